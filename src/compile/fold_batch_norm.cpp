// conv + batch_norm and linear + batch_norm folding for inference: the
// normalization's scale and shift move into the weights and bias before it.
#include "ops/op_utils.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/compile/passes.h"
#include "tessera/ops/op_table.h"

namespace tessera::compile {
namespace {

using ops::OpId;

bool frozen(const Value* v) { return v == nullptr || v->kind == ValueKind::kParameter || v->kind == ValueKind::kConstant; }

}  // namespace

int fold_batch_norm(Graph& g) {
  NoGradGuard no_grad;
  auto uses = g.uses();
  auto is_out = g.is_output();
  int folded = 0;
  for (Node* bn : g.nodes()) {
    if (bn->op != OpId::batch_norm || bn->attrs.b("training")) continue;
    Value* x = bn->inputs[0];
    if (x->kind != ValueKind::kNode || is_out[x->id] || uses[x->id].size() != 1) continue;
    Node* p = x->producer;
    // A layer with a weight [out, ...] (ops.def's kFoldsBatchNorm): linear over 2-D inputs only.
    const bool lin = p->op == OpId::linear;
    if (!ops::op_entry(p->op).has(ops::kFoldsBatchNorm) || (lin && x->shape.size() != 2)) continue;
    const Value *w = p->inputs[1], *b = p->inputs.size() > 2 ? p->inputs[2] : nullptr;
    const Value *mean = bn->inputs[1], *var = bn->inputs[2], *gamma = bn->inputs[3], *beta = bn->inputs[4];
    if (!frozen(w) || !frozen(b) || !mean || !var || !frozen(mean) || !frozen(var) || !frozen(gamma) || !frozen(beta))
      continue;
    DType t = w->dtype;
    if ((t != DType::F32 && t != DType::F64) || mean->dtype != t || var->dtype != t) continue;
    // Per output channel: scale = gamma / sqrt(var + eps); W' = W * scale; b' = (b - mean) * scale + beta.
    Tensor scale = ops::rsqrt(ops::add(var->data, bn->attrs.f("eps")));
    if (gamma) scale = ops::mul(scale, gamma->data);
    Shape bshape(w->data.dim(), 1);
    bshape[0] = w->data.shape()[0];
    Tensor w2 = ops::mul(w->data, scale.reshape(bshape)).contiguous();
    Tensor b0 = b ? b->data : zeros({w->data.shape()[0]}, t);
    Tensor b2 = ops::mul(ops::sub(b0, mean->data), scale);
    if (beta) b2 = ops::add(b2, beta->data);
    p->inputs[1] = g.add_constant(w2);
    if (p->inputs.size() < 3) p->inputs.resize(3, nullptr);  // the folded bias is new
    p->inputs[2] = g.add_constant(b2.contiguous());
    g.replace_uses(bn->outputs[0], x);
    ++folded;
  }
  if (folded) eliminate_dead_code(g);
  return folded;
}

}  // namespace tessera::compile
