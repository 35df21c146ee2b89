"""Reads tests/golden/ops.bin (written by tests/golden/generate.py; the format is
in tests/golden/README.md and tests/golden_reader.h) into NumPy-backed tessera
tensors, for the Python twin of the C++ golden test."""
import struct

import numpy as np

import tessera

# Tessera's DType enum order: the codes ops.bin stores.
DTYPES = [tessera.bool, tessera.uint8, tessera.int8, tessera.int32, tessera.int64, tessera.float16,
          tessera.bfloat16, tessera.float32, tessera.float64]
NUMPY = [np.bool_, np.uint8, np.int8, np.int32, np.int64, np.float16, None, np.float32, np.float64]
TEXT = 255


class Case:
    def __init__(self, op, dtype, name):
        self.op, self.dtype, self.name = op, dtype, name
        self.call = ""
        self.inputs, self.outputs, self.v, self.grads = {}, {}, {}, {}

    @property
    def key(self):
        return f"{self.op}/{self.dtype}/{self.name}"


def _tensor(code, dims, raw):
    if DTYPES[code] == tessera.bfloat16:
        bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
        t = tessera.from_numpy(bits.view(np.float32).reshape(dims).copy()).to(tessera.bfloat16)
    else:
        t = tessera.from_numpy(np.frombuffer(raw, dtype=NUMPY[code]).reshape(dims).copy())
    return t


def load(path):
    data = pathlib_read(path)
    if data[:8] != b"TSGOLD01":
        raise ValueError(f"{path}: bad magic")
    version, count = struct.unpack_from("<II", data, 8)
    if version != 1:
        raise ValueError(f"{path}: unsupported version {version}")
    pos = 16
    cases = {}
    for _ in range(count):
        (klen,) = struct.unpack_from("<I", data, pos)
        pos += 4
        key = data[pos:pos + klen].decode()
        pos += klen
        code, ndim = struct.unpack_from("<BI", data, pos)
        pos += 5
        dims = list(struct.unpack_from(f"<{ndim}q", data, pos))
        pos += 8 * ndim
        prefix, slot = key.rsplit("/", 1)
        op, dtype, name = prefix.split("/", 2)
        case = cases.setdefault(prefix, Case(op, dtype, name))
        if code == TEXT:
            case.call = data[pos:pos + dims[0]].decode()
            pos += dims[0]
            continue
        n = int(np.prod(dims)) if dims else 1
        size = n * DTYPES[code].itemsize
        t = _tensor(code, dims, data[pos:pos + size])
        pos += size
        kind = slot.rstrip("0123456789")
        index = int(slot[len(kind):])
        {"in": case.inputs, "out": case.outputs, "v": case.v, "grad": case.grads}[kind][index] = t
    if pos != len(data):
        raise ValueError(f"{path}: {len(data) - pos} trailing bytes")
    return list(cases.values())


def pathlib_read(path):
    with open(path, "rb") as f:
        return f.read()


# Note [Golden tolerances] in tests/ops/test_golden.cpp, the same rule.
TOL = {tessera.float64: (1e-10, 1e-12), tessera.float32: (1e-5, 1e-6), tessera.float16: (1e-2, 1e-3),
       tessera.bfloat16: (2e-2, 1e-2)}


def loosest(case):
    rtol, atol = 0.0, 0.0
    for t in list(case.inputs.values()) + list(case.outputs.values()):
        r, a = TOL.get(t.dtype, (0.0, 0.0))
        rtol, atol = max(rtol, r), max(atol, a)
    return rtol, atol


def as_f64(t):
    return t.detach().to(tessera.float64).numpy()


def compare(got, want, case_tol):
    """Empty when they match, else what differs."""
    if not isinstance(got, tessera.Tensor):
        return f"got {type(got).__name__}, not a Tensor"
    if got.dtype != want.dtype:
        return f"dtype: got {got.dtype}, want {want.dtype}"
    if tuple(got.shape) != tuple(want.shape):
        return f"shape: got {tuple(got.shape)}, want {tuple(want.shape)}"
    g, w = as_f64(got), as_f64(want)
    if not want.dtype.is_floating_point:
        return "" if np.array_equal(g, w) else f"values differ: got {g}, want {w}"
    rtol, atol = TOL[want.dtype]
    rtol, atol = max(rtol, case_tol[0]), max(atol, case_tol[1])
    finite = np.isfinite(w)
    scale = max(1.0, float(np.max(np.abs(w[finite]))) if finite.any() else 1.0)
    with np.errstate(invalid="ignore"):  # inf - inf where both are inf: judged by g == w
        ok = np.where(np.isnan(w), np.isnan(g),
                      np.where(np.isinf(w), g == w, np.abs(g - w) <= atol * scale + rtol * np.abs(w)))
    if ok.all():
        return ""
    return f"{int((~ok).sum())} of {ok.size} elements differ: got {g.reshape(-1)[:6]}, want {w.reshape(-1)[:6]}"
