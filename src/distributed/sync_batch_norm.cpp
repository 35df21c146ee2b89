// convert_sync_batch_norm (distributed/sync_batch_norm.h).
#include "tessera/distributed/sync_batch_norm.h"

#include "tessera/distributed/functional.h"
#include "tessera/nn/norm.h"

namespace tessera::distributed {

int convert_sync_batch_norm(nn::Module& model, const ProcessGroupPtr& group) {
  TS_CHECK(group, "convert_sync_batch_norm: no process group");
  int n = 0;
  for (nn::Module* m : model.modules())
    if (auto* bn = dynamic_cast<nn::BatchNorm*>(m)) {
      bn->replica_sum = [group](const Tensor& t) { return all_reduce(t, group); };
      ++n;
    }
  return n;
}

}  // namespace tessera::distributed
