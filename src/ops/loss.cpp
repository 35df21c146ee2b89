// Loss functions, composed from differentiable ops (so double backward works).
#include <cmath>

#include "ops/autocast_policy.h"
#include "ops/op_utils.h"

namespace tessera::ops {
namespace {

Tensor reduce_loss(const Tensor& l, const std::string& reduction, const char* op) {
  reduction_name(reduction, op);
  if (reduction == "mean") return mean(l);
  if (reduction == "sum") return sum(l);
  return l;
}

void check_pair(const Tensor& input, const Tensor& target, const char* op) {
  check_defined(input, op, "input");
  check_defined(target, op, "target");
  check_floating(input, op, "input");
  broadcast_shapes(input.shape(), target.shape(), op);
}

}  // namespace

Tensor nll_loss(const Tensor& logp_in, const Tensor& target_in, const Tensor& weight, int64_t ignore_index,
                const std::string& reduction) {
  TS_OP_SCOPE(nll_loss, &logp_in, &target_in, &weight);
  TS_OP_ATTRS({"ignore_index", ignore_index}, {"reduction", reduction});
  TS_AUTOCAST(nll_loss, [&](const auto& cast) { return nll_loss(cast(logp_in), cast(target_in), cast(weight), ignore_index, reduction); });
  const char* op = "nll_loss";
  check_defined(logp_in, op, "input");
  check_defined(target_in, op, "target");
  reduction_name(reduction, op);
  check_floating(logp_in, op, "input");
  TS_CHECK(target_in.dtype() == DType::I64 || target_in.dtype() == DType::I32, op,
           ": target must hold class indices (i64 or i32), got ", dtype_name(target_in.dtype()));
  bool unbatched = logp_in.dim() == 1;
  Tensor logp = unbatched ? logp_in.unsqueeze(0) : logp_in;
  Tensor target = unbatched ? target_in.unsqueeze(0) : target_in;
  TS_CHECK(logp.dim() >= 2, op, ": expected input [N, C, ...] or [C], got shape ", shape_str(logp_in.shape()));
  int64_t C = logp.shape()[1];
  Shape expect = logp.shape();
  expect.erase(expect.begin() + 1);
  TS_CHECK(IntArrayRef(target.shape()).equals(expect), op, ": target has shape ", shape_str(target_in.shape()),
           " but the input of shape ", shape_str(logp_in.shape()), " needs a target of shape ",
           shape_str(unbatched ? Shape{} : expect));
  if (weight.defined())
    TS_CHECK(weight.dim() == 1 && weight.shape()[0] == C, op, ": weight must have shape [", C, "], got ",
             shape_str(weight.shape()));
  Tensor t = cast(target, DType::I64);
  Tensor valid = ne(t, ignore_index);
  Tensor safe = where(valid, t, 0);
  if (safe.numel() > 0 && has_values(safe)) {
    int64_t lo = amin(safe).item<int64_t>(), hi = amax(safe).item<int64_t>();
    TS_CHECK(lo >= 0 && hi < C, op, ": target value ", lo < 0 ? lo : hi, " is out of range for ", C,
             " classes (valid: 0 to ", C - 1, ", or ignore_index ", ignore_index, ")");
  }
  Tensor picked = gather(logp, 1, safe.unsqueeze(1)).squeeze(1);
  Tensor w = weight.defined() ? index_select(weight, 0, safe.reshape({-1})).reshape(safe.shape())
                              : ones(safe.shape(), logp.dtype());
  w = where(valid, w, scalar_tensor(0, logp.dtype()));
  Tensor loss = neg(mul(picked, w));
  if (reduction == "none") TS_RETURN(unbatched ? loss.squeeze(0) : loss);
  if (reduction == "sum") TS_RETURN(sum(loss));
  TS_RETURN(div(sum(loss), sum(w)));
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                     const std::string& reduction, double label_smoothing) {
  TS_OP_SCOPE(cross_entropy, &logits, &target, &weight);
  TS_OP_ATTRS({"ignore_index", ignore_index}, {"reduction", reduction}, {"label_smoothing", label_smoothing});
  TS_AUTOCAST(cross_entropy, [&](const auto& cast) { return cross_entropy(cast(logits), cast(target), cast(weight), ignore_index, reduction, label_smoothing); });
  const char* op = "cross_entropy";
  check_defined(logits, op, "input");
  check_defined(target, op, "target");
  reduction_name(reduction, op);
  check_floating(logits, op, "input");
  TS_CHECK(label_smoothing >= 0 && label_smoothing <= 1, op, ": label_smoothing must be in [0, 1], got ",
           label_smoothing);
  TS_CHECK(logits.dim() >= 1, op, ": the input needs a class dimension");
  int64_t class_dim = logits.dim() == 1 ? 0 : 1;
  int64_t C = logits.shape()[class_dim];
  Tensor logp = log_softmax(logits, class_dim);
  Shape wshape(logits.dim(), 1);
  wshape[class_dim] = C;
  if (is_floating(target.dtype())) {
    // Class probabilities.
    TS_CHECK(IntArrayRef(target.shape()).equals(logits.shape()), op, ": a probability target must have the input's shape ",
             shape_str(logits.shape()), ", got ", shape_str(target.shape()));
    Tensor tgt = label_smoothing > 0 ? add(mul(target, 1 - label_smoothing), label_smoothing / static_cast<double>(C)) : target;
    Tensor prod_ = mul(logp, tgt);
    if (weight.defined()) prod_ = mul(prod_, weight.reshape(wshape));
    Tensor loss = neg(sum(prod_, {class_dim}));
    if (reduction == "none") TS_RETURN(loss);
    if (reduction == "sum") TS_RETURN(sum(loss));
    int64_t n = logits.numel() / std::max<int64_t>(C, 1);
    TS_RETURN(div(sum(loss), static_cast<double>(n)));
  }
  Tensor nll = nll_loss(logp, target, weight, ignore_index, reduction);
  if (label_smoothing == 0) TS_RETURN(nll);
  Tensor ignore = eq(cast(target, DType::I64), ignore_index);
  Tensor smooth = weight.defined() ? neg(sum(mul(logp, weight.reshape(wshape)), {class_dim})) : neg(sum(logp, {class_dim}));
  smooth = where(ignore, scalar_tensor(0, smooth.dtype()), smooth);
  Tensor ret;
  if (reduction == "none") ret = smooth;
  else if (reduction == "sum") ret = sum(smooth);
  else if (weight.defined()) {
    Tensor valid_t = where(ignore, 0, cast(target, DType::I64));
    Tensor w = where(ignore, scalar_tensor(0, weight.dtype()), index_select(weight, 0, valid_t.reshape({-1})).reshape(valid_t.shape()));
    ret = div(sum(smooth), sum(w));
  } else {
    ret = div(sum(smooth), sum(logical_not(ignore).to(smooth.dtype())));
  }
  TS_RETURN(add(mul(nll, 1 - label_smoothing), mul(ret, label_smoothing / static_cast<double>(C))));
}

Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction) {
  TS_OP_SCOPE(mse_loss, &input, &target);
  TS_OP_ATTRS({"reduction", reduction});
  TS_AUTOCAST(mse_loss, [&](const auto& cast) { return mse_loss(cast(input), cast(target), reduction); });
  check_pair(input, target, "mse_loss");
  TS_RETURN(reduce_loss(square(sub(input, target)), reduction, "mse_loss"));
}

Tensor l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction) {
  TS_OP_SCOPE(l1_loss, &input, &target);
  TS_OP_ATTRS({"reduction", reduction});
  TS_AUTOCAST(l1_loss, [&](const auto& cast) { return l1_loss(cast(input), cast(target), reduction); });
  check_pair(input, target, "l1_loss");
  TS_RETURN(reduce_loss(abs(sub(input, target)), reduction, "l1_loss"));
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction, double beta) {
  TS_OP_SCOPE(smooth_l1_loss, &input, &target);
  TS_OP_ATTRS({"reduction", reduction}, {"beta", beta});
  TS_AUTOCAST(smooth_l1_loss, [&](const auto& cast) { return smooth_l1_loss(cast(input), cast(target), reduction, beta); });
  check_pair(input, target, "smooth_l1_loss");
  TS_CHECK(beta >= 0, "smooth_l1_loss: beta must be non-negative, got ", beta);
  Tensor d = abs(sub(input, target));
  if (beta == 0) TS_RETURN(reduce_loss(d, reduction, "smooth_l1_loss"));
  Tensor l = where(lt(d, beta), div(mul(square(d), 0.5), beta), sub(d, 0.5 * beta));
  TS_RETURN(reduce_loss(l, reduction, "smooth_l1_loss"));
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight,
                            const std::string& reduction) {
  TS_OP_SCOPE(binary_cross_entropy, &input, &target, &weight);
  TS_OP_ATTRS({"reduction", reduction});
  TS_AUTOCAST(binary_cross_entropy, [&](const auto& cast) { return binary_cross_entropy(cast(input), cast(target), cast(weight), reduction); });
  check_pair(input, target, "binary_cross_entropy");
  TS_CHECK(IntArrayRef(input.shape()).equals(target.shape()), "binary_cross_entropy: target of shape ",
           shape_str(target.shape()), " must have the input's shape ", shape_str(input.shape()));
  Tensor xd = input.detach();
  TS_CHECK(xd.numel() == 0 || !has_values(xd) || (all(ge(xd, 0)).item<bool>() && all(le(xd, 1)).item<bool>()),
           "binary_cross_entropy: every input value must be a probability in [0, 1]");
  // log clamped at -100, as PyTorch does, so 0 and 1 give finite losses.
  Tensor lx = clamp(log(input), -100.0, std::nullopt);
  Tensor l1x = clamp(log(sub(1, input)), -100.0, std::nullopt);
  Tensor l = neg(add(mul(target, lx), mul(sub(1, target), l1x)));
  if (weight.defined()) l = mul(l, weight);
  TS_RETURN(reduce_loss(l, reduction, "binary_cross_entropy"));
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight,
                                        const std::string& reduction, const Tensor& pos_weight) {
  TS_OP_SCOPE(binary_cross_entropy_with_logits, &input, &target, &weight, &pos_weight);
  TS_OP_ATTRS({"reduction", reduction});
  TS_AUTOCAST(binary_cross_entropy_with_logits, [&](const auto& cast) { return binary_cross_entropy_with_logits(cast(input), cast(target), cast(weight), reduction, cast(pos_weight)); });
  check_pair(input, target, "binary_cross_entropy_with_logits");
  TS_CHECK(IntArrayRef(input.shape()).equals(target.shape()), "binary_cross_entropy_with_logits: target of shape ",
           shape_str(target.shape()), " must have the input's shape ", shape_str(input.shape()));
  // (1 - y) x + (1 + (pw - 1) y) (log(1 + exp(-|x|)) + max(-x, 0)): stable for large |x|.
  Tensor softplus_neg = add(log1p(exp(neg(abs(input)))), clamp(neg(input), 0.0, std::nullopt));
  Tensor l;
  if (pos_weight.defined()) {
    Tensor lw = add(mul(sub(pos_weight, 1), target), 1);
    l = add(mul(sub(1, target), input), mul(lw, softplus_neg));
  } else {
    l = add(mul(sub(1, target), input), softplus_neg);
  }
  if (weight.defined()) l = mul(l, weight);
  TS_RETURN(reduce_loss(l, reduction, "binary_cross_entropy_with_logits"));
}

Tensor kl_div(const Tensor& input, const Tensor& target, const std::string& reduction, bool log_target) {
  TS_OP_SCOPE(kl_div, &input, &target);
  TS_OP_ATTRS({"reduction", reduction}, {"log_target", log_target});
  TS_AUTOCAST(kl_div, [&](const auto& cast) { return kl_div(cast(input), cast(target), reduction, log_target); });
  check_pair(input, target, "kl_div");
  TS_CHECK(reduction == "mean" || reduction == "sum" || reduction == "none" || reduction == "batchmean",
           "kl_div: reduction must be 'mean', 'batchmean', 'sum' or 'none', got '", reduction, "'");
  Tensor l;
  if (log_target) {
    l = mul(exp(target), sub(target, input));
  } else {
    // target * (log target - input), with 0 where target is 0 (xlogy).
    Tensor safe_log = log(where(gt(target, 0), target, scalar_tensor(1, target.dtype())));
    l = where(gt(target, 0), mul(target, sub(safe_log, input)), mul(target, neg(input)));
    l = where(eq(target, 0), scalar_tensor(0, l.dtype()), l);
  }
  if (reduction == "batchmean") TS_RETURN(input.dim() == 0 ? sum(l) : div(sum(l), static_cast<double>(input.shape()[0])));
  TS_RETURN(reduce_loss(l, reduction, "kl_div"));
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  TS_OP_SCOPE(dropout, &x);
  TS_OP_ATTRS({"p", p}, {"training", training});
  ts_op_scope_.check_generator(gen, "dropout");
  check_defined(x, "dropout", "input");
  TS_CHECK(p >= 0 && p <= 1, "dropout: p must be in [0, 1], got ", p);
  if (!training || p == 0) TS_RETURN(x);
  if (p == 1) TS_RETURN(mul(x, 0));
  check_floating(x, "dropout", "input");
  Tensor mask = bernoulli(x.shape(), 1 - p, x.dtype(), gen);
  TS_RETURN(mul(x, mul(mask, 1.0 / (1 - p))));
}

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx) {
  TS_OP_SCOPE(embedding, &weight, &indices);
  TS_OP_ATTRS({"padding_idx", padding_idx});
  check_defined(weight, "embedding", "weight");
  check_defined(indices, "embedding", "indices");
  TS_CHECK(weight.dim() == 2, "embedding: weight must be 2-D [num_embeddings, dim], got shape ", shape_str(weight.shape()));
  TS_CHECK(indices.dtype() == DType::I64 || indices.dtype() == DType::I32,
           "embedding: indices must be integers (i64 or i32), got ", dtype_name(indices.dtype()));
  int64_t V = weight.shape()[0];
  Tensor flat = cast(indices, DType::I64).reshape({-1});
  if (flat.numel() > 0 && has_values(flat)) {
    int64_t lo = amin(flat).item<int64_t>(), hi = amax(flat).item<int64_t>();
    TS_CHECK(lo >= 0 && hi < V, "embedding: index ", lo < 0 ? lo : hi, " is out of range for ", V,
             " embeddings (valid: 0 to ", V - 1, ")");
  }
  Shape out_shape = indices.shape();
  out_shape.push_back(weight.shape()[1]);
  Tensor out = index_select(weight, 0, flat).reshape(out_shape);
  if (padding_idx) {
    int64_t pi = *padding_idx < 0 ? *padding_idx + V : *padding_idx;
    TS_CHECK(pi >= 0 && pi < V, "embedding: padding_idx ", *padding_idx, " is out of range for ", V, " embeddings");
    // The padding row's output is kept but receives no gradient.
    Tensor is_pad = eq(cast(indices, DType::I64), pi).unsqueeze(-1);
    out = where(is_pad, out.detach(), out);
  }
  TS_RETURN(out);
}

// ---- invokers (graph nodes run ops through these) ----
TS_OP_INVOKER(nll_loss) { return {nll_loss(in[0], in[1], in[2], a.i("ignore_index"), a.s("reduction"))}; }
TS_OP_INVOKER(cross_entropy) {
  return {cross_entropy(in[0], in[1], in[2], a.i("ignore_index"), a.s("reduction"), a.f("label_smoothing"))};
}
TS_OP_INVOKER(mse_loss) { return {mse_loss(in[0], in[1], a.s("reduction"))}; }
TS_OP_INVOKER(l1_loss) { return {l1_loss(in[0], in[1], a.s("reduction"))}; }
TS_OP_INVOKER(smooth_l1_loss) { return {smooth_l1_loss(in[0], in[1], a.s("reduction"), a.f("beta"))}; }
TS_OP_INVOKER(binary_cross_entropy) { return {binary_cross_entropy(in[0], in[1], in[2], a.s("reduction"))}; }
TS_OP_INVOKER(binary_cross_entropy_with_logits) {
  return {binary_cross_entropy_with_logits(in[0], in[1], in[2], a.s("reduction"), in[3])};
}
TS_OP_INVOKER(kl_div) { return {kl_div(in[0], in[1], a.s("reduction"), a.b("log_target"))}; }
TS_OP_INVOKER(dropout) { return {dropout(in[0], a.f("p"), a.b("training"))}; }
TS_OP_INVOKER(embedding) { return {embedding(in[0], in[1], a.opt_i("padding_idx"))}; }

}  // namespace tessera::ops
