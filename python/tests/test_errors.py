"""Bad input from Python: the exception types Python users expect, Tessera's
messages, and never a crash — every bound op called with wrong types, wrong
shapes, None and huge sizes."""
import itertools

import numpy as np
import pytest

import tessera
import tessera.nn.functional as F


def test_exception_types():
    a = tessera.ones(2, 3)
    with pytest.raises(TypeError, match="must be an int"):
        tessera.sum(a, "x")
    with pytest.raises(TypeError, match="unexpected keyword argument 'dimension'"):
        tessera.sum(a, dimension=0)
    with pytest.raises(ValueError):  # a shape that does not broadcast
        a + tessera.ones(4)
    with pytest.raises(RuntimeError):  # the same error, as PyTorch code catches it
        a + tessera.ones(4)
    with pytest.raises(tessera.Error, match="broadcast"):
        a + tessera.ones(4)
    with pytest.raises(IndexError):
        a[3]
    with pytest.raises(IndexError, match="dimension out of range"):
        a.size(5)
    with pytest.raises(TypeError):
        a + "text"
    with pytest.raises(TypeError, match="a list of Tensors"):
        tessera.cat(5)


def test_out_of_memory_is_a_memory_error():
    tessera.set_memory_limit(64 << 20)
    try:
        with pytest.raises(MemoryError, match="out of memory"):
            tessera.zeros(1 << 30)
        with pytest.raises(tessera.OutOfMemoryError):
            tessera.zeros(1 << 30)
    finally:
        tessera.set_memory_limit(0)


def test_messages_name_what_was_wrong():
    with pytest.raises(tessera.Error) as e:
        tessera.matmul(tessera.ones(2, 3), tessera.ones(4, 5))
    assert "3" in str(e.value) and "4" in str(e.value)
    with pytest.raises(TypeError, match="signature"):
        tessera.softmax(tessera.ones(2))  # dim is required


BAD_VALUES = [None, "x", 1.5, -1, 0, 2 ** 62, -(2 ** 62), [], [2 ** 40, 2 ** 40], (3, -7), True, object(),
              np.zeros(3), float("nan")]


def _tensors():
    return [tessera.ones(2, 3), tessera.ones(0), tessera.tensor(3.0), tessera.ones(2, 3, dtype=tessera.int64),
            tessera.ones(1, 2, 3, 4), tessera.ones(2, dtype=tessera.bool)]


ALLOWED = (TypeError, ValueError, RuntimeError, IndexError, MemoryError, NotImplementedError)


def _namespaces():
    yield "ops", tessera.ops
    yield "F", F


def test_every_bound_op_survives_bad_arguments():
    """Each op of tessera.ops and nn.functional with every combination of a few
    bad values for its first arguments: an exception of an allowed type or a
    result, never a crash or a hang."""
    tessera.set_memory_limit(256 << 20)
    calls = 0
    skip = {"all_reduce", "all_gather", "reduce_scatter", "copy_to_group", "reduce_from_group",
            "gather_from_group", "scatter_to_group"}  # need a process group: tested in test_distributed
    try:
        for space, mod in _namespaces():
            for name in sorted(n for n in dir(mod) if not n.startswith("_")):
                fn = getattr(mod, name)
                if not callable(fn) or name in skip:
                    continue
                for args in itertools.chain(
                        ([v] for v in BAD_VALUES + _tensors()),
                        ([t, v] for t in _tensors()[:3] for v in BAD_VALUES),
                        ([t, u, v] for t in _tensors()[:2] for u in _tensors()[:2] for v in BAD_VALUES[:6])):
                    calls += 1
                    try:
                        fn(*args)
                    except ALLOWED:
                        pass
    finally:
        tessera.set_memory_limit(0)
    assert calls > 10_000
