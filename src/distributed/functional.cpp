// Differentiable collectives (distributed/functional.h).
#include "tessera/distributed/functional.h"

#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/node.h"

namespace tessera::distributed {

namespace {

// Records `out` as made from `x` by `name`, with `vjp` as its backward.
Tensor recorded(const char* name, const Tensor& x, Tensor out, std::function<Tensor(const Tensor&)> vjp) {
  if (!autograd::any_requires_grad({&x})) return out;
  TensorList outs{out};
  autograd::record(name, {x}, outs, [vjp = std::move(vjp)](const autograd::VjpArgs& a) {
    return TensorList{vjp(a.grads[0])};
  });
  return outs[0];
}

Tensor stacked_shape_like(const Tensor& x, int64_t rows) {
  Shape s(x.shape().begin(), x.shape().end());
  s[0] = rows;
  return empty(s, TensorOptions(x.dtype(), x.device()));
}

}  // namespace

Tensor all_reduce(const Tensor& x, const ProcessGroupPtr& g) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = x.contiguous().clone();
    g->allreduce(out)->wait();
  }
  return recorded("all_reduce", x, out, [g](const Tensor& dy) { return all_reduce(dy, g); });
}

Tensor all_gather(const Tensor& x, const ProcessGroupPtr& g) {
  TS_CHECK(x.dim() >= 1, "all_gather: the tensor needs a dimension to stack on, got a scalar");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = stacked_shape_like(x, x.size(0) * g->size());
    g->allgather(out, x.contiguous())->wait();
  }
  return recorded("all_gather", x, out, [g](const Tensor& dy) { return reduce_scatter(dy, g); });
}

Tensor reduce_scatter(const Tensor& x, const ProcessGroupPtr& g) {
  TS_CHECK(x.dim() >= 1 && x.size(0) % g->size() == 0, "reduce_scatter: dim 0 (", x.dim() ? x.size(0) : 0,
           ") must split into ", g->size(), " equal blocks");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = stacked_shape_like(x, x.size(0) / g->size());
    g->reduce_scatter(out, x.contiguous())->wait();
  }
  return recorded("reduce_scatter", x, out, [g](const Tensor& dy) { return all_gather(dy, g); });
}

Tensor copy_to_group(const Tensor& x, const ProcessGroupPtr& g) {
  if (!autograd::any_requires_grad({&x})) return x;
  Tensor y;
  {
    NoGradGuard no_grad;
    y = x.detach().clone();  // the same values in a tensor of its own, to carry the node
  }
  return recorded("copy_to_group", x, y, [g](const Tensor& dy) { return all_reduce(dy, g); });
}

}  // namespace tessera::distributed
