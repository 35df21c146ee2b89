// The backend-independent half of a process group: argument checks, contiguous
// staging, sequence numbers, sub-group bookkeeping, and the world of 1.
#include "tessera/distributed/process_group.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <cstring>
#include <set>

#include "distributed/comm.h"
#include "tessera/autograd/grad_mode.h"

namespace tessera::distributed {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

std::string CollectiveInfo::describe() const {
  return std::string(op) + " " + dtype_name(dtype) + "[" + std::to_string(count) + "] #" + std::to_string(seq);
}

ProcessGroup::ProcessGroup(int rank, int size, std::vector<int> world_ranks, std::string name)
    : ops::Communicator(rank, size, std::move(name)), world_ranks_(std::move(world_ranks)) {}

CollectiveInfo ProcessGroup::last_issued() const {
  CollectiveInfo i;
  i.seq = seq_.load();
  i.op = last_op_.load();
  i.dtype = last_dtype_.load();
  i.count = last_count_.load();
  return i;
}

namespace {

// A call's result staged in a contiguous buffer and copied into the caller's
// (strided) tensor when the call is waited for.
class CopyBackWork : public Work {
 public:
  CopyBackWork(WorkPtr inner, Tensor dst, Tensor src) : inner_(std::move(inner)), dst_(std::move(dst)), src_(std::move(src)) {}
  void wait() override {
    inner_->wait();
    std::lock_guard<std::mutex> lock(mu_);
    if (src_.defined()) {
      NoGradGuard no_grad;
      dst_.copy_(src_);
      src_ = Tensor();
      dst_ = Tensor();
    }
  }
  bool is_completed() const override { return inner_->is_completed(); }
  std::string error() const override { return inner_->error(); }

 private:
  WorkPtr inner_;
  std::mutex mu_;
  Tensor dst_, src_;
};

void check_tensor(const Tensor& t, const char* op, const char* what) {
  TS_CHECK(t.defined(), op, ": the ", what, " tensor is undefined");
  TS_CHECK(t.device().is_cpu(), op, ": the ", what, " tensor is on ", device_str(t.device()),
           "; the MPI backend moves CPU tensors (move it with .to(\"cpu\"))");
  TS_CHECK(t.dtype() != DType::Bool, op, ": bool tensors are not supported; send them as u8");
}

// The output/input pair of allgather, reduce_scatter and all_to_all: CPU, one dtype, two tensors.
void check_out_in(const Tensor& out, const Tensor& in, const char* op) {
  check_tensor(in, op, "input");
  check_tensor(out, op, "output");
  TS_CHECK(out.dtype() == in.dtype(), op, ": the output is ", dtype_name(out.dtype()), ", the input ",
           dtype_name(in.dtype()), "; they must match");
  TS_CHECK(!out.is_same(in), op, ": the output must not be the input");
}

void check_avg(ReduceOp rop, const Tensor& t, const char* op) {
  TS_CHECK(rop != ReduceOp::kAvg || is_floating(t.dtype()), op, ": avg needs a floating-point tensor, got ",
           dtype_name(t.dtype()), " (sum it and divide)");
}

Tensor staged(const Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

// Set while a Communicator call issues its collective (Call::caller_waits).
thread_local bool t_caller_waits = false;
struct CallerWaits {
  CallerWaits() { t_caller_waits = true; }
  ~CallerWaits() { t_caller_waits = false; }
};

}  // namespace

void ProcessGroup::all_reduce_sum(const Tensor& t) {
  WorkPtr w;
  {
    CallerWaits waits;
    w = allreduce(t);
  }
  w->wait();
}

void ProcessGroup::all_gather_into(const Tensor& out, const Tensor& in) {
  WorkPtr w;
  {
    CallerWaits waits;
    w = allgather(out, in);
  }
  w->wait();
}

void ProcessGroup::broadcast_now(const Tensor& t, int root) {
  WorkPtr w;
  {
    CallerWaits waits;
    w = broadcast(t, root);
  }
  w->wait();
}

void ProcessGroup::reduce_scatter_sum(const Tensor& out, const Tensor& in) {
  WorkPtr w;
  {
    CallerWaits waits;
    w = reduce_scatter(out, in);
  }
  w->wait();
}

void ProcessGroup::recv_now(const Tensor& t, int src, int tag) {
  WorkPtr w;
  {
    CallerWaits waits;
    w = recv(t, src, tag);
  }
  w->wait();
}

WorkPtr ProcessGroup::issue(const char* op, ReduceOp rop, const Tensor& in, const Tensor& out, int peer, int tag,
                            int64_t count) {
  NoGradGuard no_grad;
  Call c;
  c.op = rop;
  c.peer = peer;
  c.tag = tag;
  c.in = in.defined() ? staged(in) : Tensor();
  c.out = out.defined() ? (out.is_same(in) ? c.in : staged(out)) : Tensor();
  const DType dt = in.defined() ? in.dtype() : out.defined() ? out.dtype() : DType::U8;
  const bool p2p = std::strcmp(op, "send") == 0 || std::strcmp(op, "recv") == 0;
  if (!p2p) {  // point-to-point messages are not collectives: no sequence number
    c.info.seq = ++seq_;
    last_op_.store(op);
    last_dtype_.store(dt);
    last_count_.store(count);
  }
  c.info.op = op;
  c.info.dtype = dt;
  c.info.count = count;
  // A receive its caller waits for may run on the caller's thread, and any
  // send may be posted there (the communication thread completes it): no
  // hand-off to that thread before the message leaves.
  c.caller_waits = t_caller_waits || std::strcmp(op, "send") == 0;
  const bool copy_back = out.defined() && !c.out.is_same(out);
  Tensor result = c.out;
  WorkPtr w = run(std::move(c));
  if (copy_back) return std::make_shared<CopyBackWork>(std::move(w), out, std::move(result));
  return w;
}

WorkPtr ProcessGroup::allreduce(const Tensor& t, ReduceOp op) {
  check_tensor(t, "allreduce", "");
  check_avg(op, t, "allreduce");
  return issue("allreduce", op, t, t, -1, 0, t.numel());
}

WorkPtr ProcessGroup::broadcast(const Tensor& t, int root) {
  check_tensor(t, "broadcast", "");
  TS_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " is not a rank of this group (0..", size() - 1, ")");
  return issue("broadcast", ReduceOp::kSum, t, t, root, 0, t.numel());
}

WorkPtr ProcessGroup::reduce(const Tensor& t, int root, ReduceOp op) {
  check_tensor(t, "reduce", "");
  TS_CHECK(root >= 0 && root < size(), "reduce: root ", root, " is not a rank of this group (0..", size() - 1, ")");
  check_avg(op, t, "reduce");
  return issue("reduce", op, t, t, root, 0, t.numel());
}

WorkPtr ProcessGroup::allgather(const Tensor& out, const Tensor& in) {
  check_out_in(out, in, "allgather");
  TS_CHECK(out.numel() == in.numel() * size(), "allgather: the output holds ", out.numel(),
           " elements; it must hold size x input = ", size(), " x ", in.numel(), " = ", in.numel() * size());
  return issue("allgather", ReduceOp::kSum, in, out, -1, 0, in.numel());
}

WorkPtr ProcessGroup::reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) {
  check_out_in(out, in, "reduce_scatter");
  TS_CHECK(in.numel() == out.numel() * size(), "reduce_scatter: the input holds ", in.numel(),
           " elements; it must hold size x output = ", size(), " x ", out.numel(), " = ", out.numel() * size());
  check_avg(op, in, "reduce_scatter");
  return issue("reduce_scatter", op, in, out, -1, 0, in.numel());
}

WorkPtr ProcessGroup::all_to_all(const Tensor& out, const Tensor& in) {
  check_out_in(out, in, "all_to_all");
  TS_CHECK(out.numel() == in.numel(), "all_to_all: the output holds ", out.numel(), " elements, the input ",
           in.numel(), "; they must match");
  TS_CHECK(in.numel() % size() == 0, "all_to_all: ", in.numel(), " elements do not split into ", size(),
           " equal blocks");
  return issue("all_to_all", ReduceOp::kSum, in, out, -1, 0, in.numel());
}

WorkPtr ProcessGroup::send(const Tensor& t, int dst, int tag) {
  check_tensor(t, "send", "");
  TS_CHECK(dst >= 0 && dst < size() && dst != rank(), "send: destination ", dst, " must be another rank of this group (0..",
           size() - 1, ", not ", rank(), ")");
  TS_CHECK(tag >= 0 && tag < (1 << 15), "send: tag ", tag, " must be in [0, 32768)");
  return issue("send", ReduceOp::kSum, t, Tensor(), dst, tag, t.numel());
}

WorkPtr ProcessGroup::recv(const Tensor& t, int src, int tag) {
  check_tensor(t, "recv", "");
  TS_CHECK(src >= 0 && src < size() && src != rank(), "recv: source ", src, " must be another rank of this group (0..",
           size() - 1, ", not ", rank(), ")");
  TS_CHECK(tag >= 0 && tag < (1 << 15), "recv: tag ", tag, " must be in [0, 32768)");
  return issue("recv", ReduceOp::kSum, Tensor(), t, src, tag, t.numel());
}

WorkPtr ProcessGroup::barrier() { return issue("barrier", ReduceOp::kSum, Tensor(), Tensor(), -1, 0, 0); }

ProcessGroupPtr registered(ProcessGroupPtr g) {
  if (g) ops::register_communicator(g);
  return g;
}

ProcessGroupPtr ProcessGroup::new_group(const std::vector<int>& ranks) {
  TS_CHECK(!ranks.empty(), "new_group: the rank list is empty");
  std::set<int> seen;
  for (int r : ranks) {
    TS_CHECK(r >= 0 && r < size(), "new_group: rank ", r, " is not in this group (0..", size() - 1, ")");
    TS_CHECK(seen.insert(r).second, "new_group: rank ", r, " is listed twice");
  }
  auto it = std::find(ranks.begin(), ranks.end(), rank());
  const int color = it == ranks.end() ? -1 : 0;
  return registered(make_subgroup(color, static_cast<int>(it - ranks.begin()), name() + "/" + std::to_string(subgroups_++)));
}

ProcessGroupPtr ProcessGroup::split(int color, int key) {
  return registered(make_subgroup(color < 0 ? -1 : color, key,
                                  name() + "/" + std::to_string(subgroups_++) + (color >= 0 ? "." + std::to_string(color) : "")));
}

// ---- the world of 1 -------------------------------------------------------------------

namespace {

class DoneWork : public Work {
 public:
  void wait() override {}
  bool is_completed() const override { return true; }
  std::string error() const override { return ""; }
};

// One process: every collective is its own result (gathers and scatters copy).
class SelfGroup : public ProcessGroup {
 public:
  explicit SelfGroup(std::vector<int> world_ranks, std::string name)
      : ProcessGroup(0, 1, std::move(world_ranks), std::move(name)) {}

 protected:
  WorkPtr run(Call c) override {
    const std::string op = c.info.op;
    TS_CHECK(op != "send" && op != "recv", op, ": a group of one process has no other rank");
    if (c.out.defined() && !c.out.is_same(c.in) && c.in.defined())
      std::memcpy(c.out.raw_data(), c.in.raw_data(), c.in.numel() * c.in.itemsize());
    return std::make_shared<DoneWork>();
  }
  ProcessGroupPtr make_subgroup(int color, int key, const std::string& name) override {
    if (color < 0) return nullptr;
    return std::make_shared<SelfGroup>(world_ranks(), name);
  }
};

}  // namespace

ProcessGroupPtr make_self_group() { return std::make_shared<SelfGroup>(std::vector<int>{0}, "world"); }

// ---- statistics --------------------------------------------------------------------------
namespace {
std::mutex g_stats_mu;
std::map<std::string, CollectiveStats>& stats_table() {
  static auto* t = new std::map<std::string, CollectiveStats>();  // used at exit by the communication thread
  return *t;
}
}  // namespace

void record_collective(const CollectiveInfo& info, double seconds) {
  std::lock_guard<std::mutex> lock(g_stats_mu);
  CollectiveStats& st = stats_table()[info.op];
  st.op = info.op;
  st.calls++;
  st.bytes += static_cast<double>(info.count) * static_cast<double>(dtype_size(info.dtype));
  st.seconds += seconds;
}

std::vector<CollectiveStats> collective_stats() {
  std::lock_guard<std::mutex> lock(g_stats_mu);
  std::vector<CollectiveStats> out;
  for (auto& [op, st] : stats_table()) out.push_back(st);
  return out;
}

// ---- shared checks ---------------------------------------------------------------
namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string signature(const std::string& name, const Tensor& t) {
  return name + " " + dtype_name(t.dtype()) + shape_str(t.shape());
}

}  // namespace

void check_same_parameters(ProcessGroup& g, const std::vector<std::pair<std::string, Tensor>>& named, const char* who) {
  Tensor count = full({1}, static_cast<int64_t>(named.size()), DType::I64);
  Tensor counts = zeros({g.size()}, DType::I64);
  g.allgather(counts, count)->wait();
  for (int r = 0; r < g.size(); ++r)
    TS_CHECK(counts.data_ptr<int64_t>()[r] == static_cast<int64_t>(named.size()), who, ": rank ",
             g.rank(), " has ", named.size(), " parameters, rank ", r, " has ", counts.data_ptr<int64_t>()[r],
             "; every rank must build the same model");
  std::vector<int64_t> mine;
  for (auto& [n, t] : named) mine.push_back(static_cast<int64_t>(fnv1a(signature(n, t))));
  Tensor local = from_buffer(mine.data(), {static_cast<int64_t>(mine.size())}, DType::I64);
  Tensor all = zeros({g.size() * static_cast<int64_t>(mine.size())}, DType::I64);
  g.allgather(all, local)->wait();
  const int64_t* a = all.data_ptr<int64_t>();
  for (int r = 0; r < g.size(); ++r)
    for (size_t i = 0; i < mine.size(); ++i)
      TS_CHECK(a[r * mine.size() + i] == mine[i], who, ": parameter ", i, " differs between rank ",
               g.rank(), " (", signature(named[i].first, named[i].second), ") and rank ", r,
               "; every rank must build the same model");
}


void unused_parameters_error(const char* who, const std::vector<std::string>& names, int64_t step, int rank) {
  std::string list;
  for (size_t k = 0; k < names.size() && k < 5; ++k) list += (k ? ", '" : "'") + names[k] + "'";
  if (names.size() > 5) list += " and " + std::to_string(names.size() - 5) + " more";
  TS_ERROR(who, ": parameter ", list, " got no gradient in the backward of step ", step, " on rank ", rank,
           "; every rank must use every parameter in each step, or set find_unused_parameters: true");
}

}  // namespace tessera::distributed
