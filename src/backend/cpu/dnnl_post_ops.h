#pragma once
// The oneDNN post-op for an Epilogue activation, shared by the GEMM and the
// convolution so both fuse the same activations the same way.
#include <oneapi/dnnl/dnnl.hpp>

#include "backend/cpu/gemm.h"

namespace tessera::cpu {

inline void append_activation(dnnl::post_ops& po, Epilogue act) {
  if (act == Epilogue::None) return;
  using A = dnnl::algorithm;
  A alg = act == Epilogue::Relu       ? A::eltwise_relu
          : act == Epilogue::Gelu     ? A::eltwise_gelu_erf
          : act == Epilogue::GeluTanh ? A::eltwise_gelu_tanh
          : act == Epilogue::Silu     ? A::eltwise_swish
                                      : A::eltwise_tanh;
  po.append_eltwise(1.0f, alg, act == Epilogue::Silu ? 1.0f : 0.0f, 0.0f);  // swish's alpha: x * sigmoid(1 * x)
}

}  // namespace tessera::cpu
