"""Tensor factories with PyTorch's signatures: sizes as *size or a sequence,
dtypes inferred from the values, requires_grad= on the result. They call the
op table's factory ops (full, arange, rand, ...)."""
import builtins as _builtins

import numpy as _np

from . import _C
from ._C import result_type  # noqa: F401

_ops = _C.ops


def _size(size):
    """(2, 3), ((2, 3),) and ([2, 3],) all mean the shape [2, 3]."""
    if len(size) == 1 and isinstance(size[0], (list, tuple)):
        size = size[0]
    out = []
    for s in size:
        if isinstance(s, _builtins.bool) or not hasattr(s, "__index__"):
            raise TypeError(f"a size must be a sequence of ints, got {type(s).__name__}")
        out.append(s.__index__())
    return out


def _finish(t, requires_grad, device=None):
    if device is not None and str(device) != str(t.device):
        t = t.to(device)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _numpy_dtype_of(value):
    """The dtype PyTorch gives a Python value: floats the default float dtype, ints int64."""
    if isinstance(value, _builtins.bool):
        return _C.bool_
    if isinstance(value, _builtins.int):
        return _C.int64
    if isinstance(value, _builtins.float):
        return _C.get_default_dtype()
    raise TypeError(f"expected a number, got {type(value).__name__}")


def tensor(data, *, dtype=None, device=None, requires_grad=False):
    """A new tensor holding a copy of `data` (nested sequences of numbers, a NumPy
    array, a tensor). Python floats become the default float dtype (float32),
    ints int64, bools bool; a NumPy array keeps its dtype."""
    if isinstance(data, Tensor):
        t = data.detach().clone()
    else:
        was_array = isinstance(data, _np.ndarray) or isinstance(data, _np.generic)
        try:
            a = _np.array(data)
        except (ValueError, TypeError) as e:
            raise TypeError(f"tensor(): cannot make a tensor from {type(data).__name__}: {e}") from None
        if a.dtype == object:
            raise TypeError(f"tensor(): cannot make a tensor from {type(data).__name__} "
                            "(ragged nesting or values that are not numbers)")
        if not was_array:
            if a.dtype.kind == "f":
                a = a.astype(_np.float32 if _C.get_default_dtype() == _C.float32 else _np.float64)
            elif a.dtype.kind in "iu":
                a = a.astype(_np.int64)
        t = _C.from_numpy(_np.ascontiguousarray(a)).clone()
    if dtype is not None:
        t = t.to(dtype)
    return _finish(t, requires_grad, device)


def as_tensor(data, dtype=None, device=None):
    """Shares memory with `data` where it can (a tensor, a NumPy array), else copies."""
    if isinstance(data, Tensor):
        return data if dtype is None else data.to(dtype)
    if isinstance(data, _np.ndarray):
        t = _C.from_numpy(data)
        return t if dtype is None else t.to(dtype)
    return tensor(data, dtype=dtype, device=device)


def full(size, fill_value, *, dtype=None, device=None, requires_grad=False):
    """A tensor of `size` (a tuple or an int) holding fill_value; its dtype is fill_value's (bool, int64, the
    default float) unless given."""
    if dtype is None:
        dtype = _numpy_dtype_of(fill_value) if not isinstance(fill_value, Tensor) else fill_value.dtype
    return _finish(_ops.full(_size((size,)), fill_value, dtype=dtype), requires_grad, device)


def zeros(*size, dtype=None, device=None, requires_grad=False):
    """A tensor of zeros of shape `size` (ints or one tuple); dtype: the default float
    (tessera.get_default_dtype()) unless given."""
    return _finish(_ops.full(_size(size), 0, dtype=dtype or _C.get_default_dtype()), requires_grad, device)


def ones(*size, dtype=None, device=None, requires_grad=False):
    """A tensor of ones of shape `size` (ints or one tuple); dtype: the default float unless given."""
    return _finish(_ops.full(_size(size), 1, dtype=dtype or _C.get_default_dtype()), requires_grad, device)


def empty(*size, dtype=None, device=None, requires_grad=False):
    """Tessera zero-fills: reading memory a caller did not write is never undefined."""
    return zeros(*size, dtype=dtype, device=device, requires_grad=requires_grad)


def zeros_like(t, *, dtype=None, requires_grad=False):
    """Zeros of t's shape, of t's dtype unless given."""
    return zeros(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def ones_like(t, *, dtype=None, requires_grad=False):
    """Ones of t's shape, of t's dtype unless given."""
    return ones(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def empty_like(t, *, dtype=None, requires_grad=False):
    """A tensor of t's shape and dtype (zero-filled, as empty)."""
    return zeros_like(t, dtype=dtype, requires_grad=requires_grad)


def full_like(t, fill_value, *, dtype=None, requires_grad=False):
    """fill_value in t's shape, of t's dtype unless given."""
    return full(t.shape, fill_value, dtype=dtype or t.dtype, requires_grad=requires_grad)


def rand(*size, dtype=None, device=None, requires_grad=False):
    """Uniform [0, 1) numbers of shape `size` from the global generator (tessera.manual_seed), the default
    float unless given."""
    return _finish(_ops.rand(_size(size), dtype=dtype or _C.get_default_dtype()), requires_grad, device)


def randn(*size, dtype=None, device=None, requires_grad=False):
    """Standard normal numbers of shape `size` from the global generator, the default float unless given."""
    return _finish(_ops.randn(_size(size), dtype=dtype or _C.get_default_dtype()), requires_grad, device)


def rand_like(t, *, dtype=None):
    """Uniform [0, 1) numbers in t's shape and dtype."""
    return rand(t.shape, dtype=dtype or t.dtype)


def randn_like(t, *, dtype=None):
    """Standard normal numbers in t's shape and dtype."""
    return randn(t.shape, dtype=dtype or t.dtype)


def randint(low, high=None, size=None, *, dtype=None, device=None):
    """randint(high, size) or randint(low, high, size), as torch.randint."""
    if size is None:
        if high is None:
            raise TypeError("randint() needs a size: randint(high, size) or randint(low, high, size)")
        low, high, size = 0, low, high
    return _finish(_ops.randint(low, high, _size((size,)), dtype=dtype or _C.int64), False, device)


def arange(start, end=None, step=1, *, dtype=None, device=None, requires_grad=False):
    """arange(end), arange(start, end), arange(start, end, step)."""
    if end is None:
        start, end = 0, start
    return _finish(_ops.arange(start, end, step, dtype=dtype), requires_grad, device)


Tensor = _C.Tensor
