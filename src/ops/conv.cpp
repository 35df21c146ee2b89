// Convolutions. conv2d and conv_transpose2d share one geometry and the three
// conv primitives (forward, backward-data, backward-weights) with roles
// swapped. Double backward through convolutions is not supported yet: the VJP
// raises an error under create_graph instead of returning wrong gradients.
#include "ops/conv_params.h"
#include "ops/autocast_policy.h"
#include "ops/op_utils.h"
#include "tessera/core/allocator.h"

namespace tessera::ops {
namespace {
// Multiply-adds of one pass (forward, data or weight gradient) count twice.
int64_t conv_flops(const backend::ConvGeometry& g) {
  return 2 * g.N * g.OC * g.OH * g.OW * (g.C / g.groups) * g.KH * g.KW;
}
}  // namespace
namespace {

std::vector<int64_t> pair_of(IntArrayRef v, const char* op, const char* what) {
  TS_CHECK(v.size() == 1 || v.size() == 2, op, ": ", what, " must have 1 or 2 values, got ", shape_str(v));
  return v.size() == 1 ? std::vector<int64_t>{v[0], v[0]} : std::vector<int64_t>{v[0], v[1]};
}

void check_no_create_graph(const char* op) {
  TS_CHECK(!GradMode::is_enabled(), op,
           ": double backward (create_graph=true through a convolution) is not supported yet");
}

}  // namespace

// xs: the input's NCHW shape.
backend::ConvGeometry conv_geometry(IntArrayRef xs, DType dtype, const Tensor& w, const std::vector<int64_t>& stride,
                                const std::vector<int64_t>& pad_tl, const std::vector<int64_t>& pad_br,
                                const std::vector<int64_t>& dil, int64_t groups) {
  backend::ConvGeometry g;
  g.N = xs[0]; g.C = xs[1]; g.H = xs[2]; g.W = xs[3];
  g.OC = w.shape()[0]; g.KH = w.shape()[2]; g.KW = w.shape()[3];
  g.sh = stride[0]; g.sw = stride[1];
  g.dh = dil[0]; g.dw = dil[1];
  g.pt = pad_tl[0]; g.pl = pad_tl[1]; g.pb = pad_br[0]; g.pr = pad_br[1];
  g.groups = groups;
  g.OH = window_output_size(g.H, checked_add(g.pt, g.pb, "conv"), g.KH, g.dh, g.sh, false, "conv");
  g.OW = window_output_size(g.W, checked_add(g.pl, g.pr, "conv"), g.KW, g.dw, g.sw, false, "conv");
  g.dtype = dtype;
  return g;
}
namespace {

backend::ConvGeometry conv_geometry(const Tensor& x, const Tensor& w, const std::vector<int64_t>& stride,
                                const std::vector<int64_t>& pad_tl, const std::vector<int64_t>& pad_br,
                                const std::vector<int64_t>& dil, int64_t groups) {
  return ::tessera::ops::conv_geometry(x.shape(), x.dtype(), w, stride, pad_tl, pad_br, dil, groups);
}

// conv_transpose2d's geometry: the convolution that maps its output
// [N, Cout, OH, OW] back to its input [N, Cin, H, W] (its forward is that
// convolution's backward-data).
backend::ConvGeometry transposed_geometry(const Tensor& x, const Tensor& w, int64_t OH, int64_t OW,
                                      const std::vector<int64_t>& stride, const std::vector<int64_t>& pad,
                                      const std::vector<int64_t>& dil, int64_t groups) {
  int64_t H = x.shape()[2], W = x.shape()[3], KH = w.shape()[2], KW = w.shape()[3];
  backend::ConvGeometry g;
  g.N = x.shape()[0]; g.C = w.shape()[1] * groups; g.H = OH; g.W = OW; g.OC = x.shape()[1]; g.KH = KH; g.KW = KW;
  g.OH = H; g.OW = W;
  g.sh = stride[0]; g.sw = stride[1]; g.dh = dil[0]; g.dw = dil[1];
  g.pt = pad[0]; g.pl = pad[1];
  g.pb = (H - 1) * stride[0] + dil[0] * (KH - 1) + 1 - OH - pad[0];
  g.pr = (W - 1) * stride[1] + dil[1] * (KW - 1) + 1 - OW - pad[1];
  g.groups = groups;
  g.dtype = x.dtype();
  return g;
}

// {gx, gw, gb} of a convolution with geometry g (of conv_transpose2d when
// `transposed`); entries not needed stay undefined.
TensorList conv_backward(const backend::ConvGeometry& g, bool transposed, const Tensor& gy_in, const Tensor& x_in,
                         const Tensor& w_in, bool need_gx, bool need_gw, bool need_gb) {
  Tensor gy = gy_in.contiguous(), x = x_in.contiguous(), w = w_in.contiguous();
  Tensor gx, gw, gb;
  if (need_gx) {
    gx = empty(x.shape(), x.dtype());
    trace::add_flops(conv_flops(g));
    if (transposed) backend::kernels(gx).conv2d_fwd(g, gy, w, Tensor(), gx);
    else backend::kernels(gx).conv2d_bwd_data(g, gy, w, gx);
  }
  if (need_gw || (need_gb && !transposed)) {
    Tensor gw_t = empty(w.shape(), w.dtype());
    Tensor gb_t = empty({g.OC}, w.dtype());
    trace::add_flops(conv_flops(g));
    if (transposed) backend::kernels(gw_t).conv2d_bwd_weights(g, gy, x, gw_t, gb_t);
    else backend::kernels(gw_t).conv2d_bwd_weights(g, x, gy, gw_t, gb_t);
    if (need_gw) gw = gw_t;
    if (need_gb && !transposed) gb = gb_t;
  }
  if (need_gb && transposed) gb = sum(gy, {0, 2, 3});
  return {gx, gw, gb};
}

Tensor conv2d_impl(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, std::vector<int64_t> stride,
                   std::vector<int64_t> pad_tl, std::vector<int64_t> pad_br, std::vector<int64_t> dil, int64_t groups) {
  const char* name = "conv2d";
  if (x_in.dtype() == DType::F16 || (x_in.dtype() == DType::BF16 && !backend::kernels(x_in).native_bf16())) {
    // 16-bit floats without native support run the f32 primitives (autograd
    // flows through the casts); bf16 on AVX512-BF16/AMX runs oneDNN's bf16 kernels.
    Tensor b32 = b_in.defined() ? b_in.to(DType::F32) : Tensor();
    return conv2d_impl(x_in.to(DType::F32), w_in.to(DType::F32), b32, stride, pad_tl, pad_br, dil, groups).to(x_in.dtype());
  }
  Tensor x = x_in.detach().contiguous(), w = w_in.detach().contiguous();
  backend::ConvGeometry g = conv_geometry(x, w, stride, pad_tl, pad_br, dil, groups);
  TS_CHECK(g.OH > 0 && g.OW > 0, name, ": the input of spatial size ", g.H, "x", g.W,
           " is too small for the kernel ", g.KH, "x", g.KW, " with this padding and dilation (output would be ",
           g.OH, "x", g.OW, ")");
  Tensor y = empty({g.N, g.OC, g.OH, g.OW}, x.dtype());
  Tensor b = b_in.defined() ? b_in.detach().contiguous() : Tensor();
  if (y.numel() > 0) {
    if (x.numel() == 0 || w.numel() == 0) {
      fill_into(y, 0);
      if (b.defined()) y = add(y, b.view({1, g.OC, 1, 1})).detach();
    } else {
      trace::add_flops(conv_flops(g));
      backend::kernels(y).conv2d_fwd(g, x, w, b, y);
    }
  }
  if (autograd::any_requires_grad({&x_in, &w_in, &b_in})) {
    TensorList outs{y};
    autograd::record(name, {x_in, w_in, b_in}, outs, [g, stride, pad_tl, pad_br, dil, groups](const VjpArgs& a) -> TensorList {
      check_no_create_graph("conv2d");
      if (recorder()) {  // being captured: the op
        TensorList r = convolution_backward(a.grads[0], a.saved[0], a.saved[1], stride, pad_tl, pad_br, dil, groups, false);
        return {a.needs_grad(0) ? r[0] : Tensor(), a.needs_grad(1) ? r[1] : Tensor(), a.needs_grad(2) ? r[2] : Tensor()};
      }
      return conv_backward(g, false, a.grads[0], a.saved[0], a.saved[1], a.needs_grad(0), a.needs_grad(1), a.needs_grad(2));
    }, {0, 1});
  }
  return y;
}

void check_conv_args(const char* name, const Tensor& x, const Tensor& w, const Tensor& b, int64_t groups,
                     int64_t spatial, bool transposed) {
  check_defined(x, name, "input");
  check_defined(w, name, "weight");
  TS_CHECK(x.dim() == spatial + 2, name, ": expected a ", spatial + 2, "-D input [N, C, ...], got shape ",
           shape_str(x.shape()));
  TS_CHECK(w.dim() == spatial + 2, name, ": expected a ", spatial + 2, "-D weight, got shape ", shape_str(w.shape()));
  check_floating(x, name, "input");
  TS_CHECK(x.dtype() == w.dtype(), name, ": input dtype ", dtype_name(x.dtype()), " and weight dtype ",
           dtype_name(w.dtype()), " differ");
  TS_CHECK(groups >= 1, name, ": groups must be positive, got ", groups);
  int64_t C = x.shape()[1];
  if (!transposed) {
    TS_CHECK(C % groups == 0 && w.shape()[0] % groups == 0, name, ": input channels ", C, " and output channels ",
             w.shape()[0], " must both be divisible by groups ", groups);
    TS_CHECK(w.shape()[1] * groups == C, name, ": the weight of shape ", shape_str(w.shape()), " expects ",
             w.shape()[1] * groups, " input channels (", w.shape()[1], " per group x ", groups,
             " groups), but the input of shape ", shape_str(x.shape()), " has ", C);
  } else {
    TS_CHECK(w.shape()[0] == C, name, ": the weight of shape ", shape_str(w.shape()), " expects ", w.shape()[0],
             " input channels, but the input of shape ", shape_str(x.shape()), " has ", C);
    TS_CHECK(C % groups == 0, name, ": input channels ", C, " must be divisible by groups ", groups);
  }
  if (b.defined()) {
    int64_t oc = transposed ? w.shape()[1] * groups : w.shape()[0];
    TS_CHECK(b.dim() == 1 && b.shape()[0] == oc && b.dtype() == x.dtype(), name, ": bias must be a ",
             dtype_name(x.dtype()), " vector of size ", oc, ", got ", dtype_name(b.dtype()), " ", shape_str(b.shape()));
  }
}

}  // namespace

Conv2dParams conv2d_params(const Tensor& w, const Conv2dOptions& o, const char* name) {
  Conv2dParams p;
  p.stride = pair_of(o.stride, name, "stride");
  p.dil = pair_of(o.dilation, name, "dilation");
  for (int i = 0; i < 2; ++i) {
    TS_CHECK(p.stride[i] > 0, name, ": stride must be positive, got ", shape_str(o.stride));
    TS_CHECK(p.dil[i] > 0, name, ": dilation must be positive, got ", shape_str(o.dilation));
  }
  if (o.padding_same) {
    TS_CHECK(p.stride[0] == 1 && p.stride[1] == 1, name, ": padding='same' requires stride 1, got ",
             shape_str(o.stride));
    // Total padding d*(k-1); PyTorch puts the odd extra element at the end.
    for (int i = 0; i < 2; ++i) {
      int64_t total = p.dil[i] * (w.shape()[2 + i] - 1);
      p.tl.push_back(total / 2);
      p.br.push_back(total - total / 2);
    }
  } else {
    p.tl = pair_of(o.padding, name, "padding");
    for (int64_t v : p.tl) TS_CHECK(v >= 0, name, ": padding must be non-negative, got ", shape_str(o.padding));
    p.br = p.tl;
  }
  return p;
}

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dOptions& o) {
  TS_OP_SCOPE(conv2d, &x, &w, &b);
  TS_OP_ATTRS({"stride", o.stride}, {"padding", o.padding}, {"dilation", o.dilation}, {"groups", o.groups}, {"padding_same", o.padding_same});
  TS_AUTOCAST(conv2d, [&](const auto& cast) { return conv2d(cast(x), cast(w), cast(b), o); });
  check_conv_args("conv2d", x, w, b, o.groups, 2, false);
  Conv2dParams p = conv2d_params(w, o, "conv2d");
  TS_RETURN(conv2d_impl(x, w, b, p.stride, p.tl, p.br, p.dil, o.groups));
}

Tensor channel_blocks(const Tensor& x, int64_t block) {
  TS_OP_SCOPE(channel_blocks, &x);
  TS_OP_ATTRS({"block", block});
  check_defined(x, "channel_blocks", "input");
  TS_CHECK(block > 0, "channel_blocks: block must be positive, got ", block);
  const Shape& s = x.shape();
  // Always new memory (ops.def: kFresh), also when the reordered view is
  // contiguous already (1x1 images): the memory plan treats it as a new value.
  auto fresh = [](const Tensor& v) { return v.is_contiguous() ? v.clone() : v.contiguous(); };
  if (x.dim() == 4) {
    TS_CHECK(s[1] % block == 0, "channel_blocks: ", s[1], " channels (shape ", shape_str(s),
             ") are not a multiple of the block ", block);
    TS_RETURN(fresh(x.reshape({s[0], s[1] / block, block, s[2], s[3]}).permute({0, 1, 3, 4, 2})));
  }
  TS_CHECK(x.dim() == 5 && s[4] == block, "channel_blocks: expected an NCHW tensor or a blocked [N, C/", block,
           ", H, W, ", block, "] one, got shape ", shape_str(s));
  TS_RETURN(fresh(x.permute({0, 1, 4, 2, 3}).reshape({s[0], s[1] * block, s[2], s[3]})));
}

// conv2d with its residual add and activation inside the primitive (oneDNN
// post-ops), reading and writing channel-blocked activations if asked, where
// the backend can; elsewhere (and for any malformed argument, whose error
// then comes from the plain ops) the same ops one after another.
Tensor fused_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& residual, const Conv2dOptions& o,
                    const std::string& activation, int64_t input_block, int64_t output_block, bool constant_weights) {
  TS_OP_SCOPE(fused_conv2d, &x, &w, &b, &residual);
  TS_OP_ATTRS({"stride", o.stride}, {"padding", o.padding}, {"dilation", o.dilation}, {"groups", o.groups},
              {"padding_same", o.padding_same}, {"activation", activation}, {"input_block", input_block},
              {"output_block", output_block}, {"constant_weights", constant_weights});
  const char* name = "fused_conv2d";
  backend::Epilogue act = epilogue_of(activation, name);
  for (int64_t blk : {input_block, output_block})
    TS_CHECK(blk == 0 || blk == 8 || blk == 16, name, ": a channel block must be 0 (NCHW), 8 or 16, got ", blk);
  auto composite = [&] {
    // Unplanned: the graph executor may have planned the output in the
    // residual's place (it dies here), which only the one-primitive path allows.
    PlannedBuffersGuard unplanned(nullptr);
    Tensor y = conv2d(input_block ? channel_blocks(x, input_block) : x, w, b, o);
    if (residual.defined()) y = add(y, output_block ? channel_blocks(residual, output_block) : residual);
    y = apply_epilogue(y, act);
    return output_block ? channel_blocks(y, output_block) : y;
  };
  check_defined(x, name, "input");
  check_defined(w, name, "weight");
  const backend::Kernels& kernels = backend::kernels(x);
  bool fast = kernels.conv_epilogue_ok(x.dtype()) && !(x.dtype() == DType::BF16 && !kernels.native_bf16()) && x.dim() == (input_block ? 5 : 4) &&
              (!input_block || x.shape()[4] == input_block) && w.dim() == 4 && w.dtype() == x.dtype() &&
              o.groups >= 1 && !autograd::any_requires_grad({&x, &w, &b, &residual});
  if (!fast) TS_RETURN(composite());
  Shape xs = x.shape();
  if (input_block) xs = {xs[0], xs[1] * input_block, xs[2], xs[3]};
  int64_t OC = w.shape()[0];
  if (xs[1] != w.shape()[1] * o.groups || OC % o.groups != 0 || (output_block && OC % output_block != 0) ||
      (b.defined() && (b.dim() != 1 || b.shape()[0] != OC || b.dtype() != x.dtype())))
    TS_RETURN(composite());
  Conv2dParams p = conv2d_params(w, o, name);
  backend::ConvGeometry g = conv_geometry(xs, x.dtype(), w, p.stride, p.tl, p.br, p.dil, o.groups);
  Shape out_shape = output_block ? Shape{g.N, OC / output_block, g.OH, g.OW, output_block} : Shape{g.N, OC, g.OH, g.OW};
  if (g.OH <= 0 || g.OW <= 0 || x.numel() == 0 || w.numel() == 0 ||
      (residual.defined() && (residual.dtype() != x.dtype() || !IntArrayRef(residual.shape()).equals(out_shape))))
    TS_RETURN(composite());  // conv2d's own errors and edge cases; broadcast residuals
  // The output first: a planned output may be the residual's own buffer (the
  // sum post-op then accumulates in place), and no copy below may take it.
  Tensor y = empty(out_shape, x.dtype());
  Tensor xc = x.detach().contiguous(), wc = w.detach().contiguous();
  Tensor bc = b.defined() ? b.detach().contiguous() : Tensor();
  Tensor rc = residual.defined() ? residual.detach().contiguous() : Tensor();
  trace::add_flops(conv_flops(g));
  backend::kernels(y).conv2d_fused(g, xc, wc, bc, rc, y, act, static_cast<int>(input_block),
                                    static_cast<int>(output_block), constant_weights && wc.storage() == w.storage());
  TS_RETURN(y);
}

Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t padding, int64_t dilation,
              int64_t groups, bool padding_same) {
  TS_OP_SCOPE(conv1d, &x, &w, &b);
  TS_OP_ATTRS({"stride", stride}, {"padding", padding}, {"dilation", dilation}, {"groups", groups}, {"padding_same", padding_same});
  TS_AUTOCAST(conv1d, [&](const auto& cast) { return conv1d(cast(x), cast(w), cast(b), stride, padding, dilation, groups, padding_same); });
  check_conv_args("conv1d", x, w, b, groups, 1, false);
  Conv2dOptions o;
  o.stride = {1, stride};
  o.padding = {0, padding};
  o.dilation = {1, dilation};
  o.groups = groups;
  o.padding_same = padding_same;
  TS_RETURN(conv2d(x.unsqueeze(2), w.unsqueeze(2), b, o).squeeze(2));
}

Tensor conv_transpose2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, IntArrayRef stride_v,
                        IntArrayRef padding_v, IntArrayRef output_padding_v, int64_t groups, IntArrayRef dilation_v) {
  TS_OP_SCOPE(conv_transpose2d, &x_in, &w_in, &b_in);
  TS_OP_ATTRS({"stride", stride_v}, {"padding", padding_v}, {"output_padding", output_padding_v}, {"groups", groups}, {"dilation", dilation_v});
  TS_AUTOCAST(conv_transpose2d, [&](const auto& cast) { return conv_transpose2d(cast(x_in), cast(w_in), cast(b_in), stride_v, padding_v, output_padding_v, groups, dilation_v); });
  const char* name = "conv_transpose2d";
  check_conv_args(name, x_in, w_in, b_in, groups, 2, true);
  auto stride = pair_of(stride_v, name, "stride");
  auto pad = pair_of(padding_v, name, "padding");
  auto opad = pair_of(output_padding_v, name, "output_padding");
  auto dil = pair_of(dilation_v, name, "dilation");
  for (int i = 0; i < 2; ++i) {
    TS_CHECK(stride[i] > 0 && dil[i] > 0, name, ": stride and dilation must be positive");
    TS_CHECK(pad[i] >= 0, name, ": padding must be non-negative, got ", shape_str(padding_v));
    TS_CHECK(opad[i] >= 0 && (opad[i] < stride[i] || opad[i] < dil[i]), name, ": output_padding ",
             shape_str(output_padding_v), " must be smaller than either stride or dilation");
  }
  if (is_reduced_float(x_in.dtype())) {
    Tensor b32 = b_in.defined() ? b_in.to(DType::F32) : Tensor();
    TS_RETURN(conv_transpose2d(x_in.to(DType::F32), w_in.to(DType::F32), b32, stride_v, padding_v, output_padding_v, groups,
                            dilation_v).to(x_in.dtype()));
  }
  Tensor x = x_in.detach().contiguous(), w = w_in.detach().contiguous();
  int64_t N = x.shape()[0], H = x.shape()[2], W = x.shape()[3];
  int64_t Cout = w.shape()[1] * groups, KH = w.shape()[2], KW = w.shape()[3];
  // (H - 1) * stride - 2 * pad + dil * (KH - 1) + output_padding + 1, checked (sizes come from files).
  auto out_size = [&](int64_t in, int i, int64_t k) {
    int64_t grow = checked_add(checked_mul(std::max<int64_t>(in - 1, 0), stride[i], name), checked_mul(dil[i], k - 1, name), name);
    return checked_add(grow, opad[i] + 1, name) - checked_mul(2, pad[i], name);
  };
  int64_t OH = out_size(H, 0, KH), OW = out_size(W, 1, KW);
  TS_CHECK(OH > 0 && OW > 0, name, ": the output size ", OH, "x", OW, " is not positive");
  backend::ConvGeometry g = transposed_geometry(x, w, OH, OW, stride, pad, dil, groups);
  Tensor y = empty({N, Cout, OH, OW}, x.dtype());
  if (y.numel() > 0) {
    if (x.numel() == 0) fill_into(y, 0);
    else {
      trace::add_flops(conv_flops(g));
      backend::kernels(y).conv2d_bwd_data(g, x, w, y);
    }
  }
  if (b_in.defined()) y = add(y, b_in.detach().view({1, Cout, 1, 1})).detach();
  if (autograd::any_requires_grad({&x_in, &w_in, &b_in})) {
    TensorList outs{y};
    autograd::record(name, {x_in, w_in, b_in}, outs, [g, stride, pad, dil, groups](const VjpArgs& a) -> TensorList {
      check_no_create_graph("conv_transpose2d");
      if (recorder()) {  // being captured: the op
        TensorList r = convolution_backward(a.grads[0], a.saved[0], a.saved[1], stride, pad, pad, dil, groups, true);
        return {a.needs_grad(0) ? r[0] : Tensor(), a.needs_grad(1) ? r[1] : Tensor(), a.needs_grad(2) ? r[2] : Tensor()};
      }
      return conv_backward(g, true, a.grads[0], a.saved[0], a.saved[1], a.needs_grad(0), a.needs_grad(1), a.needs_grad(2));
    }, {0, 1});
  }
  TS_RETURN(y);
}

TensorList convolution_backward(const Tensor& grad, const Tensor& x, const Tensor& weight, IntArrayRef stride_v,
                                IntArrayRef padding_v, IntArrayRef padding_br_v, IntArrayRef dilation_v, int64_t groups,
                                bool transposed) {
  TS_OP_SCOPE(convolution_backward, &grad, &x, &weight);
  TS_OP_ATTRS({"stride", stride_v}, {"padding", padding_v}, {"padding_br", padding_br_v}, {"dilation", dilation_v},
              {"groups", groups}, {"transposed", transposed});
  const char* name = "convolution_backward";
  check_conv_args(name, x, weight, Tensor(), groups, 2, transposed);
  check_defined(grad, name, "grad");
  TS_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F64 || (x.dtype() == DType::BF16 && backend::kernels(x).native_bf16()),
           name, ": f32 or f64 (bf16 on CPUs with native bf16) only, got ", dtype_name(x.dtype()));
  auto stride = pair_of(stride_v, name, "stride"), pad = pair_of(padding_v, name, "padding");
  auto pad_br = pair_of(padding_br_v, name, "padding_br"), dil = pair_of(dilation_v, name, "dilation");
  for (int i = 0; i < 2; ++i)
    TS_CHECK(stride[i] > 0 && dil[i] > 0 && pad[i] >= 0 && pad_br[i] >= 0, name,
             ": stride and dilation must be positive and padding non-negative");
  Tensor xd = x.detach(), wd = weight.detach();
  TS_CHECK(grad.dim() == 4 && grad.dtype() == x.dtype(), name, ": grad must be a 4-D ", dtype_name(x.dtype()),
           " tensor, got ", dtype_name(grad.dtype()), " ", shape_str(grad.shape()));
  backend::ConvGeometry g = transposed ? transposed_geometry(xd, wd, grad.shape()[2], grad.shape()[3], stride, pad, dil, groups)
                                   : conv_geometry(xd, wd, stride, pad, pad_br, dil, groups);
  Shape expect = transposed ? Shape{g.N, g.C, g.H, g.W} : Shape{g.N, g.OC, g.OH, g.OW};
  TS_CHECK(IntArrayRef(grad.shape()).equals(expect), name, ": grad has shape ", shape_str(grad.shape()),
           " but the convolution's output has shape ", shape_str(expect));
  TS_RETURN(conv_backward(g, transposed, grad.detach(), xd, wd, true, true, true));
}

// ---- invokers (graph nodes run ops through these) ----
Conv2dOptions conv2d_options(const Attrs& a) {
  Conv2dOptions o;
  o.stride = a.ints("stride");
  o.padding = a.ints("padding");
  o.dilation = a.ints("dilation");
  o.groups = a.i("groups");
  o.padding_same = a.b("padding_same");
  return o;
}
TS_OP_INVOKER(conv2d) { return {conv2d(in[0], in[1], in[2], conv2d_options(a))}; }
TS_OP_INVOKER(fused_conv2d) {
  Conv2dOptions o = conv2d_options(a);
  return {fused_conv2d(in[0], in[1], in[2], in[3], o, a.s("activation"), a.i("input_block"), a.i("output_block"),
                       a.has("constant_weights") && a.b("constant_weights"))};
}
TS_OP_INVOKER(channel_blocks) {
  return {channel_blocks(in[0], a.i("block"))};
}
TS_OP_INVOKER(convolution_backward) {
  return convolution_backward(in[0], in[1], in[2], a.ints("stride"), a.ints("padding"), a.ints("padding_br"),
                              a.ints("dilation"), a.i("groups"), a.b("transposed"));
}
TS_OP_INVOKER(conv1d) {
  return {conv1d(in[0], in[1], in[2], a.i("stride"), a.i("padding"), a.i("dilation"), a.i("groups"),
                 a.b("padding_same"))};
}
TS_OP_INVOKER(conv_transpose2d) {
  return {conv_transpose2d(in[0], in[1], in[2], a.ints("stride"), a.ints("padding"), a.ints("output_padding"),
                           a.i("groups"), a.ints("dilation"))};
}

}  // namespace tessera::ops
