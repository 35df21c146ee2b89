// Sparse weights: a linear layer whose constant weight is almost all zeros
// (unstructured pruning) runs sparse_linear over the weight in CSR form,
// which skips the zeros. Measured (docs/benchmarks.md, "Sparse weights"):
// the CSR product beats oneDNN's dense f32 GEMM from about 90% sparsity at
// batch 1 and from about 95-98% at batch 64, so the pass takes weights with
// at most 5% nonzeros.
#include "backend/sparse_format.h"
#include "ops/op_utils.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/compile/passes.h"
#include "tessera/ops/op_table.h"

namespace tessera::compile {
namespace {

using ops::OpId;

constexpr double kMaxDensity = 0.05;

}  // namespace

int sparse_weights(Graph& g) {
  NoGradGuard no_grad;
  int changes = 0;
  for (Node* n : g.nodes()) {
    if (!ops::op_entry(n->op).has(ops::kSparseLinear)) continue;
    Value *x = n->inputs[0], *w = n->inputs[1], *b = n->inputs.size() > 2 ? n->inputs[2] : nullptr;
    if (!w || (w->kind != ValueKind::kConstant && w->kind != ValueKind::kParameter) || w->dtype != DType::F32 ||
        w->shape.size() != 2 || x->dtype != DType::F32)
      continue;
    if (b && ((b->kind != ValueKind::kConstant && b->kind != ValueKind::kParameter) || b->dtype != DType::F32)) continue;
    Tensor wc = w->data.contiguous();
    const int64_t rows = wc.size(0), cols = wc.size(1);
    if (rows == 0 || cols == 0 || cols > INT32_MAX) continue;
    backend::CsrData c = backend::csr_from_dense(wc.data_ptr<float>(), rows, cols);
    if (static_cast<double>(c.values.size()) > kMaxDensity * static_cast<double>(rows * cols)) continue;
    Value* vals = g.add_constant(tensor(c.values));
    Value* idx = g.add_constant(tensor(c.col_idx));
    Value* ptr = g.add_constant(tensor(c.row_ptr));
    Node* s = g.add_node(OpId::sparse_linear, {x, vals, idx, ptr, b}, ops::Attrs{{"in_features", cols}},
                         {{DType::F32, n->outputs[0]->shape}}, n);
    s->scope = n->scope;
    g.replace_uses(n->outputs[0], s->outputs[0]);
    ++changes;
  }
  if (changes) eliminate_dead_code(g);
  return changes;
}

}  // namespace tessera::compile
