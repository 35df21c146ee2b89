// Pooling and resizing. Max pooling's gradient is a scatter-add at the saved
// indices, average pooling has an explicit backward op (itself differentiable),
// and adaptive pooling and interpolation are products with small resampling
// matrices, so every gradient here is differentiable again.
#include <algorithm>
#include <cmath>

#include "ops/autocast_policy.h"
#include "ops/op_utils.h"

namespace tessera::ops {
namespace {

std::vector<int64_t> two(IntArrayRef v, std::vector<int64_t> dflt, const char* op, const char* what) {
  if (v.empty()) return dflt;
  TS_CHECK(v.size() == 1 || v.size() == 2, op, ": ", what, " must have 1 or 2 values, got ", shape_str(v));
  return v.size() == 1 ? std::vector<int64_t>{v[0], v[0]} : std::vector<int64_t>{v[0], v[1]};
}

int64_t pooled_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  int64_t out = window_output_size(in, checked_mul(2, p, "pool"), k, d, s, ceil_mode, "pool");
  // A window may not start in the right padding (PyTorch's ceil_mode rule).
  int64_t last_start;
  if (ceil_mode && out > 0 && (__builtin_mul_overflow(out - 1, s, &last_start) || last_start >= in + p)) --out;
  return out;
}

struct Pool {
  backend::PoolGeometry g;
  Shape out_shape;
  Tensor x;  // contiguous input
};

// The geometry of pooling an input of `in_shape` ([C, H, W] or [N, C, H, W]);
// out_shape receives the output's shape.
backend::PoolGeometry pool_geometry(IntArrayRef in_shape, DType dtype, IntArrayRef kernel, IntArrayRef stride_v,
                                IntArrayRef padding_v, IntArrayRef dilation_v, bool ceil_mode, const char* op,
                                Shape& out_shape) {
  TS_CHECK(in_shape.size() == 3 || in_shape.size() == 4, op,
           ": expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape ", shape_str(in_shape));
  auto k = two(kernel, {}, op, "kernel_size");
  TS_CHECK(!k.empty(), op, ": kernel_size is required");
  auto s = two(stride_v, k, op, "stride");
  auto p = two(padding_v, {0, 0}, op, "padding");
  auto d = two(dilation_v, {1, 1}, op, "dilation");
  for (int i = 0; i < 2; ++i) {
    TS_CHECK(k[i] > 0 && s[i] > 0 && d[i] > 0, op, ": kernel_size, stride and dilation must be positive");
    TS_CHECK(p[i] >= 0 && p[i] <= k[i] / 2, op, ": padding ", p[i], " should be at most half of the kernel size ", k[i]);
  }
  size_t nd = in_shape.size();
  int64_t H = in_shape[nd - 2], W = in_shape[nd - 1];
  int64_t OH = pooled_size(H, k[0], s[0], p[0], d[0], ceil_mode), OW = pooled_size(W, k[1], s[1], p[1], d[1], ceil_mode);
  TS_CHECK(OH > 0 && OW > 0, op, ": the input of size ", H, "x", W, " is too small for the kernel (output ", OH, "x",
           OW, ")");
  out_shape = in_shape.shape();
  out_shape[nd - 2] = OH;
  out_shape[nd - 1] = OW;
  return {numel_of(in_shape) / std::max<int64_t>(H * W, 1), H, W, OH, OW, k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1],
          true, dtype};
}

Pool make_pool(const Tensor& x_in, IntArrayRef kernel, IntArrayRef stride_v, IntArrayRef padding_v, IntArrayRef dilation_v,
               bool ceil_mode, const char* op) {
  check_defined(x_in, op, "input");
  check_floating(x_in, op, "input");
  Pool r;
  r.g = pool_geometry(x_in.shape(), x_in.dtype(), kernel, stride_v, padding_v, dilation_v, ceil_mode, op, r.out_shape);
  r.x = x_in.detach().contiguous();
  return r;
}

Tensor avg_pool2d_adjoint(const Tensor& g, const backend::PoolGeometry& geo, const Shape& in_shape);

Tensor avg_pool2d_apply(const Tensor& x_in, const backend::PoolGeometry& geo, const Shape& out_shape) {
  Tensor x = x_in.detach().contiguous();
  Tensor y = empty(out_shape, x.dtype());
  backend::kernels(y).avg_pool2d_fwd(geo, x, y);
  if (autograd::any_requires_grad({&x_in})) {
    TensorList outs{y};
    Shape in_shape = x_in.shape();
    autograd::record("avg_pool2d", {x_in}, outs, [geo, in_shape](const VjpArgs& a) -> TensorList {
      if (recorder() && !GradMode::is_enabled()) {  // being captured: the op
        // ceil_mode is whichever rounding gives the forward's output size.
        bool ceil_mode = pooled_size(geo.H, geo.kh, geo.sh, geo.ph, 1, false) != geo.OH ||
                         pooled_size(geo.W, geo.kw, geo.sw, geo.pw, 1, false) != geo.OW;
        return {avg_pool2d_backward(a.grads[0], in_shape, {geo.kh, geo.kw}, {geo.sh, geo.sw}, {geo.ph, geo.pw},
                                    ceil_mode, geo.count_include_pad)};
      }
      return {avg_pool2d_adjoint(a.grads[0], geo, in_shape)};
    });
  }
  return y;
}

// The adjoint of average pooling; its own gradient is average pooling again.
Tensor avg_pool2d_adjoint(const Tensor& g_in, const backend::PoolGeometry& geo, const Shape& in_shape) {
  Tensor g = g_in.detach().contiguous();
  Tensor gx = empty(in_shape, g.dtype());
  backend::kernels(gx).avg_pool2d_bwd(geo, g, gx);
  if (autograd::any_requires_grad({&g_in})) {
    TensorList outs{gx};
    Shape out_shape = g_in.shape();
    autograd::record("avg_pool2d_backward", {g_in}, outs, [geo, out_shape](const VjpArgs& a) -> TensorList {
      return {avg_pool2d_apply(a.grads[0], geo, out_shape)};
    });
  }
  return gx;
}

// Row-stochastic [out, in] matrix averaging adaptive bins.
Tensor adaptive_matrix(int64_t in, int64_t out, DType dt) {
  Tensor m = zeros({out, in}, TensorOptions(DType::F64, Device::cpu()));  // from sizes: made on the CPU
  double* p = m.data_ptr<double>();
  for (int64_t i = 0; i < out; ++i) {
    int64_t s = (i * in) / out, e = ((i + 1) * in + out - 1) / out;
    for (int64_t j = s; j < e; ++j) p[i * in + j] = 1.0 / static_cast<double>(e - s);
  }
  return m.to(dt).to(current_device());
}

// [out, in] linear-interpolation matrix (PyTorch's bilinear coordinate rule).
Tensor linear_matrix(int64_t in, int64_t out, bool align_corners, std::optional<double> scale, DType dt) {
  Tensor m = zeros({out, in}, TensorOptions(DType::F64, Device::cpu()));  // from sizes: made on the CPU
  double* p = m.data_ptr<double>();
  for (int64_t i = 0; i < out; ++i) {
    double src;
    if (align_corners) src = out > 1 ? static_cast<double>(i) * static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
    else {
      double r = scale ? 1.0 / *scale : static_cast<double>(in) / static_cast<double>(out);
      src = std::max(0.0, (static_cast<double>(i) + 0.5) * r - 0.5);
    }
    int64_t i0 = std::min<int64_t>(static_cast<int64_t>(std::floor(src)), in - 1);
    int64_t i1 = std::min<int64_t>(i0 + 1, in - 1);
    double l = src - static_cast<double>(i0);
    p[i * in + i0] += 1.0 - l;
    p[i * in + i1] += l;
  }
  return m.to(dt).to(current_device());
}

Tensor nearest_index(int64_t in, int64_t out, std::optional<double> scale) {
  Tensor idx = empty({out}, TensorOptions(DType::I64, Device::cpu()));  // its size checked like any tensor's
  int64_t* p = idx.data_ptr<int64_t>();
  double r = scale ? 1.0 / *scale : static_cast<double>(in) / static_cast<double>(out);
  for (int64_t i = 0; i < out; ++i)
    p[i] = std::min<int64_t>(saturating_int64(std::floor(static_cast<double>(i) * r)), in - 1);
  return idx.to(current_device());
}

}  // namespace

std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x_in, IntArrayRef kernel, IntArrayRef stride,
                                                   IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) {
  TS_OP_SCOPE(max_pool2d, &x_in);
  TS_OP_ATTRS({"kernel_size", kernel}, {"stride", stride}, {"padding", padding}, {"dilation", dilation},
              {"ceil_mode", ceil_mode}, {"return_indices", true});
  Pool p = make_pool(x_in, kernel, stride, padding, dilation, ceil_mode, "max_pool2d");
  Tensor y = empty(p.out_shape, p.x.dtype());
  Tensor idx = empty(p.out_shape, DType::I64);
  backend::kernels(y).max_pool2d_fwd(p.g, p.x, y, idx);
  if (autograd::any_requires_grad({&x_in})) {
    TensorList outs{y};
    Shape in_shape = x_in.shape();
    backend::PoolGeometry geom = p.g;
    autograd::record("max_pool2d", {x_in}, outs, [in_shape, geom](const VjpArgs& a) -> TensorList {
      const Tensor& g = a.grads[0];
      const Tensor& idx = a.saved[0];
      if (!GradMode::is_enabled() && recorder()) return {max_pool2d_backward(g, idx, in_shape)};  // being captured
      if (!GradMode::is_enabled() && g.dtype() == geom.dtype) {  // the fast kernel, unless recording
        Tensor gc = g.contiguous();
        Tensor gx = empty(in_shape, g.dtype());
        backend::kernels(gx).max_pool2d_bwd(geom, gc, idx, gx);
        return {gx};
      }
      int64_t nd = static_cast<int64_t>(in_shape.size());
      Shape flat_in(in_shape.begin(), in_shape.end() - 2), flat_out(flat_in);
      flat_in.push_back(in_shape[nd - 2] * in_shape[nd - 1]);
      flat_out.push_back(-1);
      Tensor gx = scatter_add(zeros(flat_in, g.dtype()), -1, idx.reshape(flat_out), g.reshape(flat_out));
      return {gx.reshape(in_shape)};
    }, {}, {}, {idx});
  }
  TS_RETURN(std::tuple<Tensor, Tensor>{y, idx});
}

Tensor max_pool2d(const Tensor& x, IntArrayRef kernel, IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation,
                  bool ceil_mode, int64_t channel_block) {
  TS_OP_SCOPE(max_pool2d, &x);
  TS_OP_ATTRS({"kernel_size", kernel}, {"stride", stride}, {"padding", padding}, {"dilation", dilation},
              {"ceil_mode", ceil_mode}, {"return_indices", false}, {"channel_block", channel_block});
  if (channel_block != 0) {
    const int64_t b = channel_block;
    TS_CHECK(b == 8 || b == 16, "max_pool2d: channel_block must be 0 (NCHW), 8 or 16, got ", b);
    check_defined(x, "max_pool2d", "input");
    TS_CHECK(x.dim() == 5 && x.shape()[4] == b, "max_pool2d: a channel-blocked input is [N, C/", b, ", H, W, ", b,
             "], got ", shape_str(x.shape()));
    if (autograd::any_requires_grad({&x}) || !is_floating(x.dtype()))  // the plain op between conversions
      TS_RETURN(channel_blocks(max_pool2d(channel_blocks(x, b), kernel, stride, padding, dilation, ceil_mode), b));
    // Blocked planes [N * C/b, H, W, b]: the geometry of the NCHW planes.
    Shape s = x.shape(), planes_out;
    backend::PoolGeometry g = pool_geometry(Shape{s[0] * s[1], s[2], s[3]}, x.dtype(), kernel, stride, padding, dilation,
                                        ceil_mode, "max_pool2d", planes_out);
    g.lanes = b;
    Tensor y = empty({s[0], s[1], g.OH, g.OW, b}, x.dtype());
    Tensor xc = x.detach().contiguous();
    backend::kernels(y).max_pool2d_fwd(g, xc, y, Tensor());
    TS_RETURN(y);
  }
  check_defined(x, "max_pool2d", "input");
  const bool codes = x.dtype() == DType::U8 || x.dtype() == DType::I8;
  if (codes || (is_channels_last(x) && !x.is_contiguous() && !autograd::any_requires_grad({&x}))) {
    // int8 codes (an int8 graph pools its activations without dequantizing
    // them), and channels-last inputs, pooled in their own layout: planes of
    // [H, W, C] (NCHW u8 codes go through the same kernel with one lane).
    Shape planes_out;
    backend::PoolGeometry g = pool_geometry(x.shape(), x.dtype(), kernel, stride, padding, dilation, ceil_mode,
                                        "max_pool2d", planes_out);
    if (x.dim() == 4 && is_channels_last(x)) {
      const int64_t N = x.shape()[0], C = x.shape()[1];
      g.planes = N;
      g.lanes = C;
      Tensor xc = x.detach().permute({0, 2, 3, 1}).contiguous();
      Tensor y = empty({N, g.OH, g.OW, C}, x.dtype());
      backend::kernels(y).max_pool2d_fwd(g, xc, y, Tensor());
      TS_RETURN(y.permute({0, 3, 1, 2}));
    }
    Tensor xc = x.contiguous();
    Tensor y = empty(planes_out, x.dtype());
    backend::kernels(y).max_pool2d_fwd(g, xc, y, Tensor());
    TS_RETURN(y);
  }
  if (!autograd::any_requires_grad({&x})) {  // no backward: no argmax to keep (the vectorized kernel)
    Pool p = make_pool(x, kernel, stride, padding, dilation, ceil_mode, "max_pool2d");
    Tensor y = empty(p.out_shape, p.x.dtype());
    backend::kernels(y).max_pool2d_fwd(p.g, p.x, y, Tensor());
    TS_RETURN(y);
  }
  TS_RETURN(std::get<0>(max_pool2d_with_indices(x, kernel, stride, padding, dilation, ceil_mode)));
}

Tensor avg_pool2d(const Tensor& x, IntArrayRef kernel, IntArrayRef stride, IntArrayRef padding, bool ceil_mode,
                  bool count_include_pad) {
  TS_OP_SCOPE(avg_pool2d, &x);
  TS_OP_ATTRS({"kernel_size", kernel}, {"stride", stride}, {"padding", padding}, {"ceil_mode", ceil_mode}, {"count_include_pad", count_include_pad});
  Pool p = make_pool(x, kernel, stride, padding, {1, 1}, ceil_mode, "avg_pool2d");
  p.g.count_include_pad = count_include_pad;
  TS_RETURN(avg_pool2d_apply(x, p.g, p.out_shape));
}

Tensor adaptive_avg_pool2d(const Tensor& x, IntArrayRef output_size) {
  TS_OP_SCOPE(adaptive_avg_pool2d, &x);
  TS_OP_ATTRS({"output_size", output_size});
  // Averages by products with a weight matrix: in f32, never lowered by autocast.
  TS_AUTOCAST(adaptive_avg_pool2d, [&](const auto& cast) { return adaptive_avg_pool2d(cast(x), output_size); });
  check_defined(x, "adaptive_avg_pool2d", "input");
  TS_CHECK(x.dim() == 3 || x.dim() == 4, "adaptive_avg_pool2d: expected a 3-D or 4-D input, got shape ",
           shape_str(x.shape()));
  check_floating(x, "adaptive_avg_pool2d", "input");
  auto o = two(output_size, {}, "adaptive_avg_pool2d", "output_size");
  TS_CHECK(o.size() == 2 && o[0] > 0 && o[1] > 0, "adaptive_avg_pool2d: output_size must be positive, got ",
           shape_str(output_size));
  int64_t H = x.shape()[x.dim() - 2], W = x.shape()[x.dim() - 1];
  TS_CHECK(H > 0 && W > 0, "adaptive_avg_pool2d: the input's spatial size ", H, "x", W, " must be non-empty");
  Tensor mh = adaptive_matrix(H, o[0], x.dtype()), mw = adaptive_matrix(W, o[1], x.dtype());
  TS_RETURN(matmul(matmul(mh, x), mw.t()));
}

Tensor interpolate(const Tensor& x, IntArrayRef size, std::vector<double> scale_factor, const std::string& mode,
                   bool align_corners) {
  TS_OP_SCOPE(interpolate, &x);
  TS_OP_ATTRS({"size", size}, {"scale_factor", scale_factor}, {"mode", mode}, {"align_corners", align_corners});
  // Interpolates by products with a weight matrix: in f32, never lowered by autocast.
  TS_AUTOCAST(interpolate, [&](const auto& cast) { return interpolate(cast(x), size, scale_factor, mode, align_corners); });
  check_defined(x, "interpolate", "input");
  check_floating(x, "interpolate", "input");
  TS_CHECK(mode == "nearest" || mode == "bilinear", "interpolate: mode must be 'nearest' or 'bilinear', got '", mode, "'");
  int64_t spatial = x.dim() - 2;
  TS_CHECK(spatial >= 1 && spatial <= 2, "interpolate: expected a 3-D [N, C, L] or 4-D [N, C, H, W] input, got shape ",
           shape_str(x.shape()));
  TS_CHECK(mode != "bilinear" || spatial == 2, "interpolate: bilinear mode needs a 4-D input, got shape ",
           shape_str(x.shape()));
  TS_CHECK(size.empty() != scale_factor.empty(), "interpolate: give exactly one of size and scale_factor");
  TS_CHECK(!(mode == "nearest" && align_corners), "interpolate: align_corners applies only to bilinear mode");
  std::vector<int64_t> out(spatial);
  std::vector<std::optional<double>> scales(spatial);
  for (int64_t i = 0; i < spatial; ++i) {
    int64_t in = x.shape()[2 + i];
    if (!size.empty()) {
      TS_CHECK(static_cast<int64_t>(size.size()) == spatial || size.size() == 1, "interpolate: size ", shape_str(size),
               " must have ", spatial, " values");
      out[i] = size.size() == 1 ? size[0] : size[i];
    } else {
      TS_CHECK(static_cast<int64_t>(scale_factor.size()) == spatial || scale_factor.size() == 1,
               "interpolate: scale_factor must have ", spatial, " values");
      double sf = scale_factor.size() == 1 ? scale_factor[0] : scale_factor[i];
      TS_CHECK(sf > 0 && std::isfinite(sf), "interpolate: scale_factor must be positive and finite, got ", sf);
      const double o = std::floor(static_cast<double>(in) * sf);
      TS_CHECK(o < 0x1p62, "interpolate: scale_factor ", sf, " makes an output size of ", o, " from ", in);
      out[i] = static_cast<int64_t>(o);
      scales[i] = sf;
    }
    TS_CHECK(out[i] > 0, "interpolate: the output size must be positive, got ", out[i]);
    TS_CHECK(in > 0, "interpolate: the input's spatial size must be non-empty, got shape ", shape_str(x.shape()));
  }
  if (mode == "nearest") {
    Tensor r = x;
    for (int64_t i = 0; i < spatial; ++i) r = index_select(r, 2 + i, nearest_index(x.shape()[2 + i], out[i], scales[i]));
    TS_RETURN(r);
  }
  Tensor mh = linear_matrix(x.shape()[2], out[0], align_corners, scales[0], x.dtype());
  Tensor mw = linear_matrix(x.shape()[3], out[1], align_corners, scales[1], x.dtype());
  TS_RETURN(matmul(matmul(mh, x), mw.t()));
}

Tensor max_pool2d_backward(const Tensor& grad, const Tensor& indices, IntArrayRef input_size) {
  TS_OP_SCOPE(max_pool2d_backward, &grad, &indices);
  TS_OP_ATTRS({"input_size", input_size});
  const char* name = "max_pool2d_backward";
  check_defined(grad, name, "grad");
  check_defined(indices, name, "indices");
  check_floating(grad, name, "grad");
  TS_CHECK(indices.dtype() == DType::I64 && IntArrayRef(indices.shape()).equals(grad.shape()), name,
           ": indices must be i64 of the grad's shape ", shape_str(grad.shape()), ", got ", dtype_name(indices.dtype()),
           " ", shape_str(indices.shape()));
  size_t nd = input_size.size();
  TS_CHECK((nd == 3 || nd == 4) && grad.dim() == static_cast<int64_t>(nd), name, ": input_size ",
           shape_str(input_size), " and grad ", shape_str(grad.shape()), " must both be 3-D or 4-D");
  for (size_t i = 0; i + 2 < nd; ++i)
    TS_CHECK(input_size[i] == grad.shape()[i], name, ": input_size ", shape_str(input_size),
             " and grad ", shape_str(grad.shape()), " differ in the leading dimensions");
  backend::PoolGeometry g{};
  g.H = input_size[nd - 2], g.W = input_size[nd - 1];
  g.OH = grad.shape()[nd - 2], g.OW = grad.shape()[nd - 1];
  g.planes = numel_of(input_size) / std::max<int64_t>(g.H * g.W, 1);
  g.dtype = grad.dtype();
  Tensor idx = indices.detach().contiguous(), gc = grad.detach().contiguous();
  if (idx.numel() > 0 && has_values(idx)) {
    const int64_t* ip = idx.data_ptr<int64_t>();
    auto [lo, hi] = std::minmax_element(ip, ip + idx.numel());
    TS_CHECK(*lo >= -1 && *hi < g.H * g.W, name, ": index ", *lo < -1 ? *lo : *hi, " is outside the ", g.H, "x", g.W,
             " input plane");
  }
  Tensor gx = empty(input_size, grad.dtype());
  backend::kernels(gx).max_pool2d_bwd(g, gc, idx, gx);
  TS_RETURN(gx);
}

Tensor avg_pool2d_backward(const Tensor& grad, IntArrayRef input_size, IntArrayRef kernel, IntArrayRef stride,
                           IntArrayRef padding, bool ceil_mode, bool count_include_pad) {
  TS_OP_SCOPE(avg_pool2d_backward, &grad);
  TS_OP_ATTRS({"input_size", input_size}, {"kernel_size", kernel}, {"stride", stride}, {"padding", padding},
              {"ceil_mode", ceil_mode}, {"count_include_pad", count_include_pad});
  const char* name = "avg_pool2d_backward";
  check_defined(grad, name, "grad");
  check_floating(grad, name, "grad");
  Shape out_shape;
  backend::PoolGeometry g = pool_geometry(input_size, grad.dtype(), kernel, stride, padding, {1, 1}, ceil_mode, name, out_shape);
  g.count_include_pad = count_include_pad;
  TS_CHECK(IntArrayRef(grad.shape()).equals(out_shape), name, ": grad has shape ", shape_str(grad.shape()),
           " but pooling an input of size ", shape_str(input_size), " gives ", shape_str(out_shape));
  TS_RETURN(avg_pool2d_adjoint(grad.detach(), g, input_size.shape()));
}

// ---- invokers (graph nodes run ops through these) ----
// max_pool2d: "return_indices" tells the (values, indices) form from the plain one.
TS_OP_INVOKER(max_pool2d) {
  if (a.b("return_indices")) {
    auto [y, idx] = max_pool2d_with_indices(in[0], a.ints("kernel_size"), a.ints("stride"), a.ints("padding"),
                                            a.ints("dilation"), a.b("ceil_mode"));
    return {y, idx};
  }
  return {max_pool2d(in[0], a.ints("kernel_size"), a.ints("stride"), a.ints("padding"), a.ints("dilation"),
                     a.b("ceil_mode"), a.has("channel_block") ? a.i("channel_block") : 0)};
}
TS_OP_INVOKER(avg_pool2d) {
  return {avg_pool2d(in[0], a.ints("kernel_size"), a.ints("stride"), a.ints("padding"), a.b("ceil_mode"),
                     a.b("count_include_pad"))};
}
TS_OP_INVOKER(max_pool2d_backward) { return {max_pool2d_backward(in[0], in[1], a.ints("input_size"))}; }
TS_OP_INVOKER(avg_pool2d_backward) {
  return {avg_pool2d_backward(in[0], a.ints("input_size"), a.ints("kernel_size"), a.ints("stride"), a.ints("padding"),
                              a.b("ceil_mode"), a.b("count_include_pad"))};
}
TS_OP_INVOKER(adaptive_avg_pool2d) { return {adaptive_avg_pool2d(in[0], a.ints("output_size"))}; }
TS_OP_INVOKER(interpolate) {
  return {interpolate(in[0], a.ints("size"), a.floats("scale_factor"), a.s("mode"), a.b("align_corners"))};
}

}  // namespace tessera::ops
