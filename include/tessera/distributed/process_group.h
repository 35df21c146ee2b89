#pragma once
// Process groups: the ranks of a job and the collectives between them.
//
//   auto world = distributed::world();           // from mpirun / srun, else a world of 1
//   world->allreduce(grad)->wait();               // in place, sum over ranks
//   auto w = world->allreduce(bucket, distributed::ReduceOp::kAvg);  // asynchronous
//   ...compute...
//   w->wait();
//
// Every call returns a Work handle and is asynchronous: the collectives of a
// process run on one communication thread, in the order they were issued
// (Note [One communication thread] in src/distributed/mpi_group.cpp). A
// tensor handed to a call must not be read or written until its Work is
// waited for; wait() rethrows the collective's error, if any.
//
// Every collective carries a sequence number and a deadline (TESSERA_DIST_TIMEOUT
// seconds, default 300). A collective past its deadline prints one line naming
// it and the ranks that did not arrive, then ends the job. With
// TESSERA_DIST_DEBUG=1 every collective first compares its fingerprint (op,
// dtype, element count, sequence number) across the group and fails on every
// rank with both sides named when they differ.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/ops/communicator.h"

namespace tessera::distributed {

enum class ReduceOp { kSum, kAvg, kMax, kMin };
const char* reduce_op_name(ReduceOp op);

// The handle of one asynchronous call.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the call is done; throws its error. Results are visible after it.
  virtual void wait() = 0;
  virtual bool is_completed() const = 0;
  // The error message once completed with an error, else "".
  virtual std::string error() const = 0;
};
using WorkPtr = std::shared_ptr<Work>;

class ProcessGroup;
using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

// What a rank last did, for the watchdog and the launcher's summary.
struct CollectiveInfo {
  uint64_t seq = 0;  // per group, from 1
  const char* op = "";
  DType dtype = DType::F32;
  int64_t count = 0;  // elements this rank contributes
  std::string describe() const;  // "allreduce f32[1024] #41"
};

// A group is also the ops' Communicator (tessera/ops/communicator.h): made by
// world(), new_group() or split(), it is registered under its name(), which
// the communication ops (ops::all_reduce(x, "world/0"), ...) take.
class ProcessGroup : public ops::Communicator {
 public:
  // The ranks of this group in the world, by group rank.
  const std::vector<int>& world_ranks() const { return world_ranks_; }

  // In place on `t`. kAvg is for floating types; bf16/f16 sums are taken in f32.
  WorkPtr allreduce(const Tensor& t, ReduceOp op = ReduceOp::kSum);
  WorkPtr broadcast(const Tensor& t, int root);
  // The reduction lands in `t` on root; the other ranks' `t` is left as it was.
  WorkPtr reduce(const Tensor& t, int root, ReduceOp op = ReduceOp::kSum);
  // out holds size() * in.numel() elements: every rank's `in`, in rank order.
  WorkPtr allgather(const Tensor& out, const Tensor& in);
  // in holds size() * out.numel() elements; rank r receives the reduction of block r.
  WorkPtr reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::kSum);
  // in and out hold size() equal blocks; block j of `in` goes to rank j, and
  // block i of `out` comes from rank i.
  WorkPtr all_to_all(const Tensor& out, const Tensor& in);
  WorkPtr send(const Tensor& t, int dst, int tag = 0);
  WorkPtr recv(const Tensor& t, int src, int tag = 0);
  // recv(t, src, tag)->wait(), run on the calling thread when nothing is
  // queued before it (a pipeline stage waiting for its input: the hand-off
  // to the communication thread and back would add its polling interval).
  void recv_now(const Tensor& t, int src, int tag = 0);
  // broadcast(t, root)->wait(), likewise (the LLM engine's calls to its
  // tensor-parallel group, one before each of its steps).
  void broadcast_now(const Tensor& t, int root);
  WorkPtr barrier();

  // Collective over this group: every rank calls it with the same list. Members
  // get the new group (ranks numbered by their place in `ranks`), others null.
  ProcessGroupPtr new_group(const std::vector<int>& ranks);
  // Collective: the ranks with the same color form a group, ordered by (key, rank).
  // A negative color gets null.
  ProcessGroupPtr split(int color, int key = 0);

  // The last collective issued on this group (sequence 0: none yet).
  CollectiveInfo last_issued() const;

  // ops::Communicator: the blocking forms the communication ops call. The
  // caller waits at once, so a backend may run the call on the caller's
  // thread when nothing is queued before it (Call::caller_waits).
  void all_reduce_sum(const Tensor& t) final;
  void all_gather_into(const Tensor& out, const Tensor& in) final;
  void reduce_scatter_sum(const Tensor& out, const Tensor& in) final;

 protected:
  // What a backend is handed: contiguous buffers, checked shapes and dtypes.
  struct Call {
    CollectiveInfo info;
    ReduceOp op = ReduceOp::kSum;
    Tensor in, out;  // for in-place calls, both are the buffer
    int peer = -1;   // root, source or destination (a group rank)
    int tag = 0;
    bool caller_waits = false;  // waited for as soon as it is issued, or a send: may run on the caller
  };
  ProcessGroup(int rank, int size, std::vector<int> world_ranks, std::string name);
  virtual WorkPtr run(Call call) = 0;
  virtual ProcessGroupPtr make_subgroup(int color, int key, const std::string& name) = 0;

 private:
  WorkPtr issue(const char* op, ReduceOp rop, const Tensor& in, const Tensor& out, int peer, int tag,
                int64_t count);
  std::vector<int> world_ranks_;
  std::atomic<uint64_t> seq_{0};
  std::atomic<const char*> last_op_{""};
  std::atomic<int64_t> last_count_{0};
  std::atomic<DType> last_dtype_{DType::F32};
  int subgroups_ = 0;
};

// What this process's collectives have cost since it started, per operation:
// calls, bytes it contributed, and seconds the communication thread spent in
// them (the tessera_dist_* metrics; the profiler also shows each call on the
// communication thread's track).
struct CollectiveStats {
  std::string op;
  int64_t calls = 0;
  double bytes = 0;
  double seconds = 0;
};
std::vector<CollectiveStats> collective_stats();

// The world: initialized on first use from the launcher's environment
// (Open MPI's mpirun, Slurm's srun --mpi=pmix, or TESSERA_DIST_BACKEND=mpi);
// without one, a world of 1 in which every collective is a local no-op.
ProcessGroupPtr world();
bool is_distributed();  // true when world() spans more than one process
// Like is_distributed(), but false when world() has not been made yet (for error paths).
bool running_distributed();
// The rank among the processes on this host, and their number.
int local_rank();
int local_size();

// Records the training step in this rank's status record (the watchdog and
// the launcher's summary name it).
void set_step(int64_t step);

// Ends every rank of the job now with `code` (after an error on one rank,
// whose peers would otherwise wait in a collective until the deadline).
[[noreturn]] void abort_job(int code);

// Finishes the world cleanly: waits for issued work, then shuts the backend
// down. Called at exit; after it no collective may be issued.
void shutdown();

}  // namespace tessera::distributed
