#include "tessera/nn/linear.h"

#include <algorithm>
#include <cmath>

#include "tessera/autograd/grad_mode.h"
#include "tessera/nn/init.h"
#include "tessera/ops/ops.h"

namespace tessera::nn {

static void check_positive(const char* layer, const char* what, int64_t v) {
  TS_CHECK(v > 0, layer, ": ", what, " must be positive, got ", v);
}

Linear::Linear(int64_t in, int64_t out, bool with_bias) : Module("Linear"), in_features(in), out_features(out) {
  check_positive("Linear", "in_features", in);
  check_positive("Linear", "out_features", out);
  weight = register_parameter("weight", empty({out, in}));
  if (with_bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void Linear::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    init::uniform_(bias, -bound, bound);
  }
  if (lora) {  // drawn here in module order, not in the order the adapters were added
    init::kaiming_uniform_(lora->A, std::sqrt(5.0));
    init::zeros_(lora->B);
  }
  TS_CHECK(!quantized, "Linear: a quantized layer cannot be re-initialized; load its checkpoint instead");
}

Tensor Linear::forward(const Tensor& x) {
  TS_CHECK(x.dim() >= 1 && x.size(-1) == in_features, "Linear(", in_features, " -> ", out_features,
           "): expected input with last dimension ", in_features, ", got shape ", shape_str(x.shape()));
  Tensor y = quantized ? ops::quantized_linear(x, quantized->qweight, quantized->scales, quantized->mins, bias,
                                               quantized->format, quantized->group, quantized->activations)
                       : ops::linear(x, weight, bias);
  if (lora) y = ops::add(y, ops::linear(ops::linear(x, lora->A), lora->B), lora->scale());
  return y;
}

void Linear::add_lora(int64_t rank, double alpha) {
  TS_CHECK(!lora, "Linear: the layer has a LoRA pair already");
  TS_CHECK(rank > 0 && rank <= std::min(in_features, out_features), "Linear(", in_features, " -> ", out_features,
           "): a LoRA rank must be from 1 to ", std::min(in_features, out_features), ", got ", rank);
  TS_CHECK(std::isfinite(alpha) && alpha > 0, "Linear: LoRA alpha must be positive, got ", alpha);
  if (weight.defined()) weight.requires_grad_(false);
  if (bias.defined()) bias.requires_grad_(false);
  Lora l;
  l.rank = rank;
  l.alpha = alpha;
  l.A = register_parameter("lora_A", empty({rank, in_features}));
  init::kaiming_uniform_(l.A, std::sqrt(5.0));
  l.B = register_parameter("lora_B", zeros({out_features, rank}));
  lora = std::move(l);
}

void Linear::set_quantized(Quantized q) {
  TS_CHECK(!quantized, "Linear: the weight is already quantized (", quantized->format, ")");
  TS_CHECK(q.qweight.defined() && q.qweight.dim() == 2 && q.qweight.size(0) == out_features, "Linear(", in_features,
           " -> ", out_features, "): a quantized weight needs ", out_features, " packed rows");
  unregister("weight");
  weight = Tensor();
  register_buffer("qweight", q.qweight, true, true);
  if (q.scales.defined()) register_buffer("weight_scales", q.scales, true, true);
  if (q.mins.defined()) register_buffer("weight_mins", q.mins, true, true);
  quantized = std::move(q);
}

std::string Linear::extra_repr() const {
  std::string s = detail::str("in_features=", in_features, ", out_features=", out_features, ", bias=",
                              bias.defined() ? "True" : "False");
  if (quantized) {
    s += ", weight=" + quantized->format;
    if (quantized->group) s += detail::str(", group=", quantized->group);
    if (quantized->activations != "float") s += ", activations=" + quantized->activations;
  }
  return s;
}

Bilinear::Bilinear(int64_t in1, int64_t in2, int64_t out, bool with_bias)
    : Module("Bilinear"), in1_features(in1), in2_features(in2), out_features(out) {
  check_positive("Bilinear", "in1_features", in1);
  check_positive("Bilinear", "in2_features", in2);
  check_positive("Bilinear", "out_features", out);
  weight = register_parameter("weight", empty({out, in1, in2}));
  if (with_bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void Bilinear::reset_parameters() {
  double bound = 1.0 / std::sqrt(static_cast<double>(in1_features));
  init::uniform_(weight, -bound, bound);
  if (bias.defined()) init::uniform_(bias, -bound, bound);
}

Tensor Bilinear::forward(const Tensor& x1, const Tensor& x2) {
  TS_CHECK(x1.dim() >= 1 && x1.size(-1) == in1_features && x2.dim() >= 1 && x2.size(-1) == in2_features,
           "Bilinear: expected inputs [..., ", in1_features, "] and [..., ", in2_features, "], got ",
           shape_str(x1.shape()), " and ", shape_str(x2.shape()));
  TS_CHECK(IntArrayRef(x1.shape().data(), x1.dim() - 1).equals(IntArrayRef(x2.shape().data(), x2.dim() - 1)),
           "Bilinear: the inputs' leading dimensions must match, got ", shape_str(x1.shape()), " and ",
           shape_str(x2.shape()));
  Shape lead(x1.shape().begin(), x1.shape().end() - 1);
  Tensor a = x1.reshape({-1, in1_features});
  Tensor b = x2.reshape({-1, in2_features});
  // (a W_k) . b for every k: [N, in1] @ [in1, out * in2] -> [N, out, in2], times b, summed over in2.
  Tensor w = weight.permute({1, 0, 2}).reshape({in1_features, out_features * in2_features});
  Tensor t = ops::matmul(a, w).view({-1, out_features, in2_features});
  Tensor y = ops::sum(ops::mul(t, b.unsqueeze(1)), {-1});
  if (bias.defined()) y = ops::add(y, bias);
  lead.push_back(out_features);
  return y.reshape(lead);
}

std::string Bilinear::extra_repr() const {
  return detail::str("in1_features=", in1_features, ", in2_features=", in2_features, ", out_features=", out_features,
             ", bias=", bias.defined() ? "True" : "False");
}

Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> pad)
    : Module("Embedding"), num_embeddings(num), embedding_dim(dim), padding_idx(pad) {
  check_positive("Embedding", "num_embeddings", num);
  check_positive("Embedding", "embedding_dim", dim);
  if (pad) {
    TS_CHECK(*pad >= -num && *pad < num, "Embedding: padding_idx ", *pad, " is out of range for ", num,
             " embeddings");
    if (*pad < 0) padding_idx = *pad + num;
  }
  weight = register_parameter("weight", empty({num, dim}));
  reset_parameters();
}

void Embedding::reset_parameters() {
  init::normal_(weight);
  if (padding_idx) {
    NoGradGuard no_grad;
    weight.select(0, *padding_idx).zero_();
  }
}

Tensor Embedding::forward(const Tensor& ids) { return ops::embedding(weight, ids, padding_idx); }

std::string Embedding::extra_repr() const {
  std::string s = detail::str(num_embeddings, ", ", embedding_dim);
  if (padding_idx) s += detail::str(", padding_idx=", *padding_idx);
  return s;
}

TiedLinear::TiedLinear(std::shared_ptr<Embedding> e) : Module("TiedLinear"), embedding(std::move(e)) {
  TS_CHECK(embedding, "TiedLinear: no embedding to tie to");
}

Tensor TiedLinear::forward(const Tensor& x) { return ops::linear(x, embedding->weight); }

std::string TiedLinear::extra_repr() const {
  return detail::str(embedding->embedding_dim, ", ", embedding->num_embeddings, ", tied to an embedding");
}

std::string Flatten::extra_repr() const { return detail::str("start_dim=", start_dim, ", end_dim=", end_dim); }
std::string Unflatten::extra_repr() const { return detail::str("dim=", dim, ", unflattened_size=", shape_str(sizes)); }

}  // namespace tessera::nn
