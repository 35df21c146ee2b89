#pragma once
// Batch normalization over the whole global batch: each BatchNorm's training
// statistics are taken over every rank's rows (two small all-reduces per layer
// and step, differentiable), so a data-parallel ResNet normalizes as one
// process would on the whole batch. Evaluation uses the running statistics as
// before. The layers stay the same objects (nn::BatchNorm::replica_sum), so
// models that call them through members see the change.
//
//   distributed::convert_sync_batch_norm(*model, world);   // before DDP wraps it
#include "tessera/distributed/process_group.h"
#include "tessera/nn/module.h"

namespace tessera::distributed {

// Synchronizes every BatchNorm1d/2d in `model` over `group`; returns how many.
int convert_sync_batch_norm(nn::Module& model, const ProcessGroupPtr& group);

}  // namespace tessera::distributed
