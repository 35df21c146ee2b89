// Static int8: per-tensor activation quantization and the int8 convolution and
// linear layer with requantizing epilogues (Int8Epilogue in backend/kernel_ids.h). These are the
// ops a post-training-quantized graph runs (quant/ptq.h).
#include <cmath>
#include <limits>

#include "ops/conv_params.h"
#include "ops/op_utils.h"
#include "tessera/autograd/node.h"

namespace tessera::ops {
namespace {

void check_scale(double scale, const char* op, const char* what) {
  TS_CHECK(std::isfinite(scale) && scale > 0 && scale < std::numeric_limits<float>::max(), op, ": ", what,
           " must be a positive finite number, got ", scale);
}

void check_zero_point(int64_t zp, DType t, const char* op, const char* what) {
  const int64_t lo = t == DType::U8 ? 0 : -128, hi = t == DType::U8 ? 255 : 127;
  TS_CHECK(zp >= lo && zp <= hi, op, ": ", what, " must lie in [", lo, ", ", hi, "] for ", dtype_name(t), ", got ",
           zp);
}

// The shared checks of the weight side and the epilogue; returns it (pointers
// into the tensors, which must stay alive while it is used; none on meta).
backend::Int8Epilogue epilogue_of(const char* op, DType x_dtype, const Tensor& w, const Tensor& w_scales, const Tensor& bias,
                              int64_t out_channels, double x_scale, int64_t x_zp, double y_scale, int64_t y_zp,
                              const std::string& activation, DType out_dtype) {
  check_defined(w, op, "weight");
  TS_CHECK(w.dtype() == DType::I8 && w.is_contiguous(), op, ": weight must be a contiguous i8 tensor, got ",
           dtype_name(w.dtype()), w.is_contiguous() ? "" : " (not contiguous)");
  TS_CHECK(w_scales.defined() && w_scales.dtype() == DType::F32 && w_scales.dim() == 1 &&
               w_scales.size(0) == out_channels && w_scales.is_contiguous(),
           op, ": w_scales must be a contiguous f32 tensor [", out_channels, "] (one per output channel), got ",
           w_scales.defined() ? std::string(dtype_name(w_scales.dtype())) + " " + shape_str(w_scales.shape()) : std::string("none"));
  const float* ws = has_values(w_scales) ? static_cast<const float*>(w_scales.raw_data()) : nullptr;
  for (int64_t i = 0; ws && i < out_channels; ++i)
    TS_CHECK(std::isfinite(ws[i]) && ws[i] > 0, op, ": w_scales[", i, "] must be positive and finite, got ", ws[i]);
  if (bias.defined())
    TS_CHECK(bias.dtype() == DType::F32 && bias.dim() == 1 && bias.size(0) == out_channels && bias.is_contiguous(), op,
             ": bias must be a contiguous f32 tensor [", out_channels, "], got ", dtype_name(bias.dtype()), " ",
             shape_str(bias.shape()));
  check_scale(x_scale, op, "x_scale");
  check_zero_point(x_zp, x_dtype, op, "x_zero_point");
  TS_CHECK(out_dtype == DType::U8 || out_dtype == DType::F32, op, ": out_dtype must be u8 or f32, got ",
           dtype_name(out_dtype));
  if (out_dtype == DType::U8) {
    check_scale(y_scale, op, "y_scale");
    check_zero_point(y_zp, DType::U8, op, "y_zero_point");
  }
  TS_CHECK(activation == "none" || activation == "relu", op, ": activation must be 'none' or 'relu', got '",
           activation, "'");
  backend::Int8Epilogue e;
  e.x_scale = static_cast<float>(x_scale);
  e.x_zero_point = static_cast<int32_t>(x_zp);
  e.x_s8 = x_dtype == DType::I8;
  e.w_scales = ws;
  e.bias = bias.defined() && has_values(bias) ? static_cast<const float*>(bias.raw_data()) : nullptr;
  e.act = activation == "relu" ? backend::Epilogue::Relu : backend::Epilogue::None;
  e.out_u8 = out_dtype == DType::U8;
  e.y_scale = static_cast<float>(y_scale);
  e.y_zero_point = static_cast<int32_t>(y_zp);
  return e;
}

}  // namespace

Tensor quantize_per_tensor(const Tensor& x, double scale, int64_t zero_point, DType dtype) {
  TS_OP_SCOPE(quantize_per_tensor, &x);
  TS_OP_ATTRS({"scale", scale}, {"zero_point", zero_point}, {"dtype", dtype});
  const char* op = "quantize_per_tensor";
  check_defined(x, op, "input");
  check_floating(x, op, "input");
  check_scale(scale, op, "scale");
  TS_CHECK(dtype == DType::U8 || dtype == DType::I8, op, ": dtype must be u8 or i8, got ", dtype_name(dtype));
  check_zero_point(zero_point, dtype, op, "zero_point");
  Tensor xf = cast(x.detach(), DType::F32).contiguous();
  Tensor q = empty(x.shape(), dtype);
  const float inv = static_cast<float>(1.0 / scale), zp = static_cast<float>(zero_point);
  const float lo = dtype == DType::U8 ? 0.0f : -128.0f, hi = dtype == DType::U8 ? 255.0f : 127.0f;
  const bool nan = backend::kernels(q).quantize_affine(xf, q, inv, zp, lo, hi);
  TS_CHECK(!nan, op, ": the input has NaN values, which int8 cannot represent");
  TS_RETURN(q);
}

Tensor dequantize_per_tensor(const Tensor& q, double scale, int64_t zero_point) {
  TS_OP_SCOPE(dequantize_per_tensor, &q);
  TS_OP_ATTRS({"scale", scale}, {"zero_point", zero_point});
  const char* op = "dequantize_per_tensor";
  check_defined(q, op, "input");
  TS_CHECK(q.dtype() == DType::U8 || q.dtype() == DType::I8, op, ": the input must be u8 or i8 codes, got ",
           dtype_name(q.dtype()));
  check_scale(scale, op, "scale");
  check_zero_point(zero_point, q.dtype(), op, "zero_point");
  Tensor qc = q.contiguous();
  Tensor y = empty(q.shape(), DType::F32);
  backend::kernels(y).dequantize_affine(qc, y, static_cast<float>(scale), static_cast<int32_t>(zero_point));
  TS_RETURN(y);
}

Tensor int8_conv2d(const Tensor& x, const Tensor& w, const Tensor& w_scales, const Tensor& bias,
                   const Conv2dOptions& o, double x_scale, int64_t x_zero_point, double y_scale, int64_t y_zero_point,
                   const std::string& activation, DType out_dtype) {
  TS_OP_SCOPE(int8_conv2d, &x, &w, &w_scales, &bias);
  TS_OP_ATTRS({"stride", o.stride}, {"padding", o.padding}, {"dilation", o.dilation}, {"groups", o.groups},
              {"padding_same", o.padding_same}, {"x_scale", x_scale}, {"x_zero_point", x_zero_point},
              {"y_scale", y_scale}, {"y_zero_point", y_zero_point}, {"activation", activation},
              {"out_dtype", out_dtype});
  const char* op = "int8_conv2d";
  check_defined(x, op, "input");
  TS_CHECK((x.dtype() == DType::U8 || x.dtype() == DType::I8) && x.dim() == 4, op,
           ": the input must be a 4-D u8 or i8 tensor [N, C, H, W], got ",
           dtype_name(x.dtype()), " ", shape_str(x.shape()));
  check_defined(w, op, "weight");
  TS_CHECK(w.dim() == 4, op, ": weight must be 4-D [OC, C/groups, KH, KW], got ", shape_str(w.shape()));
  TS_CHECK(o.groups >= 1 && x.size(1) == w.size(1) * o.groups && w.size(0) % o.groups == 0, op, ": input ",
           shape_str(x.shape()), " with ", o.groups, " groups does not match weight ", shape_str(w.shape()));
  const int64_t OC = w.size(0);
  backend::Int8Epilogue e = epilogue_of(op, x.dtype(), w, w_scales, bias, OC, x_scale, x_zero_point, y_scale, y_zero_point,
                                    activation, out_dtype);
  Conv2dParams p = conv2d_params(w, o, op);
  backend::ConvGeometry g = conv_geometry(x.shape(), DType::U8, w, p.stride, p.tl, p.br, p.dil, o.groups);
  TS_CHECK(g.OH > 0 && g.OW > 0, op, ": input ", shape_str(x.shape()), " is smaller than the kernel ",
           shape_str(w.shape()), " after padding");
  // [N, H, W, C] memory, read in place when it already is.
  Tensor xl = is_channels_last(x) ? x : x.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
  Tensor y = empty({g.N, g.OH, g.OW, OC}, out_dtype);
  trace::add_flops(2 * g.N * OC * g.OH * g.OW * (g.C / g.groups) * g.KH * g.KW);
  if (y.numel() > 0) backend::kernels(y).int8_conv2d(g, xl, w, e, y);
  TS_RETURN(y.permute({0, 3, 1, 2}));
}

Tensor int8_linear(const Tensor& x, const Tensor& w, const Tensor& w_scales, const Tensor& bias, double x_scale,
                   int64_t x_zero_point, double y_scale, int64_t y_zero_point, const std::string& activation,
                   DType out_dtype) {
  TS_OP_SCOPE(int8_linear, &x, &w, &w_scales, &bias);
  TS_OP_ATTRS({"x_scale", x_scale}, {"x_zero_point", x_zero_point}, {"y_scale", y_scale},
              {"y_zero_point", y_zero_point}, {"activation", activation}, {"out_dtype", out_dtype});
  const char* op = "int8_linear";
  check_defined(x, op, "input");
  check_defined(w, op, "weight");
  TS_CHECK(w.dim() == 2, op, ": weight must be 2-D [out_features, in_features], got ", shape_str(w.shape()));
  TS_CHECK((x.dtype() == DType::U8 || x.dtype() == DType::I8) && x.dim() >= 1 && x.shape().back() == w.size(1), op,
           ": the input must be u8 or i8 "
           "[..., ", w.size(1), "], got ", dtype_name(x.dtype()), " ", shape_str(x.shape()));
  const int64_t N = w.size(0), K = w.size(1);
  backend::Int8Epilogue e = epilogue_of(op, x.dtype(), w, w_scales, bias, N, x_scale, x_zero_point, y_scale, y_zero_point,
                                    activation, out_dtype);
  Tensor xc = x.contiguous();
  const int64_t M = K ? xc.numel() / K : 0;
  Shape out_shape = x.shape();
  out_shape.back() = N;
  Tensor y = empty(out_shape, out_dtype);
  trace::add_flops(2 * M * N * K);
  backend::kernels(y).int8_linear(xc, w, e, y);
  TS_RETURN(y);
}

Tensor fake_quantize(const Tensor& x, const Tensor& scale, const Tensor& zero_point, int64_t axis, int64_t quant_min,
                     int64_t quant_max) {
  TS_OP_SCOPE(fake_quantize, &x, &scale, &zero_point);
  TS_OP_ATTRS({"axis", axis}, {"quant_min", quant_min}, {"quant_max", quant_max});
  const char* op = "fake_quantize";
  check_defined(x, op, "input");
  check_floating(x, op, "input");
  TS_CHECK(quant_min < quant_max && quant_min >= -128 && quant_max <= 255, op, ": [quant_min, quant_max] must be an "
           "int8 or uint8 range, got [", quant_min, ", ", quant_max, "]");
  TS_CHECK(scale.defined() && scale.dtype() == DType::F32 && scale.dim() <= 1, op, ": scale must be an f32 scalar "
           "or 1-D tensor");
  TS_CHECK(zero_point.defined() && zero_point.dtype() == DType::F32 && zero_point.numel() == scale.numel(), op,
           ": zero_point must be f32 with as many values as scale (", scale.numel(), ")");
  const bool per_channel = scale.numel() != 1;
  Shape b(x.dim(), 1);
  if (per_channel) {
    const int64_t ax = axis < 0 ? axis + x.dim() : axis;
    TS_CHECK(ax >= 0 && ax < x.dim() && x.size(ax) == scale.numel(), op, ": ", scale.numel(), " scales need axis ",
             axis, " of input ", shape_str(x.shape()), " to have that size");
    b[ax] = scale.numel();
  }
  const double qmin = static_cast<double>(quant_min), qmax = static_cast<double>(quant_max);
  Tensor xd = x.detach(), s = scale.detach().reshape(b), z = zero_point.detach().reshape(b);
  Tensor y;
  {
    NoGradGuard ng;
    Tensor inv = reciprocal(s);
    y = mul(sub(clamp(add(round(mul(xd, inv)), z), qmin, qmax), z), s);
    if (y.dtype() != x.dtype()) y = cast(y, x.dtype());
  }
  if (!autograd::any_requires_grad({&x, &scale})) TS_RETURN(y);
  TensorList outs{y};
  const bool learn = scale.requires_grad();
  const Shape scale_shape = scale.shape();
  autograd::record("fake_quantize", {x, scale}, outs, [xd, s, z, qmin, qmax, learn, b, scale_shape,
                                                       per_channel](const autograd::VjpArgs& a) {
    const Tensor& g = a.grads[0];
    Tensor xs = mul(xd, reciprocal(s)), r = round(xs), qu = add(r, z);
    Tensor inside = logical_and(ge(qu, qmin), le(qu, qmax));
    Tensor dx = where(inside, g, 0.0);
    Tensor ds;
    if (learn) {
      Tensor e = where(inside, sub(r, xs), sub(clamp(qu, qmin, qmax), z));
      std::vector<int64_t> dims;
      for (int64_t d = 0; d < g.dim(); ++d)
        if (!per_channel || b[d] == 1) dims.push_back(d);
      const double per_scale = static_cast<double>(g.numel()) / static_cast<double>(s.numel());
      ds = mul(sum(mul(g, e), dims), 1.0 / std::sqrt(per_scale * qmax)).reshape(scale_shape);
    }
    return TensorList{dx, ds};
  });
  TS_RETURN(outs[0]);
}

TS_OP_INVOKER(fake_quantize) {
  return {fake_quantize(in[0], in[1], in[2], a.i("axis"), a.i("quant_min"), a.i("quant_max"))};
}
TS_OP_INVOKER(quantize_per_tensor) {
  return {quantize_per_tensor(in[0], a.f("scale"), a.i("zero_point"), a.dtype("dtype"))};
}
TS_OP_INVOKER(dequantize_per_tensor) { return {dequantize_per_tensor(in[0], a.f("scale"), a.i("zero_point"))}; }
TS_OP_INVOKER(int8_conv2d) {
  return {int8_conv2d(in[0], in[1], in[2], in[3], conv2d_options(a), a.f("x_scale"), a.i("x_zero_point"),
                      a.f("y_scale"), a.i("y_zero_point"), a.s("activation"), a.dtype("out_dtype"))};
}
TS_OP_INVOKER(int8_linear) {
  return {int8_linear(in[0], in[1], in[2], in[3], a.f("x_scale"), a.i("x_zero_point"), a.f("y_scale"),
                      a.i("y_zero_point"), a.s("activation"), a.dtype("out_dtype"))};
}

}  // namespace tessera::ops
