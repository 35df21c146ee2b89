// The LLM engine: the paged KV cache, the step's bookkeeping, and the forward
// pass over packed token rows (include/tessera/llm/engine.h).
#include "tessera/llm/engine.h"

#include "llm/block_pool.h"
#include "llm/engine_group.h"

#include <utility>
#include <omp.h>

#include <algorithm>
#include <optional>
#include <cmath>
#include <cstring>
#include <new>

#include "backend/backend.h"
#include "backend/llm_kernels.h"
#include "quant_view.h"
#include "tessera/core/error.h"
#include "tessera/core/half.h"
#include "tessera/core/parallel.h"

namespace tessera::llm {

const char* kv_type_name(KvType t) { return t == KvType::F16 ? "f16" : "q8_0"; }

KvType kv_type_from_name(const std::string& name) {
  std::string n = name;
  for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (n == "f16") return KvType::F16;
  if (n == "q8_0") return KvType::Q8_0;
  TS_ERROR("KV cache type '", name, "' is not one of f16, q8_0");
}

namespace {
using detail::quant_view;

using backend::BlockQ8Act;
using backend::kQBlock;
using backend::LlmKernels;
using Matrix = Model::Matrix;

backend::KvFormat kv_format(KvType t) { return t == KvType::F16 ? backend::KvFormat::F16 : backend::KvFormat::Q8_0; }

// Activation rows tiled so a tile stays in L2 while the weights stream past.
constexpr int64_t kRowTile = 64;
// Rows of a matrix product are handed to threads in groups of this many
// (a whole number of the packed products' row groups: checked at start).
constexpr int64_t kRowGroup = 16;

bool quantized(GgmlType t) { return detail::qformat_of(t).has_value(); }

// An input of matrix products: m rows of `cols` f32 values (stride ld), and
// the forms the weights' kernels read, made once for all the products.
struct Act {
  const float* x = nullptr;
  int64_t ld = 0, m = 0, cols = 0;
  const BlockQ8Act* q8 = nullptr;  // [m, cols / 32], for quantized weights not repacked
  const uint8_t* packed = nullptr;  // [m, packed_ld], for repacked weights
  int64_t packed_ld = 0;            // packed_act_bytes(cols)
  const BFloat16* bf = nullptr;     // [m, cols], for BF16 weights on the bf16 dot kernel
};

struct Job {
  const Matrix* w;
  const Act* a;
  float* y;
  int64_t ldy;
};

// Output rows [r0, r1) of one product, activation tile by tile.
void product_rows(const LlmKernels& kt, const Job& j, int64_t r0, int64_t r1) {
  const Matrix& w = *j.w;
  const Act& a = *j.a;
  for (int64_t i0 = 0; i0 < a.m; i0 += kRowTile) {
    const int64_t mi = std::min(kRowTile, a.m - i0);
    float* y = j.y + i0 * j.ldy;
    switch (w.type) {
      case GgmlType::F32:
      case GgmlType::F16: {
        const int d = static_cast<int>(w.type == GgmlType::F32 ? DType::F32 : DType::F16);
        if (w.packed)
          kt.skinny_rows_packed[d](w.packed, w.rows, w.cols, a.x + i0 * a.ld, a.ld, mi, y, j.ldy, r0, r1);
        else
          kt.skinny_rows[d](w.data, w.cols, w.cols, a.x + i0 * a.ld, a.ld, mi, y, j.ldy, r0, r1);
        break;
      }
      case GgmlType::BF16:
        if (kt.skinny_rows_bf16)
          kt.skinny_rows_bf16(w.data, w.cols, w.cols, a.bf + i0 * a.cols, a.cols, mi, y, j.ldy, r0, r1);
        else
          kt.skinny_rows[static_cast<int>(DType::BF16)](w.data, w.cols, w.cols, a.x + i0 * a.ld, a.ld, mi, y, j.ldy, r0, r1);
        break;
      case GgmlType::Q8_0:
      case GgmlType::Q4_0:
      case GgmlType::Q4_K:
      case GgmlType::Q6_K: {
        const backend::QuantMatrix qm = quant_view(w);
        const backend::QFormat f = qm.format;
        if (w.packed) {
          backend::PackedQMatrix pm;
          pm.format = f;
          pm.rows = w.rows;
          pm.cols = w.cols;
          pm.data = w.packed;
          kt.qgemm_rows[static_cast<int>(f)](pm, a.packed + i0 * a.packed_ld, mi, y, j.ldy, r0, r1);
          break;
        }
        kt.qdot_rows[static_cast<int>(f)](qm, a.q8 + i0 * (a.cols / kQBlock), mi, y, j.ldy, r0, r1);
        break;
      }
      default: TS_ERROR("engine: weight type ", ggml_type_name(w.type), " has no kernel");
    }
  }
}

// Runs the products together: their output rows, in groups, split among the
// threads (never a sum: each output is computed whole by one thread).
template <size_t N>
void run_products(const LlmKernels& kt, const Job (&jobs)[N]) {
  int64_t groups = 0, work = 0;
  for (const Job& j : jobs) {
    groups += (j.w->rows + kRowGroup - 1) / kRowGroup;
    work += j.w->rows * j.w->cols * j.a->m;
  }
  const int64_t grain = std::max<int64_t>(1, groups * 65536 / std::max<int64_t>(1, work));
  parallel_for(0, groups, grain, [&](int64_t g0, int64_t g1) {
    int64_t base = 0;
    for (const Job& j : jobs) {
      const int64_t n = (j.w->rows + kRowGroup - 1) / kRowGroup;
      const int64_t b = std::max(g0, base), e = std::min(g1, base + n);
      if (b < e) product_rows(kt, j, (b - base) * kRowGroup, std::min(j.w->rows, (e - base) * kRowGroup));
      base += n;
    }
  });
}

// Row `tok` of the embedding matrix as f32.
void embedding_row(const LlmKernels& kt, const Matrix& e, int64_t tok, float* out) {
  const int64_t n = e.cols;
  switch (e.type) {
    case GgmlType::F32: std::memcpy(out, static_cast<const float*>(e.data) + tok * n, n * sizeof(float)); break;
    case GgmlType::F16:
    case GgmlType::BF16:
      kt.to_f32_row(e.type == GgmlType::F16 ? DType::F16 : DType::BF16, static_cast<const char*>(e.data) + tok * n * 2,
                    n, out);
      break;
    default: {
      const backend::QuantMatrix qm = quant_view(e);
      kt.qdequant_rows[static_cast<int>(qm.format)](qm, tok, tok + 1, out);
    }
  }
}

template <typename T>
std::unique_ptr<T[]> buffer(int64_t n, const char* what) {
  try {
    return std::unique_ptr<T[]>(new T[static_cast<size_t>(std::max<int64_t>(n, 1))]);
  } catch (const std::bad_alloc&) {
    TS_ERROR("engine: cannot allocate the ", what, " (", n * static_cast<int64_t>(sizeof(T)), " bytes)");
  }
}

}  // namespace

struct Engine::State {
  const LlmKernels* kt = nullptr;
  int64_t context = 0, n_blocks = 0, max_blocks_per_seq = 0, threads = 0;
  int64_t q_dim = 0, kv_dim = 0, k_row = 0, v_row = 0;
  // The cache: per layer, K rows of every block then V rows.
  HugeBuffer cache;
  std::vector<backend::KvLayer> layers;
  BlockPool pool;
  struct Seq {
    bool alive = false;
    int64_t length = 0;
    std::vector<int32_t> blocks;  // capacity reserved for the whole context
    // Prefix caching: the salt's slot, and the names of the full blocks (Note [Prefix caching]).
    int32_t salt = 0;
    std::vector<uint64_t> names;
  };
  std::vector<Seq> seqs;
  // Step buffers, sized for max_batch_tokens rows.
  std::unique_ptr<float[]> x, h, q, k, v, att, g, u, hl, logits, rope, scores;
  std::unique_ptr<BlockQ8Act[]> xq;
  std::unique_ptr<uint8_t[]> xp;
  std::unique_ptr<BFloat16[]> xb;
  std::unique_ptr<int64_t[]> row_seq, row_pos, row_tok, logit_row;
  // Attention work items: up to kAttnQueries query vectors of one chunk sharing a key head.
  struct AttnItem {
    int64_t row0, kv_head, v0, count;  // the chunk's first row; vectors v0.. (v = token * group + head in group)
  };
  std::unique_ptr<AttnItem[]> items;
  std::vector<int64_t> step_mark;  // per sequence: the step that last named it
  int64_t step_count = 0;
  int64_t last_rows = 0;  // rows of the last step (Engine::hidden_states)

  // A block for a sequence. Its keys are zeroed: attention reads keys in runs
  // of 16, past the sequence's last one (those scores are never used, but
  // the memory should hold numbers).
  int32_t take_block() {
    const int32_t b = pool.take();
    for (const backend::KvLayer& L : layers)
      if (L.k_format == backend::KvFormat::F16)
        std::memset(L.k + b * L.block_tokens * L.kv_dim * 2, 0, static_cast<size_t>(L.block_tokens * L.kv_dim * 2));
      else
        std::memset(L.k + b * L.block_tokens * k_row, 0, static_cast<size_t>(L.block_tokens * k_row));
    return b;
  }
  // Block src's keys, values and tokens into dst (copy on write).
  void copy_block(int32_t src, int32_t dst) {
    for (const backend::KvLayer& L : layers) {
      const int64_t kb = L.block_tokens * k_row, vb = L.block_tokens * v_row;
      std::memcpy(L.k + dst * kb, L.k + src * kb, static_cast<size_t>(kb));
      std::memcpy(L.v + dst * vb, L.v + src * vb, static_cast<size_t>(vb));
    }
    if (pool.caching()) std::memcpy(pool.tokens(dst), pool.tokens(src), static_cast<size_t>(block_tokens) * 4);
  }
  // Registers the sequence's blocks that became full.
  void name_full_blocks(Seq& q) {
    const size_t full = static_cast<size_t>(q.length / block_tokens);
    while (q.names.size() < full) {
      const size_t i = q.names.size();
      const uint64_t parent = i ? q.names[i - 1] : pool.salt_hash(q.salt);
      const int32_t b = q.blocks[i];
      const uint64_t name = BlockPool::name(parent, {pool.tokens(b), static_cast<size_t>(block_tokens)});
      q.names.push_back(name);
      pool.add(b, name, parent, q.salt);
    }
  }
  int64_t block_tokens = 16;
};

Engine::Engine(std::shared_ptr<const Model> model, const EngineOptions& opts)
    : model_(std::move(model)), opts_(opts), st_(std::make_unique<State>()) {
  TS_CHECK(model_ != nullptr, "engine: no model");
  const ModelSpec& s = model_->spec();
  State& st = *st_;
  st.kt = &backend::llm_kernels(DeviceType::CPU);
  TS_INTERNAL_ASSERT(st.kt->pack_rows > 0 && kRowGroup % st.kt->pack_rows == 0);
  TS_CHECK(opts_.block_tokens >= 16 && opts_.block_tokens <= 1024 && opts_.block_tokens % 16 == 0,
           "engine: block_tokens ", opts_.block_tokens, " must be a multiple of 16 from 16 to 1024");
  TS_CHECK(opts_.max_batch_tokens >= 1 && opts_.max_batch_tokens <= 65536, "engine: max_batch_tokens ",
           opts_.max_batch_tokens, " must be 1 to 65536");
  TS_CHECK(opts_.max_sequences >= 1 && opts_.max_sequences <= 4096, "engine: max_sequences ", opts_.max_sequences,
           " must be 1 to 4096");
  if (opts_.max_logit_rows == 0) opts_.max_logit_rows = opts_.max_sequences;
  TS_CHECK(opts_.threads >= 0, "engine: threads ", opts_.threads, " must be 0 (all) or positive");
  TS_CHECK(opts_.max_logit_rows >= 1 && opts_.max_logit_rows <= opts_.max_batch_tokens, "engine: max_logit_rows ",
           opts_.max_logit_rows, " must be 1 to max_batch_tokens (", opts_.max_batch_tokens, ")");
  st.context = opts_.context ? opts_.context : std::min<int64_t>(s.context, int64_t{1} << 18);
  TS_CHECK(st.context >= 1 && st.context <= (int64_t{1} << 18), "engine: context ", st.context,
           " must be 1 to 262144 positions");
  TS_CHECK(!model_->positions() || st.context <= s.context, "engine: context ", st.context, " is longer than the ",
           s.context, " positions this ", s.arch, " model has embeddings for");
  for (KvType t : {opts_.k_type, opts_.v_type})
    TS_CHECK(t == KvType::F16 || s.head_dim % kQBlock == 0, "engine: a Q8_0 KV cache needs heads of a multiple of "
             "32 dimensions; this model's have ", s.head_dim, " (use f16)");
  st.q_dim = s.n_heads * s.head_dim;
  st.kv_dim = s.n_kv_heads * s.head_dim;
  st.k_row = backend::kv_row_bytes(kv_format(opts_.k_type), st.kv_dim);
  st.v_row = backend::kv_row_bytes(kv_format(opts_.v_type), st.kv_dim);

  // The cache pool: whole blocks of every layer's K and V.
  const int64_t block_bytes = opts_.block_tokens * (st.k_row + st.v_row) * s.n_layers;
  st.max_blocks_per_seq = (st.context + opts_.block_tokens - 1) / opts_.block_tokens;
  int64_t memory = opts_.kv_memory;
  if (memory == 0) {
    // By default each sequence gets its context (at most 4096 tokens) in
    // whole blocks: a context shorter than a block still gets one.
    const int64_t blocks = (std::min<int64_t>(st.context, 4096) + opts_.block_tokens - 1) / opts_.block_tokens;
    memory = opts_.max_sequences * blocks * block_bytes;
  }
  TS_CHECK(memory >= block_bytes, "engine: --kv-memory of ", memory, " bytes holds no cache block (one block of ",
           opts_.block_tokens, " tokens takes ", block_bytes, " bytes)");
  st.n_blocks = std::min<int64_t>(memory / block_bytes, int64_t{1} << 30);
  st.cache = HugeBuffer(st.n_blocks * block_bytes, "the KV cache", /*populate=*/true);
  const int64_t rows = st.n_blocks * opts_.block_tokens;
  for (int64_t l = 0; l < s.n_layers; ++l) {
    backend::KvLayer L;
    L.k_format = kv_format(opts_.k_type);
    L.v_format = kv_format(opts_.v_type);
    L.block_tokens = opts_.block_tokens;
    L.kv_dim = st.kv_dim;
    L.head_dim = s.head_dim;
    L.k = st.cache.data() + l * rows * (st.k_row + st.v_row);
    L.v = L.k + rows * st.k_row;
    st.layers.push_back(L);
  }
  st.pool = BlockPool(st.n_blocks, opts_.block_tokens, opts_.prefix_caching);
  if (opts_.prefix_salt_hash) st.pool.set_salt_hash(opts_.prefix_salt_hash);
  st.block_tokens = opts_.block_tokens;
  st.seqs.resize(static_cast<size_t>(opts_.max_sequences));
  for (State::Seq& q : st.seqs) {
    q.blocks.reserve(static_cast<size_t>(st.max_blocks_per_seq));
    if (opts_.prefix_caching) q.names.reserve(static_cast<size_t>(st.max_blocks_per_seq));
  }
  st.step_mark.assign(static_cast<size_t>(opts_.max_sequences), -1);

  // Step buffers.
  const int64_t T = opts_.max_batch_tokens, wide = std::max(s.dim, s.hidden);
  st.x = buffer<float>(T * s.dim, "activations");
  st.h = buffer<float>(T * std::max(s.dim, st.q_dim), "activations");
  st.q = buffer<float>(T * st.q_dim, "queries");
  st.k = buffer<float>(T * st.kv_dim, "keys");
  st.v = buffer<float>(T * st.kv_dim, "values");
  st.att = buffer<float>(T * st.q_dim, "attention outputs");
  st.g = buffer<float>(T * s.hidden, "feed-forward activations");
  st.u = buffer<float>(T * s.hidden, "feed-forward activations");
  st.hl = buffer<float>(opts_.max_logit_rows * s.dim, "final activations");
  st.logits = buffer<float>(opts_.max_logit_rows * s.vocab, "logits");
  st.xq = buffer<BlockQ8Act>(T * (std::max(wide, st.q_dim) / kQBlock + 1), "quantized activations");
  st.xp = buffer<uint8_t>(T * st.kt->packed_act_bytes(std::max(wide, st.q_dim)), "packed activations");
  st.xb = buffer<BFloat16>(T * std::max(wide, st.q_dim), "bf16 activations");
  st.row_seq = buffer<int64_t>(T, "row table");
  st.row_pos = buffer<int64_t>(T, "row table");
  st.row_tok = buffer<int64_t>(T, "row table");
  st.logit_row = buffer<int64_t>(opts_.max_logit_rows, "row table");
  st.threads = std::max<int64_t>(omp_get_num_procs(), get_num_threads());
  st.scores = buffer<float>(st.threads * st.kt->attention_scratch(st.context), "attention scores");
  st.items = buffer<State::AttnItem>(T * s.n_heads + opts_.max_sequences * s.n_kv_heads, "attention items");
  // RoPE: cos and sin per position and dimension pair, interleaved.
  st.rope = buffer<float>(st.context * s.head_dim, "RoPE table");
  for (int64_t p = 0; p < st.context; ++p) rope_cos_sin(s, p, st.rope.get() + p * s.head_dim);

  const TensorSplit part = model_->tensor_split();
  if (opts_.group) {
    TS_CHECK(part.size == opts_.group->size() && part.rank == opts_.group->rank(), "engine: rank ",
             opts_.group->rank(), " of a tensor-parallel group of ", opts_.group->size(), " runs part {",
             opts_.group->rank(), ", ", opts_.group->size(), "} of the model, and this model is part {", part.rank,
             ", ", part.size, "} (Model::load(path, {rank, size}))");
    group_ = std::make_unique<Group>(opts_.group);
  } else {
    TS_CHECK(part.size == 1, "engine: this model is part {", part.rank, ", ", part.size, "} of a model split for "
             "tensor-parallel serving, and the engine has no group to sum the parts over (EngineOptions::group)");
  }
}

Engine::~Engine() = default;

int64_t Engine::kv_bytes_per_token() const {
  return (st_->k_row + st_->v_row) * model_->spec().n_layers;
}
int64_t Engine::total_blocks() const { return st_->n_blocks; }
int64_t Engine::free_blocks() const { return st_->pool.available(); }
int64_t Engine::cached_blocks() const { return st_->pool.cached(); }

int64_t Engine::add_sequence() {
  Lead lead(*this, [](EngineCall& c) { c.start(EngineOp::Add); });
  return add_sequence_();
}

void Engine::remove_sequence(int64_t seq) {
  Lead lead(*this, [&](EngineCall& c) {
    c.start(EngineOp::Remove);
    c.put(seq);
  });
  remove_sequence_(seq);
}

void Engine::truncate_sequence(int64_t seq, int64_t length) {
  Lead lead(*this, [&](EngineCall& c) {
    c.start(EngineOp::Truncate);
    c.put(seq);
    c.put(length);
  });
  truncate_sequence_(seq, length);
}

int64_t Engine::reuse_prefix(int64_t seq, std::span<const int32_t> tokens, std::string_view salt) {
  Lead lead(*this, [&](EngineCall& c) {
    c.start(EngineOp::Reuse);
    c.put(seq);
    c.put(tokens);
    c.put(salt);
  });
  return reuse_prefix_(seq, tokens, salt);
}

int64_t Engine::fork_sequence(int64_t seq, int64_t length) {
  Lead lead(*this, [&](EngineCall& c) {
    c.start(EngineOp::Fork);
    c.put(seq);
    c.put(length);
  });
  return fork_sequence_(seq, length);
}

std::span<const float> Engine::step(std::span<const Chunk> chunks) {
  Lead lead(*this, [&](EngineCall& c) {
    c.start(EngineOp::Step);
    c.put(static_cast<int64_t>(chunks.size()));
    for (const Chunk& ch : chunks) {
      c.put(ch.seq);
      c.put(ch.logits);
      c.put(ch.tokens);
    }
  });
  return step_(chunks);
}

int64_t Engine::add_sequence_() {
  for (size_t i = 0; i < st_->seqs.size(); ++i)
    if (!st_->seqs[i].alive) {
      st_->seqs[i].alive = true;
      st_->seqs[i].length = 0;
      st_->seqs[i].salt = 0;
      return static_cast<int64_t>(i);
    }
  TS_ERROR("engine: all ", opts_.max_sequences, " sequences are in use (EngineOptions::max_sequences)");
}

void Engine::remove_sequence_(int64_t seq) {
  TS_CHECK(seq >= 0 && seq < opts_.max_sequences && st_->seqs[seq].alive, "engine: no sequence ", seq);
  truncate_sequence_(seq, 0);
  st_->pool.release_salt(std::exchange(st_->seqs[seq].salt, 0));
  st_->seqs[seq].alive = false;
}

void Engine::truncate_sequence_(int64_t seq, int64_t length) {
  TS_CHECK(seq >= 0 && seq < opts_.max_sequences && st_->seqs[seq].alive, "engine: no sequence ", seq);
  State::Seq& s = st_->seqs[seq];
  TS_CHECK(length >= 0 && length <= s.length, "engine: cannot truncate sequence ", seq, " of ", s.length,
           " tokens to ", length);
  const int64_t bt = opts_.block_tokens;
  const size_t keep = static_cast<size_t>((length + bt - 1) / bt);
  // The block the sequence writes next, when it keeps part of it: its own
  // from here on (copied if shared, unregistered if it was named).
  if (length % bt != 0 && keep <= s.blocks.size()) {
    const int32_t b = s.blocks[keep - 1];
    if (st_->pool.refs(b) > 1) {
      TS_CHECK(st_->pool.available() >= 1, "engine: truncating sequence ", seq, " into a shared cache block needs a "
               "free block to copy it to, and the cache has none");
      const int32_t copy = st_->take_block();
      st_->copy_block(b, copy);
      st_->pool.release(b);
      s.blocks[keep - 1] = copy;
    } else {
      st_->pool.drop(b);
    }
  }
  while (s.blocks.size() > keep) {
    st_->pool.release(s.blocks.back());
    s.blocks.pop_back();
  }
  if (s.names.size() > static_cast<size_t>(length / bt)) s.names.resize(static_cast<size_t>(length / bt));
  s.length = length;
}

int64_t Engine::reuse_prefix_(int64_t seq, std::span<const int32_t> tokens, std::string_view salt) {
  TS_CHECK(seq >= 0 && seq < opts_.max_sequences && st_->seqs[seq].alive, "engine: no sequence ", seq);
  State::Seq& s = st_->seqs[seq];
  TS_CHECK(s.length == 0, "engine: reuse_prefix needs an empty sequence; sequence ", seq, " has ", s.length, " tokens");
  st_->pool.release_salt(s.salt);
  s.salt = st_->pool.hold_salt(salt);
  if (!st_->pool.caching() || tokens.empty()) return 0;
  const int64_t bt = opts_.block_tokens;
  const int64_t most = std::min<int64_t>((static_cast<int64_t>(tokens.size()) - 1) / bt, st_->max_blocks_per_seq);
  uint64_t parent = st_->pool.salt_hash(s.salt);
  for (int64_t i = 0; i < most; ++i) {
    const std::span<const int32_t> block = tokens.subspan(static_cast<size_t>(i * bt), static_cast<size_t>(bt));
    const uint64_t name = BlockPool::name(parent, block);
    const int32_t b = st_->pool.find(name, parent, s.salt, block);
    if (b < 0) break;
    st_->pool.share(b);
    s.blocks.push_back(b);
    s.names.push_back(name);
    s.length += bt;
    parent = name;
  }
  return s.length;
}

int64_t Engine::fork_sequence_(int64_t seq, int64_t length) {
  TS_CHECK(seq >= 0 && seq < opts_.max_sequences && st_->seqs[seq].alive, "engine: no sequence ", seq);
  TS_CHECK(length >= 0 && length <= st_->seqs[seq].length, "engine: cannot fork ", length, " tokens of sequence ",
           seq, ", which has ", st_->seqs[seq].length);
  const int64_t bt = opts_.block_tokens;
  TS_CHECK(length % bt == 0 || st_->pool.available() >= 1, "engine: forking sequence ", seq,
           " needs a free cache block for its partial last block, and the cache has none");
  const int64_t fork = add_sequence_();
  State::Seq &from = st_->seqs[seq], &to = st_->seqs[fork];
  const size_t full = static_cast<size_t>(length / bt);
  for (size_t i = 0; i < full; ++i) {
    st_->pool.share(from.blocks[i]);
    to.blocks.push_back(from.blocks[i]);
  }
  if (length % bt != 0) {
    const int32_t copy = st_->take_block();
    st_->copy_block(from.blocks[full], copy);
    to.blocks.push_back(copy);
  }
  to.names.assign(from.names.begin(), from.names.begin() + static_cast<ptrdiff_t>(std::min(full, from.names.size())));
  to.salt = st_->pool.share_salt(from.salt);
  to.length = length;
  return fork;
}

void Engine::hidden_states(int64_t row0, int64_t n, float* out) const {
  const State& st = *st_;
  TS_CHECK(row0 >= 0 && n >= 0 && row0 + n <= st.last_rows, "engine: hidden states of rows [", row0, ", ", row0 + n,
           ") asked of a step of ", st.last_rows, " rows");
  const ModelSpec& s = model_->spec();
  for (int64_t i = 0; i < n; ++i) {
    const float* x = st.x.get() + (row0 + i) * s.dim;
    if (s.arch == "gpt2")
      st.kt->layer_norm_row(x, model_->output_norm(), model_->output_norm_bias(), out + i * s.dim, s.dim, s.norm_eps);
    else
      st.kt->rms_norm_row(x, model_->output_norm(), out + i * s.dim, s.dim, s.norm_eps);
  }
}

int64_t Engine::sequence_length(int64_t seq) const {
  TS_CHECK(seq >= 0 && seq < opts_.max_sequences && st_->seqs[seq].alive, "engine: no sequence ", seq);
  return st_->seqs[seq].length;
}

// Note [A step's stages]
// A step is: check (nothing changes before everything is known legal),
// place (cache blocks and each row's sequence, position and token), the
// forward pass (embedding, then per layer attention and feed-forward, each
// adding to the residual x), commit (the sequences' new lengths and their
// full blocks named for prefix caching), and the logits of the rows asked for.
// StepPass holds what the forward pass's stages share.
class Engine::StepPass {
 public:
  StepPass(const Model& model, const EngineOptions& opts, State& st, std::span<const Chunk> chunks, int64_t T)
      : m_(model), s_(model.spec()), opts_(opts), st_(st), kt_(*st.kt), chunks_(chunks), T_(T),
        gpt_(s_.arch == "gpt2") {}

  void embed();
  void attention(int64_t l);
  void feed_forward(int64_t l);
  std::span<const float> logits(int64_t L);

 private:
  // f(i) for rows [0, n), split among the threads by `per_row` values each.
  template <typename F>
  void rows(int64_t n, int64_t per_row, F&& f) const {
    parallel_for(0, n, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, per_row)), [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) f(i);
    });
  }
  // gpt2: LayerNorm with biases; llama: RMSNorm.
  void norm(const float* x, const float* w, const float* b, float* y) const {
    if (gpt_) kt_.layer_norm_row(x, w, b, y, s_.dim, s_.norm_eps);
    else kt_.rms_norm_row(x, w, y, s_.dim, s_.norm_eps);
  }
  static void add_bias(float* y, const float* b, int64_t n) {
    if (b)
      for (int64_t c = 0; c < n; ++c) y[c] += b[c];
  }
  void prepare(Act& a, std::initializer_list<const Matrix*> ws) const;
  void adapters(int64_t layer, Projection p, const float* x, int64_t ldx, float* y, int64_t ldy) const;
  void residual(const float* bias) const;
  void attend(int64_t l) const;
  void sum_over_group() const;

  const Model& m_;
  const ModelSpec& s_;
  const EngineOptions& opts_;
  State& st_;
  const LlmKernels& kt_;
  const std::span<const Chunk> chunks_;
  const int64_t T_;
  const bool gpt_;  // gpt2: biases after the products, GELU, learned positions; llama: RoPE, SwiGLU
};

// Quantized / bf16 forms of an input, for the types of the matrices it meets.
void Engine::StepPass::prepare(Act& a, std::initializer_list<const Matrix*> ws) const {
  bool q8 = false, packed = false, bf = false;
  for (const Matrix* w : ws) {
    q8 = q8 || (quantized(w->type) && !w->packed);
    packed = packed || (quantized(w->type) && w->packed);
    bf = bf || (w->type == GgmlType::BF16 && kt_.skinny_rows_bf16);
  }
  if (packed) {
    const int64_t pb = kt_.packed_act_bytes(a.cols);
    rows(a.m, a.cols, [&](int64_t i) { kt_.qpack_act(a.x + i * a.ld, a.cols, st_.xp.get() + i * pb); });
    a.packed = st_.xp.get();
    a.packed_ld = pb;
  }
  const int64_t nb = a.cols / kQBlock;
  if (q8) {
    rows(a.m, a.cols, [&](int64_t i) { kt_.quantize_act(a.x + i * a.ld, a.cols, st_.xq.get() + i * nb); });
    a.q8 = st_.xq.get();
  }
  if (bf) {
    rows(a.m, a.cols, [&](int64_t i) {
      for (int64_t c = 0; c < a.cols; ++c) st_.xb[i * a.cols + c] = BFloat16(a.x[i * a.ld + c]);
    });
    a.bf = st_.xb.get();
  }
}

// Each chunk's adapter's share of projection p, on the chunk's rows.
void Engine::StepPass::adapters(int64_t layer, Projection p, const float* x, int64_t ldx, float* y,
                                int64_t ldy) const {
  int64_t r0 = 0;
  for (const Chunk& c : chunks_) {
    const int64_t n = static_cast<int64_t>(c.tokens.size());
    if (c.adapter) c.adapter->add(layer, p, x + r0 * ldx, ldx, y + r0 * ldy, ldy, n);
    r0 += n;
  }
}

// A split model's block output h is this rank's part of a sum (Note [A
// model split across ranks]): summed over the group, it is the whole.
void Engine::StepPass::sum_over_group() const {
  if (opts_.group && opts_.group->size() > 1)
    opts_.group->all_reduce_sum(st_.h.get(), T_ * s_.dim);
}

// x += h (+ the product's bias), row by row.
void Engine::StepPass::residual(const float* bias) const {
  const int64_t D = s_.dim;
  rows(T_, D, [&](int64_t i) {
    float *x = st_.x.get() + i * D, *h = st_.h.get() + i * D;
    add_bias(h, bias, D);
    for (int64_t c = 0; c < D; ++c) x[c] += h[c];
  });
}

void Engine::StepPass::embed() {
  const int64_t D = s_.dim;
  const Matrix& emb = m_.embedding();
  const float* positions = m_.positions();
  rows(T_, D, [&](int64_t i) {
    float* x = st_.x.get() + i * D;
    embedding_row(kt_, emb, st_.row_tok[i], x);
    if (positions)
      for (int64_t c = 0; c < D; ++c) x[c] += positions[st_.row_pos[i] * D + c];
  });
}

void Engine::StepPass::attention(int64_t l) {
  const Model::Layer& W = m_.layers()[l];
  const backend::KvLayer& kv = st_.layers[l];
  const int64_t D = s_.dim, hd = s_.head_dim, qd = st_.q_dim, kvd = st_.kv_dim;
  float *x = st_.x.get(), *h = st_.h.get();
  rows(T_, D, [&](int64_t i) { norm(x + i * D, W.attn_norm, W.attn_norm_b, h + i * D); });
  Act a{h, D, T_, D};
  prepare(a, {&W.q, &W.k, &W.v});
  run_products(kt_, {Job{&W.q, &a, st_.q.get(), qd}, Job{&W.k, &a, st_.k.get(), kvd}, Job{&W.v, &a, st_.v.get(), kvd}});
  adapters(l, Projection::Q, h, D, st_.q.get(), qd);
  adapters(l, Projection::K, h, D, st_.k.get(), kvd);
  adapters(l, Projection::V, h, D, st_.v.get(), kvd);
  // Biases, RoPE, and the keys and values into the cache.
  rows(T_, qd + 2 * kvd, [&](int64_t i) {
    add_bias(st_.q.get() + i * qd, W.bq, qd);
    add_bias(st_.k.get() + i * kvd, W.bk, kvd);
    add_bias(st_.v.get() + i * kvd, W.bv, kvd);
    if (!gpt_) {
      const float* cs = st_.rope.get() + st_.row_pos[i] * hd;
      kt_.rope_row(st_.q.get() + i * qd, s_.n_heads, hd, cs);
      kt_.rope_row(st_.k.get() + i * kvd, s_.n_kv_heads, hd, cs);
    }
    const State::Seq& q = st_.seqs[st_.row_seq[i]];
    const int64_t pos = st_.row_pos[i];
    const int64_t block = q.blocks[pos / opts_.block_tokens], slot = pos % opts_.block_tokens;
    kt_.kv_store_k(kv, st_.k.get() + i * kvd, block, slot);
    kt_.kv_store_v(kv, st_.v.get() + i * kvd, block, slot);
  });
  attend(l);
  Act ao{st_.att.get(), qd, T_, qd};
  prepare(ao, {&W.o});
  run_products(kt_, {Job{&W.o, &ao, h, D}});
  adapters(l, Projection::O, st_.att.get(), qd, h, D);
  sum_over_group();
  residual(W.bo);
}

// Attention over the cache: per chunk and key head, the chunk's query
// vectors of that head group in sets of up to kAttnQueries.
void Engine::StepPass::attend(int64_t l) const {
  const int64_t hd = s_.head_dim, qd = st_.q_dim, group = s_.n_heads / s_.n_kv_heads;
  const backend::PagedAttention pa{st_.layers[l], hd, 1.f / std::sqrt(static_cast<float>(hd))};
  int64_t n_items = 0, r0 = 0;
  for (const Chunk& c : chunks_) {
    const int64_t n = static_cast<int64_t>(c.tokens.size());
    for (int64_t kvh = 0; kvh < s_.n_kv_heads; ++kvh)
      for (int64_t v0 = 0; v0 < n * group; v0 += backend::kAttnQueries)
        st_.items[n_items++] = {r0, kvh, v0, std::min<int64_t>(backend::kAttnQueries, n * group - v0)};
    r0 += n;
  }
  // An item's work is its queries times its keys: a long prompt's chunk
  // and single decode tokens differ a hundredfold, so the threads split by that.
  auto work = [&](int64_t it) {
    const State::AttnItem& w = st_.items[it];
    return static_cast<double>(w.count * (st_.row_pos[w.row0 + (w.v0 + w.count - 1) / group] + 1) * hd);
  };
  parallel_for_balanced(n_items, 8192, work, [&](int64_t a0, int64_t a1) {
    float* scratch = st_.scores.get() + omp_get_thread_num() * kt_.attention_scratch(st_.context);
    for (int64_t it = a0; it < a1; ++it) {
      const State::AttnItem& w = st_.items[it];
      backend::AttnQuery qs[backend::kAttnQueries];
      for (int64_t j = 0; j < w.count; ++j) {
        const int64_t v = w.v0 + j, row = w.row0 + v / group, head = w.kv_head * group + v % group;
        qs[j] = {st_.q.get() + row * qd + head * hd, st_.att.get() + row * qd + head * hd, st_.row_pos[row] + 1};
      }
      kt_.paged_attention_set(pa, qs, static_cast<int>(w.count), st_.seqs[st_.row_seq[w.row0]].blocks.data(),
                              w.kv_head, scratch);
    }
  });
}

// silu(gate) * up, or gelu(up), then down.
void Engine::StepPass::feed_forward(int64_t l) {
  const Model::Layer& W = m_.layers()[l];
  const int64_t D = s_.dim, H = s_.hidden;
  float *x = st_.x.get(), *h = st_.h.get();
  rows(T_, D, [&](int64_t i) { norm(x + i * D, W.ffn_norm, W.ffn_norm_b, h + i * D); });
  Act af{h, D, T_, D};
  if (gpt_) {
    prepare(af, {&W.up});
    run_products(kt_, {Job{&W.up, &af, st_.g.get(), H}});
    adapters(l, Projection::Up, h, D, st_.g.get(), H);
    rows(T_, H, [&](int64_t i) {
      float* g = st_.g.get() + i * H;
      add_bias(g, W.bup, H);
      kt_.gelu_row(g, H, s_.gelu_erf);
    });
  } else {
    prepare(af, {&W.gate, &W.up});
    run_products(kt_, {Job{&W.gate, &af, st_.g.get(), H}, Job{&W.up, &af, st_.u.get(), H}});
    adapters(l, Projection::Gate, h, D, st_.g.get(), H);
    adapters(l, Projection::Up, h, D, st_.u.get(), H);
    rows(T_, H, [&](int64_t i) { kt_.swiglu_row(st_.g.get() + i * H, st_.u.get() + i * H, st_.g.get() + i * H, H); });
  }
  Act ad{st_.g.get(), H, T_, H};
  prepare(ad, {&W.down});
  run_products(kt_, {Job{&W.down, &ad, h, D}});
  adapters(l, Projection::Down, st_.g.get(), H, h, D);
  sum_over_group();
  residual(W.bdown);
}

std::span<const float> Engine::StepPass::logits(int64_t L) {
  const int64_t D = s_.dim;
  rows(L, D, [&](int64_t i) {
    norm(st_.x.get() + st_.logit_row[i] * D, m_.output_norm(), m_.output_norm_bias(), st_.hl.get() + i * D);
  });
  Act al{st_.hl.get(), D, L, D};
  const Matrix& out = m_.output();
  prepare(al, {&out});
  run_products(kt_, {Job{&out, &al, st_.logits.get(), s_.vocab}});
  return {st_.logits.get(), static_cast<size_t>(L * s_.vocab)};
}

// Everything is checked before anything changes; returns the step's rows and logit rows.
std::pair<int64_t, int64_t> Engine::check_step(std::span<const Chunk> chunks) {
  State& st = *st_;
  const ModelSpec& s = model_->spec();
  ++st.step_count;
  int64_t T = 0, L = 0, need = 0;
  for (const Chunk& c : chunks) {
    TS_CHECK(c.seq >= 0 && c.seq < opts_.max_sequences && st.seqs[c.seq].alive, "engine step: no sequence ", c.seq);
    TS_CHECK(st.step_mark[c.seq] != st.step_count, "engine step: sequence ", c.seq,
             " has two chunks in one step (give it one)");
    st.step_mark[c.seq] = st.step_count;
    const int64_t n = static_cast<int64_t>(c.tokens.size()), len = st.seqs[c.seq].length;
    TS_CHECK(n >= 1, "engine step: the chunk of sequence ", c.seq, " has no tokens");
    TS_CHECK(!c.adapter || !opts_.group, "engine step: the chunk of sequence ", c.seq, " has a LoRA adapter, which "
             "a tensor-parallel engine does not run");
    TS_CHECK(c.logits >= 0 && c.logits <= n, "engine step: ", c.logits, " logit rows asked of a chunk of ", n,
             " tokens");
    TS_CHECK(len + n <= st.context, "engine step: sequence ", c.seq, " would reach ", len + n,
             " tokens, past the context of ", st.context);
    for (int32_t t : c.tokens)
      TS_CHECK(t >= 0 && t < s.vocab, "engine step: token id ", t, " is outside the vocabulary [0, ", s.vocab, ")");
    T += n;
    L += c.logits;
    need += (len + n + opts_.block_tokens - 1) / opts_.block_tokens - static_cast<int64_t>(st.seqs[c.seq].blocks.size());
  }
  TS_CHECK(T <= opts_.max_batch_tokens, "engine step: ", T, " tokens, more than max_batch_tokens (",
           opts_.max_batch_tokens, ")");
  TS_CHECK(L <= opts_.max_logit_rows, "engine step: ", L, " logit rows, more than max_logit_rows (",
           opts_.max_logit_rows, ")");
  TS_CHECK(need <= free_blocks(), "engine step: the KV cache is full (", need, " blocks needed, ", free_blocks(),
           " free of ", st.n_blocks, "); raise --kv-memory or end sequences");
  TS_CHECK(get_num_threads() <= st.threads, "engine step: ", get_num_threads(), " threads, more than the ",
           st.threads, " the engine was made for");
  return {T, L};
}

// Cache blocks, and each row's sequence, position and token.
void Engine::place_rows(std::span<const Chunk> chunks) {
  State& st = *st_;
  int64_t r = 0, lr = 0;
  for (const Chunk& c : chunks) {
    State::Seq& q = st.seqs[c.seq];
    const int64_t n = static_cast<int64_t>(c.tokens.size());
    while (static_cast<int64_t>(q.blocks.size()) * opts_.block_tokens < q.length + n) q.blocks.push_back(st.take_block());
    for (int64_t j = 0; j < n; ++j, ++r) {
      st.row_seq[r] = c.seq;
      st.row_pos[r] = q.length + j;
      st.row_tok[r] = c.tokens[j];
      if (j >= n - c.logits) st.logit_row[lr++] = r;
    }
  }
}

// The sequences' new lengths; with prefix caching, their tokens and full blocks registered.
void Engine::commit_tokens(std::span<const Chunk> chunks) {
  State& st = *st_;
  for (const Chunk& c : chunks) {
    State::Seq& q = st.seqs[c.seq];
    if (st.pool.caching())
      for (size_t j = 0; j < c.tokens.size(); ++j) {
        const int64_t pos = q.length + static_cast<int64_t>(j);
        st.pool.tokens(q.blocks[pos / opts_.block_tokens])[pos % opts_.block_tokens] = c.tokens[j];
      }
    q.length += static_cast<int64_t>(c.tokens.size());
    if (st.pool.caching()) st.name_full_blocks(q);
  }
}

// Note [A step's stages].
std::span<const float> Engine::step_(std::span<const Chunk> chunks) {
  std::optional<ThreadLimit> limit;
  if (opts_.threads > 0) limit.emplace(static_cast<int>(std::min<int64_t>(opts_.threads, 1 << 16)));
  const auto [T, L] = check_step(chunks);
  st_->last_rows = T;
  if (T == 0) return {};
  place_rows(chunks);
  StepPass pass(*model_, opts_, *st_, chunks, T);
  pass.embed();
  for (int64_t l = 0; l < model_->spec().n_layers; ++l) {
    pass.attention(l);
    pass.feed_forward(l);
  }
  commit_tokens(chunks);
  if (L == 0 || (group_ && !group_->leader)) return {};  // rank 0 alone samples (Note [An engine across ranks])
  return pass.logits(L);
}

}  // namespace tessera::llm
