// Quantized weights: quantized_linear and dequantize_weight. The weight is a
// u8 tensor of packed rows plus its scale (and min) tensors; the format is an
// attribute (Note [Quantized weight formats] in backend/quant_format.h).
#include "ops/op_utils.h"
#include "tessera/autograd/node.h"
#include "tessera/ops/ops.h"

namespace tessera::ops {
namespace {

using backend::QFormat;

// The input dimension a packed row of `row_bytes` holds in format f.
int64_t cols_of(QFormat f, int64_t row_bytes) {
  if (qformat_is_block(f)) return row_bytes / qblock_bytes(f) * qblock_elems(f);
  return f == QFormat::Int8 ? row_bytes : row_bytes * 2;
}

// Validates the weight tensors against the format and returns them as the
// kernels read them.
backend::QuantWeight weight_of(const char* op, const Tensor& qweight, const Tensor& scales, const Tensor& mins,
                           QFormat f, int64_t group) {
  check_defined(qweight, op, "qweight");
  TS_CHECK(qweight.dtype() == DType::U8 && qweight.dim() == 2, op, ": qweight must be a 2-D u8 tensor of packed rows "
           "[out_features, bytes per row], got ", dtype_name(qweight.dtype()), " ", shape_str(qweight.shape()));
  TS_CHECK(qweight.is_contiguous(), op, ": qweight must be contiguous");
  const int64_t rows = qweight.size(0), rb = qweight.size(1), cols = cols_of(f, rb);
  TS_CHECK(qrow_bytes(f, cols) == rb && cols > 0, op, ": ", rb, " bytes per row is not a whole number of ",
           qformat_name(f), " blocks");
  if (f == QFormat::Int4) check_qshape(f, cols, group);
  const int64_t groups = f == QFormat::Int4 ? cols / group : 0;
  auto check_aux = [&](const Tensor& t, const char* arg, DType dt, const Shape& want) {
    TS_CHECK(t.defined() && t.dtype() == dt && IntArrayRef(t.shape()).equals(want) && t.is_contiguous(), op, ": ",
             qformat_name(f), " needs '", arg, "' as a contiguous ", dtype_name(dt), " tensor ", shape_str(want),
             ", got ", t.defined() ? dtype_name(t.dtype()) + (" " + shape_str(t.shape())) : std::string("none"));
  };
  if (f == QFormat::Int8) check_aux(scales, "scales", DType::F32, Shape{rows});
  if (f == QFormat::Int4) {
    check_aux(scales, "scales", DType::F16, Shape{rows, groups});
    check_aux(mins, "mins", DType::F16, Shape{rows, groups});
  }
  if (qformat_is_block(f))
    TS_CHECK(!scales.defined() && !mins.defined(), op, ": ", qformat_name(f),
             " keeps its scales inside the blocks; pass no scales or mins");
  if (f != QFormat::Int4) TS_CHECK(!mins.defined(), op, ": only int4 has mins");
  return {f, rows, cols, f == QFormat::Int4 ? group : 0, qweight, scales, mins};
}

QFormat format_of(const std::string& format) { return backend::qformat_from_name(format); }

bool act_int8(const std::string& activations, const char* op) {
  TS_CHECK(activations == "float" || activations == "int8", op, ": activations must be 'float' (weight-only) or "
           "'int8' (quantized per 32 values on the fly), got '", activations, "'");
  return activations == "int8";
}

}  // namespace

Tensor dequantize_weight(const Tensor& qweight, const Tensor& scales, const Tensor& mins, const std::string& format,
                         int64_t group) {
  TS_OP_SCOPE(dequantize_weight, &qweight, &scales, &mins);
  TS_OP_ATTRS({"format", format}, {"group", group});
  const backend::QuantWeight m = weight_of("dequantize_weight", qweight, scales, mins, format_of(format), group);
  Tensor w = empty({m.rows, m.cols}, DType::F32);
  backend::kernels(w).dequantize_weight(m, w);
  TS_RETURN(w);
}

Tensor quantized_linear(const Tensor& x, const Tensor& qweight, const Tensor& scales, const Tensor& mins,
                        const Tensor& bias, const std::string& format, int64_t group, const std::string& activations) {
  TS_OP_SCOPE(quantized_linear, &x, &qweight, &scales, &mins, &bias);
  TS_OP_ATTRS({"format", format}, {"group", group}, {"activations", activations});
  const char* op = "quantized_linear";
  const bool integer = act_int8(activations, op);
  const backend::QuantWeight m = weight_of(op, qweight, scales, mins, format_of(format), group);
  check_defined(x, op, "input");
  check_floating(x, op, "input");
  TS_CHECK(x.dim() >= 1 && x.shape().back() == m.cols, op, ": input ", shape_str(x.shape()), " must end in the "
           "weight's in_features ", m.cols);
  if (bias.defined())
    TS_CHECK(is_floating(bias.dtype()) && bias.dim() == 1 && bias.size(0) == m.rows, op, ": bias must be a float "
             "tensor [", m.rows, "], got ", dtype_name(bias.dtype()), " ", shape_str(bias.shape()));
  Shape out_shape = x.shape();
  out_shape.back() = m.rows;
  Tensor x2 = cast(x.detach(), DType::F32).contiguous().reshape({-1, m.cols});
  Tensor y = empty(out_shape, DType::F32);
  trace::add_flops(2 * x2.size(0) * m.rows * m.cols);
  backend::kernels(y).quantized_matmul(m, x2, y, integer);
  if (bias.defined()) y.add_(cast(bias.detach(), DType::F32));
  if (x.dtype() != DType::F32) y = cast(y, x.dtype());
  if (autograd::any_requires_grad({&x, &bias})) {
    // dx = dy @ W (the dequantized weight); the weight itself is not trained.
    TensorList outs{y};
    autograd::record("quantized_linear", {x, bias}, outs, [qweight, scales, mins, format, group,
                                                            has_bias = bias.defined()](const autograd::VjpArgs& a) {
      const Tensor& g = a.grads[0];
      Tensor w = dequantize_weight(qweight, scales, mins, format, group).to(g.dtype());
      Tensor gb = has_bias ? g.reshape({-1, g.shape().back()}).sum({0}) : Tensor();
      return TensorList{matmul(g, w), gb};
    });
    TS_RETURN(outs[0]);
  }
  TS_RETURN(y);
}

TS_OP_INVOKER(quantized_linear) {
  return {quantized_linear(in[0], in[1], in[2], in[3], in[4], a.s("format"), a.i("group"), a.s("activations"))};
}
TS_OP_INVOKER(dequantize_weight) { return {dequantize_weight(in[0], in[1], in[2], a.s("format"), a.i("group"))}; }

}  // namespace tessera::ops
