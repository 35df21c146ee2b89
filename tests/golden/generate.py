#!/usr/bin/python3
"""Writes tests/golden/ops.bin: PyTorch reference outputs and gradients for
every deterministic op in include/tessera/ops/ops.h.

Run with Debian's python3 (torch 1.13, numpy):  /usr/bin/python3 tests/golden/generate.py
The file format, the dtype policy and the tolerances are in tests/golden/README.md.

Each CASE row below has a twin, in the same order and with the same op and case
names, in tests/ops/test_golden.cpp: the Python expression here and the C++
expression there must compute the same thing. Inputs are bound to the names
a, b, c, d, e, f (in0..in5) on both sides; non-tensor arguments live only in
the two expressions.
"""
import math
import struct
import sys
import warnings
import zlib
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

SEED = 20240611
MAGIC = b"TSGOLD01"
VERSION = 1
TEXT = 255  # dtype code of a text record (the case's Python expression)

# tag: (Tessera DType code, torch dtype). Codes follow enum class DType.
DTYPES = {
    "bool": (0, torch.bool), "u8": (1, torch.uint8), "i8": (2, torch.int8), "i32": (3, torch.int32),
    "i64": (4, torch.int64), "f16": (5, torch.float16), "bf16": (6, torch.bfloat16),
    "f32": (7, torch.float32), "f64": (8, torch.float64),
}
CODE_OF = {t: code for code, t in DTYPES.values()}

FP = ("f32", "f64")                      # every floating case
ALLF = ("f32", "f64", "f16", "bf16")     # the reduced-precision subset
F32 = ("f32",)
MIX = ("mix",)                           # every input has an explicit dtype


class In:
    """One input: shape, value domain, dtype (None: the case's dtype), grad.

    grad=None: a gradient is checked if the input is floating; False: never.
    """

    def __init__(self, *shape, d="n", dtype=None, grad=None):
        self.shape, self.d, self.dtype, self.grad = tuple(shape), d, dtype, grad


def values(rng, shape, d):
    """float64 or int64 numpy values of `shape` from domain `d`."""
    n = int(np.prod(shape)) if shape else 1
    if d == "n":
        return rng.standard_normal(shape)
    if d == "big":                       # stability of softmax / logsumexp
        return rng.standard_normal(shape) * 40
    if d == "pos":
        return rng.uniform(0.5, 2.5, shape)
    if d == "unit":
        return rng.uniform(-0.9, 0.9, shape)
    if d == "nz":                        # away from zero, both signs
        return rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 2.0, shape)
    if d == "prob":
        return rng.uniform(0.05, 0.95, shape)
    if d == "grid":                      # -3, -2.5, ..., 3: zeros, kinks, round-half cases
        return ((np.arange(n) % 13 - 6) * 0.5).reshape(shape)
    if d == "ties":                      # small integers as values: many ties
        return rng.integers(-2, 3, shape).astype(np.float64)
    if d == "zeros1":                    # positive values with some exact zeros
        v = rng.uniform(0.5, 1.5, shape).reshape(-1)
        v[::5] = 0.0
        return v.reshape(shape)
    if d == "special":
        base = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.5, -2.5, 3.0, 1e-3, -7.0]
        return np.array([base[i % len(base)] for i in range(n)]).reshape(shape)
    if d == "neginf":                    # normal, with -inf at every third position of the last dim
        v = rng.standard_normal(shape)
        v[..., 1::3] = -math.inf
        return v
    if d == "bool":
        return rng.random(shape) < 0.5
    if d == "logp":                      # log-probabilities along the last dim
        x = rng.standard_normal(shape)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))
    if d == "simplex":                   # probabilities along the last dim
        x = np.exp(rng.standard_normal(shape))
        return x / x.sum(-1, keepdims=True)
    if d.startswith("int:"):             # int:lo:hi, integers in [lo, hi)
        lo, hi = map(int, d.split(":")[1:])
        return rng.integers(lo, hi, shape)
    if d.startswith("perm:"):            # perm:dim:N, distinct values of range(N) along dim
        dim, N = map(int, d.split(":")[1:])
        full = list(shape)
        full[dim] = N
        idx = np.argsort(rng.random(full), axis=dim)
        return np.take(idx, np.arange(shape[dim]), axis=dim)
    if d.startswith("mask:"):            # mask:L:S, a bool mask where every row keeps >= 1
        m = rng.random(shape) < 0.6
        m[..., 0] = True
        return m
    raise ValueError(f"unknown domain {d}")


class Case:
    def __init__(self, op, name, call, inputs, dtypes, grad, native):
        self.op, self.name, self.call, self.inputs = op, name, call, inputs
        self.dtypes, self.grad, self.native = dtypes, grad, native


CASES = []


def C(op, name, call, inputs, dtypes=FP, grad=True, native=False):
    """One case per dtype in `dtypes`. native: compute f16/bf16 in that dtype
    (default: in f32 on the exactly upcast inputs, rounded back)."""
    CASES.append(Case(op, name, call, inputs, dtypes, grad, native))


# ---- helpers used by expressions (each has a twin in test_golden.cpp) -------
def rms(x, shape, w=None, eps=None):
    # torch 1.13 has no rms_norm; this is torch 2.4's definition.
    dims = tuple(range(-len(shape), 0))
    if eps is None:
        eps = torch.finfo(x.dtype).eps
    y = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
    return y * w if w is not None else y


def sdpa(q, k, v, mask=None, dropout_p=0.0, is_causal=False, scale=None):
    # torch 1.13 has no scaled_dot_product_attention; this is torch 2.x's reference math.
    L, S = q.size(-2), k.size(-2)
    s = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    bias = torch.zeros(L, S, dtype=q.dtype)
    if is_causal:
        bias = bias.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(0), -math.inf)
    if mask is not None:
        bias = bias.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else bias + mask
    return torch.softmax(q @ k.transpose(-2, -1) * s + bias, -1) @ v


def bn(x, rm, rv, w, b, training, momentum, eps):
    # Returns the updated running stats too (batch_norm updates them in place).
    rm = rm.clone() if rm is not None else None
    rv = rv.clone() if rv is not None else None
    y = F.batch_norm(x, rm, rv, w, b, training, momentum, eps)
    return [y] + [t for t in (rm, rv) if t is not None]


INF = math.inf

# =============================================================================
# The table. Python expression | inputs | dtypes.   (C++ twin: test_golden.cpp)
# =============================================================================

# ---- unary ------------------------------------------------------------------
C("neg", "main", "torch.neg(a)", [In(3, 4)], ALLF)
C("neg", "zero", "torch.neg(a)", [In(0, 3)])
C("neg", "int", "torch.neg(a)", [In(3, 4, d="int:-5:5")], ("i64", "i32"))
C("abs", "main", "torch.abs(a)", [In(3, 4)], ALLF)
C("abs", "grid", "torch.abs(a)", [In(2, 13, d="grid")])
C("abs", "int", "torch.abs(a)", [In(3, 4, d="int:-5:5")], ("i64", "i32"))
C("exp", "main", "torch.exp(a)", [In(3, 4)], ALLF)
C("exp", "zero", "torch.exp(a)", [In(0, 3)])
C("exp", "strided", "torch.exp(a.t())", [In(4, 3)])
C("exp", "int", "torch.exp(a)", [In(3, 4, d="int:-3:3")], ("i64",))
C("exp", "special", "torch.exp(a)", [In(2, 5, d="special")], grad=False)
C("exp2", "main", "torch.exp2(a)", [In(3, 4)], ALLF)
C("log", "main", "torch.log(a)", [In(3, 4, d="pos")], ALLF)
C("log", "int", "torch.log(a)", [In(3, 4, d="int:1:9")], ("i32",))
C("log", "special", "torch.log(a)", [In(2, 5, d="special")], grad=False)
C("log2", "main", "torch.log2(a)", [In(3, 4, d="pos")], ALLF)
C("log1p", "main", "torch.log1p(a)", [In(3, 4, d="unit")], ALLF)
C("expm1", "main", "torch.expm1(a)", [In(3, 4)], ALLF)
C("sqrt", "main", "torch.sqrt(a)", [In(3, 4, d="pos")], ALLF)
C("sqrt", "int", "torch.sqrt(a)", [In(3, 4, d="int:0:9")], ("i64",))
C("sqrt", "special", "torch.sqrt(a)", [In(2, 5, d="special")], grad=False)
C("rsqrt", "main", "torch.rsqrt(a)", [In(3, 4, d="pos")], ALLF)
C("square", "main", "torch.square(a)", [In(3, 4)], ALLF)
C("square", "int", "torch.square(a)", [In(3, 4, d="int:-5:5")], ("i64",))
C("sin", "main", "torch.sin(a)", [In(3, 4)], ALLF)
C("sin", "3d", "torch.sin(a)", [In(2, 3, 4, d="big")])
C("cos", "main", "torch.cos(a)", [In(3, 4)], ALLF)
C("tan", "main", "torch.tan(a)", [In(3, 4, d="unit")], ALLF)
C("tanh", "main", "torch.tanh(a)", [In(3, 4)], ALLF)
C("tanh", "big", "torch.tanh(a)", [In(3, 4, d="big")])
C("tanh", "special", "torch.tanh(a)", [In(2, 5, d="special")], grad=False)
C("sigmoid", "main", "torch.sigmoid(a)", [In(3, 4)], ALLF)
C("sigmoid", "big", "torch.sigmoid(a)", [In(3, 4, d="big")])
C("sigmoid", "int", "torch.sigmoid(a)", [In(3, 4, d="int:-3:3")], ("i64",))
C("sigmoid", "zero", "torch.sigmoid(a)", [In(0, 3)])
C("sigmoid", "special", "torch.sigmoid(a)", [In(2, 5, d="special")], grad=False)
C("relu", "main", "torch.relu(a)", [In(3, 4)], ALLF)
C("relu", "grid", "torch.relu(a)", [In(2, 13, d="grid")])
C("relu", "int", "torch.relu(a)", [In(3, 4, d="int:-5:5")], ("i64",))
C("relu", "zero", "torch.relu(a)", [In(0, 3)])
C("relu", "special", "torch.relu(a)", [In(2, 5, d="special")], grad=False)
C("leaky_relu", "main", "F.leaky_relu(a)", [In(3, 4)], ALLF)
C("leaky_relu", "slope", "F.leaky_relu(a, 0.2)", [In(2, 13, d="grid")])
C("elu", "main", "F.elu(a)", [In(3, 4)], ALLF)
C("elu", "alpha", "F.elu(a, 0.5)", [In(2, 13, d="grid")])
C("gelu", "main", "F.gelu(a)", [In(3, 4)], ALLF)
C("gelu", "tanh", "F.gelu(a, approximate='tanh')", [In(3, 4)], ALLF)
C("gelu", "zero", "F.gelu(a)", [In(2, 0)])
C("gelu", "special", "F.gelu(a)", [In(2, 5, d="special")], grad=False)
C("silu", "main", "F.silu(a)", [In(3, 4)], ALLF)
C("silu", "special", "F.silu(a)", [In(2, 5, d="special")], grad=False)
C("mish", "main", "F.mish(a)", [In(3, 4)], ALLF)
C("softplus", "main", "F.softplus(a)", [In(3, 4)], ALLF)
C("softplus", "beta", "F.softplus(a, 2.0, 1.0)", [In(2, 13, d="grid")])
C("softplus", "special", "F.softplus(a)", [In(2, 5, d="special")], grad=False)
C("hardtanh", "main", "F.hardtanh(a)", [In(3, 4)], ALLF)
C("hardtanh", "grid", "F.hardtanh(a, -0.5, 1.5)", [In(2, 13, d="grid")])
C("hardtanh", "int", "F.hardtanh(a, -2, 3)", [In(3, 4, d="int:-5:5")], ("i64",))
C("sign", "grid", "torch.sign(a)", [In(2, 13, d="grid")], ALLF)
C("sign", "int", "torch.sign(a)", [In(3, 4, d="int:-5:5")], ("i64",))
C("sign", "special", "torch.sign(a)", [In(2, 5, d="special")], grad=False)
C("floor", "grid", "torch.floor(a)", [In(2, 13, d="grid")], ALLF)
C("floor", "main", "torch.floor(a)", [In(3, 4, d="big")])
C("floor", "int", "torch.floor(a)", [In(3, 4, d="int:-5:5")], ("i64",))
C("floor", "special", "torch.floor(a)", [In(2, 5, d="special")], grad=False)
C("ceil", "grid", "torch.ceil(a)", [In(2, 13, d="grid")], ALLF)
C("ceil", "main", "torch.ceil(a)", [In(3, 4, d="big")])
C("round", "grid", "torch.round(a)", [In(2, 13, d="grid")], ALLF)
C("round", "main", "torch.round(a)", [In(3, 4, d="big")])
C("round", "special", "torch.round(a)", [In(2, 5, d="special")], grad=False)
C("trunc", "grid", "torch.trunc(a)", [In(2, 13, d="grid")], ALLF)
C("trunc", "main", "torch.trunc(a)", [In(3, 4, d="big")])
C("clamp", "main", "torch.clamp(a, -0.5, 0.5)", [In(3, 4)], ALLF)
C("clamp", "grid", "torch.clamp(a, -1.0, 1.0)", [In(2, 13, d="grid")])
C("clamp", "min", "torch.clamp(a, min=0.25)", [In(3, 4)])
C("clamp", "max", "torch.clamp(a, max=0.25)", [In(3, 4)])
C("clamp", "int", "torch.clamp(a, -2, 3)", [In(3, 4, d="int:-5:5")], ("i64", "i32"))
C("clamp", "int_float", "torch.clamp(a, -2.5, 3)", [In(3, 4, d="int:-5:5")], ("i64",))
C("clamp", "tensor", "torch.clamp(a, b, c)", [In(3, 4), In(3, 4, d="unit"), In(4, d="pos")])
C("clamp", "tensor_min", "torch.clamp(a, min=b)", [In(3, 4), In(1, 4)])
C("clamp", "special", "torch.clamp(a, -1.0, 1.0)", [In(2, 5, d="special")], grad=False)
C("reciprocal", "main", "torch.reciprocal(a)", [In(3, 4, d="nz")], ALLF)
C("reciprocal", "int", "torch.reciprocal(a)", [In(3, 4, d="int:1:5")], ("i64",))
C("reciprocal", "special", "torch.reciprocal(a)", [In(2, 5, d="special")], grad=False)
C("erf", "main", "torch.erf(a)", [In(3, 4)], ALLF)
C("erf", "special", "torch.erf(a)", [In(2, 5, d="special")], grad=False)
C("pow", "scalar2", "torch.pow(a, 2)", [In(3, 4)], ALLF)
C("pow", "scalar3", "torch.pow(a, 3)", [In(3, 4)])
C("pow", "scalar0", "torch.pow(a, 0)", [In(3, 4)])
C("pow", "half", "torch.pow(a, 0.5)", [In(3, 4, d="pos")], ALLF)
C("pow", "neg", "torch.pow(a, -1.5)", [In(3, 4, d="pos")])
C("pow", "int", "torch.pow(a, 2)", [In(3, 4, d="int:-5:5")], ("i64", "i32"))
C("pow", "int_float", "torch.pow(a, 0.5)", [In(3, 4, d="int:0:9")], ("i64",))
C("pow", "base", "torch.pow(2.0, a)", [In(3, 4)], ALLF)
C("pow", "base_frac", "torch.pow(0.5, a)", [In(3, 4)])
C("pow", "base_int", "torch.pow(2, a)", [In(3, 4, d="int:0:5")], ("i64",))
C("pow", "special", "torch.pow(a, 2)", [In(2, 5, d="special")], grad=False)
C("isnan", "special", "torch.isnan(a)", [In(3, 4, d="special")], ALLF)
C("isnan", "int", "torch.isnan(a)", [In(3, 4, d="int:-5:5")], ("i64",))
C("isinf", "special", "torch.isinf(a)", [In(3, 4, d="special")], ALLF)
C("isfinite", "special", "torch.isfinite(a)", [In(3, 4, d="special")], ALLF)
C("nan_to_num", "default", "torch.nan_to_num(a)", [In(3, 4, d="special")], ALLF, native=True)
C("nan_to_num", "values", "torch.nan_to_num(a, 0.5, 100.0, -100.0)", [In(3, 4, d="special")])
C("nan_to_num", "int", "torch.nan_to_num(a)", [In(3, 4, d="int:-5:5")], ("i64",))
C("logical_not", "grid", "torch.logical_not(a)", [In(2, 13, d="grid")])
C("logical_not", "bool", "torch.logical_not(a)", [In(3, 4, d="bool")], ("bool",))
C("logical_not", "int", "torch.logical_not(a)", [In(3, 4, d="int:-2:2")], ("i64",))

# ---- binary -----------------------------------------------------------------
C("add", "main", "torch.add(a, b)", [In(3, 4), In(3, 4)], ALLF)
C("add", "bcast", "torch.add(a, b)", [In(3, 1, 5), In(4, 5)], ALLF)
C("add", "alpha", "torch.add(a, b, alpha=2.5)", [In(3, 4), In(4)])
C("add", "zero", "torch.add(a, b)", [In(0, 3), In(1, 3)])
C("add", "strided", "torch.add(a.t(), b)", [In(4, 3), In(3, 4)])
C("add", "int", "torch.add(a, b)", [In(3, 4, d="int:-9:9"), In(4, d="int:-9:9")], ("i64", "i32"))
C("add", "int_alpha", "torch.add(a, b, alpha=3)", [In(3, 4, d="int:-9:9"), In(3, 4, d="int:-9:9")], ("i64",))
C("add", "int_float", "torch.add(a, b)", [In(3, 4, d="int:-9:9", dtype="i64"), In(3, 4, dtype="f32")], MIX)
C("add", "f16_f32", "torch.add(a, b)", [In(3, 4, dtype="f16"), In(3, 4, dtype="f32")], MIX)
C("add", "i32_i64", "torch.add(a, b)", [In(3, 4, d="int:-9:9", dtype="i32"), In(3, 4, d="int:-9:9", dtype="i64")], MIX)
C("add", "f32_0d_f64", "torch.add(a, b)", [In(3, 4, dtype="f32"), In(dtype="f64")], MIX)
C("add", "scalar_int", "torch.add(a, 2)", [In(3, 4)], ALLF)
C("add", "scalar_float", "torch.add(a, 2.5)", [In(3, 4)])
C("add", "int_scalar_int", "torch.add(a, 2)", [In(3, 4, d="int:-9:9")], ("i64", "i32"))
C("add", "int_scalar_float", "torch.add(a, 2.5)", [In(3, 4, d="int:-9:9")], ("i64",))
C("add", "rscalar", "2.5 + a", [In(3, 4)])
C("sub", "main", "torch.sub(a, b)", [In(3, 4), In(3, 4)], ALLF)
C("sub", "bcast", "torch.sub(a, b)", [In(3, 1, 5), In(4, 5)], ALLF)
C("sub", "alpha", "torch.sub(a, b, alpha=0.5)", [In(3, 4), In(3, 1)])
C("sub", "int", "torch.sub(a, b)", [In(3, 4, d="int:-9:9"), In(3, 4, d="int:-9:9")], ("i64", "i32"))
C("sub", "scalar", "torch.sub(a, 1.5)", [In(3, 4)])
C("sub", "rscalar", "1 - a", [In(3, 4)])
C("sub", "int_rscalar", "1 - a", [In(3, 4, d="int:-9:9")], ("i64",))
C("sub", "zero", "torch.sub(a, b)", [In(0, 3), In(3)])
C("mul", "main", "torch.mul(a, b)", [In(3, 4), In(3, 4)], ALLF)
C("mul", "bcast", "torch.mul(a, b)", [In(2, 1, 4), In(3, 1)], ALLF)
C("mul", "zero", "torch.mul(a, b)", [In(2, 0, 3), In(3)])
C("mul", "int", "torch.mul(a, b)", [In(3, 4, d="int:-9:9"), In(3, 4, d="int:-9:9")], ("i64", "i32"))
C("mul", "bool_float", "torch.mul(a, b)", [In(3, 4, d="bool", dtype="bool"), In(3, 4, dtype="f32")], MIX)
C("mul", "scalar", "torch.mul(a, -1.5)", [In(3, 4)], ALLF)
C("mul", "rscalar", "3 * a", [In(3, 4)])
C("mul", "expanded", "torch.mul(a.expand(3, 4), b.t())", [In(4), In(4, 3)])
C("div", "main", "torch.div(a, b)", [In(3, 4), In(3, 4, d="nz")], ALLF)
C("div", "bcast", "torch.div(a, b)", [In(3, 1, 5), In(4, 5, d="nz")], ALLF)
C("div", "floor", "torch.div(a, b, rounding_mode='floor')", [In(3, 4, d="big"), In(3, 4, d="nz")])
C("div", "trunc", "torch.div(a, b, rounding_mode='trunc')", [In(3, 4, d="big"), In(3, 4, d="nz")])
C("div", "int", "torch.div(a, b)", [In(3, 4, d="int:-9:9"), In(3, 4, d="int:1:4")], ("i64", "i32"))
C("div", "int_floor", "torch.div(a, b, rounding_mode='floor')", [In(3, 4, d="int:-9:9"), In(4, d="int:-3:0")], ("i64", "i32"))
C("div", "int_trunc", "torch.div(a, b, rounding_mode='trunc')", [In(3, 4, d="int:-9:9"), In(4, d="int:-3:0")], ("i64",))
C("div", "scalar", "torch.div(a, 4)", [In(3, 4)], ALLF)
C("div", "scalar_floor", "torch.div(a, 3, rounding_mode='floor')", [In(3, 4, d="int:-9:9")], ("i64",))
C("div", "rscalar", "2.0 / a", [In(3, 4, d="nz")])
C("div", "zero", "torch.div(a, b)", [In(2, 0), In(1, d="nz")])
C("div", "special", "torch.div(a, b)", [In(2, 5, d="special"), In(2, 5, d="grid")], grad=False)
# torch 1.13 has no derivative for floor_divide: forward only.
C("floor_divide", "main", "torch.floor_divide(a, b)", [In(3, 4, d="big"), In(3, 4, d="nz")], grad=False)
C("floor_divide", "int", "torch.floor_divide(a, b)", [In(3, 4, d="int:-9:9"), In(4, d="int:-3:0")], ("i64", "i32"))
C("remainder", "main", "torch.remainder(a, b)", [In(3, 4, d="big"), In(3, 4, d="nz")])
C("remainder", "int", "torch.remainder(a, b)", [In(3, 4, d="int:-9:9"), In(4, d="int:-3:0")], ("i64", "i32"))
C("remainder", "scalar", "torch.remainder(a, 1.5)", [In(3, 4, d="big")])
C("remainder", "int_scalar", "torch.remainder(a, 4)", [In(3, 4, d="int:-9:9")], ("i64",))
C("pow", "tensor", "torch.pow(a, b)", [In(3, 4, d="pos"), In(3, 4)])
C("pow", "tensor_bcast", "torch.pow(a, b)", [In(3, 1, d="pos"), In(4, d="unit")])
C("pow", "tensor_int", "torch.pow(a, b)", [In(3, 4, d="int:-4:4"), In(3, 4, d="int:0:4")], ("i64",))
C("maximum", "main", "torch.maximum(a, b)", [In(3, 4), In(3, 4)], ALLF)
C("maximum", "ties", "torch.maximum(a, b)", [In(3, 4, d="ties"), In(4, d="ties")])
C("maximum", "int", "torch.maximum(a, b)", [In(3, 4, d="int:-9:9"), In(3, 4, d="int:-9:9")], ("i64",))
C("maximum", "zero", "torch.maximum(a, b)", [In(0, 3), In(0, 1)])
C("maximum", "special", "torch.maximum(a, b)", [In(2, 5, d="special"), In(2, 5)], grad=False)
C("minimum", "main", "torch.minimum(a, b)", [In(3, 4), In(3, 4)], ALLF)
C("minimum", "ties", "torch.minimum(a, b)", [In(3, 4, d="ties"), In(4, d="ties")])
C("minimum", "special", "torch.minimum(a, b)", [In(2, 5, d="special"), In(2, 5)], grad=False)
C("atan2", "main", "torch.atan2(a, b)", [In(3, 4), In(3, 4)])
C("atan2", "bcast", "torch.atan2(a, b)", [In(3, 1), In(4)])
C("atan2", "special", "torch.atan2(a, b)", [In(2, 5, d="special"), In(2, 5, d="grid")], grad=False)
for _op in ("eq", "ne", "lt", "le", "gt", "ge"):
    C(_op, "main", f"torch.{_op}(a, b)", [In(3, 4, d="ties"), In(3, 4, d="ties")], ALLF)
    C(_op, "bcast", f"torch.{_op}(a, b)", [In(3, 1, d="ties"), In(4, d="ties")])
    C(_op, "int", f"torch.{_op}(a, b)", [In(3, 4, d="int:-2:3"), In(3, 4, d="int:-2:3")], ("i64",))
    C(_op, "int_float", f"torch.{_op}(a, b)", [In(3, 4, d="int:-2:3", dtype="i64"), In(3, 4, d="ties", dtype="f32")], MIX)
    C(_op, "scalar", f"torch.{_op}(a, 1)", [In(3, 4, d="ties")])
    C(_op, "int_scalar_float", f"torch.{_op}(a, 0.5)", [In(3, 4, d="int:-2:3")], ("i64",))
C("eq", "zero", "torch.eq(a, b)", [In(0, 3, d="ties"), In(3, d="ties")])
for _op in ("logical_and", "logical_or", "logical_xor"):
    C(_op, "bool", f"torch.{_op}(a, b)", [In(3, 4, d="bool"), In(3, 4, d="bool")], ("bool",))
    C(_op, "float", f"torch.{_op}(a, b)", [In(2, 13, d="grid"), In(2, 13, d="ties")])
    C(_op, "bcast", f"torch.{_op}(a, b)", [In(3, 1, d="bool", dtype="bool"), In(4, d="int:0:2", dtype="i64")], MIX)
C("where", "main", "torch.where(a, b, c)", [In(3, 4, d="bool", dtype="bool"), In(3, 4), In(3, 4)], ALLF)
C("where", "bcast", "torch.where(a, b, c)", [In(3, 1, d="bool", dtype="bool"), In(4), In(2, 1, 1)])
C("where", "scalar_other", "torch.where(a, b, 0.5)", [In(3, 4, d="bool", dtype="bool"), In(3, 4)])
C("where", "scalar_self", "torch.where(a, -1.0, b)", [In(3, 4, d="bool", dtype="bool"), In(3, 4)])
C("where", "int", "torch.where(a, b, c)", [In(3, 4, d="bool", dtype="bool"), In(3, 4, d="int:-9:9"), In(3, 4, d="int:-9:9")], ("i64",))
C("where", "mixed", "torch.where(a, b, c)", [In(3, 4, d="bool", dtype="bool"), In(3, 4, d="int:-9:9", dtype="i64"), In(3, 4, dtype="f32")], MIX)
C("where", "zero", "torch.where(a, b, c)", [In(0, 3, d="bool", dtype="bool"), In(3), In(0, 1)])
C("lerp", "tensor", "torch.lerp(a, b, c)", [In(3, 4), In(3, 4), In(4, d="unit")])
C("lerp", "scalar", "torch.lerp(a, b, 0.3)", [In(3, 4), In(3, 1)])
C("addcmul", "main", "torch.addcmul(a, b, c, value=0.5)", [In(3, 4), In(3, 4), In(4)])
C("addcmul", "default", "torch.addcmul(a, b, c)", [In(3, 4), In(3, 1), In(3, 4)])
C("addcdiv", "main", "torch.addcdiv(a, b, c, value=0.5)", [In(3, 4), In(3, 4), In(4, d="nz")])
C("addcdiv", "default", "torch.addcdiv(a, b, c)", [In(3, 4), In(3, 4), In(3, 4, d="nz")])
# result_type: the output is an empty tensor of the result dtype.
C("result_type", "i32_i64", "torch.empty(0, dtype=torch.result_type(a, b))", [In(2, d="int:0:3", dtype="i32"), In(2, d="int:0:3", dtype="i64")], MIX)
C("result_type", "bool_i32", "torch.empty(0, dtype=torch.result_type(a, b))", [In(2, d="bool", dtype="bool"), In(2, d="int:0:3", dtype="i32")], MIX)
C("result_type", "u8_i64", "torch.empty(0, dtype=torch.result_type(a, b))", [In(2, d="int:0:3", dtype="u8"), In(2, d="int:0:3", dtype="i64")], MIX)
C("result_type", "i64_f16", "torch.empty(0, dtype=torch.result_type(a, b))", [In(2, d="int:0:3", dtype="i64"), In(2, dtype="f16")], MIX)
C("result_type", "f16_bf16", "torch.empty(0, dtype=torch.result_type(a, b))", [In(2, dtype="f16"), In(2, dtype="bf16")], MIX)
C("result_type", "f32_0d_f64", "torch.empty(0, dtype=torch.result_type(a, b))", [In(2, dtype="f32"), In(dtype="f64")], MIX)
C("result_type", "i32_0d_i64", "torch.empty(0, dtype=torch.result_type(a, b))", [In(2, d="int:0:3", dtype="i32"), In(d="int:0:3", dtype="i64")], MIX)
C("result_type", "i64_0d_f64", "torch.empty(0, dtype=torch.result_type(a, b))", [In(2, d="int:0:3", dtype="i64"), In(dtype="f64")], MIX)
C("result_type", "f16_0d_f32", "torch.empty(0, dtype=torch.result_type(a, b))", [In(2, dtype="f16"), In(dtype="f32")], MIX)

# ---- reductions ---------------------------------------------------------------
C("sum", "all", "torch.sum(a)", [In(3, 4, 5)], ALLF)
C("sum", "dim", "torch.sum(a, 1)", [In(3, 4, 5)], ALLF)
C("sum", "dims_keep", "torch.sum(a, (0, 2), keepdim=True)", [In(3, 4, 5)])
C("sum", "neg_dim", "torch.sum(a, -1)", [In(3, 4, 5)])
C("sum", "strided", "torch.sum(a.transpose(0, 2), 1)", [In(3, 4, 5)])
C("sum", "zero_all", "torch.sum(a)", [In(0, 4)])
C("sum", "zero_dim", "torch.sum(a, 0)", [In(0, 4)])
C("sum", "int", "torch.sum(a, 1)", [In(3, 4, d="int:-9:9")], ("i64", "i32"))
C("sum", "bool", "torch.sum(a)", [In(3, 4, d="bool")], ("bool",))
C("sum", "dtype", "torch.sum(a, 1, dtype=torch.float64)", [In(3, 4)], F32)
C("sum", "int_dtype", "torch.sum(a, 0, dtype=torch.float32)", [In(3, 4, d="int:-9:9")], ("i64",))
C("sum", "special", "torch.sum(a, 1)", [In(2, 5, d="special")], grad=False)
C("mean", "all", "torch.mean(a)", [In(3, 4, 5)], ALLF)
C("mean", "dim", "torch.mean(a, 1)", [In(3, 4, 5)], ALLF)
C("mean", "dims_keep", "torch.mean(a, (0, 2), keepdim=True)", [In(3, 4, 5)])
C("mean", "zero_dim", "torch.mean(a, 1)", [In(0, 4)])
C("mean", "zero_empty", "torch.mean(a, 0)", [In(0, 4)])
C("mean", "expanded", "torch.mean(a.expand(3, 4), 0)", [In(1, 4)])
C("prod", "all", "torch.prod(a)", [In(3, 4, d="pos")])
C("prod", "dim", "torch.prod(a, 1)", [In(3, 4, 5)])
C("prod", "keep", "torch.prod(a, 0, keepdim=True)", [In(3, 4)])
C("prod", "zeros", "torch.prod(a, 1)", [In(3, 5, d="zeros1")])
C("prod", "zeros_all", "torch.prod(a)", [In(2, 3, d="zeros1")])
C("prod", "int", "torch.prod(a, 1)", [In(3, 4, d="int:-3:4")], ("i64", "i32"))
C("prod", "zero", "torch.prod(a, 0)", [In(0, 3)])
C("amax", "all", "torch.amax(a)", [In(3, 4, 5)])
C("amax", "dims", "torch.amax(a, (0, 2))", [In(3, 4, 5)])
C("amax", "keep", "torch.amax(a, 1, keepdim=True)", [In(3, 4, 5)])
C("amax", "ties", "torch.amax(a, 1)", [In(3, 6, d="ties")])
C("amax", "int", "torch.amax(a, 0)", [In(3, 4, d="int:-9:9")], ("i64",))
C("amax", "zero", "torch.amax(a, 1)", [In(0, 4)])
C("amax", "special", "torch.amax(a, 1)", [In(2, 5, d="special")], grad=False)
C("amin", "all", "torch.amin(a)", [In(3, 4, 5)])
C("amin", "dims", "torch.amin(a, (0, 2))", [In(3, 4, 5)])
C("amin", "ties", "torch.amin(a, 1)", [In(3, 6, d="ties")])
C("amin", "special", "torch.amin(a, 1)", [In(2, 5, d="special")], grad=False)
C("max", "all", "torch.max(a)", [In(3, 4, 5)])
C("max", "all_ties", "torch.max(a)", [In(3, 4, d="ties")])
C("max", "all_int", "torch.max(a)", [In(3, 4, d="int:-9:9")], ("i64",))
C("max", "all_special", "torch.max(a)", [In(2, 5, d="special")], grad=False)
C("max", "dim", "torch.max(a, 1)", [In(3, 4, 5)])
C("max", "dim_keep", "torch.max(a, -1, keepdim=True)", [In(3, 4, 5)])
C("max", "dim_ties", "torch.max(a, 1)", [In(3, 6, d="ties")])
C("max", "dim_int", "torch.max(a, 0)", [In(3, 4, d="int:-9:9")], ("i64",))
C("max", "dim_zero", "torch.max(a, 1)", [In(0, 4)])
C("max", "dim_special", "torch.max(a, 1)", [In(2, 5, d="special")], grad=False)
C("min", "all", "torch.min(a)", [In(3, 4, 5)])
C("min", "all_ties", "torch.min(a)", [In(3, 4, d="ties")])
C("min", "dim", "torch.min(a, 1)", [In(3, 4, 5)])
C("min", "dim_ties", "torch.min(a, 1)", [In(3, 6, d="ties")])
C("min", "dim_special", "torch.min(a, 1)", [In(2, 5, d="special")], grad=False)
C("argmax", "all", "torch.argmax(a)", [In(3, 4, 5)])
C("argmax", "dim", "torch.argmax(a, 1)", [In(3, 4, 5)])
C("argmax", "keep", "torch.argmax(a, 0, keepdim=True)", [In(3, 4)])
C("argmax", "all_keep", "torch.argmax(a, keepdim=True)", [In(3, 4)])
C("argmax", "ties", "torch.argmax(a, 1)", [In(3, 6, d="ties")])
C("argmax", "int", "torch.argmax(a, -1)", [In(3, 4, d="int:-2:3")], ("i64",))
C("argmax", "zero", "torch.argmax(a, 1)", [In(0, 4)])
C("argmax", "special", "torch.argmax(a, 1)", [In(2, 5, d="special")], grad=False)
C("argmin", "all", "torch.argmin(a)", [In(3, 4, 5)])
C("argmin", "dim", "torch.argmin(a, 1)", [In(3, 4, 5)])
C("argmin", "ties", "torch.argmin(a, 1)", [In(3, 6, d="ties")])
C("argmin", "special", "torch.argmin(a, 1)", [In(2, 5, d="special")], grad=False)
C("var", "all", "torch.var(a)", [In(3, 4, 5)])
C("var", "dim", "torch.var(a, 1)", [In(3, 4, 5)])
C("var", "corr0_keep", "torch.var(a, (0, 2), correction=0, keepdim=True)", [In(3, 4, 5)])
C("var", "corr2", "torch.var(a, 1, correction=2)", [In(3, 6)])
C("var", "zero", "torch.var(a, 1)", [In(0, 4)])
C("std", "all", "torch.std(a)", [In(3, 4, 5)])
C("std", "dim", "torch.std(a, 1)", [In(3, 4, 5)])
C("std", "corr0_keep", "torch.std(a, (0, 2), correction=0, keepdim=True)", [In(3, 4, 5)])
C("logsumexp", "dim", "torch.logsumexp(a, 1)", [In(3, 4, 5)])
C("logsumexp", "dims_keep", "torch.logsumexp(a, (0, 2), keepdim=True)", [In(3, 4, 5)])
C("logsumexp", "big", "torch.logsumexp(a, -1)", [In(3, 6, d="big")])
C("logsumexp", "zero", "torch.logsumexp(a, 1)", [In(0, 4)])
C("logsumexp", "neginf", "torch.logsumexp(a, 1)", [In(3, 7, d="neginf")])
C("norm", "p2", "torch.linalg.vector_norm(a)", [In(3, 4, 5)])
C("norm", "p2_dim", "torch.linalg.vector_norm(a, 2, (1,), keepdim=True)", [In(3, 4, 5)])
C("norm", "p1", "torch.linalg.vector_norm(a, 1, (1,))", [In(3, 4, 5)])
C("norm", "pinf", "torch.linalg.vector_norm(a, INF, (0, 2))", [In(3, 4, 5)])
C("norm", "zero", "torch.linalg.vector_norm(a)", [In(0, 3)])
C("all", "float", "torch.all(a)", [In(3, 4, d="grid")])
C("all", "dim", "torch.all(a, 1)", [In(4, 3, d="bool")], ("bool",))
C("all", "keep", "torch.all(a, 0, keepdim=True)", [In(3, 4, d="int:0:3")], ("i64",))
C("all", "zero", "torch.all(a)", [In(0, 3, d="bool")], ("bool",))
C("any", "float", "torch.any(a, 1)", [In(4, 3, d="ties")])
C("any", "bool", "torch.any(a)", [In(3, 4, d="bool")], ("bool",))
C("any", "zero", "torch.any(a)", [In(0, 3, d="bool")], ("bool",))
C("cumsum", "dim0", "torch.cumsum(a, 0)", [In(3, 4, 5)])
C("cumsum", "dim_last", "torch.cumsum(a, -1)", [In(3, 4, 5)])
C("cumsum", "zero", "torch.cumsum(a, 0)", [In(0, 3)])
C("cumsum", "int", "torch.cumsum(a, 1)", [In(3, 4, d="int:-9:9")], ("i32", "i64"))
C("cumsum", "bool", "torch.cumsum(a, 0)", [In(5, d="bool")], ("bool",))
C("cumsum", "special", "torch.cumsum(a, 1)", [In(2, 5, d="special")], grad=False)
C("cumsum", "strided", "torch.cumsum(a.t(), 1)", [In(4, 3)])
C("cumprod", "dim", "torch.cumprod(a, 1)", [In(3, 5)])
C("cumprod", "zeros", "torch.cumprod(a, 1)", [In(3, 5, d="zeros1")])
C("cumprod", "int", "torch.cumprod(a, 0)", [In(3, 4, d="int:-3:4")], ("i64",))
C("cumprod", "zero", "torch.cumprod(a, 1)", [In(0, 3)])
C("sum_to", "lead", "a.sum_to_size(3, 1)", [In(2, 3, 4)])
C("sum_to", "inner", "a.sum_to_size(1, 3, 4)", [In(2, 3, 4)])
C("sum_to", "same", "a.sum_to_size(2, 3)", [In(2, 3)])

# ---- linear algebra -------------------------------------------------------------
C("matmul", "2d", "torch.matmul(a, b)", [In(3, 4), In(4, 5)], ALLF)
C("matmul", "1d_2d", "torch.matmul(a, b)", [In(4), In(4, 5)])
C("matmul", "2d_1d", "torch.matmul(a, b)", [In(3, 4), In(4)])
C("matmul", "1d_1d", "torch.matmul(a, b)", [In(4), In(4)])
C("matmul", "batched", "torch.matmul(a, b)", [In(2, 3, 4), In(4, 5)], ALLF)
C("matmul", "bcast", "torch.matmul(a, b)", [In(2, 1, 3, 4), In(3, 4, 2)])
C("matmul", "1d_3d", "torch.matmul(a, b)", [In(4), In(2, 4, 3)])
C("matmul", "strided", "torch.matmul(a.t(), b.t())", [In(4, 3), In(5, 4)])
C("matmul", "zero_m", "torch.matmul(a, b)", [In(0, 4), In(4, 5)])
C("matmul", "zero_k", "torch.matmul(a, b)", [In(3, 0), In(0, 4)])
C("matmul", "int", "torch.matmul(a, b)", [In(3, 4, d="int:-5:5"), In(4, 2, d="int:-5:5")], ("i64",))
C("mm", "main", "torch.mm(a, b)", [In(3, 4), In(4, 5)], ALLF)
C("mm", "strided", "torch.mm(a, b.t())", [In(3, 4), In(5, 4)])
C("mm", "int", "torch.mm(a, b)", [In(3, 4, d="int:-5:5"), In(4, 2, d="int:-5:5")], ("i64", "i32"))
C("bmm", "main", "torch.bmm(a, b)", [In(2, 3, 4), In(2, 4, 5)], ALLF)
C("bmm", "strided", "torch.bmm(a.transpose(1, 2), b)", [In(2, 4, 3), In(2, 4, 5)])
C("bmm", "zero", "torch.bmm(a, b)", [In(0, 3, 4), In(0, 4, 5)])
C("linear", "bias", "F.linear(a, b, c)", [In(3, 4), In(5, 4), In(5)], ALLF)
C("linear", "nobias", "F.linear(a, b)", [In(3, 4), In(5, 4)], ALLF)
C("linear", "3d", "F.linear(a, b, c)", [In(2, 3, 4), In(5, 4), In(5)])
C("linear", "1d_weight", "F.linear(a, b)", [In(3, 4), In(4)])
C("linear", "zero", "F.linear(a, b, c)", [In(0, 4), In(5, 4), In(5)])
C("addmm", "main", "torch.addmm(a, b, c)", [In(3, 5), In(3, 4), In(4, 5)])
C("addmm", "scaled", "torch.addmm(a, b, c, beta=0.5, alpha=2)", [In(5), In(3, 4), In(4, 5)])
C("outer", "main", "torch.outer(a, b)", [In(3), In(4)])
C("einsum", "mm", "torch.einsum('ij,jk->ik', a, b)", [In(3, 4), In(4, 5)])
C("einsum", "bmm", "torch.einsum('bij,bjk->bik', a, b)", [In(2, 3, 4), In(2, 4, 5)])
C("einsum", "attn", "torch.einsum('bhld,bhsd->bhls', a, b)", [In(1, 2, 3, 4), In(1, 2, 5, 4)])
C("einsum", "transpose", "torch.einsum('ij->ji', a)", [In(3, 4)])
C("einsum", "sum_all", "torch.einsum('ij->', a)", [In(3, 4)])
C("einsum", "sum_dim", "torch.einsum('ij->j', a)", [In(3, 4)])
C("einsum", "dot", "torch.einsum('i,i->', a, b)", [In(4), In(4)])
C("einsum", "outer", "torch.einsum('i,j->ij', a, b)", [In(3), In(4)])
C("einsum", "diag", "torch.einsum('ii->i', a)", [In(4, 4)])
C("einsum", "ellipsis", "torch.einsum('...ij,...jk->...ik', a, b)", [In(2, 3, 4), In(2, 4, 5)])
C("einsum", "implicit", "torch.einsum('ij,jk', a, b)", [In(3, 4), In(4, 5)])

# ---- shape and indexing ---------------------------------------------------------
C("cat", "dim0", "torch.cat([a, b], 0)", [In(2, 3), In(4, 3)])
C("cat", "dim1", "torch.cat([a, b, c], 1)", [In(2, 3, 4), In(2, 2, 4), In(2, 1, 4)])
C("cat", "neg_dim", "torch.cat([a, b], -1)", [In(2, 3), In(2, 2)])
C("cat", "zero", "torch.cat([a, b], 0)", [In(2, 3), In(0, 3)])
C("cat", "int", "torch.cat([a, b], 1)", [In(2, 3, d="int:-9:9"), In(2, 1, d="int:-9:9")], ("i64",))
C("cat", "mixed", "torch.cat([a, b], 0)", [In(2, 3, dtype="f32"), In(1, 3, d="int:-9:9", dtype="i64")], MIX)
C("cat", "strided", "torch.cat([a.t(), b], 0)", [In(3, 2), In(1, 3)])
C("stack", "dim0", "torch.stack([a, b, c], 0)", [In(2, 3), In(2, 3), In(2, 3)])
C("stack", "dim_last", "torch.stack([a, b], -1)", [In(2, 3), In(2, 3)])
C("stack", "dim1", "torch.stack([a, b], 1)", [In(2, 3), In(2, 3)])
C("stack", "zero", "torch.stack([a, b], 1)", [In(0, 3), In(0, 3)])
C("split", "size", "torch.split(a, 2, 0)", [In(5, 4)])
C("split", "sizes", "torch.split(a, [1, 3], 1)", [In(5, 4)])
C("chunk", "main", "torch.chunk(a, 3, 0)", [In(5, 4)])
C("chunk", "many", "torch.chunk(a, 6, 1)", [In(2, 4)])
C("unbind", "dim1", "torch.unbind(a, 1)", [In(3, 4)])
C("unbind", "dim0", "torch.unbind(a, 0)", [In(2, 3)])
C("pad", "constant", "F.pad(a, (1, 2), 'constant', 0.5)", [In(2, 3)])
C("pad", "constant_2d", "F.pad(a, (1, 0, 2, 1))", [In(2, 3, 4)])
C("pad", "negative", "F.pad(a, (-1, 2))", [In(2, 3)])
C("pad", "reflect", "F.pad(a, (2, 1), 'reflect')", [In(2, 3, 5)])
C("pad", "reflect_2d", "F.pad(a, (1, 2, 2, 1), 'reflect')", [In(1, 2, 4, 5)])
C("pad", "replicate", "F.pad(a, (2, 3), 'replicate')", [In(2, 3, 4)])
C("pad", "replicate_2d", "F.pad(a, (0, 2, 3, 1), 'replicate')", [In(1, 2, 3, 4)])
C("pad", "zero", "F.pad(a, (1, 1))", [In(0, 3)])
C("pad", "strided", "F.pad(a.transpose(1, 2), (1, 2), 'reflect')", [In(2, 4, 3)])
C("flip", "dims", "torch.flip(a, (0, 2))", [In(2, 3, 4)])
C("flip", "last", "torch.flip(a, (-1,))", [In(3, 4)])
C("flip", "zero", "torch.flip(a, (0,))", [In(0, 3)])
C("roll", "dims", "torch.roll(a, (2, -1), (0, 1))", [In(3, 4)])
C("roll", "flat", "torch.roll(a, 3)", [In(3, 4)])
C("repeat", "main", "a.repeat(2, 1, 3)", [In(2, 3)])
C("repeat", "same_rank", "a.repeat(2, 2)", [In(2, 3)])
C("tile", "fewer", "torch.tile(a, (2,))", [In(2, 3, 4)])
C("tile", "more", "torch.tile(a, (2, 1, 2))", [In(2, 3)])
C("tril", "main", "torch.tril(a)", [In(4, 5)])
C("tril", "neg", "torch.tril(a, -1)", [In(4, 5)])
C("tril", "batch", "torch.tril(a, 2)", [In(2, 3, 4)])
C("tril", "zero", "torch.tril(a)", [In(0, 3)])
C("triu", "main", "torch.triu(a)", [In(4, 5)])
C("triu", "pos", "torch.triu(a, 1)", [In(4, 5)])
C("triu", "batch", "torch.triu(a, -2)", [In(2, 4, 3)])
C("gather", "dim1", "torch.gather(a, 1, b)", [In(3, 5), In(3, 4, d="int:0:5", dtype="i64")])
C("gather", "dim0", "torch.gather(a, 0, b)", [In(3, 4), In(2, 4, d="int:0:3", dtype="i64")])
C("gather", "small", "torch.gather(a, 1, b)", [In(3, 5), In(2, 2, d="int:0:5", dtype="i64")])
C("gather", "i32", "torch.gather(a, 1, b.long())", [In(3, 5), In(3, 4, d="int:0:5", dtype="i32")])
C("gather", "empty", "torch.gather(a, 1, b)", [In(3, 4), In(3, 0, d="int:0:4", dtype="i64")])
C("gather", "strided", "torch.gather(a.t(), 1, b)", [In(5, 3), In(3, 4, d="int:0:5", dtype="i64")])
C("scatter", "src", "torch.scatter(a, 1, b, c)", [In(3, 5), In(3, 2, d="perm:1:5", dtype="i64"), In(3, 2)])
# torch 1.13's scatter backward fails when src is larger than index: forward only.
C("scatter", "src_bigger", "torch.scatter(a, 1, b, c)", [In(3, 5), In(3, 2, d="perm:1:5", dtype="i64"), In(3, 3)], grad=False)
C("scatter", "dim0", "torch.scatter(a, 0, b, c)", [In(4, 3), In(2, 3, d="perm:0:4", dtype="i64"), In(2, 3)])
C("scatter", "value", "torch.scatter(a, 1, b, 2.5)", [In(3, 5), In(3, 2, d="perm:1:5", dtype="i64")])
C("scatter", "int", "torch.scatter(a, 1, b, c)", [In(3, 5, d="int:-9:9"), In(3, 2, d="perm:1:5", dtype="i64"), In(3, 2, d="int:-9:9")], ("i64",))
C("scatter_add", "main", "torch.scatter_add(a, 1, b, c)", [In(3, 5), In(3, 4, d="int:0:5", dtype="i64"), In(3, 4)])
C("scatter_add", "src_bigger", "torch.scatter_add(a, 0, b, c)", [In(3, 4), In(2, 3, d="int:0:3", dtype="i64"), In(3, 4)], grad=False)
C("index_select", "dim1", "torch.index_select(a, 1, b)", [In(3, 5), In(4, d="int:0:5", dtype="i64")])
C("index_select", "dim0", "torch.index_select(a, 0, b)", [In(3, 2, 2), In(5, d="int:0:3", dtype="i64")])
C("index_select", "i32", "torch.index_select(a, 1, b)", [In(3, 5), In(4, d="int:0:5", dtype="i32")])
C("index_select", "empty", "torch.index_select(a, 0, b)", [In(3, 4), In(0, d="int:0:3", dtype="i64")])
C("index_select", "strided", "torch.index_select(a.t(), 0, b)", [In(3, 4), In(5, d="int:0:4", dtype="i64")])
C("index_add", "main", "torch.index_add(a, 0, b, c)", [In(3, 5), In(4, d="int:0:3", dtype="i64"), In(4, 5)])
C("index_add", "alpha", "torch.index_add(a, 1, b, c, alpha=2.0)", [In(3, 5), In(6, d="int:0:5", dtype="i64"), In(3, 6)])
C("masked_fill", "scalar", "torch.masked_fill(a, b, -1.5)", [In(3, 4), In(3, 4, d="bool", dtype="bool")])
C("masked_fill", "bcast", "torch.masked_fill(a, b, 2.0)", [In(3, 5), In(1, 5, d="bool", dtype="bool")])
C("masked_fill", "int", "torch.masked_fill(a, b, 7)", [In(3, 4, d="int:-9:9"), In(3, 4, d="bool", dtype="bool")], ("i64",))
C("masked_fill", "tensor", "torch.masked_fill(a, b, c)", [In(3, 4), In(3, 4, d="bool", dtype="bool"), In()])
C("masked_select", "main", "torch.masked_select(a, b)", [In(3, 4), In(3, 4, d="bool", dtype="bool")])
C("masked_select", "bcast", "torch.masked_select(a, b)", [In(3, 4), In(4, d="bool", dtype="bool")])
C("masked_select", "zero", "torch.masked_select(a, b)", [In(0, 3), In(0, 3, d="bool", dtype="bool")])
C("nonzero", "float", "torch.nonzero(a)", [In(3, 4, d="ties")])
C("nonzero", "bool", "torch.nonzero(a)", [In(2, 3, 4, d="bool")], ("bool",))
C("nonzero", "int", "torch.nonzero(a)", [In(5, d="int:-1:2")], ("i64",))
C("nonzero", "empty", "torch.nonzero(a)", [In(0, 3)])
C("one_hot", "main", "F.one_hot(a, 5)", [In(2, 3, d="int:0:4")], ("i64",))
C("one_hot", "infer", "F.one_hot(a)", [In(6, d="int:0:4")], ("i64",))
C("one_hot", "empty", "F.one_hot(a, 3)", [In(0, d="int:0:3")], ("i64",))
C("topk", "largest", "torch.topk(a, 2)", [In(3, 5)])
C("topk", "smallest", "torch.topk(a, 3, 0, largest=False)", [In(4, 3)])
C("topk", "int", "torch.topk(a, 2)", [In(3, 5, d="int:-50:50")], ("i64",))
C("topk", "k0", "torch.topk(a, 0)", [In(3, 4)])
C("topk", "special", "torch.topk(a, 2)", [In(2, 5, d="neginf")], grad=False)
C("sort", "main", "torch.sort(a)", [In(3, 5)])
C("sort", "desc_dim0", "torch.sort(a, 0, descending=True)", [In(4, 3)])
C("sort", "stable", "torch.sort(a, dim=-1, stable=True)", [In(3, 8, d="ties")])
C("sort", "stable_desc", "torch.sort(a, dim=1, descending=True, stable=True)", [In(3, 8, d="ties")])
C("sort", "int", "torch.sort(a, stable=True)", [In(3, 6, d="int:-3:3")], ("i64",))
C("sort", "zero", "torch.sort(a)", [In(0, 3)])
C("sort", "special", "torch.sort(a, dim=1, stable=True)", [In(2, 5, d="special")], grad=False)
C("sort", "special_desc", "torch.sort(a, dim=1, descending=True, stable=True)", [In(2, 5, d="special")], grad=False)
C("sort", "strided", "torch.sort(a.t(), 1)", [In(5, 3)])
C("argsort", "main", "torch.argsort(a)", [In(3, 5)])
C("argsort", "desc", "torch.argsort(a, 0, descending=True)", [In(4, 3)])
C("argsort", "stable", "torch.argsort(a, dim=-1, stable=True)", [In(3, 8, d="ties")])
# unique is not differentiable (nor in torch): forward only.
C("unique", "float", "torch.unique(a)", [In(3, 5, d="ties")], grad=False)
C("unique", "inverse", "torch.unique(a, return_inverse=True)", [In(3, 5, d="ties")], grad=False)
C("unique", "counts", "torch.unique(a, return_counts=True)", [In(3, 5, d="ties")], grad=False)
C("unique", "both", "torch.unique(a, return_inverse=True, return_counts=True)", [In(12, d="int:-3:4")], ("i64",))
C("unique", "empty", "torch.unique(a, return_counts=True)", [In(0, d="int:0:3")], ("i64",))

# ---- views ---------------------------------------------------------------------------
C("view", "main", "a.view(2, 6)", [In(3, 4)])
C("view", "infer", "a.view(4, -1)", [In(2, 3, 2)])
C("reshape", "contig", "torch.reshape(a, (2, 2, 3))", [In(3, 4)])
C("reshape", "copy", "torch.reshape(a.t(), (-1,))", [In(3, 4)])
C("permute", "main", "a.permute(2, 0, 1)", [In(2, 3, 4)])
C("transpose", "main", "torch.transpose(a, 0, 2)", [In(2, 3, 4)])
C("transpose", "neg", "torch.transpose(a, -1, -2)", [In(2, 3, 4)])
C("slice", "step", "a[:, 1:5:2]", [In(4, 6)])
C("slice", "neg_start", "a[-3:]", [In(4, 6)])
C("slice", "clamp_end", "a[:, 2:100]", [In(4, 6)])
C("select", "last", "a.select(1, -1)", [In(3, 4, 5)])
C("select", "dim0", "a.select(0, 2)", [In(3, 4, 5)])
C("expand", "main", "a.expand(2, 3, 4)", [In(3, 1)])
C("expand", "infer", "a.expand(-1, 5)", [In(3, 1)])
C("squeeze", "all", "torch.squeeze(a)", [In(3, 1, 4, 1)])
C("squeeze", "dim", "torch.squeeze(a, 1)", [In(3, 1, 4, 1)])
C("squeeze", "noop", "torch.squeeze(a, 0)", [In(3, 1, 4, 1)])
C("unsqueeze", "front", "torch.unsqueeze(a, 0)", [In(3, 4)])
C("unsqueeze", "back", "torch.unsqueeze(a, -1)", [In(3, 4)])
C("diagonal", "main", "torch.diagonal(a)", [In(4, 5)])
C("diagonal", "offset", "torch.diagonal(a, 1)", [In(4, 5)])
C("diagonal", "neg_offset", "torch.diagonal(a, -2)", [In(4, 5)])
C("diagonal", "3d", "torch.diagonal(a, 0, 1, 2)", [In(2, 3, 4)])
C("diagonal", "3d_swapped", "torch.diagonal(a, -1, 2, 0)", [In(3, 2, 4)])
C("contiguous", "transposed", "a.t().contiguous()", [In(3, 4)])
C("clone", "main", "torch.clone(a)", [In(3, 4)])
C("to_dtype", "to_f64", "a.to(torch.float64)", [In(3, 4)], F32)
C("to_dtype", "to_f32", "a.to(torch.float32)", [In(3, 4)], ("f64",))
C("to_dtype", "to_f16", "a.to(torch.float16)", [In(3, 4)])
C("to_dtype", "to_bf16", "a.to(torch.bfloat16)", [In(3, 4)])
C("to_dtype", "f16_to_f32", "a.to(torch.float32)", [In(3, 4)], ("f16", "bf16"), native=True)
C("to_dtype", "to_i64", "a.to(torch.int64)", [In(2, 13, d="grid")])
C("to_dtype", "to_i32", "a.to(torch.int32)", [In(3, 4, d="big")])
C("to_dtype", "to_u8", "a.to(torch.uint8)", [In(3, 4, d="pos")], F32)
C("to_dtype", "to_bool", "a.to(torch.bool)", [In(2, 13, d="grid")])
C("to_dtype", "i64_to_f32", "a.to(torch.float32)", [In(3, 4, d="int:-9:9")], ("i64",))
C("to_dtype", "i64_to_i32", "a.to(torch.int32)", [In(3, 4, d="int:-9:9")], ("i64",))
C("to_dtype", "bool_to_f32", "a.to(torch.float32)", [In(3, 4, d="bool")], ("bool",))

# ---- neural-network functions -----------------------------------------------------------
C("softmax", "last", "torch.softmax(a, -1)", [In(3, 5)], ALLF)
C("softmax", "dim0", "torch.softmax(a, 0)", [In(3, 5)])
C("softmax", "3d", "torch.softmax(a, 1)", [In(2, 3, 4)], ALLF)
C("softmax", "big", "torch.softmax(a, -1)", [In(3, 5, d="big")])
C("softmax", "zero", "torch.softmax(a, -1)", [In(0, 5)])
C("softmax", "neginf", "torch.softmax(a, -1)", [In(3, 7, d="neginf")])
C("softmax", "strided", "torch.softmax(a.t(), -1)", [In(5, 3)])
C("log_softmax", "last", "torch.log_softmax(a, -1)", [In(3, 5)], ALLF)
C("log_softmax", "3d", "torch.log_softmax(a, 1)", [In(2, 3, 4)])
C("log_softmax", "big", "torch.log_softmax(a, -1)", [In(3, 5, d="big")])
C("log_softmax", "zero", "torch.log_softmax(a, 0)", [In(0, 5)])
C("log_softmax", "neginf", "torch.log_softmax(a, -1)", [In(3, 7, d="neginf")])
C("log_softmax", "strided", "torch.log_softmax(a.transpose(0, 2), 1)", [In(4, 3, 2)])
C("layer_norm", "affine", "F.layer_norm(a, (5,), b, c)", [In(3, 4, 5), In(5), In(5)], ALLF)
C("layer_norm", "plain", "F.layer_norm(a, (4, 5))", [In(3, 4, 5)], ALLF)
C("layer_norm", "weight_eps", "F.layer_norm(a, (5,), b, None, 1e-3)", [In(3, 5), In(5)])
C("layer_norm", "zero", "F.layer_norm(a, (5,), b, c)", [In(0, 5), In(5), In(5)])
C("layer_norm", "strided", "F.layer_norm(a.transpose(0, 1), (3,), b, c)", [In(3, 4), In(3), In(3)])
C("rms_norm", "weight", "rms(a, (5,), b, 1e-5)", [In(3, 4, 5), In(5)])
C("rms_norm", "plain", "rms(a, (4, 5), None, 1e-6)", [In(3, 4, 5)])
C("rms_norm", "default_eps", "rms(a, (5,), b)", [In(3, 5), In(5)])
C("rms_norm", "strided", "rms(a.t(), (3,), b, 1e-5)", [In(3, 4), In(3)])
C("group_norm", "affine", "F.group_norm(a, 3, b, c)", [In(2, 6, 3), In(6), In(6)])
C("group_norm", "plain", "F.group_norm(a, 2, None, None, 1e-3)", [In(2, 4, 3, 3)])
C("group_norm", "one_group", "F.group_norm(a, 1, b, c)", [In(2, 4, 5), In(4), In(4)])
C("group_norm", "strided", "F.group_norm(a.transpose(1, 2), 2, b, c)", [In(2, 3, 4), In(4), In(4)])
C("batch_norm", "eval", "bn(a, b, c, d, e, False, 0.1, 1e-5)", [In(2, 3, 4), In(3, grad=False), In(3, d="pos", grad=False), In(3), In(3)])
C("batch_norm", "train", "bn(a, b, c, d, e, True, 0.1, 1e-5)", [In(3, 3, 2, 2), In(3, grad=False), In(3, d="pos", grad=False), In(3), In(3)])
C("batch_norm", "train_2d", "bn(a, b, c, None, None, True, 0.3, 1e-3)", [In(4, 3), In(3, grad=False), In(3, d="pos", grad=False)])
C("batch_norm", "train_nostats", "bn(a, None, None, b, c, True, 0.1, 1e-5)", [In(4, 3, 5), In(3), In(3)])
C("batch_norm", "strided", "bn(a.transpose(1, 2), None, None, b, c, True, 0.1, 1e-5)", [In(2, 4, 3), In(3), In(3)])
C("dropout", "eval", "F.dropout(a, 0.5, False)", [In(3, 4)])
C("dropout", "p0", "F.dropout(a, 0.0, True)", [In(3, 4)])
C("embedding", "main", "F.embedding(b, a)", [In(5, 3), In(2, 4, d="int:0:5", dtype="i64")])
C("embedding", "padding", "F.embedding(b, a, padding_idx=1)", [In(5, 3), In(2, 4, d="int:0:5", dtype="i64")])
C("embedding", "i32", "F.embedding(b, a)", [In(5, 3), In(7, d="int:0:5", dtype="i32")])
C("embedding", "zero", "F.embedding(b, a)", [In(5, 3), In(0, d="int:0:5", dtype="i64")])
C("embedding", "strided", "F.embedding(b, a.t())", [In(3, 5), In(2, 4, d="int:0:5", dtype="i64")])
C("conv1d", "main", "F.conv1d(a, b, c)", [In(2, 4, 7), In(6, 4, 3), In(6)])
C("conv1d", "strided", "F.conv1d(a, b, c, 2, 1, 1, 2)", [In(2, 4, 7), In(6, 2, 3), In(6)])
C("conv1d", "dilated", "F.conv1d(a, b, None, 1, 2, 2)", [In(1, 3, 8), In(2, 3, 3)])
C("conv1d", "same", "F.conv1d(a, b, c, 1, 'same')", [In(2, 3, 7), In(4, 3, 4), In(4)])
C("conv1d", "noncontig", "F.conv1d(a.transpose(1, 2), b.transpose(0, 1), c)", [In(2, 7, 3), In(3, 4, 2), In(4)])
C("conv2d", "main", "F.conv2d(a, b, c, 1, 1)", [In(2, 3, 5, 6), In(4, 3, 3, 3), In(4)])
C("conv2d", "strided", "F.conv2d(a, b, None, (2, 1), (0, 1), (1, 2))", [In(1, 3, 6, 6), In(2, 3, 3, 2)])
C("conv2d", "depthwise", "F.conv2d(a, b, c, 1, 1, 1, 4)", [In(1, 4, 5, 5), In(4, 1, 3, 3), In(4)])
C("conv2d", "groups", "F.conv2d(a, b, c, 2, 0, 1, 2)", [In(2, 4, 5, 5), In(6, 2, 2, 2), In(6)])
C("conv2d", "same", "F.conv2d(a, b, None, 1, 'same', (2, 1))", [In(1, 2, 5, 6), In(3, 2, 2, 3)])
C("conv2d", "zero_batch", "F.conv2d(a, b)", [In(0, 3, 5, 5), In(2, 3, 3, 3)])
C("conv2d", "noncontig", "F.conv2d(a.permute(0, 3, 1, 2), b, c, 1, 1)", [In(2, 5, 6, 3), In(4, 3, 3, 3), In(4)])
C("conv_transpose2d", "main", "F.conv_transpose2d(a, b, c)", [In(1, 4, 3, 4), In(4, 3, 3, 3), In(3)])
C("conv_transpose2d", "strided", "F.conv_transpose2d(a, b, c, 2, 1, 1)", [In(2, 2, 3, 3), In(2, 3, 3, 3), In(3)])
C("conv_transpose2d", "groups", "F.conv_transpose2d(a, b, None, (1, 2), (0, 1), (0, 1), 2, (2, 1))", [In(1, 4, 3, 3), In(4, 2, 2, 3)])
C("max_pool2d_with_indices", "main", "F.max_pool2d(a, 2, return_indices=True)", [In(2, 3, 5, 6)])
C("max_pool2d_with_indices", "pad_ceil", "F.max_pool2d(a, 3, 2, 1, 1, True, True)", [In(1, 2, 6, 5)])
C("max_pool2d_with_indices", "dilated", "F.max_pool2d(a, (2, 3), (1, 2), 0, 2, False, True)", [In(1, 2, 6, 6)])
C("max_pool2d", "main", "F.max_pool2d(a, 2)", [In(2, 3, 5, 6)])
C("max_pool2d", "pad_ceil", "F.max_pool2d(a, 3, 2, 1, 1, True)", [In(1, 2, 6, 5)])
C("max_pool2d", "3d_input", "F.max_pool2d(a, (2, 3), (1, 2))", [In(2, 5, 6)])
C("max_pool2d", "strided", "F.max_pool2d(a.transpose(2, 3), 2)", [In(1, 2, 6, 5)])
C("avg_pool2d", "main", "F.avg_pool2d(a, 2)", [In(2, 3, 5, 6)])
C("avg_pool2d", "pad", "F.avg_pool2d(a, 3, 2, 1)", [In(1, 2, 6, 5)])
C("avg_pool2d", "pad_exclude", "F.avg_pool2d(a, 3, 2, 1, False, False)", [In(1, 2, 6, 5)])
C("avg_pool2d", "ceil", "F.avg_pool2d(a, 2, 2, 0, True)", [In(1, 2, 5, 5)])
C("avg_pool2d", "ceil_pad", "F.avg_pool2d(a, 3, 2, 1, True, True)", [In(1, 1, 6, 6)])
C("avg_pool2d", "strided", "F.avg_pool2d(a.transpose(2, 3), 2)", [In(1, 2, 6, 5)])
C("adaptive_avg_pool2d", "div", "F.adaptive_avg_pool2d(a, (1, 3))", [In(2, 3, 4, 6)])
C("adaptive_avg_pool2d", "nondiv", "F.adaptive_avg_pool2d(a, (3, 4))", [In(2, 3, 5, 6)])
C("adaptive_avg_pool2d", "global", "F.adaptive_avg_pool2d(a, 1)", [In(2, 3, 5, 6)])
C("adaptive_avg_pool2d", "up", "F.adaptive_avg_pool2d(a, (4, 5))", [In(1, 2, 3, 3)])
C("interpolate", "nearest_size", "F.interpolate(a, size=(5, 7))", [In(1, 2, 3, 4)])
C("interpolate", "nearest_scale", "F.interpolate(a, scale_factor=(2.0, 1.5))", [In(1, 2, 3, 4)])
C("interpolate", "nearest_down", "F.interpolate(a, size=(2, 3))", [In(1, 2, 5, 6)])
C("interpolate", "bilinear", "F.interpolate(a, size=(5, 7), mode='bilinear', align_corners=False)", [In(1, 2, 3, 4)])
C("interpolate", "bilinear_align", "F.interpolate(a, size=(5, 7), mode='bilinear', align_corners=True)", [In(1, 2, 3, 4)])
C("interpolate", "bilinear_scale", "F.interpolate(a, scale_factor=(1.5, 2.0), mode='bilinear', align_corners=False)", [In(2, 1, 3, 4)])
C("interpolate", "bilinear_down", "F.interpolate(a, size=(2, 3), mode='bilinear', align_corners=False)", [In(1, 2, 5, 6)])
C("interpolate", "strided", "F.interpolate(a.transpose(2, 3), size=(5, 4), mode='bilinear', align_corners=False)", [In(1, 2, 4, 3)])
C("cross_entropy", "main", "F.cross_entropy(a, b)", [In(4, 5), In(4, d="int:0:5", dtype="i64")])
C("cross_entropy", "weight_sum", "F.cross_entropy(a, b, c, reduction='sum')", [In(4, 5), In(4, d="int:0:5", dtype="i64"), In(5, d="pos", grad=False)])
C("cross_entropy", "weight_mean", "F.cross_entropy(a, b, c)", [In(4, 5), In(4, d="int:0:5", dtype="i64"), In(5, d="pos", grad=False)])
C("cross_entropy", "ignore", "F.cross_entropy(a, b, ignore_index=2)", [In(6, 3), In(6, d="int:0:3", dtype="i64")])
C("cross_entropy", "smoothing", "F.cross_entropy(a, b, label_smoothing=0.1)", [In(4, 5), In(4, d="int:0:5", dtype="i64")])
C("cross_entropy", "smoothing_weight", "F.cross_entropy(a, b, c, label_smoothing=0.2)", [In(4, 5), In(4, d="int:0:5", dtype="i64"), In(5, d="pos", grad=False)])
C("cross_entropy", "none", "F.cross_entropy(a, b, reduction='none')", [In(4, 5), In(4, d="int:0:5", dtype="i64")])
C("cross_entropy", "spatial", "F.cross_entropy(a, b)", [In(2, 5, 3), In(2, 3, d="int:0:5", dtype="i64")])
C("cross_entropy", "probs", "F.cross_entropy(a, b)", [In(4, 5), In(4, 5, d="simplex", grad=False)])
C("cross_entropy", "zero", "F.cross_entropy(a, b, reduction='none')", [In(0, 5), In(0, d="int:0:5", dtype="i64")])
C("cross_entropy", "strided", "F.cross_entropy(a.t(), b)", [In(5, 4), In(4, d="int:0:5", dtype="i64")])
C("nll_loss", "main", "F.nll_loss(a, b)", [In(4, 5, d="logp"), In(4, d="int:0:5", dtype="i64")])
C("nll_loss", "weight", "F.nll_loss(a, b, c)", [In(4, 5, d="logp"), In(4, d="int:0:5", dtype="i64"), In(5, d="pos", grad=False)])
C("nll_loss", "ignore_sum", "F.nll_loss(a, b, ignore_index=1, reduction='sum')", [In(6, 3, d="logp"), In(6, d="int:0:3", dtype="i64")])
C("nll_loss", "none", "F.nll_loss(a, b, reduction='none')", [In(4, 5, d="logp"), In(4, d="int:0:5", dtype="i64")])
C("nll_loss", "spatial", "F.nll_loss(a, b)", [In(2, 4, 3, d="n"), In(2, 3, d="int:0:4", dtype="i64")])
C("mse_loss", "mean", "F.mse_loss(a, b)", [In(3, 4), In(3, 4)])
C("mse_loss", "sum", "F.mse_loss(a, b, reduction='sum')", [In(3, 4), In(3, 4)])
C("mse_loss", "none", "F.mse_loss(a, b, reduction='none')", [In(3, 4), In(3, 4)])
C("mse_loss", "zero", "F.mse_loss(a, b, reduction='sum')", [In(0, 3), In(0, 3)])
C("l1_loss", "mean", "F.l1_loss(a, b)", [In(3, 4), In(3, 4)])
C("l1_loss", "none", "F.l1_loss(a, b, reduction='none')", [In(3, 4), In(3, 4)])
C("smooth_l1_loss", "mean", "F.smooth_l1_loss(a, b)", [In(3, 4, d="big"), In(3, 4)])
C("smooth_l1_loss", "beta", "F.smooth_l1_loss(a, b, reduction='none', beta=0.5)", [In(3, 4), In(3, 4)])
C("smooth_l1_loss", "beta0", "F.smooth_l1_loss(a, b, reduction='sum', beta=0.0)", [In(3, 4), In(3, 4)])
C("binary_cross_entropy", "mean", "F.binary_cross_entropy(a, b)", [In(3, 4, d="prob"), In(3, 4, d="prob", grad=False)])
C("binary_cross_entropy", "weight_sum", "F.binary_cross_entropy(a, b, c, reduction='sum')", [In(3, 4, d="prob"), In(3, 4, d="prob", grad=False), In(4, d="pos", grad=False)])
C("binary_cross_entropy", "none", "F.binary_cross_entropy(a, b, reduction='none')", [In(3, 4, d="prob"), In(3, 4, d="bool", grad=False)])
C("binary_cross_entropy_with_logits", "mean", "F.binary_cross_entropy_with_logits(a, b)", [In(3, 4, d="big"), In(3, 4, d="prob", grad=False)])
C("binary_cross_entropy_with_logits", "weight", "F.binary_cross_entropy_with_logits(a, b, c, reduction='sum')", [In(3, 4), In(3, 4, d="prob", grad=False), In(3, 1, d="pos", grad=False)])
C("binary_cross_entropy_with_logits", "pos_weight", "F.binary_cross_entropy_with_logits(a, b, None, reduction='none', pos_weight=c)", [In(3, 4), In(3, 4, d="prob", grad=False), In(4, d="pos", grad=False)])
C("kl_div", "mean", "F.kl_div(a, b, reduction='mean')", [In(3, 4, d="logp"), In(3, 4, d="simplex", grad=False)])
C("kl_div", "sum", "F.kl_div(a, b, reduction='sum')", [In(3, 4, d="logp"), In(3, 4, d="simplex", grad=False)])
C("kl_div", "log_target", "F.kl_div(a, b, reduction='none', log_target=True)", [In(3, 4, d="logp"), In(3, 4, d="logp", grad=False)])
C("scaled_dot_product_attention", "main", "sdpa(a, b, c)", [In(2, 3, 4), In(2, 5, 4), In(2, 5, 6)])
C("scaled_dot_product_attention", "bool_mask", "sdpa(a, b, c, d)", [In(2, 3, 4), In(2, 5, 4), In(2, 5, 4), In(3, 5, d="mask:3:5", dtype="bool")])
C("scaled_dot_product_attention", "float_mask", "sdpa(a, b, c, d)", [In(2, 3, 4), In(2, 5, 4), In(2, 5, 4), In(2, 3, 5, grad=False)])
C("scaled_dot_product_attention", "causal", "sdpa(a, b, c, None, 0.0, True)", [In(1, 2, 4, 3), In(1, 2, 4, 3), In(1, 2, 4, 5)])
C("scaled_dot_product_attention", "scale", "sdpa(a, b, c, None, 0.0, False, 0.5)", [In(1, 2, 3, 4), In(1, 2, 5, 4), In(1, 2, 5, 4)])
C("scaled_dot_product_attention", "strided", "sdpa(a.transpose(1, 2), b.transpose(1, 2), c.transpose(1, 2))", [In(1, 3, 2, 4), In(1, 5, 2, 4), In(1, 5, 2, 4)])


# =============================================================================
def to_torch(arr, tag):
    t = torch.from_numpy(np.array(arr))  # a copy; keeps 0-D arrays 0-D
    return t.to(DTYPES[tag][1])


def raw_bytes(t):
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    if t.dtype == torch.bool:
        return t.to(torch.uint8).numpy().tobytes()
    return t.numpy().tobytes()


class Writer:
    def __init__(self):
        self.chunks, self.count = [], 0

    def tensor(self, key, t):
        k = key.encode()
        shape = tuple(t.shape)
        self.chunks.append(struct.pack("<I", len(k)) + k + struct.pack("<BI", CODE_OF[t.dtype], len(shape)))
        self.chunks.append(struct.pack(f"<{len(shape)}q", *shape) + raw_bytes(t))
        self.count += 1

    def text(self, key, s):
        k, b = key.encode(), s.encode()
        self.chunks.append(struct.pack("<I", len(k)) + k + struct.pack("<BIq", TEXT, 1, len(b)) + b)
        self.count += 1

    def data(self):
        return MAGIC + struct.pack("<II", VERSION, self.count) + b"".join(self.chunks)


def flatten(res):
    if isinstance(res, torch.Tensor):
        return [res]
    return [t for t in res]


def run(case, tag, w):
    prefix = f"{case.op}/{tag}/{case.name}"
    rng = np.random.default_rng([SEED, zlib.crc32(f"{case.op}/{case.name}".encode())])
    reduced = tag in ("f16", "bf16") and not case.native
    stored, args, leaves = [], [], []
    for i, spec in enumerate(case.inputs):
        dtag = spec.dtype or tag
        assert dtag in DTYPES, f"{prefix}: input {i} needs an explicit dtype"
        t = to_torch(values(rng, spec.shape, spec.d), dtag)
        stored.append(t)
        x = t.float() if reduced and t.dtype in (torch.float16, torch.bfloat16) else t.clone()
        if case.grad and spec.grad is not False and x.is_floating_point():
            x.requires_grad_(True)
            leaves.append(i)
        args.append(x)
    env = {"torch": torch, "F": F, "math": math, "INF": INF, "rms": rms, "sdpa": sdpa, "bn": bn}
    env.update(zip("abcdef", args))
    outs = flatten(eval(case.call, env))

    def store_dtype(o):
        return DTYPES[tag][1] if reduced and o.dtype == torch.float32 else o.dtype

    w.text(prefix + "/call", case.call + ("  [f32 reference, rounded]" if reduced else ""))
    for i, t in enumerate(stored):
        w.tensor(f"{prefix}/in{i}", t)
    for i, o in enumerate(outs):
        w.tensor(f"{prefix}/out{i}", o.detach().to(store_dtype(o)))
    diff = [(i, o) for i, o in enumerate(outs) if o.requires_grad]
    if not leaves or not diff:
        return
    vs = []
    for i, o in diff:
        v = to_torch(rng.standard_normal(tuple(o.shape)), "f64").to(store_dtype(o))
        w.tensor(f"{prefix}/v{i}", v)
        vs.append(v.to(o.dtype))
    grads = torch.autograd.grad([o for _, o in diff], [args[i] for i in leaves], vs, allow_unused=True)
    for i, g in zip(leaves, grads):
        if g is None:
            g = torch.zeros_like(args[i])
        w.tensor(f"{prefix}/grad{i}", g.to(stored[i].dtype))


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    seen = set()
    w = Writer()
    ncases = 0
    for case in CASES:
        key = (case.op, case.name)
        assert key not in seen, f"duplicate case {key}"
        seen.add(key)
        for tag in case.dtypes:
            try:
                run(case, tag, w)
            except Exception as e:
                raise RuntimeError(f"case {case.op}/{tag}/{case.name}: {e}") from e
            ncases += 1
    out = Path(__file__).resolve().parent / "ops.bin"
    data = w.data()
    out.write_bytes(data)
    ops = {c.op for c in CASES}
    print(f"wrote {out}: {len(data)} bytes, {w.count} records, {ncases} cases "
          f"({len(CASES)} rows, {len(ops)} ops), torch {torch.__version__}")


if __name__ == "__main__":
    sys.exit(main())
