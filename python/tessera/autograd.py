"""Autograd from Python: backward and grad over lists, the grad modes as context
managers and decorators, anomaly mode, and autograd.Function for ops written
in Python (recorded in the graph like any op)."""
import functools

from . import _C

_A = _C._autograd


def is_grad_enabled():
    """Whether ops record for autograd on this thread (no_grad and inference_mode turn it off)."""
    return _A.is_grad_enabled()


class _GradMode:
    """A context manager and decorator that sets grad mode and restores it."""

    _mode = True

    def __enter__(self):
        self._prev = _A.is_grad_enabled()
        _A.set_grad_enabled(self._mode)
        return self

    def __exit__(self, *exc):
        _A.set_grad_enabled(self._prev)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)
        return wrapper


class no_grad(_GradMode):
    """Ops inside record no graph (evaluation, optimizer updates)."""
    _mode = False


class enable_grad(_GradMode):
    """Turns recording back on inside a no_grad region; a context manager or a decorator."""
    _mode = True


class inference_mode(_GradMode):
    """As no_grad (Tessera has no separate inference tensors): ops record no graph."""

    def __init__(self, mode=True):
        self._mode = not mode


class set_grad_enabled(_GradMode):
    """Recording on (True) or off (False) for the block; a context manager or a decorator, or a plain call that
    sets the mode."""
    def __init__(self, mode):
        self._prev = _A.is_grad_enabled()
        self._mode = bool(mode)
        _A.set_grad_enabled(self._mode)  # also works as a plain call, as in PyTorch

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _A.set_grad_enabled(self._prev)
        return False


class detect_anomaly:
    """Names the forward op whose backward produced a NaN or Inf."""

    def __init__(self, mode=True):
        self._mode = mode

    def __enter__(self):
        self._prev = _A.is_anomaly_enabled()
        _A.set_detect_anomaly(self._mode)

    def __exit__(self, *exc):
        _A.set_detect_anomaly(self._prev)
        return False


def set_detect_anomaly(mode):
    """Anomaly mode on or off for the whole process (see detect_anomaly)."""
    _A.set_detect_anomaly(bool(mode))


def backward(tensors, grad_tensors=None, retain_graph=False, create_graph=False):
    """Sums the gradients of `tensors` (scalars, or tensors with grad_tensors of their shapes) into the .grad
    of the leaves they depend on."""
    if isinstance(tensors, _C.Tensor):
        tensors = [tensors]
    if isinstance(grad_tensors, _C.Tensor):
        grad_tensors = [grad_tensors]
    _A.backward(list(tensors), None if grad_tensors is None else list(grad_tensors), bool(retain_graph),
                bool(create_graph))


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=False):
    """d(outputs)/d(inputs), without touching .grad; create_graph=True records the
    backward pass so the result can be differentiated again."""
    if isinstance(outputs, _C.Tensor):
        outputs = [outputs]
    if isinstance(inputs, _C.Tensor):
        inputs = [inputs]
    if isinstance(grad_outputs, _C.Tensor):
        grad_outputs = [grad_outputs]
    return _A.grad(list(outputs), list(inputs), None if grad_outputs is None else list(grad_outputs),
                   retain_graph, bool(create_graph), bool(allow_unused))


class FunctionCtx:
    """What forward leaves for backward: save_for_backward(*tensors), then
    ctx.saved_tensors; any other attribute may be set freely."""

    def save_for_backward(self, *tensors):
        self._saved = tensors

    @property
    def saved_tensors(self):
        return getattr(self, "_saved", ())

    def mark_non_differentiable(self, *tensors):
        self._non_differentiable = tensors

    def set_materialize_grads(self, value):
        self._materialize = bool(value)


class Function:
    """An op written in Python, as torch.autograd.Function:

        class Exp(tessera.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                y = x.exp()
                ctx.save_for_backward(y)
                return y

            @staticmethod
            def backward(ctx, grad):
                y, = ctx.saved_tensors
                return grad * y

        y = Exp.apply(x)

    forward runs without recording; its outputs become the results of one node
    whose backward is this class's, called with one gradient per output (zeros
    where none flowed) and returning one per forward argument (None for
    non-tensors and for inputs that need none)."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("a Function subclass must define forward(ctx, ...)")

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError("a Function subclass must define backward(ctx, *grads) to be differentiated")

    @classmethod
    def apply(cls, *args):
        ctx = FunctionCtx()
        with no_grad():
            out = cls.forward(ctx, *args)
        single = isinstance(out, _C.Tensor)
        outs = [out] if single else list(out)
        positions = [i for i, a in enumerate(args) if isinstance(a, _C.Tensor)]
        inputs = [args[i] for i in positions]
        n_args = len(args)
        name = cls.__name__

        def run_backward(grads):
            r = cls.backward(ctx, *grads)
            if isinstance(r, _C.Tensor) or r is None:
                r = (r,)
            r = tuple(r)
            if len(r) != n_args:
                raise ValueError(f"{name}.backward returned {len(r)} gradients; forward took {n_args} arguments "
                                 "(return None for the ones without a gradient)")
            return [r[i] for i in positions]

        if _A.is_grad_enabled():
            outs = _A.record(name, inputs, [o for o in outs], run_backward)
        return outs[0] if single else tuple(outs)


def gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3):
    """Compares fn's gradients with central differences (inputs in float64);
    raises AssertionError naming the input and element that differ, else True."""
    import numpy as np
    inputs = tuple(inputs)
    out = fn(*inputs)
    outs = [out] if isinstance(out, _C.Tensor) else list(out)
    for k, x in enumerate(inputs):
        if not (isinstance(x, _C.Tensor) and x.requires_grad):
            continue
        for oi, o in enumerate(outs):
            flat = o.detach().numpy().reshape(-1)
            for j in range(flat.size):
                g = _C.ops.full(list(o.shape), 0, dtype=o.dtype)
                g.view([-1])[j] = 1.0
                analytic = grad([fn_out for fn_out in ([fn(*inputs)] if isinstance(out, _C.Tensor) else list(fn(*inputs)))][oi],
                                [x], [g], allow_unused=True)[0]
                a = np.zeros(x.shape) if analytic is None else analytic.numpy()
                xs = x.detach()
                numeric = np.zeros(x.shape).reshape(-1)
                base = xs.numpy().reshape(-1)
                for i in range(base.size):
                    orig = base[i]
                    base[i] = orig + eps
                    plus = fn(*inputs)
                    plus = (plus if isinstance(out, _C.Tensor) else list(plus)[oi]).detach().numpy().reshape(-1)[j]
                    base[i] = orig - eps
                    minus = fn(*inputs)
                    minus = (minus if isinstance(out, _C.Tensor) else list(minus)[oi]).detach().numpy().reshape(-1)[j]
                    base[i] = orig
                    numeric[i] = (plus - minus) / (2 * eps)
                if not np.allclose(a.reshape(-1), numeric, atol=atol, rtol=rtol):
                    bad = int(np.argmax(np.abs(a.reshape(-1) - numeric)))
                    raise AssertionError(f"gradcheck: input {k}, output {oi}[{j}], element {bad}: "
                                         f"analytic {a.reshape(-1)[bad]}, numeric {numeric[bad]}")
    return True
