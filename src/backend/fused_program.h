#pragma once
// A fused elementwise program: a small register machine over tiles of f32
// that the compiler's fusion pass writes as text and every backend runs
// (kernels.fused_elementwise). Registers hold f32 values; inputs are loaded
// into registers, instructions are the eager ops' unary and binary kernels,
// and outputs are stored once, so a chain of n pointwise ops reads its
// inputs once, writes its outputs once, and gives the same bits as running
// the ops one by one.
#include <memory>
#include <string>
#include <vector>

#include "backend/kernel_ids.h"

namespace tessera::backend {

struct FusedInstr {
  enum Kind : uint8_t { kLoad, kConst, kUnary, kBinary, kWhere, kStore };
  Kind kind;
  uint8_t kernel = 0;  // UnaryKernel or BinaryKernel
  int dst = -1;        // register (kStore: output index)
  int a = -1, b = -1, c = -1;  // registers (kLoad: input index)
  int param = -1;      // kConst: value index; kUnary: first parameter index in params
};

struct FusedProgram {
  std::vector<FusedInstr> code;
  std::vector<double> params;
  int num_regs = 0, num_inputs = 0, num_outputs = 0;
};

// Parses the text form ("r0 = in0; r1 = const 0.5; r2 = Mul r0 r1;
// r3 = LeakyRelu[0.2] r2; r4 = where r5 r2 r3; out0 = r4"), checking that
// every register is written once before it is read. Errors name the
// instruction. Parsed programs are cached by text.
std::shared_ptr<const FusedProgram> parse_fused_program(const std::string& text);

}  // namespace tessera::backend
