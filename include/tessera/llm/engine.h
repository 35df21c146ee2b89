#pragma once
// The LLM inference engine: a language model's weights as the file holds
// them (memory-mapped, never dequantized), a paged KV cache, and one step
// that runs prefill chunks of some sequences and decodes of others together.
//
//   auto model = llm::Model::load("model.gguf");
//   llm::Engine engine(model, {.kv_memory = 256 << 20});
//   int64_t s = engine.add_sequence();
//   llm::Chunk c{s, prompt_ids, 1};                 // logits of the last token
//   std::span<const float> logits = engine.step({&c, 1});   // [1, vocab]
//
// Everything a step needs is allocated when the engine is made; a step
// allocates nothing. A token's logits are bit-identical whatever else shares
// its step, however its prompt was chunked, wherever its cache blocks lie and
// however many threads run (Note [Batch-invariant LLM kernels] in
// backend/cpu/llm.h). docs/llm.md describes the engine.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/llm/gguf.h"

namespace tessera::nn::zoo {
struct Llama;
struct GPT;
}

namespace tessera::llm {

// How positions become RoPE angles: llama.cpp's scaling options, read from
// {arch}.rope.scaling.* and the rope_freqs.weight tensor.
struct RopeScaling {
  enum class Type : uint8_t { None, Linear, Yarn };
  Type type = Type::None;
  double factor = 1.0;            // the context extension: angles at position / factor (YaRN mixes per dimension)
  int64_t original_context = 0;   // YaRN: the context before extension (0: the model's)
  double attn_factor = 1.0;       // {arch}.rope.scaling.attn_factor: scales cos and sin
  double beta_fast = 32.0, beta_slow = 1.0;  // YaRN's correction range
  double ext_factor = -1.0;       // YaRN's extrapolation mix (< 0: 1 for YaRN, 0 otherwise)
  std::vector<float> freq_factors;  // divides each pair's frequency (Llama 3.1); empty: none
};

// The shape of a model the engine runs: "llama" (RMSNorm, RoPE on adjacent
// pairs, SwiGLU, grouped-query attention) or "gpt2" (LayerNorm with biases,
// learned positions, biases on every product, GELU).
struct ModelSpec {
  std::string arch = "llama";
  bool gelu_erf = false;  // gpt2: the exact GELU (Tessera's GPT) instead of the tanh form
  int64_t vocab = 0, dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, hidden = 0;
  int64_t context = 0;  // positions the model was trained for
  float norm_eps = 1e-5f;
  double rope_theta = 10000.0;
  RopeScaling rope;
};

// cos and sin of each dimension pair's RoPE angle at `position`, interleaved
// (head_dim floats), computed as ggml's rope cache does: float arithmetic,
// the frequency stepped by repeated products, YaRN's ramp and magnitude.
void rope_cos_sin(const ModelSpec& s, int64_t position, float* out);
// The scaling a "llama" GGUF asks for (an error naming an unknown type).
RopeScaling rope_scaling_from_gguf(const GgufFile& f, int64_t head_dim);

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

class Model {
 public:
  // One weight matrix [rows, cols] in its file type (F32, F16, BF16, Q8_0,
  // Q4_0, Q4_K, Q6_K), read where the file maps it.
  struct Matrix {
    GgmlType type = GgmlType::F32;
    int64_t rows = 0, cols = 0;
    const void* data = nullptr;
    // Q8_0/Q4_0/Q4_K/Q6_K repacked at load for the CPU's int8 products (VNNI, AMX),
    // where it has them (backend/cpu/qgemm.h); null otherwise.
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

  // A "llama" or "gpt2" GGUF file; its weights stay in the mapping.
  static std::shared_ptr<Model> load(const std::string& path);
  static std::shared_ptr<Model> from_gguf(GgufFile file);
  // Tessera's Llama or GPT, its weights converted to `type` (F32, F16, BF16, Q8_0, Q4_0).
  static std::shared_ptr<Model> from_llama(const nn::zoo::Llama& model, GgmlType type = GgmlType::F32);
  static std::shared_ptr<Model> from_gpt(const nn::zoo::GPT& model, GgmlType type = GgmlType::F32);

  const ModelSpec& spec() const { return spec_; }
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
  GgufFile file_;
  ModelSpec spec_;
  Matrix embedding_, output_;
  std::vector<Layer> layers_;
  const float* output_norm_ = nullptr;
  const float* output_norm_b_ = nullptr;
  const float* positions_ = nullptr;
  std::vector<std::vector<float>> norms_;  // norm weights converted to f32 (their buffers never move)
  HugeBuffer packed_;  // the repacked matrices, in one buffer
};

enum class KvType : uint8_t { F16, Q8_0 };
const char* kv_type_name(KvType t);
// "f16", "q8_0" (any case); an error naming both otherwise.
KvType kv_type_from_name(const std::string& name);

struct EngineOptions {
  // Bytes of the KV cache pool (every layer's K and V). 0: enough for
  // max_sequences sequences of min(context, 4096) tokens.
  int64_t kv_memory = 0;
  int64_t block_tokens = 16;      // tokens per cache block
  int64_t max_batch_tokens = 512;  // tokens one step carries, all chunks together
  int64_t max_sequences = 16;      // sequences alive at once
  int64_t max_logit_rows = 0;      // logit rows one step returns (0: max_sequences)
  int64_t context = 0;             // positions per sequence (0: the model's, at most 2^18)
  KvType k_type = KvType::F16, v_type = KvType::F16;
  // Keep computed full blocks for later sequences that begin the same way
  // (Note [Prefix caching] in llm/block_pool.h; Engine::reuse_prefix).
  bool prefix_caching = false;
  // The hash of a prefix salt's bytes; empty: SipHash-2-4 under a key drawn
  // per engine. Tests set a constant one to force collisions.
  std::function<uint64_t(std::string_view)> prefix_salt_hash;
  // Compute threads for this engine's steps (0: get_num_threads()). A draft
  // model's steps are so small that one thread beats a parallel region.
  int64_t threads = 0;
};

// Adds a low-rank adapter's contribution to a projection's outputs for the
// rows of one chunk: y[r, :] += f(x[r, :]) for r < rows. Called once per
// layer and projection for each chunk that carries one.
enum class Projection : uint8_t { Q, K, V, O, Gate, Up, Down };
class Adapter {
 public:
  virtual ~Adapter() = default;
  virtual void add(int64_t layer, Projection p, const float* x, int64_t ldx, float* y, int64_t ldy,
                   int64_t rows) const = 0;
};

// Tokens of one sequence for one step, at the sequence's next positions.
struct Chunk {
  int64_t seq = 0;
  std::span<const int32_t> tokens;
  // Logits of the chunk's last `logits` tokens (0 to tokens.size()).
  int64_t logits = 0;
  const Adapter* adapter = nullptr;
};

class Engine {
 public:
  explicit Engine(std::shared_ptr<const Model> model, const EngineOptions& opts = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Model& model() const { return *model_; }
  const EngineOptions& options() const { return opts_; }

  // A new empty sequence; an error when max_sequences are alive.
  int64_t add_sequence();
  // Ends a sequence and frees its cache blocks.
  void remove_sequence(int64_t seq);
  // Forgets the sequence's tokens from position `length` on (0: all).
  void truncate_sequence(int64_t seq, int64_t length);
  int64_t sequence_length(int64_t seq) const;

  // Prefix caching (EngineOptions::prefix_caching). Starts the empty
  // sequence `seq` with the longest run of registered full blocks that
  // begins `tokens`, leaving at least one token to compute, and returns how
  // many tokens that is (0 without caching). `salt` is whatever else
  // decides the blocks' contents (the adapter, a client's cache_salt), as
  // bytes: blocks are shared only between equal salts, compared byte for
  // byte (Note [Prefix caching], llm/block_pool.h).
  int64_t reuse_prefix(int64_t seq, std::span<const int32_t> tokens, std::string_view salt = {});
  // A new sequence holding the first `length` tokens of `seq`: its full
  // blocks shared, a partial last block copied.
  int64_t fork_sequence(int64_t seq, int64_t length);

  // One forward pass over the chunks (at most one per sequence): writes
  // their keys and values to the cache and returns the logits asked for,
  // [rows, vocab], chunk by chunk in order. The span stays valid until the
  // next step. Bad input (an unknown sequence, a token outside the
  // vocabulary, too many tokens, a full cache) is an error before anything
  // changes.
  std::span<const float> step(std::span<const Chunk> chunks);

  // The last step's final hidden states (after the output norm, before the
  // output matrix) of its rows [row0, row0 + n), chunk after chunk: [n, dim]
  // into `out`. For embeddings.
  void hidden_states(int64_t row0, int64_t n, float* out) const;

  int64_t total_blocks() const;
  // Blocks a sequence can take: free ones and registered ones no sequence holds.
  int64_t free_blocks() const;
  // Registered blocks no sequence holds (kept for reuse, evicted least recently used first).
  int64_t cached_blocks() const;
  // KV cache bytes per token (every layer's K and V).
  int64_t kv_bytes_per_token() const;

 private:
  struct State;
  std::shared_ptr<const Model> model_;
  EngineOptions opts_;
  std::unique_ptr<State> st_;
};

}  // namespace tessera::llm
