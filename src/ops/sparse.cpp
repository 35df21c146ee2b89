// Sparse weights: sparse_linear over a CSR weight (backend/sparse_format.h).
#include "ops/op_utils.h"

namespace tessera::ops {

Tensor sparse_linear(const Tensor& x, const Tensor& values, const Tensor& col_idx, const Tensor& row_ptr,
                     const Tensor& bias, int64_t in_features) {
  TS_OP_SCOPE(sparse_linear, &x, &values, &col_idx, &row_ptr, &bias);
  TS_OP_ATTRS({"in_features", in_features});
  const char* op = "sparse_linear";
  for (auto [t, name] : {std::pair{&x, "input"}, {&values, "values"}, {&col_idx, "col_idx"}, {&row_ptr, "row_ptr"}})
    check_defined(*t, op, name);
  TS_CHECK(values.dtype() == DType::F32 && values.dim() == 1 && values.is_contiguous(), op,
           ": values must be a contiguous 1-D f32 tensor");
  TS_CHECK(col_idx.dtype() == DType::I32 && col_idx.dim() == 1 && col_idx.numel() == values.numel() &&
               col_idx.is_contiguous(),
           op, ": col_idx must be a contiguous 1-D i32 tensor with one index per value (", values.numel(), ")");
  TS_CHECK(row_ptr.dtype() == DType::I64 && row_ptr.dim() == 1 && row_ptr.numel() >= 2 && row_ptr.is_contiguous(),
           op, ": row_ptr must be a contiguous 1-D i64 tensor of out_features + 1 offsets");
  TS_CHECK(in_features > 0 && in_features <= INT32_MAX, op, ": in_features must be positive, got ", in_features);
  const int64_t rows = row_ptr.numel() - 1, nnz = values.numel();
  if (has_values(row_ptr) && has_values(col_idx)) {
    const auto* rp = row_ptr.data_ptr<int64_t>();
    const auto* ci = col_idx.data_ptr<int32_t>();
    TS_CHECK(rp[0] == 0 && rp[rows] == nnz, op, ": row_ptr must start at 0 and end at the number of values ", nnz,
             ", got ", rp[0], " and ", rp[rows]);
    for (int64_t r = 0; r < rows; ++r) TS_CHECK(rp[r] <= rp[r + 1], op, ": row_ptr decreases at row ", r);
    for (int64_t p = 0; p < nnz; ++p)
      TS_CHECK(ci[p] >= 0 && ci[p] < in_features, op, ": col_idx[", p, "] = ", ci[p], " is outside [0, ",
               in_features, ")");
  }
  check_floating(x, op, "input");
  TS_CHECK(x.dim() >= 1 && x.shape().back() == in_features, op, ": input ", shape_str(x.shape()), " must end in ",
           in_features);
  if (bias.defined())
    TS_CHECK(bias.dtype() == DType::F32 && bias.dim() == 1 && bias.size(0) == rows, op, ": bias must be f32 [", rows,
             "]");
  TS_CHECK(!autograd::any_requires_grad({&x, &values, &bias}), op, ": inference only (no gradient)");
  Tensor xc = cast(x, DType::F32).contiguous();
  Shape out = x.shape();
  out.back() = rows;
  Tensor y = empty(out, DType::F32);
  Tensor bc = bias.defined() ? bias.contiguous() : Tensor();
  trace::add_flops(2 * (xc.numel() / in_features) * nnz);
  backend::kernels(y).csr_linear(values, col_idx, row_ptr, in_features, xc, bc, y);
  TS_RETURN(y);
}

TS_OP_INVOKER(sparse_linear) { return {sparse_linear(in[0], in[1], in[2], in[3], in[4], a.i("in_features"))}; }

}  // namespace tessera::ops
