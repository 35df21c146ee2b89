// Matrix products. matmul follows PyTorch: 1-D operands are promoted to
// matrices and the added dim removed afterwards; batch dims broadcast.
#include <map>

#include "ops/autocast_policy.h"
#include "ops/op_utils.h"

namespace tessera::ops {
namespace {

// One GEMM when possible: a [B, M, K] (or [M, K]), b [B, K, N] (or [K, N]).
void run_gemm(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& bias) {
  int64_t k = a.shape()[a.dim() - 1];
  if (k == 0) {
    // An empty inner dimension: the product is zero (plus bias).
    fill_into(c, 0);
    if (bias.defined()) copy_into(c, add(c, bias).detach());
    return;
  }
  int64_t batch = c.dim() == 3 ? c.shape()[0] : 1;
  trace::add_flops(2 * batch * c.shape()[c.dim() - 2] * c.shape()[c.dim() - 1] * k);
  backend::kernels(c).matmul(a, b, c, bias);
}

// Makes a 2-D/3-D operand usable by the GEMM (unit stride in one inner dim).
Tensor gemm_ready(const Tensor& t) {
  int64_t nd = t.dim();
  int64_t s1 = t.strides()[nd - 2], s2 = t.strides()[nd - 1];
  bool ok = (s2 == 1 || t.shape()[nd - 1] == 1) || (s1 == 1 || t.shape()[nd - 2] == 1);
  return ok ? t : t.contiguous();
}

// Batched product of a [..., M, K] and b [..., K, N], both at least 2-D, in the
// same dtype, without autograd.
Tensor matmul_raw(const Tensor& a, const Tensor& b) {
  int64_t M = a.shape()[a.dim() - 2], K = a.shape()[a.dim() - 1], N = b.shape()[b.dim() - 1];
  Shape abatch(a.shape().begin(), a.shape().end() - 2), bbatch(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(abatch, bbatch, "matmul");
  Shape out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor out = empty(out_shape, a.dtype());
  int64_t B = numel_of(batch);
  if (out.numel() == 0) return out;
  if (numel_of(bbatch) == 1 && B > 0) {
    // b is one matrix: fold a's batch dims into its rows when the layout allows.
    Tensor b2 = gemm_ready(b.reshape({K, N}));
    Tensor a_full = a.expand([&] { Shape s = batch; s.push_back(M); s.push_back(K); return s; }());
    Tensor a2 = a_full.dim() == 2 ? a_full : a_full.reshape({B * M, K});
    a2 = gemm_ready(a2);
    run_gemm(a2, b2, out.view({B * M, N}), Tensor());
    return out;
  }
  Shape ae = batch, be = batch;
  ae.push_back(M); ae.push_back(K);
  be.push_back(K); be.push_back(N);
  Tensor a3 = gemm_ready(a.expand(ae).reshape({B, M, K}));
  Tensor b3 = gemm_ready(b.expand(be).reshape({B, K, N}));
  run_gemm(a3, b3, out.view({B, M, N}), Tensor());
  return out;
}

Tensor matmul_nd(const Tensor& a, const Tensor& b) {
  Tensor out = matmul_raw(a.detach(), b.detach());
  if (autograd::any_requires_grad({&a, &b})) {
    TensorList outs{out};
    Shape sa = a.shape(), sb = b.shape();
    autograd::record("matmul", {a, b}, outs, [sa, sb](const VjpArgs& v) -> TensorList {
      const Tensor& g = v.grads[0];
      Tensor ga = v.needs_grad(0) ? sum_to(matmul_nd(g, v.saved[1].mT()), sa) : Tensor();
      Tensor gb = v.needs_grad(1) ? sum_to(matmul_nd(v.saved[0].mT(), g), sb) : Tensor();
      return {ga, gb};
    }, {0, 1});
  }
  return out;
}

void check_matmul_args(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op, "input");
  check_defined(b, op, "other");
  TS_CHECK(a.dim() >= 1 && b.dim() >= 1, op, ": both arguments need at least 1 dimension, got shapes ",
           shape_str(a.shape()), " and ", shape_str(b.shape()));
  TS_CHECK(a.dtype() == b.dtype(), op, ": expected both operands to have the same dtype, got ", dtype_name(a.dtype()),
           " and ", dtype_name(b.dtype()));
  TS_CHECK(a.dtype() != DType::Bool, op, ": not supported for bool tensors");
  int64_t ka = a.shape().back();
  int64_t kb = b.dim() == 1 ? b.shape()[0] : b.shape()[b.dim() - 2];
  TS_CHECK(ka == kb, op, ": cannot multiply ", shape_str(a.shape()), " by ", shape_str(b.shape()),
           ": inner dimensions ", ka, " and ", kb, " differ");
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  TS_OP_SCOPE(matmul, &a, &b);
  TS_AUTOCAST(matmul, [&](const auto& cast) { return matmul(cast(a), cast(b)); });
  check_matmul_args(a, b, "matmul");
  Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor b2 = b.dim() == 1 ? b.unsqueeze(-1) : b;
  Tensor r = matmul_nd(a2, b2);
  if (b.dim() == 1) r = r.squeeze(-1);
  if (a.dim() == 1) r = r.squeeze(a.dim() == 1 && b.dim() == 1 ? -1 : -2);
  TS_RETURN(r);
}

Tensor mm(const Tensor& a, const Tensor& b) {
  TS_OP_SCOPE(mm, &a, &b);
  TS_AUTOCAST(mm, [&](const auto& cast) { return mm(cast(a), cast(b)); });
  TS_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected 2-D tensors, got shapes ", shape_str(a.shape()), " and ",
           shape_str(b.shape()));
  TS_RETURN(matmul(a, b));
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  TS_OP_SCOPE(bmm, &a, &b);
  TS_AUTOCAST(bmm, [&](const auto& cast) { return bmm(cast(a), cast(b)); });
  TS_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-D tensors, got shapes ", shape_str(a.shape()), " and ",
           shape_str(b.shape()));
  TS_CHECK(a.shape()[0] == b.shape()[0], "bmm: batch sizes ", a.shape()[0], " and ", b.shape()[0], " differ");
  TS_RETURN(matmul(a, b));
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  TS_OP_SCOPE(linear, &x, &w, &bias);
  TS_AUTOCAST(linear, [&](const auto& cast) { return linear(cast(x), cast(w), cast(bias)); });
  check_defined(x, "linear", "input");
  check_defined(w, "linear", "weight");
  TS_CHECK(w.dim() == 2 || w.dim() == 1, "linear: weight must be 1-D or 2-D, got shape ", shape_str(w.shape()));
  TS_CHECK(x.dim() >= 1, "linear: input must have at least 1 dimension");
  int64_t in = w.shape().back();
  TS_CHECK(x.shape().back() == in, "linear: input's last dimension ", x.shape().back(),
           " does not match the weight's in_features ", in, " (input ", shape_str(x.shape()), ", weight ",
           shape_str(w.shape()), ")");
  TS_CHECK(x.dtype() == w.dtype(), "linear: input dtype ", dtype_name(x.dtype()), " and weight dtype ",
           dtype_name(w.dtype()), " differ");
  if (w.dim() == 1 || x.dim() == 1) {
    Tensor y = matmul(x, w.t());
    TS_RETURN(bias.defined() ? add(y, bias) : y);
  }
  int64_t out_f = w.shape()[0];
  if (bias.defined())
    TS_CHECK(bias.dim() == 1 && bias.shape()[0] == out_f && bias.dtype() == x.dtype(), "linear: bias must be a ",
             dtype_name(x.dtype()), " vector of size ", out_f, ", got ", dtype_name(bias.dtype()), " of shape ",
             shape_str(bias.shape()));
  // Forward: one GEMM over all leading dims with W^T as a strided view, bias fused.
  Tensor x2 = gemm_ready(x.detach().reshape({-1, in}));
  Shape out_shape = x.shape();
  out_shape.back() = out_f;
  Tensor y = empty(out_shape, x.dtype());
  if (y.numel() > 0) run_gemm(x2, w.detach().t(), y.view({-1, out_f}), bias.defined() ? bias.detach().contiguous() : Tensor());
  if (autograd::any_requires_grad({&x, &w, &bias})) {
    TensorList outs{y};
    autograd::record("linear", {x, w, bias}, outs, [in, out_f](const VjpArgs& v) -> TensorList {
      const Tensor& g = v.grads[0];
      const Tensor& x = v.saved[0];
      const Tensor& w = v.saved[1];
      Tensor g2 = g.reshape({-1, out_f});
      Tensor gx = v.needs_grad(0) ? matmul(g, w) : Tensor();
      Tensor gw = v.needs_grad(1) ? matmul(g2.t(), x.reshape({-1, in})) : Tensor();
      Tensor gb = v.needs_grad(2) ? sum(g2, {0}) : Tensor();
      return {gx, gw, gb};
    }, {0, 1});
  }
  TS_RETURN(y);
}

Tensor addmm(const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& beta, const Scalar& alpha) {
  TS_OP_SCOPE(addmm, &self, &a, &b);
  TS_OP_ATTRS({"beta", beta}, {"alpha", alpha});
  TS_AUTOCAST(addmm, [&](const auto& cast) { return addmm(cast(self), cast(a), cast(b), beta, alpha); });
  TS_CHECK(a.dim() == 2 && b.dim() == 2, "addmm: expected 2-D matrices, got shapes ", shape_str(a.shape()), " and ",
           shape_str(b.shape()));
  Tensor p = mm(a, b);
  if (alpha.to_double() != 1.0) p = mul(p, alpha);
  if (beta.to_double() == 0.0) TS_RETURN(add(p, mul(self.detach(), 0).expand(p.shape())));
  TS_RETURN(add(beta.to_double() == 1.0 ? self : mul(self, beta), p));
}

Tensor outer(const Tensor& a, const Tensor& b) {
  TS_OP_SCOPE(outer, &a, &b);
  TS_CHECK(a.dim() == 1 && b.dim() == 1, "outer: expected 1-D vectors, got shapes ", shape_str(a.shape()), " and ",
           shape_str(b.shape()));
  TS_RETURN(mul(a.unsqueeze(1), b.unsqueeze(0)));
}

// ---- einsum ----------------------------------------------------------------------
namespace {


std::string expand_ellipsis(const std::string& term, int64_t ndim, int64_t ell_dims, const char* eq) {
  size_t pos = term.find("...");
  if (pos == std::string::npos) {
    TS_CHECK(static_cast<int64_t>(term.size()) == ndim, "einsum: the subscript '", term, "' in '", eq, "' has ",
             term.size(), " labels but its operand has ", ndim, " dimensions");
    return term;
  }
  int64_t named = static_cast<int64_t>(term.size()) - 3;
  int64_t here = ndim - named;
  TS_CHECK(here >= 0, "einsum: the subscript '", term, "' has more labels than its operand's ", ndim, " dimensions");
  std::string e;
  for (int64_t i = ell_dims - here; i < ell_dims; ++i) e += static_cast<char>('A' + i);
  return term.substr(0, pos) + e + term.substr(pos + 3);
}

}  // namespace

Tensor einsum(const std::string& equation, const TensorList& operands) {
  TS_OP_SCOPE_LIST(einsum, operands);
  TS_OP_ATTRS({"equation", equation});
  TS_AUTOCAST(einsum, [&](const auto& cast) {  // a product, as matmul
    TensorList c;
    for (const Tensor& t : operands) c.push_back(cast(t));
    return einsum(equation, c);
  });
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  size_t arrow = eq.find("->");
  std::string lhs = arrow == std::string::npos ? eq : eq.substr(0, arrow);
  std::vector<std::string> terms;
  size_t start = 0;
  while (true) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  TS_CHECK(terms.size() == operands.size(), "einsum: the equation '", equation, "' has ", terms.size(),
           " operand subscripts but ", operands.size(), " operands were given");
  TS_CHECK(operands.size() == 1 || operands.size() == 2, "einsum: supports one or two operands, got ", operands.size());
  int64_t ell = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    for (char c : terms[i])
      TS_CHECK((std::isalpha(static_cast<unsigned char>(c)) && std::islower(static_cast<unsigned char>(c))) || c == '.',
               "einsum: invalid subscript '", c, "' in '", equation, "' (use lowercase letters a-z and ...)");
    if (terms[i].find("...") != std::string::npos)
      ell = std::max(ell, operands[i].dim() - static_cast<int64_t>(terms[i].size()) + 3);
  }
  std::vector<std::string> labels;
  for (size_t i = 0; i < terms.size(); ++i) labels.push_back(expand_ellipsis(terms[i], operands[i].dim(), ell, equation.c_str()));
  std::string out;
  if (arrow != std::string::npos) {
    std::string rhs = eq.substr(arrow + 2);
    size_t pos = rhs.find("...");
    if (pos != std::string::npos) {
      std::string e;
      for (int64_t i = 0; i < ell; ++i) e += static_cast<char>('A' + i);
      rhs = rhs.substr(0, pos) + e + rhs.substr(pos + 3);
    }
    out = rhs;
  } else {
    // Implicit output: ellipsis dims, then labels that appear once, sorted.
    std::map<char, int> count;
    for (auto& l : labels)
      for (char c : l) count[c]++;
    for (int64_t i = 0; i < ell; ++i) out += static_cast<char>('A' + i);
    for (auto [c, n] : count)
      if (n == 1 && std::islower(static_cast<unsigned char>(c))) out += c;
  }
  // Label sizes must agree.
  std::map<char, int64_t> size;
  for (size_t i = 0; i < labels.size(); ++i)
    for (size_t d = 0; d < labels[i].size(); ++d) {
      char c = labels[i][d];
      int64_t s = operands[i].shape()[d];
      auto it = size.find(c);
      if (it == size.end() || it->second == 1) size[c] = s;
      else TS_CHECK(s == it->second || s == 1, "einsum: label '", c, "' has size ", it->second, " in one place and ",
                    s, " in another in '", equation, "'");
    }
  for (char c : out) TS_CHECK(size.count(c), "einsum: output label '", c, "' does not appear in any input of '", equation, "'");

  // Per operand: diagonals for repeated labels, sum labels used nowhere else.
  std::vector<Tensor> ts;
  for (size_t i = 0; i < labels.size(); ++i) {
    Tensor t = operands[i];
    std::string& l = labels[i];
    for (size_t a = 0; a < l.size(); ++a)
      for (size_t b = a + 1; b < l.size(); ++b)
        if (l[a] == l[b]) {
          t = t.diagonal(0, static_cast<int64_t>(a), static_cast<int64_t>(b));
          char c = l[a];
          l.erase(b, 1);
          l.erase(a, 1);
          l.push_back(c);
          a = static_cast<size_t>(-1);
          break;
        }
    std::string other = out + (labels.size() == 2 ? labels[1 - i] : std::string());
    Shape sum_dims;
    std::string kept;
    for (size_t d = 0; d < l.size(); ++d) {
      if (other.find(l[d]) == std::string::npos) sum_dims.push_back(static_cast<int64_t>(d));
      else kept += l[d];
    }
    if (!sum_dims.empty()) t = sum(t, sum_dims);
    l = kept;
    ts.push_back(t);
  }
  auto permute_to = [](const Tensor& t, const std::string& from, const std::string& to) {
    Shape perm;
    for (char c : to) perm.push_back(static_cast<int64_t>(from.find(c)));
    return t.permute(perm);
  };
  if (ts.size() == 1) TS_RETURN(permute_to(ts[0], labels[0], out).contiguous());

  // Two operands: batch (both, kept), contracted (both, not kept), left, right.
  const std::string &la = labels[0], &lb = labels[1];
  std::string batch, contract, left, right;
  for (char c : la) {
    bool in_b = lb.find(c) != std::string::npos, in_out = out.find(c) != std::string::npos;
    if (in_b && in_out) batch += c;
    else if (in_b) contract += c;
    else left += c;
  }
  for (char c : lb)
    if (la.find(c) == std::string::npos) right += c;
  auto dims_of = [&](const std::string& s, const Tensor& t, const std::string& l) {
    int64_t n = 1;
    for (char c : s) n *= t.shape()[l.find(c)];
    return n;
  };
  Tensor a = permute_to(ts[0], la, batch + left + contract);
  Tensor b = permute_to(ts[1], lb, batch + contract + right);
  // Broadcast size-1 batch dims between the operands.
  Shape bshape;
  for (char c : batch) bshape.push_back(std::max(ts[0].shape()[la.find(c)], ts[1].shape()[lb.find(c)]));
  int64_t B = numel_of(bshape);
  Shape ae = bshape, be = bshape;
  for (size_t i = batch.size(); i < static_cast<size_t>(a.dim()); ++i) ae.push_back(a.shape()[i]);
  for (size_t i = batch.size(); i < static_cast<size_t>(b.dim()); ++i) be.push_back(b.shape()[i]);
  a = a.expand(ae);
  b = b.expand(be);
  int64_t L = dims_of(left, ts[0], la), C = dims_of(contract, ts[0], la), R = dims_of(right, ts[1], lb);
  Tensor p = matmul(a.reshape({B, L, C}), b.reshape({B, C, R}));
  Shape rs = bshape;
  for (char c : left) rs.push_back(ts[0].shape()[la.find(c)]);
  for (char c : right) rs.push_back(ts[1].shape()[lb.find(c)]);
  p = p.reshape(rs);
  TS_RETURN(permute_to(p, batch + left + right, out).contiguous());
}

// linear with its activation and residual add run inside the GEMM (oneDNN
// post-ops) where the backend can; elsewhere the same ops one after another.
Tensor fused_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual,
                    const std::string& activation, bool constant_weights) {
  TS_OP_SCOPE(fused_linear, &x, &w, &bias, &residual);
  TS_OP_ATTRS({"activation", activation}, {"constant_weights", constant_weights});
  backend::Epilogue act = epilogue_of(activation, "fused_linear");
  auto composite = [&] {
    Tensor y = apply_epilogue(linear(x, w, bias), act);
    return residual.defined() ? add(y, residual) : y;
  };
  check_defined(x, "fused_linear", "input");
  check_defined(w, "fused_linear", "weight");
  bool plain = x.dtype() == DType::F32 && w.dtype() == DType::F32 && w.dim() == 2 && x.dim() >= 2 &&
               x.shape().back() == w.shape()[1] && (!bias.defined() || (bias.dtype() == DType::F32 && bias.dim() == 1 &&
                                                                         bias.shape()[0] == w.shape()[0])) &&
               !autograd::any_requires_grad({&x, &w, &bias, &residual});
  Shape out_shape = x.shape();
  if (plain) out_shape.back() = w.shape()[0];
  if (!plain || (residual.defined() && (residual.dtype() != DType::F32 || !IntArrayRef(residual.shape()).equals(out_shape))))
    TS_RETURN(composite());
  int64_t in = w.shape()[1], out_f = w.shape()[0];
  Tensor x2 = gemm_ready(x.detach().reshape({-1, in}));
  Tensor y = empty(out_shape, DType::F32);
  Tensor r2 = residual.defined() ? residual.detach().contiguous().view({-1, out_f}) : Tensor();
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  if (y.numel() == 0) TS_RETURN(y);
  if (!backend::kernels(y).linear_epilogue(x2, w.detach(), b, r2, y.view({-1, out_f}), act, constant_weights))
    TS_RETURN(composite());
  trace::add_flops(2 * x2.shape()[0] * out_f * in);
  TS_RETURN(y);
}

// ---- invokers (graph nodes run ops through these) ----
TS_OP_INVOKER(matmul) { return {matmul(in[0], in[1])}; }
TS_OP_INVOKER(mm) { return {mm(in[0], in[1])}; }
TS_OP_INVOKER(bmm) { return {bmm(in[0], in[1])}; }
TS_OP_INVOKER(outer) { return {outer(in[0], in[1])}; }
TS_OP_INVOKER(linear) { return {linear(in[0], in[1], in[2])}; }
TS_OP_INVOKER(fused_linear) {
  return {fused_linear(in[0], in[1], in[2], in[3], a.s("activation"),
                       a.has("constant_weights") && a.b("constant_weights"))};
}
TS_OP_INVOKER(addmm) { return {addmm(in[0], in[1], in[2], a.scalar("beta"), a.scalar("alpha"))}; }
TS_OP_INVOKER(einsum) { return {einsum(a.s("equation"), in)}; }

}  // namespace tessera::ops
