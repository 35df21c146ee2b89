// A process group as the LLM engine's communicator (distributed/llm_group.h).
#include "tessera/distributed/llm_group.h"

#include "tessera/core/error.h"

namespace tessera::distributed {
namespace {

class GroupCommunicator final : public llm::Communicator {
 public:
  explicit GroupCommunicator(ProcessGroupPtr g) : g_(std::move(g)) {}
  int rank() const override { return g_->rank(); }
  int size() const override { return g_->size(); }
  // Both on the caller's thread when nothing is queued before them: a
  // decode step makes two per layer, each a few microseconds of work.
  void all_reduce_sum(float* data, int64_t n) override { g_->all_reduce_sum(from_blob(data, {n}, DType::F32)); }
  void broadcast(int64_t* data, int64_t n, int root) override {
    g_->broadcast_now(from_blob(data, {n}, DType::I64), root);
  }

 private:
  ProcessGroupPtr g_;
};

}  // namespace

std::shared_ptr<llm::Communicator> llm_communicator(ProcessGroupPtr group) {
  TS_CHECK(group != nullptr, "llm_communicator: no group");
  return std::make_shared<GroupCommunicator>(std::move(group));
}

}  // namespace tessera::distributed
