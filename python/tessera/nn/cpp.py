"""The C++ library's modules in a Python model tree: CppModule wraps an
nn::Module (a layer or a zoo model); its parameters and buffers are the C++
module's own tensors, so a Python optimizer trains them and a Python Module may
hold one next to Python layers.

    tessera.nn.cpp.Linear(784, 128)                 # every C++ layer, by torch.nn's arguments
    tessera.nn.cpp.MultiheadAttention(64, 4, batch_first=True)
    tessera.nn.zoo.build("llama", vocab_size=256, dim=64, ...)  # a zoo model by its config"""
import json

from .. import _C
from .module import Module, Parameter


def _share(t):
    """A Parameter that is `t` itself (same tensor, same .grad), not a copy."""
    p = Parameter.__new__(Parameter)
    _C.Tensor.__init__(p, t)
    return p


class CppModule(Module):
    """A C++ nn::Module (a layer of tessera.nn.cpp or a zoo model) in a Python model tree: its parameters and
    buffers are the C++ module's own tensors; forward runs the C++ module."""
    def __init__(self, native):
        super().__init__()
        object.__setattr__(self, "_native", native)
        self._refresh()

    def _refresh(self):
        """Mirrors the C++ module's tree again (after pruning or quantization changed its tensors)."""
        native = self._native
        self._parameters.clear()
        self._buffers.clear()
        self._modules.clear()
        for name, t in native.named_parameters(False):
            self._parameters[name] = _share(t)
        for name, t in native.named_buffers(False):
            self._buffers[name] = t
        for name, child in native.named_children():
            self._modules[name] = CppModule(child)
        object.__setattr__(self, "training", native.training)

    def forward(self, *args, **kwargs):
        return self._native(*args, **kwargs)

    def train(self, mode=True):
        self._native.train(mode)
        return super().train(mode)

    def __repr__(self):
        return repr(self._native)


def build(name, **config):
    """A model of the C++ zoo by name and config, as `model:` in a YAML config:
    build("llama", vocab_size=256, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=128)."""
    return CppModule(_C._nn.build_model(json.dumps(dict(config, name=name))))


def model_names():
    """The names tessera.nn.zoo.build takes (the recipes' model zoo)."""
    return _C._nn.model_names()


def _layer(name):
    """The CppModule class of the C++ layer `name`, built by its constructor's arguments."""
    native_cls = getattr(_C._layers, name)

    def __init__(self, *args, **kwargs):
        CppModule.__init__(self, native_cls(*args, **kwargs))

    return type(name, (CppModule,), {"__init__": __init__, "__doc__": native_cls.__doc__,
                                     "__module__": __name__, "__qualname__": name})


LAYERS = sorted(n for n in dir(_C._layers) if not n.startswith("_") and n != "Loss")
for _name in LAYERS:
    globals()[_name] = _layer(_name)


def _one(v):
    return v[0] if isinstance(v, (tuple, list)) else v


def _cpp_twin(m):
    """The C++ layer built by the Python layer m's arguments and holding its
    values, or None for a layer that has no twin here."""
    from . import layers as L
    bias = getattr(m, "bias", None) is not None
    if type(m) is L.Linear:
        c = Linear(m.in_features, m.out_features, bias=bias)
    elif type(m) is L.Conv2d:
        c = Conv2d(m.in_channels, m.out_channels, m.kernel_size, m.stride, m.padding, m.dilation, m.groups, bias)
    elif type(m) is L.Conv1d:
        c = Conv1d(m.in_channels, m.out_channels, _one(m.kernel_size), _one(m.stride), _one(m.padding),
                   _one(m.dilation), m.groups, bias)
    else:
        return None
    c.load_state_dict(m.state_dict())
    c.train(m.training)
    return c


def to_cpp(model):
    """Replaces, in place, the Python Linear, Conv1d and Conv2d layers of a
    Python model by the C++ layers holding the same values (what pruning,
    weight quantization and QAT act on), and returns the model; a bare Python
    layer gives its C++ twin. The parameters are new objects (make the
    optimizer afterwards, as after torch.nn.utils.prune), and hooks on the
    replaced layers do not carry over."""
    twin = _cpp_twin(model)
    if twin is not None:
        return twin
    for name, child in list(model._modules.items()):
        if child is not None and not isinstance(child, CppModule):
            model._modules[name] = to_cpp(child)
    return model


def cpp_roots(model):
    """(path, CppModule) for each C++ module tree in `model`: the model itself
    when it is one, else the outermost ones inside a Python model."""
    if isinstance(model, CppModule):
        return [("", model)]
    roots = []

    def walk(prefix, m):
        for name, child in m._modules.items():
            if isinstance(child, CppModule):
                roots.append((prefix + name, child))
            elif child is not None:
                walk(prefix + name + ".", child)

    walk("", model)
    return roots
