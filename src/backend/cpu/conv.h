#pragma once
// 2-D convolution: forward, backward-data and backward-weights. f32 and bf16
// run oneDNN primitives (cached by geometry, NCHW in and out, reorders to the
// primitive's preferred layouts inside); other dtypes use direct loops.
// conv_transpose2d is the same three primitives with roles swapped.
#include <cstdint>

#include "backend/cpu/gemm.h"
#include "tessera/core/dtype.h"

namespace tessera::cpu {

struct ConvGeometry {
  int64_t N, C, H, W;      // input
  int64_t OC, KH, KW;      // weight [OC, C / groups, KH, KW]
  int64_t OH, OW;          // output
  int64_t sh, sw, dh, dw;  // stride, dilation (PyTorch convention: 1 = dense)
  int64_t pt, pl, pb, pr;  // padding top, left, bottom, right
  int64_t groups;
  DType dtype;
};

// y = act(conv(x, w) + bias + residual), the epilogue inside the primitive
// (oneDNN post-ops: sum, then eltwise). residual (optional) is NCHW of y's
// shape and must not overlap y; an epilogue needs conv_epilogue_ok(dtype).
void conv2d_forward(const ConvGeometry& g, const void* x, const void* w, const void* bias, void* y,
                    const void* residual = nullptr, Epilogue act = Epilogue::None);
bool conv_epilogue_ok(DType t);
void conv2d_backward_data(const ConvGeometry& g, const void* gy, const void* w, void* gx);
// gw [OC, C/groups, KH, KW]; gbias [OC] (may be null).
void conv2d_backward_weights(const ConvGeometry& g, const void* x, const void* gy, void* gw, void* gbias);

}  // namespace tessera::cpu
