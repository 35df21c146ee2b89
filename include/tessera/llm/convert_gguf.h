#pragma once
// Converting GGUF weights: an f32 matrix as the bytes of a ggml type, and a
// whole file's weights in another type or in one of llama.cpp's mixes
// (`tessera quantize-gguf`). A bridge to quant/, whose quantizers it uses;
// the inference stack only reads (gguf.h).
#include <optional>

#include "tessera/llm/gguf.h"

namespace tessera::llm {

// An f32 matrix [rows, cols] as the bytes of a ggml type (F32, F16, BF16,
// Q8_0, Q4_0 with cols % 32 == 0, Q4_K, Q6_K with cols % 256 == 0; quantized
// as llama.cpp's reference quantizers do), as a U8 tensor.
Tensor to_ggml_bytes(const Tensor& x, GgmlType type);

// A GGUF file with its weights converted to `type` (F32, F16, BF16, Q8_0,
// Q4_0, Q4_K or Q6_K): every tensor of 2 or more dimensions whose rows are
// whole blocks of the type, except norms; 1-D tensors (norms, biases) and the
// rest keep their type, as llama.cpp's quantizer does. For Q4_K the output
// matrix (the token embedding when tied) is written in Q6_K, as llama.cpp's
// Q4_K_S does (which also puts a few early layers' V and down products in
// Q5_K, a type Tessera does not have). The metadata is copied, with
// general.file_type set to the new type. Sources may be F32, F16, BF16,
// Q8_0, Q4_0, Q4_K or Q6_K.
GgufWriter convert_gguf(const GgufFile& in, GgmlType type);

// llama.cpp's quantization mixes that Tessera writes: Q4_K_M is Q4_K with
// the output matrix (the token embedding when tied) in Q6_K, and the V and
// down products of the first and last eighth of the layers and of every
// third layer between in Q6_K (llama.cpp's rule for dense models);
// general.file_type 15.
enum class GgufMix : uint8_t { Q4_K_M };
GgufWriter convert_gguf(const GgufFile& in, GgufMix mix);
// "Q4_K_M" -> GgufMix::Q4_K_M; anything else, nullopt.
std::optional<GgufMix> gguf_mix_from_name(const std::string& name);

}  // namespace tessera::llm
