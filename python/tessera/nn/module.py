"""Module: parameters, buffers and submodules registered by attribute, as in
torch.nn.Module. The math runs in the C++ ops; this file only keeps the tree."""
from collections import OrderedDict

from .. import _C
from ..autograd import no_grad


class Parameter(_C.Tensor):
    """A tensor that a Module registers as a parameter (requires_grad by default).
    It shares its data's storage."""

    def __init__(self, data=None, requires_grad=True):
        if data is None:
            data = _C.ops.full([0], 0, dtype=_C.get_default_dtype())
        super().__init__(data.detach())
        self.requires_grad_(requires_grad)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    def __reduce_ex__(self, proto):
        return (Parameter, (_C.Tensor(self.detach()), self.requires_grad))


class Module:
    """The base of every layer and model. Assigning a Parameter, a Module or
    (through register_buffer) a buffer to an attribute registers it."""

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_forward_hooks", OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())
        object.__setattr__(self, "training", True)

    # ---- registration --------------------------------------------------------
    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"cannot assign '{name}' before Module.__init__() is called "
                                 "(call super().__init__() first in your module's __init__)")
        params, modules, buffers = self._parameters, self._modules, self._buffers
        if isinstance(value, Parameter):
            modules.pop(name, None)
            buffers.pop(name, None)
            self.__dict__.pop(name, None)
            params[name] = value
        elif isinstance(value, Module):
            params.pop(name, None)
            buffers.pop(name, None)
            self.__dict__.pop(name, None)
            modules[name] = value
        elif name in buffers:
            if value is not None and not isinstance(value, _C.Tensor):
                raise TypeError(f"cannot assign {type(value).__name__} to buffer '{name}' (a Tensor or None)")
            buffers[name] = value
        elif name in params:
            if value is not None:
                raise TypeError(f"cannot assign {type(value).__name__} to parameter '{name}' "
                                "(a tessera.nn.Parameter or None)")
            params[name] = None
        elif name in modules:
            if value is not None:
                raise TypeError(f"cannot assign {type(value).__name__} to submodule '{name}' (a Module or None)")
            modules[name] = None
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            if key in d and name in d[key]:
                return d[key][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for key in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__[key]:
                del self.__dict__[key][name]
                return
        object.__delattr__(self, name)

    def register_parameter(self, name, param):
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter: '{name}' must be a Parameter or None, got {type(param).__name__}")
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        if tensor is not None and not isinstance(tensor, _C.Tensor):
            raise TypeError(f"register_buffer: '{name}' must be a Tensor or None, got {type(tensor).__name__}")
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent.add(name)

    def register_module(self, name, module):
        self._modules[name] = module

    add_module = register_module

    # ---- walking the tree ------------------------------------------------------
    def named_modules(self, memo=None, prefix=""):
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(memo, prefix + ("." if prefix else "") + name)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        for name, m in self._modules.items():
            if m is not None:
                yield name, m

    def children(self):
        for _, m in self.named_children():
            yield m

    def _named(self, key, recurse):
        seen = set()
        mods = self.named_modules() if recurse else [("", self)]
        for prefix, m in mods:
            for name, t in getattr(m, key).items():
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                yield (prefix + "." if prefix else "") + name, t

    def named_parameters(self, prefix="", recurse=True):
        for name, p in self._named("_parameters", recurse):
            yield (prefix + "." if prefix else "") + name, p

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True):
        for name, b in self._named("_buffers", recurse):
            yield (prefix + "." if prefix else "") + name, b

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # ---- modes and state ---------------------------------------------------------
    def train(self, mode=True):
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    @no_grad()
    def to(self, *args, **kwargs):
        """Converts parameters and buffers in place (dtype, device), keeping them the same objects."""
        for m in self.modules():
            for d in (m._parameters, m._buffers):
                for k, t in d.items():
                    if t is None:
                        continue
                    converted = t.to(*args, **kwargs)
                    if converted is not t:
                        if t.is_floating_point() or not any(isinstance(a, _C.dtype) for a in args):
                            t.data = converted
        return self

    def float(self):
        return self.to(_C.float32)

    def double(self):
        return self.to(_C.float64)

    def state_dict(self, prefix="", keep_vars=False):
        out = OrderedDict()
        for mprefix, m in self.named_modules():
            p = prefix + (mprefix + "." if mprefix else "")
            for name, t in m._parameters.items():
                if t is not None:
                    out[p + name] = t if keep_vars else t.detach()
            for name, t in m._buffers.items():
                if t is not None and name not in m._non_persistent:
                    out[p + name] = t if keep_vars else t.detach()
        return out

    @no_grad()
    def load_state_dict(self, state_dict, strict=True):
        """Copies values into the existing tensors; names missing or unexpected
        are an error under strict (the message lists them), and shapes must match."""
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise _C.Error(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
        for k, t in own.items():
            if k not in state_dict:
                continue
            v = state_dict[k]
            if tuple(v.shape) != tuple(t.shape):
                raise _C.Error(f"load_state_dict: '{k}' has shape {tuple(v.shape)} in the state dict "
                               f"and {tuple(t.shape)} in the model")
            t.copy_(v)
        return missing, unexpected

    # ---- calling -------------------------------------------------------------------
    def register_forward_hook(self, hook):
        key = object()
        self._forward_hooks[key] = hook
        return _Handle(self._forward_hooks, key)

    def register_forward_pre_hook(self, hook):
        key = object()
        self._forward_pre_hooks[key] = hook
        return _Handle(self._forward_pre_hooks, key)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args, **kwargs):
        for hook in list(self._forward_pre_hooks.values()):
            r = hook(self, args)
            if r is not None:
                args = r if isinstance(r, tuple) else (r,)
        out = self.forward(*args, **kwargs)
        for hook in list(self._forward_hooks.values()):
            r = hook(self, args, out)
            if r is not None:
                out = r
        return out

    # ---- printing ------------------------------------------------------------------
    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = []
        for name, m in self._modules.items():
            body = repr(m).replace("\n", "\n  ")
            lines.append(f"({name}): {body}")
        head = type(self).__name__ + "(" + self.extra_repr()
        if not lines:
            return head + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"

    def __dir__(self):
        return sorted(set(object.__dir__(self)) | set(self._parameters) | set(self._modules) | set(self._buffers))


class _Handle:
    def __init__(self, d, key):
        self._d, self._key = d, key

    def remove(self):
        self._d.pop(self._key, None)


class Sequential(Module):
    """Modules called in order, each on the previous one's output; indexable, and iterable."""
    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for k, m in modules[0].items():
                self.add_module(k, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        mods = list(self._modules.values())
        if isinstance(i, slice):
            return Sequential(*mods[i])
        return mods[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, m):
        self.add_module(str(len(self)), m)
        return self


class ModuleList(Module):
    """A list of modules registered as children ('0', '1', ...): append, extend, insert, indexing, iteration."""
    def __init__(self, modules=()):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, m):
        self.add_module(str(len(self._modules)), m)
        return self

    def extend(self, ms):
        for m in ms:
            self.append(m)
        return self

    def __getitem__(self, i):
        mods = list(self._modules.values())
        return ModuleList(mods[i]) if isinstance(i, slice) else mods[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class ModuleDict(Module):
    """A dict of modules registered as children by their keys."""
    def __init__(self, modules=None):
        super().__init__()
        for k, m in (modules or {}).items():
            self.add_module(k, m)

    def __getitem__(self, k):
        return self._modules[k]

    def __setitem__(self, k, m):
        self.add_module(k, m)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()
