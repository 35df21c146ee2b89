"""Autograd from Python: backward, grad with create_graph, grad modes, hooks,
anomaly mode, and Python autograd.Functions checked by gradcheck."""
import pytest

import tessera
from tessera.autograd import Function, gradcheck


def test_backward_fills_leaf_grads():
    x = tessera.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x * x).sum()
    y.backward()
    assert x.grad.tolist() == [2.0, 4.0, 6.0]
    assert x.is_leaf and not y.is_leaf and y.grad_fn is not None


def test_grad_with_create_graph_gives_second_derivatives():
    x = tessera.tensor([0.5, -1.0], dtype=tessera.float64, requires_grad=True)
    y = (x ** 3).sum()
    (g,) = tessera.autograd.grad(y, x, create_graph=True)
    assert g.tolist() == pytest.approx([0.75, 3.0])
    (h,) = tessera.autograd.grad(g.sum(), x)
    assert h.tolist() == pytest.approx([3.0, -6.0])


def test_grad_modes():
    x = tessera.ones(2, requires_grad=True)
    with tessera.no_grad():
        assert not (x * 2).requires_grad
        with tessera.enable_grad():
            assert (x * 2).requires_grad
    with tessera.inference_mode():
        assert not (x * 2).requires_grad
    assert (x * 2).requires_grad

    @tessera.no_grad()
    def f(t):
        return t * 2

    assert not f(x).requires_grad
    tessera.set_grad_enabled(False)
    assert not tessera.is_grad_enabled()
    tessera.set_grad_enabled(True)


def test_tensor_hooks_see_and_replace_gradients():
    x = tessera.ones(3, requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(g.tolist()))
    y = x * 2
    y.register_hook(lambda g: g * 10)
    y.sum().backward()
    assert seen == [[20.0, 20.0, 20.0]]
    assert x.grad.tolist() == [20.0, 20.0, 20.0]


def test_retain_grad_and_detach():
    x = tessera.ones(2, requires_grad=True)
    y = x * 3
    y.retain_grad()
    (y * y).sum().backward()
    assert y.grad.tolist() == [6.0, 6.0]
    assert not y.detach().requires_grad


class Cube(Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return x * x * x * scale

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x * x * ctx.scale, None


class SplitSum(Function):
    """Two outputs, two tensor inputs."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a + b, a * b

    @staticmethod
    def backward(ctx, g_sum, g_prod):
        a, b = ctx.saved_tensors
        return g_sum + g_prod * b, g_sum + g_prod * a


def test_python_function_is_recorded_like_an_op():
    x = tessera.tensor([1.0, 2.0], requires_grad=True)
    y = Cube.apply(x, 2.0)
    assert y.tolist() == [2.0, 16.0]
    assert y.grad_fn == "CubeBackward"
    y.sum().backward()
    assert x.grad.tolist() == [6.0, 24.0]


def test_python_functions_pass_gradcheck():
    x = tessera.tensor([0.3, -1.2, 2.0], dtype=tessera.float64, requires_grad=True)
    assert gradcheck(lambda t: Cube.apply(t, 1.5), [x])
    a = tessera.tensor([0.5, 1.5], dtype=tessera.float64, requires_grad=True)
    b = tessera.tensor([-2.0, 0.25], dtype=tessera.float64, requires_grad=True)
    assert gradcheck(lambda p, q: SplitSum.apply(p, q), [a, b])


def test_gradcheck_catches_a_wrong_backward():
    class Wrong(Function):
        @staticmethod
        def forward(ctx, x):
            return x * x

        @staticmethod
        def backward(ctx, g):
            return g  # should be 2 x g

    x = tessera.tensor([1.0, 2.0], dtype=tessera.float64, requires_grad=True)
    with pytest.raises(AssertionError, match="analytic"):
        gradcheck(lambda t: Wrong.apply(t), [x])


def test_a_backward_that_returns_the_wrong_count_is_a_clear_error():
    class Bad(Function):
        @staticmethod
        def forward(ctx, x, y):
            return x + y

        @staticmethod
        def backward(ctx, g):
            return (g,)

    x = tessera.ones(2, requires_grad=True)
    with pytest.raises(ValueError, match="returned 1 gradients; forward took 2"):
        Bad.apply(x, x).sum().backward()


def test_anomaly_mode_names_the_op():
    x = tessera.tensor([0.0], requires_grad=True)
    with tessera.autograd.detect_anomaly():
        y = x.sqrt() * 0  # d sqrt at 0 is inf; times 0 gives NaN
        with pytest.raises(tessera.Error, match="sqrt"):
            y.sum().backward()


def test_grad_scaler_skips_steps_with_inf_gradients_and_backs_off():
    import tessera.nn as nn
    model = nn.Linear(4, 2)
    opt = tessera.optim.SGD(model.parameters(), lr=0.1)
    scaler = tessera.amp.GradScaler(init_scale=2.0 ** 16, growth_interval=2)
    x = tessera.randn(8, 4)
    w0 = model.weight.detach().clone()
    with tessera.autocast("cpu", dtype=tessera.float16):
        loss = model(x).float().pow(2).mean() * 1e30  # overflows once scaled
    scaler.scale(loss).backward()
    assert scaler.step(opt) is False  # inf gradients: no step
    scaler.update()
    assert scaler.get_scale() == 2.0 ** 15
    assert (model.weight == w0).all().item()
    opt.zero_grad()
    with tessera.autocast("cpu", dtype=tessera.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    assert scaler.step(opt) is True
    scaler.update()
    assert not (model.weight == w0).all().item()
    with pytest.raises(ValueError, match="bfloat16 or tessera.float16"):
        tessera.autocast("cpu", dtype=tessera.float32)


def test_callbacks_held_only_by_cpp_are_released_safely():
    # A lambda whose only reference is the engine's queue is released inside
    # backward, where the GIL is not held: the holder takes it back first.
    seen = []
    x = tessera.ones(3, requires_grad=True)

    def post(leaf):
        tessera._C._autograd.queue_callback(lambda: seen.append(leaf.grad.sum().item()))

    x.register_post_accumulate_grad_hook(post)
    for _ in range(3):
        (x * 2).sum().backward()
    assert seen == [6.0, 12.0, 18.0]
