"""tessera.compile, tessera.export and tessera.load_model: the graph compiler
from Python. A Python function or Module is traced once per input signature:
the ops it calls are recorded into a graph (Python control flow runs at trace
time and is baked in, as with torch.jit.trace), which is optimized (fusion,
folding, memory plan) and run without Python."""
from . import _C
from .nn.module import Module

_c = _C._compile


def _dynamic(dynamic, n_inputs, names=None):
    """[(input, dim, symbol)] from True (dim 0 of every input, one symbol "B"),
    a list of such triples, or PyTorch's dynamic_axes ({input name: {dim: symbol}})."""
    if dynamic is None or dynamic is False:
        return []
    if dynamic is True:
        return [(i, 0, "B") for i in range(n_inputs)]
    if isinstance(dynamic, dict):
        names = names or [f"x{i}" for i in range(n_inputs)]
        out = []
        for name, axes in dynamic.items():
            if name not in names:
                continue  # an output's axes: outputs follow from the inputs
            axes = {a: f"{name}_{a}" for a in axes} if isinstance(axes, (list, tuple)) else axes
            out += [(names.index(name), int(d), str(s)) for d, s in axes.items()]
        return out
    return [(int(i), int(d), str(s)) for i, d, s in dynamic]


def _params(model):
    return list(model.state_dict(keep_vars=True).items()) if isinstance(model, Module) else []


def _fn(model):
    if isinstance(model, Module):
        return lambda *xs: model(*xs)
    if not callable(model):
        raise TypeError(f"compile: expected a Module or a function, got {type(model).__name__}")
    return model


class CompiledFunction:
    """What tessera.compile returns: call it like the model. One graph per input
    signature (dtype, rank, static sizes), grad mode, autocast state and, for a
    Module, train/eval mode and the identity of its parameters."""

    def __init__(self, model, dynamic, cache_size):
        self._model, self._dynamic, self._cache_size = model, dynamic, cache_size
        self._compiled = {}

    def __call__(self, *args):
        params = _params(self._model)
        key = (getattr(self._model, "training", None), tuple(id(t) for _, t in params), len(args))
        f = self._compiled.get(key)
        if f is None:
            if len(self._compiled) >= 4:  # old parameter sets or modes: keep a few
                self._compiled.pop(next(iter(self._compiled)))
            f = self._compiled[key] = _c.compile(_fn(self._model), params, _dynamic(self._dynamic, len(args)),
                                                 self._cache_size)
        return f(*args)

    @property
    def traces(self):
        return sum(f.traces for f in self._compiled.values())

    def graph(self):
        """The optimized graph that ran last, as text."""
        for f in reversed(list(self._compiled.values())):
            g = f.graph()
            if g is not None:
                return g
        return None


def compile(model=None, *, dynamic=None, cache_size=8, fullgraph=True, backend=None, mode=None, options=None):
    """A Module or function as a compiled graph (torch.compile's place).
    dynamic: True for a dynamic first dim of every input, or [(input, dim, "B")].
    Also a decorator: @tessera.compile or @tessera.compile(dynamic=True)."""
    if model is None:
        return lambda m: CompiledFunction(m, dynamic, cache_size)
    return CompiledFunction(model, dynamic, cache_size)


def _capture(model, args, dynamic, input_names):
    args = (args,) if isinstance(args, _C.Tensor) else tuple(args)
    names = list(input_names) if input_names else [f"x{i}" for i in range(len(args))]
    if isinstance(model, Module):
        was = model.training
        model.eval()
    try:
        return _c.capture(_fn(model), list(args), _params(model), _dynamic(dynamic, len(args), names), names)
    finally:
        if isinstance(model, Module) and was:
            model.train()


def export(model, args, path, *, dynamic=None, input_names=None):
    """Traces model(*args) in eval mode and writes it: an ONNX file when path
    ends in .onnx, else a Tessera graph directory (graph.json +
    weights.safetensors) that `tessera run`, `tessera serve` and
    tessera.load_model run without this code."""
    g = _capture(model, args, dynamic, input_names)
    if str(path).endswith(".onnx"):
        g.export_onnx(str(path))
    else:
        g.save(str(path))
    return g


def load_model(path):
    """A saved graph directory or an ONNX file, optimized and ready to call."""
    return _c.load(str(path))
