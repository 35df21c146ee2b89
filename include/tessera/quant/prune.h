#pragma once
// Pruning: zeroing the least important weights of Linear and Conv layers.
//
// Note [Pruning masks]
// Pruning a layer re-registers its weight as the parameter "weight_orig" and
// adds the buffer "weight_mask" (0 or 1, the weight's dtype); a forward
// pre-hook sets the layer's `weight` to weight_orig * weight_mask before every
// forward. So the optimizer updates weight_orig (the pruned entries get zero
// gradient), the pruned weights stay zero in every forward whatever the
// optimizer does, and state_dict() / checkpoints carry the mask. PyTorch's
// torch.nn.utils.prune works the same way and uses the same names. Loading a
// pruned checkpoint: prune the fresh model first (any sparsity; the loaded
// masks replace its masks), then load_state_dict. Structured pruning removes
// whole filters, so it masks the bias of each pruned row as well (bias_orig +
// bias_mask): a pruned row's output is exactly 0 and the compiler takes it
// out of the layer and out of the next one (compile::remove_pruned_channels).
#include <string>
#include <utility>
#include <vector>

#include "tessera/nn/module.h"

namespace tessera::quant {

struct PruneConfig {
  double sparsity = 0.5;  // fraction of weights (magnitude) or of rows/channels (structured) that are zero afterwards
  // magnitude: the smallest |w| entries. structured: whole output rows of a
  // Linear / output channels of a Conv, those with the smallest L2 norm.
  std::string method = "magnitude";
  bool global = false;             // magnitude: one threshold across all layers instead of one per layer
  std::vector<std::string> skip;   // module paths left alone (and everything below them)
};

struct PruneReport {
  struct Layer {
    std::string name;
    int64_t total = 0, zeros = 0;  // weights, and those masked
  };
  std::vector<Layer> layers;
  int64_t total = 0, zeros = 0;
  std::string str() const;  // a table for people
};

// Prunes every Linear, Conv1d and Conv2d of `model` (but those in cfg.skip)
// to cfg.sparsity. Pruning again only adds to the masks (iterative pruning:
// prune, fine-tune, prune further), so the sparsity must not decrease.
PruneReport prune(nn::Module& model, const PruneConfig& cfg);

// The sparsity of the current masks, layer by layer (unpruned layers too).
PruneReport sparsity_report(nn::Module& model);

// Folds the masks into plain weights: "weight" = weight_orig * mask, the
// mask and hook removed. Needed before quantize_weights or export of a file
// that should not carry masks.
void make_pruning_permanent(nn::Module& model);

// The polynomial schedule of Zhu & Gupta (2017): sparsity at `step` rising
// from `initial` at begin_step to `final` at end_step as
// final + (initial - final) * (1 - progress)^3, constant outside.
double polynomial_sparsity(int64_t step, int64_t begin_step, int64_t end_step, double initial, double final_sparsity);

}  // namespace tessera::quant
