#pragma once
// Static int8 products: u8 activations (affine, per tensor), s8 weights
// (symmetric, per output channel), int32 accumulation, and the requantizing
// epilogue inside the primitive:
//
//   acc[oc]  = sum (x_q - x_zp) * w_q[oc]                      (int32)
//   v[oc]    = act(x_scale * w_scale[oc] * acc[oc] + bias[oc])  (f32)
//   y        = v                                   (f32 output), or
//   y_q      = saturate_u8(round_half_even(v / y_scale) + y_zp)   (u8 output)
//
// The convolution reads and writes channels-last activations (NHWC: oneDNN's
// int8 kernels work in that layout); the linear reads [m, k] rows. The fast
// paths are oneDNN primitives (VNNI where the CPU has it); the _ref functions
// are the portable definition they are tested against.
#include <cstdint>
#include <memory>
#include <string>

#include "backend/cpu/conv.h"
#include "backend/cpu/gemm.h"

namespace tessera::cpu {

using backend::Int8Epilogue;

// x: u8 (or s8: e.x_s8) [N, H, W, C]; w: s8 [OC, C / groups, KH, KW]; y: [N, OH, OW, OC], u8
// or f32 as e.out_u8 says. g.dtype is ignored. `packed`: the weights already
// in the primitive's layout (pack_int8_conv_weights), or null.
void int8_conv2d(const ConvGeometry& g, const void* x, const int8_t* w, const Int8Epilogue& e, void* y,
                 const void* packed = nullptr);
void int8_conv2d_ref(const ConvGeometry& g, const void* x, const int8_t* w, const Int8Epilogue& e, void* y);
// The layout the convolution reads its weights in (a key for a packed copy),
// and the weights packed into it (with the sums oneDNN's kernels need).
std::string int8_conv_weights_layout(const ConvGeometry& g, const Int8Epilogue& e);
std::shared_ptr<const void> pack_int8_conv_weights(const ConvGeometry& g, const Int8Epilogue& e, const int8_t* w);

// x: u8 (or s8) [m, k]; w: s8 rows [n, k]; y: [m, n].
void int8_linear(int64_t m, int64_t n, int64_t k, const void* x, const int8_t* w, const Int8Epilogue& e, void* y);
void int8_linear_ref(int64_t m, int64_t n, int64_t k, const void* x, const int8_t* w, const Int8Epilogue& e,
                     void* y);

// The oneDNN implementation the products run ("brgconv:avx512_core_vnni"),
// for tests that must not fall back to oneDNN's reference loops.
std::string int8_conv2d_impl(const ConvGeometry& g, const Int8Epilogue& e);

}  // namespace tessera::cpu
