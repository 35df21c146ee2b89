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

#include "tessera/llm/communicator.h"
#include "tessera/llm/model.h"

namespace tessera::llm {

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
  // Tensor-parallel serving (Note [An engine across ranks]): the group whose
  // rank r runs the model's part {r, size} (Model::load(path, {r, size})),
  // every rank with the same options. Rank 0's engine is used as any engine
  // is; every other rank's runs Engine::follow(). Null: one process.
  std::shared_ptr<Communicator> group;
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

  // Tensor-parallel serving, on every rank but 0: runs what rank 0's engine
  // is asked (its sequences and steps, in order) until that engine is
  // destroyed. Its own calls of the other methods are refused.
  void follow();

  int64_t total_blocks() const;
  // Blocks a sequence can take: free ones and registered ones no sequence holds.
  int64_t free_blocks() const;
  // Registered blocks no sequence holds (kept for reuse, evicted least recently used first).
  int64_t cached_blocks() const;
  // KV cache bytes per token (every layer's K and V).
  int64_t kv_bytes_per_token() const;

 private:
  struct State;
  class StepPass;  // the forward pass's stages (Note [A step's stages])
  struct Group;    // the command channel to the other ranks (llm/engine_group.h)
  class Lead;      // one call, sent to the other ranks first
  int64_t add_sequence_();
  void remove_sequence_(int64_t seq);
  void truncate_sequence_(int64_t seq, int64_t length);
  int64_t reuse_prefix_(int64_t seq, std::span<const int32_t> tokens, std::string_view salt);
  int64_t fork_sequence_(int64_t seq, int64_t length);
  std::span<const float> step_(std::span<const Chunk> chunks);
  std::pair<int64_t, int64_t> check_step(std::span<const Chunk> chunks);
  void place_rows(std::span<const Chunk> chunks);
  void commit_tokens(std::span<const Chunk> chunks);

  std::shared_ptr<const Model> model_;
  EngineOptions opts_;
  std::unique_ptr<State> st_;
  std::unique_ptr<Group> group_;
};

}  // namespace tessera::llm
