#pragma once
// A language model as the engine runs it: its shape (ModelSpec) and its
// weights as the file holds them, memory-mapped and never dequantized
// (Model), with the RoPE tables its positions need.
//
//   auto model = llm::Model::load("model.gguf");   // "llama" or "gpt2" GGUF
//   model->spec().n_layers;  model->bytes_per_token_read();
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/llm/gguf.h"
#include "tessera/llm/model_spec.h"

namespace tessera::llm {

// A buffer aligned to 2 MiB and advised onto huge pages where the kernel
// grants them: memory read end to end every step (the repacked weights, the
// KV cache), where 4 KiB pages cost a TLB miss each (measured: Q8_0 decode
// of a 110M model about 7% faster on a Xeon). `populate` faults every page
// in now: the kernel's first touch of a huge page may compact memory for
// it, which stalled single engine steps by 100 ms and more when it came
// during serving (AMD EPYC, THP defrag "madvise").
class HugeBuffer {
 public:
  HugeBuffer() = default;
  // An error naming `what` and the size when the memory is not there.
  HugeBuffer(int64_t bytes, const char* what, bool populate = false);
  uint8_t* data() const { return p_.get(); }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> p_;
};

// Tensor-parallel serving: which part of a model one rank holds (Note
// [A model split across ranks] in model.cpp). {0, 1}: the whole model.
struct TensorSplit {
  int rank = 0, size = 1;
};

class Model {
 public:
  // One weight matrix [rows, cols] in its file type (F32, F16, BF16, Q8_0,
  // Q4_0, Q4_K, Q6_K), read where the file maps it.
  struct Matrix {
    GgmlType type = GgmlType::F32;
    int64_t rows = 0, cols = 0;
    const void* data = nullptr;
    // Q8_0/Q4_0/Q4_K/Q6_K repacked at load for the int8 products (AVX2, VNNI, AMX),
    // where the kernel tier has them (backend/cpu/qgemm.h); F32 and F16 rows
    // interleaved for the skinny kernel (Note [Interleaved weight rows]); null otherwise.
    const uint8_t* packed = nullptr;
    // Rows [r0, r0 + n) as a matrix of their own.
    Matrix rows_at(int64_t r0, int64_t n) const;
  };
  struct Layer {
    const float* attn_norm = nullptr;
    Matrix q, k, v, o;
    const float* ffn_norm = nullptr;
    Matrix gate, up, down;  // gate: llama only
    // gpt2: the norms' biases and the products' (null where the model has none).
    const float *attn_norm_b = nullptr, *ffn_norm_b = nullptr;
    const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr, *bup = nullptr, *bdown = nullptr;
  };

  // A "llama" or "gpt2" GGUF file; its weights stay in the mapping. With a
  // split, only that rank's part of the layers is read and packed; heads or
  // widths the split does not divide are an error naming them.
  static std::shared_ptr<Model> load(const std::string& path, TensorSplit split = {});
  static std::shared_ptr<Model> from_gguf(GgufFile file, TensorSplit split = {});
  // Tessera's own Llama or GPT: model_from_llama / model_from_gpt (llm/llama_gguf.h, llm/gpt_gguf.h).

  // The spec of the part this model holds: a split model's n_heads,
  // n_kv_heads and hidden are its rank's share.
  const ModelSpec& spec() const { return spec_; }
  TensorSplit tensor_split() const { return split_; }
  const GgufFile& file() const { return file_; }
  const Matrix& embedding() const { return embedding_; }
  const std::vector<Layer>& layers() const { return layers_; }
  const float* output_norm() const { return output_norm_; }
  const float* output_norm_bias() const { return output_norm_b_; }  // gpt2
  const float* positions() const { return positions_; }             // gpt2: [context, dim]
  const Matrix& output() const { return output_; }  // the embedding when tied
  // The type most of the weights have (the layers' matrices).
  GgmlType weight_type() const { return layers_.empty() ? embedding_.type : layers_[0].q.type; }
  // Bytes of weights one decoded token reads: every layer's matrices and the output.
  int64_t bytes_per_token_read() const;

 private:
  Model() = default;
  void repack();  // the product weights placed in packed_ (Note [Weights on huge pages])
  void keep_part(TensorSplit split);  // Note [A model split across ranks]
  // Columns [c0, c0 + n) of a matrix, copied (a row range is a view; a column range is not).
  Matrix columns(const Matrix& mx, int64_t c0, int64_t n, const char* what);
  GgufFile file_;
  ModelSpec spec_;
  Matrix embedding_, output_;
  std::vector<Layer> layers_;
  const float* output_norm_ = nullptr;
  const float* output_norm_b_ = nullptr;
  const float* positions_ = nullptr;
  std::vector<std::vector<float>> norms_;  // norm weights converted to f32 (their buffers never move)
  std::vector<std::vector<uint8_t>> columns_;  // column ranges of a split model's matrices
  TensorSplit split_;
  HugeBuffer packed_;  // the repacked matrices, in one buffer
};

}  // namespace tessera::llm
