// llm::Model: a "llama" or "gpt2" GGUF file's weights, as the engine reads them (its spec: model_spec.cpp).
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "backend/backend.h"
#include "backend/llm_kernels.h"
#include "quant_view.h"
#include "tessera/core/error.h"
#include "tessera/core/parallel.h"
#include "tessera/llm/engine.h"

namespace tessera::llm {
namespace {

// The engine's kernels take these types for a matrix.
bool engine_type(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::Q8_0 ||
         t == GgmlType::Q4_0 || t == GgmlType::Q4_K || t == GgmlType::Q6_K;
}

constexpr int64_t kMaxHeadDim = 512;  // the attention kernel's buffers (kernels/llm.cpp)

}  // namespace

std::shared_ptr<Model> Model::load(const std::string& path, TensorSplit split) {
  GgufFile file = GgufFile::open(path);
  try {
    return from_gguf(std::move(file), split);
  } catch (const Error& e) {
    rethrow_naming_file(path, e);
  }
}

std::shared_ptr<Model> Model::from_gguf(GgufFile file, TensorSplit split) {
  std::shared_ptr<Model> m(new Model());
  m->spec_ = read_model_spec(file);  // every tensor present, in its shape
  m->file_ = std::move(file);
  const GgufFile& f = m->file_;
  const ModelSpec& s = m->spec_;
  const bool gpt = s.arch == "gpt2";
  TS_CHECK(s.head_dim <= kMaxHeadDim, f.what(), ": heads of ", s.head_dim, " dimensions; the engine takes up to ",
           kMaxHeadDim);

  auto matrix = [&](const std::string& name) {
    const GgufTensorInfo& t = f.tensor_info(name);
    Matrix mx;
    mx.type = t.type;
    mx.rows = t.shape()[0];
    mx.cols = t.shape()[1];
    mx.data = f.tensor_data(t);
    TS_CHECK(engine_type(mx.type), f.what(), ": ", name, " is ", ggml_type_name(t.type),
             "; the engine runs F32, F16, BF16, Q8_0, Q4_0, Q4_K and Q6_K weights (convert with "
             "`tessera quantize-gguf`)");
    return mx;
  };
  auto norm = [&](const std::string& name) {
    const Tensor w = dequantize_gguf_tensor(f, f.tensor_info(name));
    std::vector<float> v(static_cast<size_t>(w.numel()));
    std::memcpy(v.data(), w.contiguous().data_ptr<float>(), v.size() * sizeof(float));
    for (float x : v) TS_CHECK(std::isfinite(x), f.what(), ": ", name, " holds values that are not finite");
    m->norms_.push_back(std::move(v));
    return m->norms_.back().data();
  };
  auto optional = [&](const std::string& name) { return f.find_tensor(name) ? norm(name) : nullptr; };
  m->embedding_ = matrix("token_embd.weight");
  for (int64_t i = 0; i < s.n_layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    Layer L;
    L.attn_norm = norm(b + "attn_norm.weight");
    L.ffn_norm = norm(b + "ffn_norm.weight");
    L.o = matrix(b + "attn_output.weight");
    L.up = matrix(b + "ffn_up.weight");
    L.down = matrix(b + "ffn_down.weight");
    if (gpt) {
      // Q, K and V are row ranges of one matrix (and bias).
      const Matrix qkv = matrix(b + "attn_qkv.weight");
      L.q = qkv.rows_at(0, s.dim);
      L.k = qkv.rows_at(s.dim, s.dim);
      L.v = qkv.rows_at(2 * s.dim, s.dim);
      L.attn_norm_b = optional(b + "attn_norm.bias");
      L.ffn_norm_b = optional(b + "ffn_norm.bias");
      if (const float* bqkv = optional(b + "attn_qkv.bias")) L.bq = bqkv, L.bk = bqkv + s.dim, L.bv = bqkv + 2 * s.dim;
      L.bo = optional(b + "attn_output.bias");
      L.bup = optional(b + "ffn_up.bias");
      L.bdown = optional(b + "ffn_down.bias");
    } else {
      L.q = matrix(b + "attn_q.weight");
      L.k = matrix(b + "attn_k.weight");
      L.v = matrix(b + "attn_v.weight");
      L.gate = matrix(b + "ffn_gate.weight");
    }
    m->layers_.push_back(L);
  }
  m->output_norm_ = norm("output_norm.weight");
  if (gpt) {
    m->output_norm_b_ = optional("output_norm.bias");
    m->positions_ = norm("position_embd.weight");
  }
  m->output_ = f.find_tensor("output.weight") ? matrix("output.weight") : m->embedding_;
  m->keep_part(split);
  m->repack();
  return m;
}

// Note [A model split across ranks]
// For tensor-parallel serving, rank r of T keeps heads [r H/T, (r+1) H/T)
// of every layer's attention and columns [r F/T, (r+1) F/T) of its
// feed-forward width, Megatron's split: the rows of Q, K, V, gate and up
// (views of the file), the matching columns of the output and down
// projections (copied: a column range is not contiguous). Each rank's
// block output is then a partial sum, which the engine sums over the
// group before the residual adds it, so the biases of the output and down
// projections are added once, after the sum. Key/value heads split like
// the queries when T divides them; when T is a multiple of them, each
// rank keeps the one head its queries share (held on T / KV ranks). The
// embedding, the norms and the output matrix stay whole on every rank:
// every rank then holds the whole residual stream, and rank 0 alone
// computes logits.
void Model::keep_part(TensorSplit sp) {
  const int T = sp.size, r = sp.rank;
  ModelSpec& s = spec_;
  const std::string& what = file_.what();
  TS_CHECK(T >= 1 && T <= 4096 && r >= 0 && r < T, what, ": rank ", r, " of a tensor-parallel group of ", T,
           " is not a rank of it");
  split_ = sp;
  if (T == 1) return;
  TS_CHECK(s.n_heads % T == 0, what, ": its ", s.n_heads, " attention heads do not split over ", T,
           " ranks (--tensor-parallel must divide the heads)");
  TS_CHECK(s.hidden % T == 0, what, ": its feed-forward width ", s.hidden, " does not split over ", T,
           " ranks (--tensor-parallel must divide it)");
  TS_CHECK(s.n_kv_heads % T == 0 || T % s.n_kv_heads == 0, what, ": its ", s.n_kv_heads,
           " key/value heads neither split over ", T, " ranks nor divide ", T,
           " (--tensor-parallel must divide them or be a multiple of them)");
  const int64_t hd = s.head_dim, H = s.n_heads / T, q0 = r * H, F = s.hidden / T, f0 = r * F;
  const int64_t KV = s.n_kv_heads % T == 0 ? s.n_kv_heads / T : 1;
  const int64_t kv0 = s.n_kv_heads % T == 0 ? r * KV : r / (T / s.n_kv_heads);
  for (Layer& L : layers_) {
    L.q = L.q.rows_at(q0 * hd, H * hd);
    L.k = L.k.rows_at(kv0 * hd, KV * hd);
    L.v = L.v.rows_at(kv0 * hd, KV * hd);
    L.o = columns(L.o, q0 * hd, H * hd, "attention output");
    if (L.gate.data) L.gate = L.gate.rows_at(f0, F);
    L.up = L.up.rows_at(f0, F);
    L.down = columns(L.down, f0, F, "feed-forward down");
    if (L.bq) L.bq += q0 * hd;
    if (L.bk) L.bk += kv0 * hd;
    if (L.bv) L.bv += kv0 * hd;
    if (L.bup) L.bup += f0;
  }
  s.n_heads = H;
  s.n_kv_heads = KV;
  s.hidden = F;
}

Model::Matrix Model::columns(const Matrix& mx, int64_t c0, int64_t n, const char* what) {
  const int64_t block = ggml_block_size(mx.type);
  TS_CHECK(c0 % block == 0 && n % block == 0, file_.what(), ": the ", what, " projection's ", ggml_type_name(mx.type),
           " rows are blocks of ", block, " values, and a rank's share of ", n, " columns from column ", c0,
           " cuts through one (use fewer ranks, or weights in Q8_0, F16 or F32)");
  const int64_t in_row = ggml_row_bytes(mx.type, mx.cols), out_row = ggml_row_bytes(mx.type, n);
  const int64_t skip = ggml_row_bytes(mx.type, c0);
  std::vector<uint8_t> bytes(static_cast<size_t>(out_row * mx.rows));
  for (int64_t i = 0; i < mx.rows; ++i)
    std::memcpy(bytes.data() + i * out_row, static_cast<const uint8_t*>(mx.data) + i * in_row + skip,
                static_cast<size_t>(out_row));
  Matrix m = mx;
  m.cols = n;
  m.data = bytes.data();
  columns_.push_back(std::move(bytes));
  return m;
}

// Note [Weights on huge pages]
// The matrices a step multiplies by are placed once, at load, into one
// buffer on huge pages (HugeBuffer), in the order a step reads them: a
// decoded token streams the weights from start to end, and each matrix's
// read-ahead runs on into the next one's first bytes. Q8_0/Q4_0/Q4_K/Q6_K
// are repacked there for the int8 products (AVX2, VNNI, AMX) where the
// kernel tier has them; F32 and F16 interleaved for the skinny kernel, and
// BF16 copied as it is. Read from the file's mapping instead, the page
// cache's 4 KiB pages stop the hardware prefetcher at every page and cost a
// TLB miss each: F16 decode of a 110M model ran 10-20% slower in
// alternated runs (Zen 5, one thread).
void Model::repack() {
  const backend::LlmKernels& kt = backend::llm_kernels(DeviceType::CPU);
  std::vector<Matrix*> order;  // the matrices placed, in step order
  auto dense = [](const Matrix& mx) { return !detail::qformat_of(mx.type); };  // F32, F16, BF16
  auto take = [&](Matrix* mx) {
    if (!mx->data) return;
    const std::optional<backend::QFormat> f = detail::qformat_of(mx->type);
    if ((f && kt.qgemm_rows[static_cast<int>(*f)]) || dense(*mx)) order.push_back(mx);
  };
  // F32 and F16 interleaved for the skinny kernel where its steps divide the
  // width (Note [Interleaved weight rows]); BF16 as it is (the bf16 dot
  // kernel reads it so).
  auto interleave = [&](const Matrix& mx) -> backend::SkinnyPack {
    return mx.type == GgmlType::F32   ? kt.skinny_pack[static_cast<int>(DType::F32)]
           : mx.type == GgmlType::F16 ? kt.skinny_pack[static_cast<int>(DType::F16)]
                                      : nullptr;
  };
  for (Layer& L : layers_)
    for (Matrix* mx : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) take(mx);
  take(&output_);
  auto bytes = [&](const Matrix& mx) {
    return dense(mx) ? ggml_row_bytes(mx.type, mx.cols) * mx.rows
                     : kt.packed_matrix_bytes(*detail::qformat_of(mx.type), mx.rows, mx.cols);
  };
  std::vector<int64_t> at;  // each one's offset, a multiple of 64
  int64_t total = 0;
  for (const Matrix* mx : order) {
    at.push_back(total);
    total += (bytes(*mx) + 63) / 64 * 64;
  }
  if (total > 0) packed_ = HugeBuffer(total, "the model's weights");
  for (size_t i = 0; i < order.size(); ++i) {
    Matrix& mx = *order[i];
    uint8_t* out = packed_.data() + at[i];
    const void* from = mx.data;
    if (dense(mx)) {
      const backend::SkinnyPack pack = interleave(mx);
      if (pack && pack(from, mx.rows, mx.cols, out)) {
        mx.packed = out;
      } else {
        const int64_t row = ggml_row_bytes(mx.type, mx.cols);
        parallel_for(0, mx.rows, 64, [&](int64_t r0, int64_t r1) {
          std::memcpy(out + r0 * row, static_cast<const char*>(from) + r0 * row,
                      static_cast<size_t>((r1 - r0) * row));
        });
        mx.data = out;
      }
    } else {
      const backend::QuantMatrix q = detail::quant_view(mx);
      parallel_for(0, (mx.rows + kt.pack_rows - 1) / kt.pack_rows, 16,
                   [&](int64_t t0, int64_t t1) { kt.qpack_weights(q, t0, t1, out); });
      mx.packed = out;
    }
    // The products read the packed copy only, so the file's pages of the
    // matrix need not stay resident beside it (the tied embedding's lookups
    // map back just the rows they read). A split model's column ranges are
    // its own copies, not the file's.
    const bool copied = std::any_of(columns_.begin(), columns_.end(),
                                    [&](const std::vector<uint8_t>& c) { return c.data() == from; });
    if (!copied) file_.release(static_cast<const char*>(from), static_cast<size_t>(ggml_row_bytes(mx.type, mx.cols) * mx.rows));
  }
}

HugeBuffer::HugeBuffer(int64_t bytes, const char* what, bool populate) {
  constexpr size_t kHuge = size_t{1} << 21;
  const size_t n = (static_cast<size_t>(std::max<int64_t>(bytes, 1)) + kHuge - 1) / kHuge * kHuge;
  p_.reset(static_cast<uint8_t*>(std::aligned_alloc(kHuge, n)));
  TS_CHECK(p_ != nullptr, "cannot allocate ", n, " bytes for ", what);
  madvise(p_.get(), n, MADV_HUGEPAGE);  // advice only; without it the buffer works the same
  // Linux 5.14 and later fault the range in at once; elsewhere writing it does.
  if (populate && madvise(p_.get(), n, MADV_POPULATE_WRITE) != 0) std::memset(p_.get(), 0, n);
}
void HugeBuffer::Free::operator()(uint8_t* p) const { std::free(p); }

Model::Matrix Model::Matrix::rows_at(int64_t r0, int64_t n) const {
  Matrix m = *this;
  m.rows = n;
  m.data = static_cast<const uint8_t*>(data) + r0 * ggml_row_bytes(type, cols);
  TS_CHECK(packed == nullptr, "Model::Matrix::rows_at: a repacked matrix is cut before it is packed");
  return m;
}

int64_t Model::bytes_per_token_read() const {
  auto bytes = [](const Matrix& m) { return m.rows * ggml_row_bytes(m.type, m.cols); };
  int64_t n = bytes(output_);
  for (const Layer& L : layers_)
    n += bytes(L.q) + bytes(L.k) + bytes(L.v) + bytes(L.o) + (L.gate.data ? bytes(L.gate) : 0) + bytes(L.up) +
         bytes(L.down);
  return n;
}

}  // namespace tessera::llm
