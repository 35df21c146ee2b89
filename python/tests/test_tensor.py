"""Tensors from Python: construction, dtypes, printing, Python's operators,
indexing, and memory shared with NumPy and through DLPack."""
import threading

import numpy as np
import pytest

import tessera


def test_tensor_infers_dtypes_as_pytorch():
    assert tessera.tensor([1.0, 2.0]).dtype == tessera.float32
    assert tessera.tensor([1, 2]).dtype == tessera.int64
    assert tessera.tensor([True, False]).dtype == tessera.bool
    assert tessera.tensor(np.zeros(3)).dtype == tessera.float64
    assert tessera.tensor([[1, 2], [3, 4]], dtype=tessera.float64).dtype == tessera.float64
    assert tessera.tensor([[1, 2], [3, 4]]).shape == (2, 2)
    assert tessera.tensor(3.5).item() == 3.5
    assert tessera.tensor([1.5, 2.5], requires_grad=True).requires_grad


def test_factories_take_sizes_as_pytorch():
    assert tessera.zeros(2, 3).shape == (2, 3)
    assert tessera.zeros((2, 3)).shape == (2, 3)
    assert tessera.ones([4]).tolist() == [1.0, 1.0, 1.0, 1.0]
    assert tessera.full((2,), 7).dtype == tessera.int64
    assert tessera.full((2,), 7.0).dtype == tessera.float32
    assert tessera.arange(5).tolist() == [0, 1, 2, 3, 4]
    assert tessera.arange(1, 2, 0.5).tolist() == [1.0, 1.5]
    assert tessera.eye(2).tolist() == [[1.0, 0.0], [0.0, 1.0]]
    tessera.manual_seed(0)
    a = tessera.randn(3, 4)
    tessera.manual_seed(0)
    assert (a == tessera.randn(3, 4)).all().item()
    assert tessera.randint(0, 10, (100,)).max().item() < 10


def test_repr_reads_like_pytorch():
    assert repr(tessera.tensor([1.0, 2.5])) == "tensor([1.0000, 2.5000])"
    assert repr(tessera.tensor([1, 2])) == "tensor([1, 2])"
    assert repr(tessera.tensor([1.0], dtype=tessera.float64)) == "tensor([1.], dtype=tessera.float64)"
    assert "requires_grad=True" in repr(tessera.ones(2, requires_grad=True))
    assert repr(tessera.float16) == "tessera.float16"


def test_operators_broadcast_and_promote_like_pytorch():
    a = tessera.tensor([[1.0, 2.0], [3.0, 4.0]])
    b = tessera.tensor([10.0, 20.0])
    assert (a + b).tolist() == [[11.0, 22.0], [13.0, 24.0]]
    assert (a * 2).dtype == tessera.float32  # a Python number does not widen a tensor
    assert (2 - a).tolist() == [[1.0, 0.0], [-1.0, -2.0]]
    assert (a / 2).tolist() == [[0.5, 1.0], [1.5, 2.0]]
    assert (a @ a).tolist() == [[7.0, 10.0], [15.0, 22.0]]
    assert (a ** 2).tolist() == [[1.0, 4.0], [9.0, 16.0]]
    assert (tessera.tensor([7]) // 2).tolist() == [3]
    assert (tessera.tensor([7]) % 3).tolist() == [1]
    assert (a > 2).tolist() == [[False, False], [True, True]]
    assert (-a).tolist() == [[-1.0, -2.0], [-3.0, -4.0]]
    assert (tessera.tensor([1, 2]) + 0.5).dtype == tessera.float32
    c = a.clone()
    c += 1
    assert c.tolist() == [[2.0, 3.0], [4.0, 5.0]]


def test_methods_come_from_the_op_table():
    a = tessera.tensor([[1.0, 5.0], [3.0, 2.0]])
    assert a.sum().item() == 11.0
    assert a.sum(0).tolist() == [4.0, 7.0]
    assert a.sum(dim=1, keepdim=True).shape == (2, 1)
    values, indices = a.max(1)
    assert values.tolist() == [5.0, 3.0] and indices.tolist() == [1, 0]
    assert tessera.max(a, tessera.ones(2, 2) * 4).tolist() == [[4.0, 5.0], [4.0, 4.0]]
    assert a.view(4).shape == (4,) and a.view(1, 4).shape == (1, 4) and a.reshape((4, 1)).shape == (4, 1)
    assert a.permute(1, 0).tolist() == a.T.tolist() == a.t().tolist()
    assert a.transpose(0, 1).is_contiguous() is False
    assert tessera.cat([a, a], dim=0).shape == (4, 2)
    assert tessera.einsum("ij,jk->ik", a, a).tolist() == (a @ a).tolist()
    assert len(a.split(1)) == 2
    assert a.softmax(-1).sum(-1).tolist() == pytest.approx([1.0, 1.0])
    assert a.unsqueeze(0).shape == (1, 2, 2) and a.unsqueeze(0).squeeze(0).shape == (2, 2)


def test_indexing_with_ints_slices_none_ellipsis_and_tensors():
    a = tessera.arange(24).reshape(2, 3, 4)
    n = np.arange(24).reshape(2, 3, 4)
    for index in [0, -1, (1, 2), (slice(None), 1), (Ellipsis, 2), (None, 0), (slice(1, None), slice(None, None, 2)),
                  (0, slice(0, 3, 2), slice(1, 3)), (Ellipsis,), (0, None, Ellipsis, None)]:
        assert np.array_equal(a[index].numpy(), n[index]), index
    assert np.array_equal(a[tessera.tensor([1, 0])].numpy(), n[[1, 0]])
    assert np.array_equal(a[:, [2, 0]].numpy(), n[:, [2, 0]])
    mask = a > 20
    assert np.array_equal(a[mask].numpy(), n[n > 20])
    assert np.array_equal(a[0][a[0] % 2 == 0].numpy(), n[0][n[0] % 2 == 0])
    with pytest.raises(IndexError):
        a[5]
    with pytest.raises(IndexError):
        a[0, 0, 0, 0]


def test_setitem_writes_through_views():
    a = tessera.zeros(3, 4)
    a[0] = 1.0
    a[1, 1:3] = tessera.tensor([5.0, 6.0])
    a[:, -1] = 9
    a[a > 8] = 2.0
    want = np.zeros((3, 4), dtype=np.float32)
    want[0] = 1
    want[1, 1:3] = [5, 6]
    want[:, -1] = 2
    assert np.array_equal(a.numpy(), want)


def test_numpy_shares_memory_both_ways():
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = tessera.from_numpy(arr)
    arr[0, 0] = 100
    assert t[0, 0].item() == 100
    t[1, 2] = -1
    assert arr[1, 2] == -1
    back = t.numpy()
    assert np.shares_memory(back, arr)
    # Strided views share too; negative strides are copied.
    v = tessera.from_numpy(arr[:, ::2])
    assert v.shape == (2, 2) and v.stride() == (3, 2)
    arr[1, 2] = 7
    assert v[1, 1].item() == 7
    flipped = tessera.from_numpy(arr[::-1])
    assert flipped[0, 0].item() == arr[1, 0]
    assert np.asarray(t).base is not None and np.shares_memory(np.asarray(t), arr)
    assert np.array_equal(np.asarray(tessera.ones(2, 2).T), np.ones((2, 2)))
    for dt in (np.bool_, np.uint8, np.int8, np.int32, np.int64, np.float16, np.float32, np.float64):
        x = np.ones(3, dtype=dt)
        assert tessera.from_numpy(x).numpy().dtype == dt


def test_numpy_array_outlives_the_python_names():
    t = tessera.from_numpy(np.full(1000, 3.0))
    import gc
    gc.collect()
    assert t.sum().item() == 3000.0


def test_unsupported_numpy_dtypes_name_the_supported_ones():
    with pytest.raises(TypeError, match="supported ones"):
        tessera.from_numpy(np.zeros(3, dtype=np.int16))
    with pytest.raises(TypeError, match="bfloat16"):
        tessera.ones(2, dtype=tessera.bfloat16).numpy()
    with pytest.raises(TypeError, match="detach"):
        tessera.ones(2, requires_grad=True).numpy()


def test_dlpack_shares_memory_with_numpy():
    t = tessera.arange(6, dtype=tessera.float32).reshape(2, 3)
    a = np.from_dlpack(t)  # NumPy marks arrays from DLPack read-only; writes through t show in a
    t[0, 1] = 42
    assert a[0, 1] == 42
    back = tessera.from_dlpack(np.arange(4.0))
    assert back.dtype == tessera.float64 and back.tolist() == [0.0, 1.0, 2.0, 3.0]
    x = np.arange(4.0)
    y = tessera.from_dlpack(x)
    x[2] = -5
    assert y[2].item() == -5
    s = tessera.arange(12).reshape(3, 4)[:, 1::2]
    assert np.array_equal(np.from_dlpack(s), np.arange(12).reshape(3, 4)[:, 1::2])


def test_dlpack_shares_memory_with_pytorch():
    torch = pytest.importorskip("torch")
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    t = tessera.from_dlpack(a)
    a[1, 1] = 9
    assert t[1, 1].item() == 9
    back = torch.utils.dlpack.from_dlpack(tessera.ones(2, 2).__dlpack__())
    assert back.sum().item() == 4
    src = tessera.tensor([1.0, 2.0])
    shared = torch.from_dlpack(src)
    shared[0] = 7
    assert src[0].item() == 7


def test_ops_release_the_gil():
    # Two Python threads each run large matmuls; with the GIL released both make progress at once.
    a = tessera.randn(256, 256)
    results = []

    def work():
        r = a
        for _ in range(5):
            r = (r @ a).tanh()
        results.append(r.shape)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results == [(256, 256), (256, 256)]


def test_no_leak_after_ten_thousand_ops():
    import gc
    import tracemalloc
    a = tessera.ones(8, 8)
    for _ in range(200):
        (a + a).sum()
    gc.collect()
    before = tessera.memory_allocated()
    tracemalloc.start()
    snap0 = tracemalloc.take_snapshot()
    for _ in range(10_000):
        b = (a * 2 + 1).relu()
        del b
    gc.collect()
    snap1 = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in snap1.compare_to(snap0, "filename") if s.size_diff > 0)
    assert tessera.memory_allocated() == before
    assert grown < 64 * 1024, grown


def test_values_and_indices_come_as_named_tuples():
    x = tessera.tensor([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]])
    r = tessera.max(x, 1)
    assert isinstance(r, tessera.return_types.max) and isinstance(r, tuple)
    assert r.values.tolist() == [5.0, 6.0] and r.indices.tolist() == [1, 2]
    assert repr(r).startswith("tessera.return_types.max(values=tensor([5., 6.]), indices=tensor([1, 2]))")
    values, indices = x.sort(dim=1, descending=True)
    assert values.tolist() == [[5.0, 3.0, 1.0], [6.0, 4.0, 2.0]] and indices.tolist() == [[1, 2, 0], [2, 0, 1]]
    assert x.topk(1).indices.tolist() == [[1], [2]]
    assert tessera.min(x, dim=0, keepdim=True).values.tolist() == [[1.0, 2.0, 3.0]]
    assert type(x.max()) is tessera.Tensor  # one output: the tensor itself
    u = tessera.unique(tessera.tensor([1, 1, 2]), return_counts=True)
    assert type(u) is tuple  # as PyTorch: unique's results are a plain tuple


def test_several_tensor_indices_follow_numpy():
    """Note [Several tensor indices]: values as NumPy's advanced indexing, the
    gradient as np.add.at (repeated positions add up)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)
    i, j = np.array([0, 2, 3, 2]), np.array([1, 1, -2, 1])
    rows, cols = np.array([[0], [3]]), np.array([1, 4, 2])
    mask = np.array([True, False, True, True])
    cases = [  # (index for NumPy, the same for Tessera)
        ((i, j), lambda T: (T(i), T(j))),
        ((rows, cols), lambda T: (T(rows), T(cols))),                       # broadcast to [2, 3]
        ((slice(None), i[:2], j[:2]), lambda T: (slice(None), T(i[:2]), T(j[:2]))),  # adjacent: in place
        ((i[:2], slice(None), j[:2]), lambda T: (T(i[:2]), slice(None), T(j[:2]))),  # apart: first
        ((i[:2], 2, j[:2]), lambda T: (T(i[:2]), 2, T(j[:2]))),
        (([0, 1], [2, 3]), lambda T: ([0, 1], [2, 3])),
        ((mask, np.array([0, 1, 2])), lambda T: (T(mask), T(np.array([0, 1, 2])))),
        ((Ellipsis, [0, 1], [2, 3]), lambda T: (Ellipsis, [0, 1], [2, 3])),
    ]
    for k, (npi, ti) in enumerate(cases):
        xt = tessera.tensor(x, requires_grad=True)
        y = xt[ti(tessera.tensor)]
        assert y.shape == x[npi].shape, k
        assert np.array_equal(y.detach().numpy(), x[npi]), k
        y.sum().backward()
        grad = np.zeros_like(x)
        np.add.at(grad, npi, 1.0)
        assert np.array_equal(xt.grad.numpy(), grad), k
    # Assignment through them: a number, a tensor broadcast to the selection.
    for npi, ti, value in [((i, j), lambda T: (T(i), T(j)), 7.0),
                           ((i[:2], j[:2]), lambda T: (T(i[:2]), T(j[:2])), np.full((2, 6), 3.0, np.float32)),
                           ((np.array([1, 3]),), lambda T: (T(np.array([1, 3])),), np.arange(30.0, dtype=np.float32).reshape(5, 6)),
                           ((slice(None), [0, 4]), lambda T: (slice(None), [0, 4]), np.zeros((4, 2, 1), np.float32))]:
        expect = x.copy()
        expect[npi] = value
        t = tessera.tensor(x)
        t[ti(tessera.tensor)] = value if isinstance(value, float) else tessera.tensor(value)
        assert np.array_equal(t.numpy(), expect)
    t = tessera.tensor(x)
    with pytest.raises(IndexError, match="index 4 is out of bounds for dimension 0 with size 4"):
        t[tessera.tensor([0, 4]), tessera.tensor([1, 1])]
    with pytest.raises(ValueError, match="cannot be broadcast"):
        t[tessera.tensor([0, 1]), tessera.tensor([1, 1, 1])]
