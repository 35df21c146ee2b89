// The MPI backend: process groups over MPI-3.1 communicators, one
// communication thread that makes every MPI call, and the watchdog.
//
// Note [One communication thread]
// Open MPI here makes progress only inside MPI calls (no progress thread), so a
// non-blocking allreduce started during backward would sit idle until the next
// MPI call. Instead every call of every group is queued to one thread that runs
// them with blocking MPI calls, in issue order: the queue is the same on every
// rank (collectives are issued in the same order everywhere), so no two ranks
// ever wait on each other's different collectives, and the main thread goes on
// computing while the thread communicates. Work handles complete from there.
// One exception keeps the order: a call its caller waits for at once (the
// communication ops') runs on the caller's thread when nothing is queued or
// running (CommThread::run_here), since the hand-off there and back costs as
// much as a 1 MB transfer on a machine whose cores the ranks fill.
//
// Note [Polling transfers]
// Sends and receives are posted non-blocking (a blocking send would deadlock
// two pipeline stages sending to each other) and completed by this thread's
// polling. A send is posted on its caller's thread when nothing is queued
// (the message leaves at once; this thread only completes it), and a
// receive its caller waits for (recv_now) blocks there. A large message
// still needs the sender's progress for each of its fragments (with
// btl_vader_single_copy_mechanism=none, as the launcher runs), which only
// the polling gives: while transfers are in flight the thread polls every
// 10 us, with the kernel's timer slack lowered so that a sleep is that long.
#define OMPI_SKIP_MPICXX 1  // the C API only
#include <mpi.h>
#include <sys/prctl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "distributed/comm.h"
#include "tessera/core/trace.h"
#include "tessera/distributed/status.h"

namespace tessera::distributed {

namespace {

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

class CommWork : public Work {
 public:
  void complete(std::string err) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      err_ = std::move(err);
      keep_.clear();
      done_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
  }
  void wait() override {
    // A small collective completes in microseconds: poll briefly (yielding the
    // core) before sleeping on the condition variable, whose wake-up alone
    // costs tens of microseconds here.
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    while (!done_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_.load(); });
    if (!err_.empty()) TS_ERROR(err_);
  }
  bool is_completed() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  std::string error() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return err_;
  }
  std::vector<Tensor> keep_;  // the buffers, alive until the call is done

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};
  std::string err_;
};

struct Task {
  std::function<void()> fn;
  std::shared_ptr<CommWork> work;
  std::string group;
  std::vector<int> world_ranks;  // of the group, for the watchdog's report
  CollectiveInfo info;
  std::string what;  // "allreduce f32[1024] #41 on world"
  bool deadline = true;  // false: MPI's start-up, which the launcher bounds
};

// A send or receive in flight: posted non-blocking, completed by the loop (a
// blocking send would deadlock a ring in which every rank sends first).
struct Pending {
  MPI_Request request;
  std::shared_ptr<CommWork> work;
  std::function<std::string(const MPI_Status&)> finish;  // returns an error or ""
  std::string what;
  std::vector<int> world_ranks;
  double since;
};
thread_local std::vector<Pending>* t_pending = nullptr;  // where a task's posted transfers go
thread_local bool t_on_caller = false;  // the task runs on its caller's thread (run_here)

// "comm allreduce": the profiler keeps scope names by pointer, so they live as long as the process.
const char* comm_scope_name(const char* op) {
  static std::mutex mu;
  static auto* names = new std::map<std::string, std::string>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = names->find(op);
  if (it == names->end()) it = names->emplace(op, std::string("comm ") + op).first;
  return it->second.c_str();
}

class CommThread {
 public:
  static CommThread& get() {
    static CommThread* t = new CommThread();  // never destroyed: shutdown() stops it
    return *t;
  }

  // Runs `fn` on the thread after everything queued before it.
  std::shared_ptr<CommWork> post(Task task) {
    auto work = task.work ? task.work : std::make_shared<CommWork>();
    task.work = work;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) {
        work->complete(task.what + ": the process group was shut down");
        return work;
      }
      queue_.push_back(std::move(task));
      queued_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_one();
    return work;
  }
  // Posts and waits: for setup calls that return values.
  void call(const char* what, std::function<void()> fn, bool deadline = true) {
    Task t;
    t.fn = std::move(fn);
    t.what = what;
    t.deadline = deadline;
    t.info.op = what;
    post(std::move(t))->wait();
  }

  void start() {
    thread_ = std::thread([this] { loop(); });
    watchdog_ = std::thread([this] { watch(); });
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    {
      std::lock_guard<std::mutex> lock(watch_mu_);
      watch_stop_ = true;
    }
    watch_cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
  }
  int my_world_rank = 0;

 private:
  // Completes the sends and receives that have finished.
  void poll_pending() {
    adopt();
    if (pending_.empty()) return;
    std::vector<MPI_Request> reqs;
    for (auto& p : pending_) reqs.push_back(p.request);
    std::vector<int> idx(reqs.size());
    std::vector<MPI_Status> st(reqs.size());
    int done = 0;
    int rc = MPI_Testsome(static_cast<int>(reqs.size()), reqs.data(), &done, idx.data(), st.data());
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) done = 0;
    if (done <= 0 || done == MPI_UNDEFINED) return;
    std::vector<bool> finished(pending_.size());
    for (int j = 0; j < done; ++j) {
      Pending& p = pending_[idx[j]];
      std::string err;
      try {
        err = p.finish(st[j]);
      } catch (const std::exception& e) {
        err = e.what();
      }
      p.work->complete(std::move(err));
      finished[idx[j]] = true;
    }
    std::lock_guard<std::mutex> lock(watch_mu_);
    std::vector<Pending> keep;
    for (size_t i = 0; i < pending_.size(); ++i)
      if (!finished[i]) keep.push_back(std::move(pending_[i]));
    pending_ = std::move(keep);
  }

  // Takes over the transfers callers posted (run_here) into pending_.
  void adopt() {
    std::vector<Pending> mine;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (adopted_.empty()) return;
      mine.swap(adopted_);
    }
    std::lock_guard<std::mutex> lock(watch_mu_);
    for (auto& p : mine) pending_.push_back(std::move(p));
  }

  void loop() {
    t_pending = &staged_;
    // Sleeps of 10 us between polls of the transfers in flight, not the
    // kernel's default 50 us slack on top (Note [Polling transfers]).
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    for (;;) {
      Task task;
      // Calls often come in quick succession (the buckets of one backward, a
      // stream of small collectives): poll briefly before sleeping, as wait() does.
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
      // A caller running its call itself (run_here) wants the core: sleep then.
      while (queued_.load(std::memory_order_acquire) == 0 && !caller_running_.load(std::memory_order_relaxed) &&
             std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
      {
        std::unique_lock<std::mutex> lock(mu_);
        // Work to take: queued, and no caller running a call itself (run_here).
        auto ready = [&] { return stopped_ || (!queue_.empty() && !busy_) || !adopted_.empty(); };
        if (pending_.empty() && adopted_.empty()) {
          cv_.wait(lock, ready);
        } else {
          // Sends and receives in flight: poll them while waiting for work.
          cv_.wait_for(lock, std::chrono::microseconds(10), ready);
        }
        if ((queue_.empty() || busy_) && !stopped_) {
          lock.unlock();
          poll_pending();
          continue;
        }
        if (queue_.empty()) return;  // stopped and drained (a stopping process runs nothing itself)
        task = std::move(queue_.front());
        queue_.pop_front();
        queued_.fetch_sub(1, std::memory_order_relaxed);
        busy_ = true;
      }
      const std::string err = run_task(task);
      {
        std::lock_guard<std::mutex> lock(mu_);
        busy_ = false;
      }
      if (!staged_.empty()) {  // the task posted a send or receive: it completes later
        std::lock_guard<std::mutex> lock(watch_mu_);
        for (auto& p : staged_) {
          p.since = now_seconds();
          p.what = task.what;
          p.world_ranks = task.world_ranks;
          pending_.push_back(std::move(p));
        }
        staged_.clear();
        if (!err.empty()) task.work->complete(err);
      } else {
        task.work->complete(err);
      }
      poll_pending();
    }
  }

 public:
  // Runs a collective's task on the calling thread, when nothing is queued or
  // running (so every rank's issue order holds) and MPI allows calls from any
  // thread; false when it must be queued instead. For callers that wait at
  // once (the communication ops, Note [Collectives as ops]): on a machine
  // whose cores the ranks fill, the hand-off to this thread and back costs
  // tens of microseconds, as much as a 1 MB allreduce's transfer.
  bool run_here(Task& task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!thread_multiple || stopped_ || busy_ || !queue_.empty()) return false;
      busy_ = true;
      caller_running_.store(true, std::memory_order_relaxed);
    }
    std::vector<Pending> posted;  // a send this caller posted: this thread completes it
    t_pending = &posted;
    t_on_caller = true;
    const std::string err = run_task(task);
    t_pending = nullptr;
    t_on_caller = false;
    bool queued;
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
      caller_running_.store(false, std::memory_order_relaxed);
      queued = !queue_.empty();
      for (auto& p : posted) {
        p.since = now_seconds();
        p.what = task.what;
        p.world_ranks = task.world_ranks;
        adopted_.push_back(std::move(p));
      }
    }
    // Calls queued meanwhile were held back by busy_, and a posted send needs
    // polling: wake the thread for them (only then: a needless wake-up takes
    // a core from the other ranks).
    if (queued || !posted.empty()) cv_.notify_one();
    if (posted.empty() || !err.empty()) task.work->complete(err);
    return true;
  }
  bool thread_multiple = false;  // MPI_THREAD_MULTIPLE was provided

 private:
  // Runs one task with its status record, watchdog entry, trace scope and
  // statistics; returns its error ("" for none). Its buffers are released
  // before it returns, so that a tensor the caller drops after wait() is
  // freed then (ZeRO-2's gradient segments).
  std::string run_task(Task& task) {
    const bool tracked = task.info.seq > 0;
      if (tracked) StatusBoard::get().begin(task.group, task.info);
      {
        std::lock_guard<std::mutex> lock(watch_mu_);
        current_ = &task;
        current_since_ = now_seconds();
      }
    std::string err;
    const double began = now_seconds();
    try {
      // On the profiler's timeline, the communication thread's track is the
      // communication track (a call run by its caller shows on the caller's).
      trace::ScopeGuard scope(comm_scope_name(task.info.op), trace::ScopeKind::kUser);
      task.fn();
    } catch (const std::exception& e) {
      err = e.what();
    }
    if (tracked) record_collective(task.info, now_seconds() - began);
    {
      std::lock_guard<std::mutex> lock(watch_mu_);
      current_ = nullptr;
    }
    task.fn = nullptr;
    if (tracked) StatusBoard::get().end();
    return err;
  }

  // Note [Collective deadline]
  // A blocking MPI call cannot be cancelled, so a collective past its deadline
  // ends the job: the watchdog names it and the ranks that did not arrive
  // (from their status records), then aborts every rank through MPI.
  void watch() {
    const double timeout = collective_timeout();
    const auto tick = std::chrono::duration<double>(std::min(1.0, timeout / 20));
    std::unique_lock<std::mutex> lock(watch_mu_);
    while (!watch_stop_) {
      watch_cv_.wait_for(lock, tick);
      if (watch_stop_) continue;
      std::string line;
      // MPI's start-up is bounded by the launcher, not by the collective deadline (a slow host
      // starting many ranks is not a hang).
      if (current_ && current_->deadline && now_seconds() - current_since_ >= timeout)
        line = report(*current_, timeout);
      for (auto& p : pending_)
        if (line.empty() && now_seconds() - p.since >= timeout)
          line = "tessera: rank " + std::to_string(my_world_rank) + ": " + p.what + " did not complete within " +
                 std::to_string(static_cast<int>(timeout)) + " s (TESSERA_DIST_TIMEOUT); its peer never matched it";
      if (line.empty()) continue;
      lock.unlock();
      std::fprintf(stderr, "%s\n", line.c_str());
      std::fflush(stderr);
      mpi_abort(124);
    }
  }

  std::string report(const Task& t, double timeout) const {
    char head[160];
    std::snprintf(head, sizeof head, "tessera: rank %d: %s did not complete within %g s (TESSERA_DIST_TIMEOUT)",
                  my_world_rank, t.what.c_str(), timeout);
    std::string line = head;
    if (t.info.seq == 0) return line;
    std::string missing;
    for (int r : t.world_ranks) {
      if (r == my_world_rank) continue;
      auto rec = StatusBoard::get().read(r);
      std::string who = "rank " + std::to_string(r);
      if (!rec) {
        missing += (missing.empty() ? "" : "; ") + who + " (no status record readable here)";
        continue;
      }
      const bool arrived = t.group == rec->group && rec->seq >= t.info.seq && !rec->finished;
      if (arrived) continue;
      char host[64];
      gethostname(host, sizeof host);
      const bool gone = std::strncmp(host, rec->host, sizeof host) == 0 && kill(rec->pid, 0) != 0 && errno == ESRCH;
      missing += (missing.empty() ? "" : "; ") + who + (gone ? " (exited, " : " (") + rec->describe() + ")";
    }
    if (missing.empty())
      return line + "; every rank's status record shows it in this collective, so it is stuck in the transport "
                    "(a link down, a host cut off?)";
    return line + "; ranks that did not arrive: " + missing;
  }

  std::thread thread_, watchdog_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool busy_ = false;  // a task is running (on this thread or its caller's); under mu_
  std::atomic<bool> caller_running_{false};  // the running task is a caller's (run_here)
  std::atomic<int> queued_{0};  // queue_.size(), for polling without the lock
  bool stopped_ = false;
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  const Task* current_ = nullptr;
  std::vector<Pending> pending_, staged_;
  std::vector<Pending> adopted_;  // posted by callers, not yet polled here; under mu_
  double current_since_ = 0;
  bool watch_stop_ = false;
};

// ---- MPI types and operators -------------------------------------------------------------
MPI_Datatype g_bf16 = MPI_DATATYPE_NULL, g_f16 = MPI_DATATYPE_NULL;
MPI_Op g_half_sum = MPI_OP_NULL, g_half_max = MPI_OP_NULL, g_half_min = MPI_OP_NULL;

// bf16/f16 reductions: each pair combined in f32, rounded once.
template <typename H> void combine(const void* in, void* inout, int n, ReduceOp op) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  for (int i = 0; i < n; ++i) {
    const float x = a[i], y = b[i];
    b[i] = H(op == ReduceOp::kSum ? x + y : op == ReduceOp::kMax ? (x > y || x != x ? x : y) : (x < y || x != x ? x : y));
  }
}
template <ReduceOp Op> void half_op(void* in, void* inout, int* len, MPI_Datatype* dt) {
  if (*dt == g_bf16) combine<BFloat16>(in, inout, *len, Op);
  else combine<Half>(in, inout, *len, Op);
}

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::U8: return MPI_UINT8_T;
    case DType::I8: return MPI_INT8_T;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::F16: return g_f16;
    case DType::BF16: return g_bf16;
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    default: TS_ERROR("MPI: no datatype for ", dtype_name(d));
  }
}

MPI_Op mpi_op(ReduceOp op, DType d) {
  const bool half = is_reduced_float(d);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return half ? g_half_sum : MPI_SUM;
    case ReduceOp::kMax: return half ? g_half_max : MPI_MAX;
    case ReduceOp::kMin: return half ? g_half_min : MPI_MIN;
  }
  return MPI_SUM;
}

void check_mpi(int rc, const std::string& what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  TS_ERROR(what, ": MPI error: ", std::string(msg, len));
}

int int_count(int64_t n, const std::string& what) {
  TS_CHECK(n <= INT32_MAX, what, ": ", n, " elements per rank is more than MPI's int count; split the tensor");
  return static_cast<int>(n);
}

void divide(const Tensor& t, int by) {
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::F32: for (float* p = t.data_ptr<float>(); p != t.data_ptr<float>() + n; ++p) *p /= by; break;
    case DType::F64: for (double* p = t.data_ptr<double>(); p != t.data_ptr<double>() + n; ++p) *p /= by; break;
    case DType::BF16: for (BFloat16* p = t.data_ptr<BFloat16>(); p != t.data_ptr<BFloat16>() + n; ++p) *p = BFloat16(float(*p) / by); break;
    case DType::F16: for (Half* p = t.data_ptr<Half>(); p != t.data_ptr<Half>() + n; ++p) *p = Half(float(*p) / by); break;
    default: TS_ERROR("avg of ", dtype_name(t.dtype()));
  }
}

// ---- the communicator -------------------------------------------------------------------
struct Comm {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  std::string name;
  std::string broken;  // after a mismatched collective, the group is unusable
  bool owned = false;
};

// Note [Collective fingerprints]
// With TESSERA_DIST_DEBUG=1 each collective first all-gathers a fixed-size
// fingerprint, so that a rank that issued a different collective (another op,
// dtype, size or root) is reported by every rank instead of hanging or mixing
// buffers. It costs one small allgather per collective, so it is off by default.
struct Fingerprint {
  uint64_t seq;
  int64_t count;
  int32_t peer;
  uint8_t dtype;
  uint8_t reduce;
  char op[18];
};

void check_fingerprints(Comm& c, const CollectiveInfo& info, int peer, ReduceOp rop) {
  Fingerprint mine{};
  mine.seq = info.seq;
  mine.count = info.count;
  mine.peer = peer;
  mine.dtype = static_cast<uint8_t>(info.dtype);
  mine.reduce = static_cast<uint8_t>(rop);
  std::strncpy(mine.op, info.op, sizeof mine.op - 1);
  std::vector<Fingerprint> all(c.size);
  check_mpi(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, c.comm),
            "debug fingerprint of " + info.describe());
  bool same = true;
  for (auto& f : all) same = same && std::memcmp(&f, &all[0], sizeof f) == 0;
  if (same) return;
  std::string msg = "collective mismatch on group " + c.name + ": ";
  for (int r = 0; r < c.size; ++r) {
    CollectiveInfo i;
    i.seq = all[r].seq;
    i.op = all[r].op;
    i.dtype = static_cast<DType>(all[r].dtype);
    i.count = all[r].count;
    msg += (r ? ", rank " : "rank ") + std::to_string(r) + " runs " + i.describe();
    if (all[r].peer >= 0) msg += " (root " + std::to_string(all[r].peer) + ")";
    if (std::strcmp(all[r].op, "allreduce") == 0 || std::strcmp(all[r].op, "reduce") == 0 ||
        std::strcmp(all[r].op, "reduce_scatter") == 0)
      msg += std::string(" ") + reduce_op_name(static_cast<ReduceOp>(all[r].reduce));
  }
  c.broken = msg;
  TS_ERROR(msg);
}

constexpr int64_t kChunk = int64_t{1} << 30;  // elements per MPI call, under int's limit

struct MpiCall {
  CollectiveInfo info;
  ReduceOp op;
  Tensor in, out;
  int peer, tag;
  std::shared_ptr<CommWork> work;
};

void execute(Comm& c, const MpiCall& k) {
  const std::string what = k.info.describe() + " on " + c.name;
  TS_CHECK(c.broken.empty(), what, ": the group is unusable after an earlier error: ", c.broken);
  const std::string op = k.info.op;
  if (debug_collectives() && k.info.seq > 0) check_fingerprints(c, k.info, k.peer, k.op);
  if (op == "barrier") return check_mpi(MPI_Barrier(c.comm), what);
  const Tensor& buf = k.out.defined() ? k.out : k.in;
  const MPI_Datatype type = mpi_type(buf.dtype());
  const int64_t isz = static_cast<int64_t>(buf.itemsize());
  auto chunks = [&](const Tensor& t, auto&& f) {
    char* p = static_cast<char*>(t.raw_data());
    for (int64_t at = 0, n = t.numel(); at < n || (n == 0 && at == 0); at += kChunk) {
      f(p + at * isz, static_cast<int>(std::min(kChunk, n - at)));
      if (n == 0) break;
    }
  };
  if (op == "allreduce") {
    chunks(k.in, [&](char* p, int n) {
      check_mpi(MPI_Allreduce(MPI_IN_PLACE, p, n, type, mpi_op(k.op, buf.dtype()), c.comm), what);
    });
    if (k.op == ReduceOp::kAvg) divide(k.in, c.size);
  } else if (op == "broadcast") {
    chunks(k.in, [&](char* p, int n) { check_mpi(MPI_Bcast(p, n, type, k.peer, c.comm), what); });
  } else if (op == "reduce") {
    const bool root = c.rank == k.peer;
    chunks(k.in, [&](char* p, int n) {
      check_mpi(MPI_Reduce(root ? MPI_IN_PLACE : p, root ? p : nullptr, n, type, mpi_op(k.op, buf.dtype()), k.peer,
                           c.comm),
                what);
    });
    if (root && k.op == ReduceOp::kAvg) divide(k.in, c.size);
  } else if (op == "allgather") {
    const int n = int_count(k.in.numel(), what);
    check_mpi(MPI_Allgather(k.in.raw_data(), n, type, k.out.raw_data(), n, type, c.comm), what);
  } else if (op == "reduce_scatter") {
    const int n = int_count(k.out.numel(), what);
    check_mpi(MPI_Reduce_scatter_block(k.in.raw_data(), k.out.raw_data(), n, type, mpi_op(k.op, buf.dtype()), c.comm),
              what);
    if (k.op == ReduceOp::kAvg) divide(k.out, c.size);
  } else if (op == "all_to_all") {
    const int n = int_count(k.in.numel() / c.size, what);
    check_mpi(MPI_Alltoall(k.in.raw_data(), n, type, k.out.raw_data(), n, type, c.comm), what);
  } else if (op == "recv" && t_on_caller) {  // on its caller's thread (recv_now): wait here
    const int n = int_count(buf.numel(), what);
    MPI_Status st;
    check_mpi(MPI_Recv(k.out.raw_data(), n, type, k.peer, k.tag, c.comm, &st), what);
    int got = 0;
    MPI_Get_count(&st, type, &got);
    TS_CHECK(got == n, what, ": received ", got, " elements from rank ", k.peer, ", expected ", n,
             " (the sender's tensor has another size)");
  } else if (op == "send" || op == "recv") {
    const int n = int_count(buf.numel(), what);
    Pending p;
    const bool is_send = op == "send";
    check_mpi(is_send ? MPI_Isend(k.in.raw_data(), n, type, k.peer, k.tag, c.comm, &p.request)
                      : MPI_Irecv(k.out.raw_data(), n, type, k.peer, k.tag, c.comm, &p.request),
              what);
    p.work = k.work;
    p.finish = [is_send, n, type, what, peer = k.peer](const MPI_Status& st) -> std::string {
      if (is_send) return "";
      int got = 0;
      MPI_Get_count(&st, type, &got);
      if (got == n) return "";
      return what + ": received " + std::to_string(got) + " elements from rank " + std::to_string(peer) +
             ", expected " + std::to_string(n) + " (the sender's tensor has another size)";
    };
    t_pending->push_back(std::move(p));
  } else {
    TS_ERROR("MPI backend: unknown call ", op);
  }
}

class MpiGroup : public ProcessGroup {
 public:
  MpiGroup(std::shared_ptr<Comm> c, std::vector<int> world_ranks)
      : ProcessGroup(c->rank, c->size, std::move(world_ranks), c->name), comm_(std::move(c)) {}
  ~MpiGroup() override {
    if (!comm_->owned) return;
    Task t;
    auto comm = comm_;
    t.fn = [comm] { MPI_Comm_free(&comm->comm); };
    t.what = "free " + comm_->name;
    CommThread::get().post(std::move(t));  // not waited for: destructors do not block
  }

 protected:
  WorkPtr run(Call call) override {
    Task t;
    t.group = name();
    t.world_ranks = world_ranks();
    t.info = call.info;
    t.what = call.info.describe() + " on " + name();
    auto work = std::make_shared<CommWork>();
    work->keep_ = {call.in, call.out};
    t.work = work;
    MpiCall k{call.info, call.op, call.in, call.out, call.peer, call.tag, work};
    t.fn = [comm = comm_, k] { execute(*comm, k); };
    if (call.caller_waits && CommThread::get().run_here(t)) return work;
    return CommThread::get().post(std::move(t));
  }

  ProcessGroupPtr make_subgroup(int color, int key, const std::string& name) override {
    auto sub = std::make_shared<Comm>();
    sub->name = name;
    sub->owned = true;
    std::vector<int> members;
    auto parent = comm_;
    const std::vector<int> parent_world = world_ranks();
    CommThread::get().call("split", [&] {
      check_mpi(MPI_Comm_split(parent->comm, color < 0 ? MPI_UNDEFINED : color, key, &sub->comm), "split " + name);
      if (sub->comm == MPI_COMM_NULL) return;
      MPI_Comm_set_errhandler(sub->comm, MPI_ERRORS_RETURN);
      MPI_Comm_rank(sub->comm, &sub->rank);
      MPI_Comm_size(sub->comm, &sub->size);
      // Which world ranks are in it, by new rank.
      int mine = parent_world[parent->rank];
      members.resize(sub->size);
      check_mpi(MPI_Allgather(&mine, 1, MPI_INT, members.data(), 1, MPI_INT, sub->comm), "split " + name);
    });
    if (sub->comm == MPI_COMM_NULL) return nullptr;
    return std::make_shared<MpiGroup>(sub, members);
  }

 private:
  std::shared_ptr<Comm> comm_;
};

int g_local_rank = 0, g_local_size = 1;
bool g_started = false, g_finalized = false, g_thread_multiple = false;
std::string g_owned_status_dir;  // made here (not by the launcher): removed at a clean shutdown

}  // namespace

bool mpi_launched() {
  if (const char* b = std::getenv("TESSERA_DIST_BACKEND"); b && *b) {
    TS_CHECK(std::strcmp(b, "mpi") == 0 || std::strcmp(b, "none") == 0, "TESSERA_DIST_BACKEND='", b,
             "': expected mpi or none");
    return std::strcmp(b, "mpi") == 0;
  }
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

ProcessGroupPtr make_mpi_world() {
  CommThread& ct = CommThread::get();
  ct.start();
  auto world = std::make_shared<Comm>();
  world->name = "world";
  std::vector<int> ranks;
  std::string status_dir;
  ct.call("init", [&] {
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    g_thread_multiple = provided >= MPI_THREAD_MULTIPLE;
    CommThread::get().thread_multiple = g_thread_multiple;
    g_started = true;
    world->comm = MPI_COMM_WORLD;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &world->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world->size);
    MPI_Comm local;
    check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world->rank, MPI_INFO_NULL, &local),
              "local ranks");
    MPI_Comm_rank(local, &g_local_rank);
    MPI_Comm_size(local, &g_local_size);
    MPI_Comm_free(&local);
    MPI_Type_contiguous(2, MPI_BYTE, &g_bf16);
    MPI_Type_commit(&g_bf16);
    MPI_Type_contiguous(2, MPI_BYTE, &g_f16);
    MPI_Type_commit(&g_f16);
    MPI_Op_create(&half_op<ReduceOp::kSum>, 1, &g_half_sum);
    MPI_Op_create(&half_op<ReduceOp::kMax>, 1, &g_half_max);
    MPI_Op_create(&half_op<ReduceOp::kMin>, 1, &g_half_min);
    // The status directory: the launcher's, else one rank 0 names for the job.
    char dir[512] = {};
    if (const char* d = std::getenv("TESSERA_DIST_STATUS_DIR"); d && *d) {
      std::snprintf(dir, sizeof dir, "%s", d);
    } else if (world->rank == 0) {
      const char* tmp = std::getenv("TMPDIR");
      char host[64] = {};
      gethostname(host, sizeof host - 1);
      std::snprintf(dir, sizeof dir, "%s/tessera-dist-%s-%d", tmp && *tmp ? tmp : "/tmp", host, getpid());
      g_owned_status_dir = dir;
    }
    check_mpi(MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD), "status directory");
    status_dir = dir;
    if (std::getenv("TESSERA_DIST_STATUS_DIR") == nullptr) g_owned_status_dir = dir;
  }, /*deadline=*/false);
  ct.my_world_rank = world->rank;
  for (int r = 0; r < world->size; ++r) ranks.push_back(r);
  StatusBoard::get().open(status_dir, world->rank);
  std::atexit([] { mpi_shutdown(); });
  return std::make_shared<MpiGroup>(world, ranks);
}

int mpi_local_rank() { return g_local_rank; }
int mpi_local_size() { return g_local_size; }

void mpi_shutdown() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!g_started) return;
    CommThread& ct = CommThread::get();
    StatusBoard::get().finish();
    try {
      ct.call("finalize", [] {
        MPI_Barrier(MPI_COMM_WORLD);  // every rank done with the status files
        if (!g_owned_status_dir.empty()) {
          int rank = 0;
          MPI_Comm_rank(MPI_COMM_WORLD, &rank);
          std::error_code ec;
          std::filesystem::remove(StatusBoard::path_of(g_owned_status_dir, rank), ec);
          MPI_Barrier(MPI_COMM_WORLD);
          if (rank == 0) std::filesystem::remove(g_owned_status_dir, ec);
        }
        MPI_Op_free(&g_half_sum);
        MPI_Op_free(&g_half_max);
        MPI_Op_free(&g_half_min);
        MPI_Type_free(&g_bf16);
        MPI_Type_free(&g_f16);
        MPI_Finalize();
        g_finalized = true;
      });
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tessera: MPI shutdown: %s\n", e.what());
    }
    ct.stop();
  });
}

void mpi_abort(int code) {
  std::fflush(nullptr);
  // MPI_Abort can itself hang when a host is cut off: end this process regardless.
  std::thread([code] {
    std::this_thread::sleep_for(std::chrono::seconds(10));
    std::_Exit(code);
  }).detach();
  if (g_started && !g_finalized && g_thread_multiple) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace tessera::distributed
