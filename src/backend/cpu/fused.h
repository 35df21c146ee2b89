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
#include "backend/fused_program.h"
#include "tessera/core/tensor.h"

namespace tessera::cpu {

constexpr int64_t kFusedTile = 256;

using backend::FusedInstr;
using backend::FusedProgram;

// Runs `p` over `outputs` (contiguous f32, all of one shape) with `inputs`
// broadcastable to that shape (f32, f16, bf16, f64 or bool; converted to f32
// on load, as the eager ops convert their operands).
void run_fused(const FusedProgram& p, const TensorList& inputs, const TensorList& outputs);

}  // namespace tessera::cpu
