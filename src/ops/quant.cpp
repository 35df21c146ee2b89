// Quantized weights: quantized_linear and dequantize_weight. The weight is a
// u8 tensor of packed rows plus its scale (and min) tensors; the format is an
// attribute (Note [Quantized weight formats] in backend/cpu/quant.h).
#include "backend/cpu/kernel_table.h"
#include "backend/cpu/quant.h"
#include "ops/op_utils.h"
#include "tessera/autograd/node.h"
#include "tessera/core/parallel.h"
#include "tessera/ops/ops.h"

namespace tessera::ops {
namespace {

// The input dimension a packed row of `row_bytes` holds in format f.
int64_t cols_of(cpu::QFormat f, int64_t row_bytes) {
  if (cpu::qformat_is_block(f)) return row_bytes / cpu::qblock_bytes(f) * cpu::qblock_elems(f);
  return f == cpu::QFormat::Int8 ? row_bytes : row_bytes * 2;
}

// Validates the weight tensors against the format and returns the view the
// kernels read (the tensors must stay alive and contiguous while it is used).
cpu::QuantMatrix matrix_of(const char* op, const Tensor& qweight, const Tensor& scales, const Tensor& mins,
                           cpu::QFormat f, int64_t group) {
  check_defined(qweight, op, "qweight");
  TS_CHECK(qweight.dtype() == DType::U8 && qweight.dim() == 2, op, ": qweight must be a 2-D u8 tensor of packed rows "
           "[out_features, bytes per row], got ", dtype_name(qweight.dtype()), " ", shape_str(qweight.shape()));
  TS_CHECK(qweight.is_contiguous(), op, ": qweight must be contiguous");
  const int64_t rows = qweight.size(0), rb = qweight.size(1), cols = cols_of(f, rb);
  TS_CHECK(cpu::qrow_bytes(f, cols) == rb && cols > 0, op, ": ", rb, " bytes per row is not a whole number of ",
           cpu::qformat_name(f), " blocks");
  if (f == cpu::QFormat::Int4) cpu::check_qshape(f, cols, group);
  const int64_t groups = f == cpu::QFormat::Int4 ? cols / group : 0;
  auto check_aux = [&](const Tensor& t, const char* arg, DType dt, const Shape& want) {
    TS_CHECK(t.defined() && t.dtype() == dt && IntArrayRef(t.shape()).equals(want) && t.is_contiguous(), op, ": ",
             cpu::qformat_name(f), " needs '", arg, "' as a contiguous ", dtype_name(dt), " tensor ", shape_str(want),
             ", got ", t.defined() ? dtype_name(t.dtype()) + (" " + shape_str(t.shape())) : std::string("none"));
  };
  if (f == cpu::QFormat::Int8) check_aux(scales, "scales", DType::F32, Shape{rows});
  if (f == cpu::QFormat::Int4) {
    check_aux(scales, "scales", DType::F16, Shape{rows, groups});
    check_aux(mins, "mins", DType::F16, Shape{rows, groups});
  }
  if (cpu::qformat_is_block(f))
    TS_CHECK(!scales.defined() && !mins.defined(), op, ": ", cpu::qformat_name(f),
             " keeps its scales inside the blocks; pass no scales or mins");
  if (f != cpu::QFormat::Int4) TS_CHECK(!mins.defined(), op, ": only int4 has mins");
  cpu::QuantMatrix m;
  m.format = f;
  m.rows = rows;
  m.cols = cols;
  m.group = f == cpu::QFormat::Int4 ? group : 0;
  m.data = static_cast<const uint8_t*>(qweight.raw_data());
  m.scales = scales.defined() ? scales.raw_data() : nullptr;
  m.mins = mins.defined() ? mins.raw_data() : nullptr;
  return m;
}

cpu::QFormat format_of(const std::string& format) { return cpu::qformat_from_name(format); }

bool act_int8(const std::string& activations, const char* op) {
  TS_CHECK(activations == "float" || activations == "int8", op, ": activations must be 'float' (weight-only) or "
           "'int8' (quantized per 32 values on the fly), got '", activations, "'");
  return activations == "int8";
}

Tensor dequantize_matrix(const cpu::QuantMatrix& m) {
  Tensor w = empty({m.rows, m.cols}, DType::F32);
  auto* out = static_cast<float*>(w.raw_data());
  const auto& kt = cpu::kernels();
  parallel_for(0, m.rows, std::max<int64_t>(1, 16384 / m.cols), [&](int64_t r0, int64_t r1) {
    kt.qdequant_rows[static_cast<int>(m.format)](m, r0, r1, out + r0 * m.cols);
  });
  return w;
}

}  // namespace

Tensor dequantize_weight(const Tensor& qweight, const Tensor& scales, const Tensor& mins, const std::string& format,
                         int64_t group) {
  TS_OP_SCOPE(dequantize_weight, &qweight, &scales, &mins);
  TS_OP_ATTRS({"format", format}, {"group", group});
  cpu::QuantMatrix m = matrix_of("dequantize_weight", qweight, scales, mins, format_of(format), group);
  TS_RETURN(dequantize_matrix(m));
}

Tensor quantized_linear(const Tensor& x, const Tensor& qweight, const Tensor& scales, const Tensor& mins,
                        const Tensor& bias, const std::string& format, int64_t group, const std::string& activations) {
  TS_OP_SCOPE(quantized_linear, &x, &qweight, &scales, &mins, &bias);
  TS_OP_ATTRS({"format", format}, {"group", group}, {"activations", activations});
  const char* op = "quantized_linear";
  const bool integer = act_int8(activations, op);
  cpu::QuantMatrix m = matrix_of(op, qweight, scales, mins, format_of(format), group);
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
  cpu::qmatmul(m, static_cast<const float*>(x2.raw_data()), x2.size(0), static_cast<float*>(y.raw_data()), integer);
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
