#pragma once
// The CPU backend: its Backend record and its kernel entries (entries.cpp),
// named as in TS_BACKEND_KERNELS. Only backend/registry.cpp includes this
// from outside backend/cpu.
#include <type_traits>

#include "backend/backend.h"

namespace tessera::cpu {

namespace entry {
using backend::BinaryKernel;
using backend::RandomDist;
using backend::ReduceKernel;
using backend::UnaryKernel;
using backend::QuantWeight;
using backend::Int8Epilogue;
using backend::ConvGeometry;
using backend::FusedProgram;
#define TS_X(name, type) extern std::remove_pointer_t<backend::type> name;
TS_BACKEND_KERNELS(TS_X)
#undef TS_X
}  // namespace entry

extern const backend::Backend kBackend;
// The LLM engine's kernels of the chosen instruction set (llm_table.cpp).
const backend::LlmKernels* llm_kernels();

}  // namespace tessera::cpu
