// Note [Gradient buckets]
// All-reducing each gradient on its own costs one collective per parameter
// (hundreds per step, each paying latency); all-reducing them all after
// backward leaves the network idle while backward runs. So the gradients are
// views into a few flat buffers ("buckets", 25 MB; the first 1 MB so that
// communication starts early), filled in roughly the order backward produces
// them: reverse registration order at first, then, once, the order observed in
// the first synchronized backward (rank 0's, broadcast, so every rank agrees).
// A leaf's post-accumulate hook marks its gradient ready; a bucket whose
// gradients are all ready is all-reduced (averaged) on the communication
// thread while backward goes on. Buckets are launched strictly in index order
// so that every rank issues the same collectives in the same order even when
// their ready orders differ. The end-of-backward callback launches what is
// left, waits, and leaves the averages in .grad (which are the bucket views).

// Note [Gradient compression]
// Both compressors keep, per bucket, the error feedback of Seide et al. and
// Karimireddy et al.: what compression dropped from this rank's gradient is
// added to its next one, so that nothing is lost, only delayed.
//  - bf16: the f32 bucket plus its error is rounded to bf16 and all-reduced
//    (summed in f32 by the backend), the error keeps the rounding. Half the
//    bytes; launched from the hooks like an uncompressed bucket.
//  - PowerSGD, as PyTorch's powerSGD_hook: each matrix gradient M (n x m,
//    a parameter's leading dimension by the rest; only where the factors are
//    smaller, (n + m) r < n m) is sent as P = M Q (all-reduced, then
//    orthonormalized) and Q = M^T P (all-reduced), and replaced by P Q^T / N,
//    the projection of the ranks' average onto P's columns; Q is kept for the
//    next step (warm start), and starts from the same seed on every rank.
//    Vectors and incompressible matrices are all-reduced as they are. It
//    runs at the end of backward (its two rounds depend on each other).
#include "tessera/distributed/ddp.h"

#include <chrono>
#include <cmath>
#include <array>
#include <cstring>
#include <map>

#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/ops.h"
#include "distributed/comm.h"

namespace tessera::distributed {

struct DistributedDataParallel::Param {
  std::string name;
  Tensor tensor;
  size_t hook = 0;
  size_t bucket = 0;
  int64_t offset = 0;  // elements into the bucket
  bool ready = false;
};

struct DistributedDataParallel::Bucket {
  DType dtype = DType::F32;
  Tensor buffer;
  std::vector<size_t> params;
  size_t pending = 0;
  WorkPtr work;
  Tensor error;            // compression: what it dropped from this rank's gradients (error feedback)
  Tensor wire;             // bf16: the compressed bucket being all-reduced
  std::map<size_t, Tensor> qs;  // PowerSGD: per compressed parameter, its Q (m x r)
};

DistributedDataParallel::DistributedDataParallel(nn::Module& model, ProcessGroupPtr group, DdpOptions options)
    : model_(model), group_(std::move(group)), opt_(options) {
  TS_CHECK(group_, "DistributedDataParallel: no process group");
  TS_CHECK(opt_.bucket_cap_mb > 0 && opt_.first_bucket_mb > 0, "DistributedDataParallel: bucket sizes must be positive");
  if (opt_.compression == "bf16")
    compression_ = Compression::kBf16;
  else if (opt_.compression == "powersgd")
    compression_ = Compression::kPowerSgd;
  else
    TS_CHECK(opt_.compression == "none", "DistributedDataParallel: compression '", opt_.compression,
             "' is not one of none, bf16, powersgd");
  TS_CHECK(opt_.powersgd_rank >= 1 && opt_.powersgd_start_step >= 0,
           "DistributedDataParallel: powersgd_rank must be >= 1 and powersgd_start_step >= 0");
  NoGradGuard no_grad;
  auto named = model_.named_parameters();
  check_same_parameters(*group_, named, "DistributedDataParallel");
  // Rank 0's weights (and buffers) everywhere, frozen ones included.
  std::vector<WorkPtr> works;
  for (auto& [n, t] : named) works.push_back(group_->broadcast(t, 0));
  if (opt_.broadcast_buffers)
    for (auto& [n, t] : model_.named_buffers()) works.push_back(group_->broadcast(t, 0));
  for (auto& w : works) w->wait();

  for (auto& [n, t] : named)
    if (t.requires_grad()) params_.push_back(Param{n, t});
  TS_CHECK(!params_.empty(), "DistributedDataParallel: the model has no parameter that requires grad");
  for (auto& p : params_)
    TS_CHECK(is_floating(p.tensor.dtype()) && p.tensor.is_contiguous(), "DistributedDataParallel: parameter '", p.name,
             "' must be a contiguous floating-point tensor");
  std::vector<size_t> order;
  for (size_t i = params_.size(); i-- > 0;) order.push_back(i);  // backward meets the last layers first
  build_buckets(order);
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i].hook = params_[i].tensor.register_post_accumulate_grad_hook([this, i](const Tensor&) { on_grad_ready(i); });
}

DistributedDataParallel::~DistributedDataParallel() {
  for (auto& b : buckets_)
    if (b.work) try {
        b.work->wait();
      } catch (...) {
      }
  for (auto& p : params_) p.tensor.remove_post_accumulate_grad_hook(p.hook);
}

std::vector<std::vector<std::string>> DistributedDataParallel::buckets() const {
  std::vector<std::vector<std::string>> out;
  for (auto& b : buckets_) {
    out.emplace_back();
    for (size_t i : b.params) out.back().push_back(params_[i].name);
  }
  return out;
}

void DistributedDataParallel::build_buckets(const std::vector<size_t>& order) {
  NoGradGuard no_grad;
  std::vector<Bucket> buckets;
  // One open bucket per dtype; a bucket closes when the next gradient would overflow it.
  std::vector<std::pair<DType, size_t>> open;  // dtype -> index into buckets
  std::vector<int64_t> bytes;
  for (size_t i : order) {
    const Tensor& t = params_[i].tensor;
    size_t bi = SIZE_MAX;
    for (auto& [dt, idx] : open)
      if (dt == t.dtype()) bi = idx;
    const double cap = (bi == 0 ? opt_.first_bucket_mb : opt_.bucket_cap_mb) * 1e6;
    const int64_t nbytes = t.numel() * static_cast<int64_t>(t.itemsize());
    if (bi != SIZE_MAX && bytes[bi] > 0 && bytes[bi] + nbytes > cap) {
      for (auto it = open.begin(); it != open.end(); ++it)
        if (it->first == t.dtype()) {
          open.erase(it);
          break;
        }
      bi = SIZE_MAX;
    }
    if (bi == SIZE_MAX) {
      bi = buckets.size();
      buckets.emplace_back();
      buckets.back().dtype = t.dtype();
      bytes.push_back(0);
      open.push_back({t.dtype(), bi});
    }
    buckets[bi].params.push_back(i);
    bytes[bi] += nbytes;
  }
  for (size_t bi = 0; bi < buckets.size(); ++bi) {
    Bucket& b = buckets[bi];
    int64_t n = 0;
    for (size_t i : b.params) {
      params_[i].bucket = bi;
      params_[i].offset = n;
      n += params_[i].tensor.numel();
    }
    b.buffer = zeros({n}, b.dtype);
    for (size_t i : b.params) {  // gradients already there move into the bucket
      Param& p = params_[i];
      Tensor g = p.tensor.grad();
      if (!g.defined()) continue;
      Tensor view = b.buffer.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.shape());
      view.copy_(g);
      p.tensor.set_grad(view);
    }
  }
  buckets_ = std::move(buckets);
}

void DistributedDataParallel::on_grad_ready(size_t index) {
  if (!sync_) return;
  if (!in_backward_) {
    in_backward_ = true;
    next_launch_ = 0;
    for (auto& p : params_) p.ready = false;
    for (auto& b : buckets_) {
      b.pending = b.params.size();
      b.work = nullptr;
    }
    autograd::queue_callback([this] { finish_backward(); });
  }
  Param& p = params_[index];
  TS_CHECK(!p.ready, "DistributedDataParallel: parameter '", p.name, "' received its gradient twice in one backward ",
           "(rank ", group_->rank(), ", step ", step_, "); run one backward per step, or use no_sync() for the others");
  p.ready = true;
  if (!rebuilt_) ready_order_.push_back(index);
  // The gradient must be the bucket's view (it is not after zero_grad(set_to_none)).
  Bucket& b = buckets_[p.bucket];
  Tensor view = b.buffer.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.shape());
  Tensor g = p.tensor.grad();
  if (g.raw_data() != view.raw_data()) {
    NoGradGuard no_grad;
    view.copy_(g);
    p.tensor.set_grad(view);
  }
  if (--b.pending == 0 && opt_.overlap) launch_ready_buckets();
}

void DistributedDataParallel::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(buckets_[next_launch_++]);
}

void DistributedDataParallel::launch(Bucket& b) {
  if (compression_ == Compression::kPowerSgd && synced_ >= opt_.powersgd_start_step) {
    b.work = nullptr;  // at the end of backward
    return;
  }
  if (compression_ == Compression::kBf16 && b.dtype == DType::F32) {
    NoGradGuard no_grad;
    if (!b.error.defined()) b.error = zeros({b.buffer.numel()}, DType::F32);
    Tensor x = ops::add(b.buffer, b.error);
    b.wire = x.to(DType::BF16);
    b.error = ops::sub(x, b.wire.to(DType::F32));
    b.work = group_->allreduce(b.wire, ReduceOp::kAvg);
    return;
  }
  b.work = group_->allreduce(b.buffer, ReduceOp::kAvg);
}

namespace {

// Gram-Schmidt on the columns of p (n x r, contiguous), as PyTorch's
// _orthogonalize: each column made orthogonal to the ones before and divided
// by its norm plus 1e-8.
void orthonormalize_columns(Tensor& p) {
  const int64_t n = p.size(0), r = p.size(1);
  Tensor t = p.to(DType::F64).contiguous();
  double* d = t.data_ptr<double>();
  for (int64_t j = 0; j < r; ++j) {
    for (int64_t k = 0; k < j; ++k) {
      double dot = 0;
      for (int64_t i = 0; i < n; ++i) dot += d[i * r + k] * d[i * r + j];
      for (int64_t i = 0; i < n; ++i) d[i * r + j] -= dot * d[i * r + k];
    }
    double norm = 0;
    for (int64_t i = 0; i < n; ++i) norm += d[i * r + j] * d[i * r + j];
    norm = std::sqrt(norm) + 1e-8;
    for (int64_t i = 0; i < n; ++i) d[i * r + j] /= norm;
  }
  p.copy_(t);
}

}  // namespace

void DistributedDataParallel::powersgd(Bucket& b) {
  NoGradGuard no_grad;
  const int world = group_->size();
  std::vector<size_t> mats;  // compressed, and the rest all-reduced as they are
  std::vector<Tensor> rest;
  auto region = [&](size_t i) { return b.buffer.narrow(0, params_[i].offset, params_[i].tensor.numel()); };
  auto dims = [&](size_t i) {
    const Tensor& t = params_[i].tensor;
    const int64_t n = t.dim() >= 2 ? t.size(0) : 0, m = n > 0 ? t.numel() / n : 0;
    return std::array<int64_t, 3>{n, m, std::min<int64_t>({opt_.powersgd_rank, n, m})};
  };
  for (size_t i : b.params) {
    auto [n, m, r] = dims(i);
    if (n > 0 && (n + m) * r < n * m) mats.push_back(i);
    else rest.push_back(region(i));
  }
  if (!rest.empty()) {
    Tensor flat = ops::cat(rest, 0);
    group_->allreduce(flat, ReduceOp::kAvg)->wait();
    int64_t at = 0;
    for (auto& t : rest) t.copy_(flat.narrow(0, at, t.numel())), at += t.numel();
  }
  if (mats.empty()) return;
  if (!b.error.defined()) b.error = zeros({b.buffer.numel()}, b.dtype);
  std::vector<Tensor> ms, ps, compensated;
  for (size_t i : mats) {
    auto [n, m, r] = dims(i);
    Tensor reg = region(i);
    reg.add_(b.error.narrow(0, params_[i].offset, reg.numel()));  // error feedback
    compensated.push_back(reg.clone());
    ms.push_back(reg.view({n, m}));
    auto it = b.qs.find(i);
    if (it == b.qs.end()) {  // the same on every rank: a seed of the parameter's index
      Generator g(0x505753ull + i);
      it = b.qs.emplace(i, ops::randn({m, r}, b.dtype, &g)).first;
    }
    ps.push_back(ops::matmul(ms.back(), it->second));
  }
  auto allreduce_all = [&](std::vector<Tensor>& parts) {
    std::vector<Tensor> flat_parts;
    for (auto& t : parts) flat_parts.push_back(t.reshape({-1}));
    Tensor flat = ops::cat(flat_parts, 0);
    group_->allreduce(flat, ReduceOp::kSum)->wait();
    int64_t at = 0;
    for (auto& t : parts) t = flat.narrow(0, at, t.numel()).view(t.shape()).contiguous(), at += t.numel();
  };
  allreduce_all(ps);
  std::vector<Tensor> qs;
  for (size_t k = 0; k < mats.size(); ++k) {
    orthonormalize_columns(ps[k]);
    qs.push_back(ops::matmul(ms[k].t(), ps[k]));
  }
  allreduce_all(qs);
  for (size_t k = 0; k < mats.size(); ++k) {
    const size_t i = mats[k];
    b.qs[i] = qs[k];
    Tensor approx = ops::div(ops::matmul(ps[k], qs[k].t()), static_cast<double>(world));
    ms[k].copy_(approx);
    // What this rank's compensated gradient lost: carried into its next one.
    b.error.narrow(0, params_[i].offset, approx.numel()).copy_(ops::sub(compensated[k], approx.reshape({-1})));
  }
}

void DistributedDataParallel::finish_backward() {
  in_backward_ = false;
  NoGradGuard no_grad;
  // Parameters that got no gradient on this rank.
  std::vector<size_t> unused;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!params_[i].ready) unused.push_back(i);
  if (!unused.empty() && !opt_.find_unused_parameters) {
    std::vector<std::string> names;
    for (size_t i : unused) names.push_back(params_[i].name);
    unused_parameters_error("DistributedDataParallel", names, step_, group_->rank());
  }
  for (size_t i : unused) {  // zeros in the bucket: the other ranks' gradients still average in
    Param& p = params_[i];
    Bucket& b = buckets_[p.bucket];
    b.buffer.narrow(0, p.offset, p.tensor.numel()).zero_();
    --b.pending;
  }
  Tensor used;
  WorkPtr used_work;
  if (opt_.find_unused_parameters) {
    used = zeros({static_cast<int64_t>(params_.size())}, DType::I32);
    for (size_t i = 0; i < params_.size(); ++i) used.data_ptr<int32_t>()[i] = params_[i].ready ? 1 : 0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  while (next_launch_ < buckets_.size()) launch(buckets_[next_launch_++]);
  if (used.defined()) used_work = group_->allreduce(used, ReduceOp::kMax);
  for (auto& b : buckets_)
    if (b.work) b.work->wait();
  if (used_work) used_work->wait();
  for (auto& b : buckets_) {
    if (b.wire.defined()) b.buffer.copy_(b.wire.to(b.dtype));  // bf16 compression: back to f32
    b.wire = Tensor();
    if (!b.work && compression_ == Compression::kPowerSgd) powersgd(b);
  }
  ++synced_;
  last_wait_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& p : params_) {
    Bucket& b = buckets_[p.bucket];
    p.tensor.set_grad(b.buffer.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.shape()));
  }
  // A parameter no rank used has no gradient, as in one process.
  if (used.defined())
    for (size_t i = 0; i < params_.size(); ++i)
      if (used.data_ptr<int32_t>()[i] == 0) params_[i].tensor.set_grad(Tensor());
  if (!rebuilt_) {
    rebuilt_ = true;
    // Rank 0's observed order, completed with the parameters it did not see.
    std::vector<int64_t> order(params_.size(), -1);
    std::vector<bool> seen(params_.size());
    size_t k = 0;
    for (size_t i : ready_order_) order[k++] = static_cast<int64_t>(i), seen[i] = true;
    for (size_t i = params_.size(); i-- > 0;)
      if (!seen[i]) order[k++] = static_cast<int64_t>(i);
    Tensor t = from_buffer(order.data(), {static_cast<int64_t>(order.size())}, DType::I64);
    group_->broadcast(t, 0)->wait();
    std::vector<size_t> rebuilt(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) rebuilt[i] = static_cast<size_t>(t.data_ptr<int64_t>()[i]);
    build_buckets(rebuilt);
    ready_order_.clear();
  }
}

}  // namespace tessera::distributed
