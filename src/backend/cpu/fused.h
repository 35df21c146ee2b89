#pragma once
// The fused elementwise kernel: a small register program run tile by tile.
//
// A tile is up to kFusedTile consecutive output elements. Each register holds
// one tile of f32; inputs are loaded into registers (read in place when they
// are contiguous f32, broadcast or converted otherwise), the program's
// instructions call the same 1-D loops the eager ops use, and outputs are
// written once. Intermediate values never leave the tile, so a chain of n
// pointwise ops reads its inputs once and writes its outputs once, and gives
// the same bits as running the ops one by one.
#include <string>
#include <vector>

#include "backend/cpu/kernel_table.h"
#include "tessera/core/tensor.h"

namespace tessera::cpu {

constexpr int64_t kFusedTile = 256;

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

// Runs `p` over `outputs` (contiguous f32, all of one shape) with `inputs`
// broadcastable to that shape (f32, f16, bf16, f64 or bool; converted to f32
// on load, as the eager ops convert their operands).
void run_fused(const FusedProgram& p, const TensorList& inputs, const TensorList& outputs);

}  // namespace tessera::cpu
