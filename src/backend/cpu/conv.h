#pragma once
// 2-D convolution: forward, backward-data and backward-weights. f32 and bf16
// run oneDNN primitives (cached by geometry, NCHW in and out, reorders to the
// primitive's preferred layouts inside); other dtypes use direct loops.
// conv_transpose2d is the same three primitives with roles swapped.
#include <cstdint>
#include <memory>
#include <string>

#include "backend/cpu/gemm.h"
#include "tessera/core/dtype.h"

namespace tessera::cpu {

using backend::ConvGeometry;

// What a forward convolution does besides the product, inside the primitive:
// y = act(conv(x, w) + bias + residual) (oneDNN post-ops: sum, then eltwise),
// and the layouts of x and y: NCHW, or channel-blocked [N, C/b, H, W, b]
// (oneDNN's nChw8c / nChw16c, its own layout on this CPU: no reorders between
// convolutions). The residual (optional) has y's shape and layout; it may be
// y itself (in place) but must not partly overlap it. Anything but the defaults needs conv_epilogue_ok(dtype).
struct ConvFusion {
  const void* residual = nullptr;
  Epilogue act = Epilogue::None;
  int src_block = 0, dst_block = 0;  // 0: NCHW; 8 or 16: channel-blocked
  const void* packed_weights = nullptr;  // w already in the primitive's layout (pack_conv_weights)
};
// Constant weights, reordered once: the name of the layout the forward
// convolution g (with this fusion) reads its weights in, so that geometries
// sharing a layout share one packed copy, and the weights `w` (OIHW) packed
// into it. Pass the packed data as ConvFusion::packed_weights. f32/bf16 only.
std::string conv_weights_layout(const ConvGeometry& g, const ConvFusion& f);
std::shared_ptr<const void> pack_conv_weights(const ConvGeometry& g, const ConvFusion& f, const void* w);
void conv2d_forward(const ConvGeometry& g, const void* x, const void* w, const void* bias, void* y,
                    const ConvFusion& fusion = {});
bool conv_epilogue_ok(DType t);
// The channel block oneDNN's f32 convolutions keep activations in on this CPU
// (8 with AVX2, 16 with AVX-512), or 0 if they prefer plain NCHW.
int conv_activation_block();
void conv2d_backward_data(const ConvGeometry& g, const void* gy, const void* w, void* gx);
// gw [OC, C/groups, KH, KW]; gbias [OC] (may be null).
void conv2d_backward_weights(const ConvGeometry& g, const void* x, const void* gy, void* gw, void* gbias);

}  // namespace tessera::cpu
