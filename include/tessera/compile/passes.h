#pragma once
// Graph passes and the pipeline that runs them. Each pass rewrites a graph in
// place and returns how many changes it made; the pipeline verifies the graph
// after every pass, can skip passes by name and can dump the graph after each.
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "tessera/compile/graph.h"

namespace tessera::compile {

struct PassOptions {
  std::vector<std::string> disable;  // pass names to skip
  std::ostream* dump = nullptr;      // if set: the graph after every pass
  // An inference graph may fold parameter values (batch norm into weights).
  bool inference = true;
  // The graph runs without recording autograd (inference, or a joint
  // forward+backward graph): detach is a no-op, and pointwise ops may fuse
  // (a fused kernel has no backward of its own).
  bool no_autograd = true;
};

// The passes whose output only Tessera runs (fused kernels, blocked layouts):
// disable them for a graph meant for ONNX export.
inline std::vector<std::string> tessera_only_passes() {
  return {"sparse-weights", "fuse-epilogue", "layout", "fuse-elementwise"};
}

struct Pass {
  std::string name;
  std::string description;
  std::function<int(Graph&, const PassOptions&)> run;
};

// The default pipeline, in order.
const std::vector<Pass>& default_passes();

struct PassReport {
  std::string name;
  int changes = 0;
  int nodes_after = 0;
};
// Runs the pipeline; an unknown name in opts.disable is an error listing the passes.
std::vector<PassReport> optimize(Graph& g, const PassOptions& opts = {});

// The passes, for tests and custom pipelines.
int eliminate_dead_code(Graph& g);
int eliminate_common_subexpressions(Graph& g);
int fold_constants(Graph& g);
// conv/linear followed by batch_norm (inference) with frozen weights: the
// normalization moves into new constant weights and bias. Graphs stay right
// for the parameter values they were folded with; compile() keys its cache on
// parameter versions for inference graphs so an update retraces.
int fold_batch_norm(Graph& g);
// Output channels of a conv2d/linear whose weights and bias are all zero
// (filters removed by structured pruning, quant/prune.h) are taken out of the
// layer and out of the conv2d/linear reading them (through ReLU, pooling,
// dropout, a flatten); the values computed are the same. Inference graphs
// only (the weights become constants, as with fold_batch_norm).
int remove_pruned_channels(Graph& g);
// A linear layer whose weight is a constant (or parameter) with at most 5%
// nonzeros runs sparse_linear over the weight in CSR form; inference graphs
// only. Not a Tessera-only pass for ONNX: sparse_linear has no ONNX mapping,
// so export disables it (tessera_only_passes).
int sparse_weights(Graph& g);
// Attention written out op by op (q @ k^T, an optional scale and mask,
// softmax over the last dim, @ v; each intermediate read once) becomes one
// f32 scaled_dot_product_attention; a lower-triangular mask of ones becomes
// is_causal. Scales and -inf fills must be constants (or, for `inference`
// graphs, frozen parameters).
int fuse_attention(Graph& g, bool inference = true);
// GELU written out op by op (0.5 x (1 + erf(x / sqrt 2)), or its tanh form;
// each intermediate read once, the constants to f32 precision) becomes one
// gelu node, which fuse_epilogues can then fuse into a linear layer.
// Constants must be constants (or, for `inference` graphs, frozen parameters).
int fuse_gelu(Graph& g, bool inference = true);
// f32 linear followed by its activation (relu, gelu, silu, tanh) and/or a
// residual add as one fused_linear node (the GEMM's epilogue); graphs run
// without autograd only.
int fuse_epilogues(Graph& g);
// f32 convolutions pass activations to each other in oneDNN's channel-blocked
// layout (fused_conv2d input_block/output_block; channel_blocks where a
// residual comes from elsewhere); graphs without autograd only.
int block_conv_activations(Graph& g);
// f32 convolutions whose weights are graph constants or parameters read them
// packed into the primitive's layout once (fused_conv2d constant_weights), not
// reordered on every call; inference graphs only (part of the layout pass).
// The packed copy is remade when the weights' version changes (any Tessera op
// or optimizer step that writes them); raw writes through data_ptr are not seen.
int pack_constant_conv_weights(Graph& g);
// Likewise f32 linear layers (2-D constant or parameter weights, as
// fused_linear constant_weights): the GEMM reads a copy in its primitive's
// layout, made once per weight version (inference graphs; part of the layout
// pass). Products of a few rows read the weight as it is (skinny kernel).
int pack_constant_linear_weights(Graph& g);
// Connected f32 pointwise ops (and the scalars they read) as fused_elementwise
// nodes; the fused kernel has no backward, so only for graphs run without autograd.
int fuse_elementwise(Graph& g);
// `inference`: no autograd will run through the graph (detach is then an identity).
int simplify(Graph& g, bool no_autograd = true);

}  // namespace tessera::compile
