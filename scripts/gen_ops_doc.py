#!/usr/bin/env python3
"""Writes docs/ops.md from src/ops/ops.def (names, families, backward support)
plus the dtype rules and notes below. Run after adding an op:
    python3 scripts/gen_ops_doc.py
"""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
src = "\n".join(l for l in (ROOT / "src/ops/ops.def").read_text().splitlines() if not l.lstrip().startswith("//"))
rows = re.findall(r"OP\((\w+),\s*(\w+),\s*(\w+),", src)  # name, family, grad: the first three columns

F = "f16, bf16, f32, f64"
ALL = "bool, u8, i8, i32, i64, f16, bf16, f32, f64"
NUM = "u8, i8, i32, i64, f16, bf16, f32, f64"
FLOAT_PROMOTE = {"exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh",
                 "sigmoid", "leaky_relu", "elu", "gelu", "silu", "mish", "softplus", "reciprocal", "erf", "nan_to_num"}


def dtypes(n, f):
    if n == "convolution_backward":
        return "f32 (oneDNN), f64 (direct loop), bf16 with native support"
    if n == "unary_backward":
        return F
    if n == "batch_norm_backward":
        return "f32, f64"
    if f == "unary":
        if n in FLOAT_PROMOTE:
            return F + " (integers promote to the default float)"
        if n in ("isnan", "isinf", "isfinite", "logical_not"):
            return ALL + " → bool"
        if n in ("sign", "floor", "ceil", "round", "trunc"):
            return NUM + " (identity on integers)"
        return NUM
    if f == "binary":
        if n in ("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"):
            return ALL + " → bool"
        if n in ("div", "atan2"):
            return NUM + " (integers give the default float)"
        if n in ("add", "mul", "maximum", "minimum", "where"):
            return ALL
        return NUM
    if f == "reduce":
        if n in ("mean", "var", "std", "logsumexp", "norm"):
            return F
        if n in ("all", "any"):
            return ALL + " → bool"
        if n in ("argmax", "argmin"):
            return ALL + " → i64"
        if n in ("sum", "prod", "cumsum", "cumprod"):
            return ALL + " (integers and bool accumulate to i64)"
        return ALL
    if f == "linalg":
        return "f32 (oneDNN), bf16/f16 (oneDNN, through f32 where the CPU lacks bf16), f64 and integers (portable loop)"
    if f in ("shape", "index", "view"):
        return ALL
    if f == "fused":
        return "f32 (inputs f32, f16, bf16, f64, bool)"
    if f == "factory":
        return {"full": ALL, "eye": ALL, "arange": "integers, floats", "linspace": F}[n]
    if f == "random":
        return "f16, bf16, f32, f64 (randint: integers or floats)"
    if f == "conv":
        return "f32 (oneDNN), f16/bf16 (computed in f32), f64 (direct loop)"
    if f == "attention":
        return "f32, f64 (f16/bf16 computed in f32)"
    if f == "sparse":
        return "x: floats (computed in f32); weight: f32 CSR"
    if f == "collective":
        return NUM + " (bool: send as u8; sums of f16/bf16 taken in f32)"
    if f == "quant":
        return {"quantized_linear": "x: f32 (f16/bf16/f64 computed in f32); weight: q8_0, q4_0, int8 (per row), int4 "
                "(groups of 32-256)", "dequantize_weight": "q8_0, q4_0, int8, int4 → f32",
                "quantize_per_tensor": "floats → u8, s8", "dequantize_per_tensor": "u8, s8 → f32",
                "int8_conv2d": "x: u8 (channels-last); weight: s8 per-channel; → u8 or f32",
                "int8_linear": "x: u8; weight: s8 per-channel; → u8 or f32",
                "fake_quantize": "f16, bf16, f32, f64 (scale f32)"}[n]
    if n == "embedding":
        return "weight: " + F + "; indices: i32, i64"
    return F


GRAD = {"kGradGrad": "yes (double backward)", "kFused": "fused kernel; double backward via its composite",
        "kFirstOnly": "first order only", "kNone": "—"}
NOTES = {
    "cumprod": "backward is an exact O(n) kernel (handles zeros); it is not differentiable again",
    "conv1d": "double backward raises an error (not supported yet)",
    "conv2d": "stride, padding (incl. 'same'), dilation, groups; double backward raises an error (not supported yet)",
    "conv_transpose2d": "double backward raises an error (not supported yet)",
    "scaled_dot_product_attention": "never materializes [L, S] scores (64-row query blocks); causal, additive or bool "
                                    "mask, dropout (Philox, regenerated in backward); attn_mask gets no gradient",
    "softmax": "fused row kernel forward and backward", "log_softmax": "fused row kernel forward and backward",
    "layer_norm": "fused row kernel; weight/bias grads summed in fixed row blocks (independent of thread count)",
    "rms_norm": "eps defaults to the dtype's machine epsilon, as PyTorch",
    "group_norm": "the fused layer_norm kernel on [N, G, C/G·HW]",
    "embedding": "padding_idx row receives no gradient",
    "batch_norm": "training updates running_mean/var in place (unbiased var), as PyTorch",
    "max_pool2d": "indices are flat positions in the H×W plane; gradient via scatter_add (differentiable)",
    "avg_pool2d": "count_include_pad, ceil_mode; its backward is an op whose gradient is avg_pool2d again",
    "interpolate": "nearest and bilinear (align_corners), by size or scale_factor; resampling matrices",
    "adaptive_avg_pool2d": "products with averaging matrices",
    "sort": "NaN sorts as the largest value; stable option", "unique": "always sorted; inverse and counts",
    "einsum": "one or two operands, repeated labels (trace/diagonal), ellipsis, implicit output",
    "div": "rounding_mode '', 'floor', 'trunc'; integer division by zero is an error",
    "floor_divide": "integer division by zero is an error",
    "remainder": "Python sign convention; integer division by zero is an error",
    "to_dtype": "gradient flows between floating dtypes", "max": "with a dim: values and indices",
    "amax": "ties share the gradient evenly", "norm": "p = 1, 2, inf; the gradient at 0 is 0",
    "pow": "tensor-scalar, scalar-tensor and tensor-tensor; integers to negative powers are an error",
    "cross_entropy": "class indices or probabilities, weight, ignore_index, label_smoothing, reduction",
    "nll_loss": "weight, ignore_index; mean divides by the summed weights", "dropout": "mask from the Philox generator",
    "kl_div": "reduction also 'batchmean'", "pad": "constant (negative pads crop), reflect, replicate",
    "linear": "one GEMM over all leading dims, bias fused",
    "full": "zeros, ones, full_like, scalar_tensor", "arange": "i64 for integer arguments",
    "linspace": "symmetric evaluation, both ends exact", "eye": "n, optional m",
    "detach": "shares storage; stops gradients",
    "strided_scatter": "zeros with a strided window written: the gradient of a view (slice, select, diagonal...)",
    "fused_linear": "made by the compiler's fuse-epilogue pass: linear + activation + residual add as one oneDNN GEMM",
    "fused_conv2d": "made by the compiler's fuse-epilogue pass: conv2d + residual add + activation as one oneDNN convolution; channel-blocked input/output from the layout pass",
    "channel_blocks": "NCHW to channel-blocked [N, C/b, H, W, b] and back (the layout pass's conversions)",
    "unary_backward": "relu, gelu, gelu_tanh, tanh, silu gradients in one pass; fuses in graphs",
    "softmax_backward": "log=true for log_softmax; recorded by training captures",
    "layer_norm_backward": "recomputes the row statistics; rms=true for rms_norm; returns grads of input, weight, bias",
    "batch_norm_backward": "f32/f64; recomputes batch statistics (training) or uses running ones",
    "convolution_backward": "conv2d and conv_transpose2d (transposed=true); returns grads of input, weight, bias",
    "max_pool2d_backward": "from the indices max_pool2d returned (checked against the input plane)",
    "avg_pool2d_backward": "the adjoint of avg_pool2d",
    "attention_with_lse": "`scaled_dot_product_attention` without dropout that also returns each query row's "
                          "log-sum-exp ([..., L], f32 or f64); gradient-recording attention calls go through it, so "
                          "that a captured training step's backward reads it",
    "attention_backward": "takes the forward's output and log-sum-exp, or recomputes them; no dropout",
    "quantized_linear": "weight-only quantized linear; activations \"float\" (decoded in registers) or \"int8\" "
                        "(int8 dot products, or oneDNN's int8 GEMM); docs/quantization.md",
    "dequantize_weight": "the f32 weight a quantized one stands for",
    "quantize_per_tensor": "affine codes, round half to even, saturating (ONNX QuantizeLinear); NaN is an error",
    "dequantize_per_tensor": "(q - zero_point) * scale (ONNX DequantizeLinear)",
    "int8_conv2d": "static int8 convolution (oneDNN, VNNI) with bias, ReLU and requantization in its epilogue; "
                   "inference only; made by quant::quantize_static",
    "sparse_linear": "CSR weight (made by the sparse-weights pass from very sparse constant weights); inference only",
    "fake_quantize": "quantization-aware training: straight-through for x, LSQ for a learnable scale; "
                     "quant/qat.h",
    "int8_linear": "static int8 linear layer (oneDNN) with bias, ReLU and requantization in its epilogue; inference "
                   "only; made by quant::quantize_static",
    "all_reduce": "sum over the group's ranks; gradient all_reduce(dy) (every rank's loss counts: SyncBatchNorm)",
    "all_gather": "the ranks' tensors joined along `dim` in rank order; gradient reduce_scatter(dy)",
    "reduce_scatter": "block `rank` along `dim` of the sum; gradient all_gather(dy)",
    "copy_to_group": "x itself; gradient all_reduce(dy) (Megatron's f: the input of a split computation)",
    "reduce_from_group": "sum over the group's ranks; gradient dy (Megatron's g: a result every rank uses alike)",
    "gather_from_group": "the ranks' tensors joined along `dim`; gradient block `rank` of dy (a split result every rank uses whole)",
    "scatter_to_group": "block `rank` along `dim`; gradient the ranks' dy joined along `dim` (a replicated input split across the ranks)",
    "fused_elementwise": "made by the compiler's fusion pass: a register program over pointwise kernels, run in tiles", "matmul": "1-D promotion and batch broadcasting as PyTorch",
}
# Shapes, for docs/ops.md and the Python docstrings: a family's rule, or the op's own.
FAMILY_SHAPES = {
    "unary": "y has x's shape", "binary": "the inputs broadcast (NumPy's rules); y has the broadcast shape",
    "reduce": "the dims in `dim` (all when none) are reduced, kept as size 1 with keepdim",
    "view": "a view of x where strides allow (shares storage)", "random": "the shape given",
    "collective": "per rank, as torch.distributed's", "factory": "the shape given",
}
SHAPES = {
    "matmul": "[..., n, k] @ [..., k, m] -> [..., n, m]; 1-D operands promote as in PyTorch; batch dims broadcast",
    "mm": "[n, k] @ [k, m] -> [n, m]", "bmm": "[b, n, k] @ [b, k, m] -> [b, n, m]",
    "addmm": "c [n, m] (broadcast) + a [n, k] @ b [k, m]", "outer": "[n], [m] -> [n, m]",
    "linear": "x [..., in], weight [out, in], bias [out] -> [..., out]",
    "fused_linear": "x [..., in], weight [out, in] -> [..., out]",
    "conv1d": "x [N, C_in, L], weight [C_out, C_in / groups, k], bias [C_out] -> [N, C_out, L_out]",
    "conv2d": "x [N, C_in, H, W], weight [C_out, C_in / groups, kH, kW], bias [C_out] -> [N, C_out, H_out, W_out]",
    "conv_transpose2d": "x [N, C_in, H, W], weight [C_in, C_out / groups, kH, kW] -> [N, C_out, H_out, W_out]",
    "max_pool2d": "x [N, C, H, W] -> [N, C, H_out, W_out] (and the indices, same shape)",
    "avg_pool2d": "x [N, C, H, W] -> [N, C, H_out, W_out]",
    "adaptive_avg_pool2d": "x [N, C, H, W] -> [N, C, *output_size]",
    "interpolate": "x [N, C, H, W] -> [N, C, *size]",
    "softmax": "y has x's shape; normalized along `dim`", "log_softmax": "y has x's shape; normalized along `dim`",
    "layer_norm": "x [..., *normalized_shape], weight and bias [*normalized_shape]; y has x's shape",
    "rms_norm": "x [..., *normalized_shape], weight [*normalized_shape]; y has x's shape",
    "group_norm": "x [N, C, ...], weight and bias [C]; y has x's shape",
    "batch_norm": "x [N, C, ...], running stats, weight and bias [C]; y has x's shape",
    "scaled_dot_product_attention": "q [..., L, E], k [..., S, E], v [..., S, Ev], attn_mask broadcast to [..., L, S] "
                                    "-> [..., L, Ev]",
    "cross_entropy": "x [N, C] or [N, C, d...], target [N] or [N, d...] class indices (or probabilities as x) -> "
                     "a scalar, or [N, d...] with reduction='none'",
    "nll_loss": "log-probabilities [N, C], target [N] -> a scalar, or [N] with reduction='none'",
    "embedding": "indices [...] of i32/i64, weight [num, dim] -> [..., dim]",
    "mse_loss": "x and target of one shape -> a scalar, or that shape with reduction='none'",
    "l1_loss": "x and target of one shape -> a scalar, or that shape with reduction='none'",
    "smooth_l1_loss": "x and target of one shape -> a scalar, or that shape with reduction='none'",
    "binary_cross_entropy": "x (probabilities) and target of one shape -> a scalar, or that shape",
    "binary_cross_entropy_with_logits": "x (logits) and target of one shape -> a scalar, or that shape",
    "kl_div": "x (log-probabilities) and target of one shape -> a scalar, or that shape",
    "dropout": "y has x's shape",
    "cat": "tensors alike but along `dim` -> their sizes along `dim` summed",
    "stack": "tensors of one shape -> a new dim of size len(tensors) at `dim`",
    "split": "pieces of x along `dim`", "chunk": "`chunks` pieces of x along `dim`",
    "unbind": "x's slices along `dim`, each without it", "flip": "y has x's shape", "roll": "y has x's shape",
    "repeat": "x's sizes times `repeats`", "tile": "x's sizes times `dims`", "tril": "[..., n, m] kept",
    "triu": "[..., n, m] kept", "pad": "each padded dim grows by its two pads",
    "gather": "index of x's rank -> index's shape", "scatter": "y has x's shape",
    "scatter_add": "y has x's shape", "index_select": "x with size len(index) along `dim`",
    "index_add": "y has x's shape", "masked_fill": "mask broadcast to x; y has x's shape",
    "masked_select": "-> [number of true entries]", "nonzero": "-> [number of nonzeros, x.dim()] of i64",
    "one_hot": "[...] of i64 -> [..., num_classes]", "topk": "x with size k along `dim`, values and indices",
    "sort": "values and indices of x's shape", "argsort": "x's shape, i64", "unique": "-> [number of distinct values]",
    "max": "a scalar; with a dim, values and indices with it reduced", "min": "a scalar; with a dim, values and indices with it reduced",
    "argmax": "`dim` reduced (all when none), i64", "argmin": "`dim` reduced (all when none), i64",
    "cumsum": "y has x's shape", "cumprod": "y has x's shape", "einsum": "as the equation says",
    "where": "cond, x and other broadcast", "clamp": "y has x's shape", "pow": "the inputs broadcast",
    "reshape": "the shape given (-1 inferred); a view where strides allow",
    "view": "the shape given (-1 inferred); always a view", "permute": "x's dims in the order given",
    "transpose": "x with two dims swapped", "squeeze": "x without size-1 dims (or only `dim`)",
    "unsqueeze": "x with a size-1 dim at `dim`", "expand": "x broadcast to the shape given (a view)",
    "diagonal": "x without dim1 and dim2, plus their diagonal as the last dim", "select": "x without `dim`",
    "slice": "x narrowed along `dim`", "to_dtype": "y has x's shape", "clone": "y has x's shape",
    "contiguous": "y has x's shape", "detach": "y has x's shape",
}


def shapes(n, f):
    return SHAPES.get(n) or FAMILY_SHAPES.get(f, "")


TITLES = {"unary": "Unary elementwise", "binary": "Binary elementwise (broadcasting, PyTorch type promotion, Scalar forms)",
          "reduce": "Reductions (any set of dims, keepdim)", "linalg": "Linear algebra", "shape": "Shape",
          "index": "Indexing and sorting", "view": "Views and copies (views share storage)",
          "random": "Random (counter-based Philox: same seed, same numbers for any thread count)",
          "normalization": "Normalization", "loss": "Losses, dropout and embedding", "conv": "Convolution",
          "pooling": "Pooling and resizing", "attention": "Attention",
          "quant": "Quantization: weight-only, static int8, fake quantization (docs/quantization.md)",
          "sparse": "Sparse weights (pruned layers)",
          "collective": "Communication (a process group by name; never folded or dropped by the compiler; "
                        "docs/distributed.md)",
          "fused": "Fused kernels (made by the graph compiler)",
          "factory": "Factories (ops so that a captured graph rebuilds them at a new dynamic size)"}

out = [
    "# Operators", "",
    "Every operator in Tessera, generated from `src/ops/ops.def` (the single list) by `scripts/gen_ops_doc.py`; "
    "`tests/ops/test_op_table.cpp` fails if one is missing here.",
    "All ops live in `tessera::ops` (`#include \"tessera/ops/ops.h\"`); common ones are also `Tensor` methods and operators.", "",
    "**Backward**: *yes (double backward)* — the VJP is written in Tessera ops, so `create_graph=true` gives exact higher "
    "derivatives; *fused kernel* — a fused backward kernel, and under `create_graph` the VJP differentiates the op's "
    "composite fallback (Note [Fused ops and double backward] in `src/ops/op_utils.h`); *first order only* — double "
    "backward raises an error; *—* — not differentiable (integer or bool results).", "",
    "Every differentiable op is checked against f64 central differences (`tests/ops/test_opinfo.cpp`: contiguous, "
    "transposed, strided and expanded inputs; second derivatives where supported) and every op against PyTorch golden "
    "data (`tests/ops/test_golden.cpp`).", ""]
families = []
for _, f, _ in rows:
    if f not in families:
        families.append(f)
for f in families:
    out += ["## " + TITLES.get(f, f), "", "| op | shapes | dtypes | backward | notes |", "|---|---|---|---|---|"]
    out += [f"| `{n}` | {shapes(n, f)} | {dtypes(n, f)} | {GRAD[g]} | {NOTES.get(n, '')} |"
            for n, ff, g in rows if ff == f]
    out.append("")
out += ["## In-place ops", "",
        "`add_`, `sub_`, `mul_`, `div_`, `zero_`, `fill_`, `copy_`, `clamp_`, `masked_fill_`, `index_add_`, `scatter_`, "
        "`scatter_add_`, `index_fill_` are `Tensor` methods. They bump the storage's version counter; a backward that "
        "needs a tensor saved before the change raises an error naming the op that saved it. Under autograd they record "
        "like their out-of-place forms (Note [In-place ops] in `src/ops/tensor_methods.cpp`); modifying a leaf that "
        "requires grad, or a view while autograd records, is refused with an error.", ""]
(ROOT / "docs/ops.md").write_text("\n".join(out))
print(f"docs/ops.md: {len(rows)} ops")

# The same for the Python docstrings (python/src/ops.cpp includes it).
def c_string(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


inc = ["// Generated by scripts/gen_ops_doc.py from src/ops/ops.def: each op's shapes, dtypes,",
       "// backward and notes, for its Python docstring. Do not edit.",
       "//   OPDOC(op, shapes, dtypes, backward, notes)"]
inc += [f"OPDOC({n}, {c_string(shapes(n, f))}, {c_string(dtypes(n, f))}, {c_string(GRAD[g])}, {c_string(NOTES.get(n, ''))})"
        for n, f, g in rows]
(ROOT / "python/src/op_docs.inc").write_text("\n".join(inc) + "\n")
print(f"python/src/op_docs.inc: {len(rows)} ops")
