"""tessera.optim: the C++ optimizers (one fused, threaded loop per parameter)
with torch.optim's constructors, param groups as dicts, and state dicts."""
from .. import _C

_O = _C._optim


class _Group(dict):
    """A param group: {'params': [...], 'lr': ..., ...}. Setting an option here
    sets it in the C++ optimizer (what a scheduler or a user does between steps)."""

    def __init__(self, opt, index, options):
        super().__init__(options)
        self._opt, self._index = opt, index

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        if key == "params":
            raise _C.Error("changing a param group's 'params' is not supported; make a new optimizer")
        for k, v in self._opt._to_native({key: value}).items():
            self._opt._native.set_group_option(self._index, k, float(v))


def run_closure(closure):
    """What step(closure) does first, as torch.optim: the closure's loss, with grad recording on (or None)."""
    if closure is None:
        return None
    from ..autograd import enable_grad
    with enable_grad():
        return closure()


class Optimizer:
    """The base of the optimizers: params (tensors, or param groups as dicts with their own options), step(),
    zero_grad(set_to_none=True), param_groups (dicts; setting an option reaches the C++ optimizer),
    add_param_group, state_dict / load_state_dict."""
    _name = None
    _defaults = {}

    def __init__(self, params, **options):
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.defaults = dict(self._defaults, **options)
        native = []
        for g in groups:
            ps = list(g["params"])
            for p in ps:
                if not isinstance(p, _C.Tensor):
                    raise TypeError(f"optimizer params must be Tensors, got {type(p).__name__}")
            native.append((ps, self._to_native({k: v for k, v in g.items() if k != "params"})))
        self._native = _O.make(self._name, native, self._to_native(self.defaults))
        self.param_groups = []
        for i, g in enumerate(groups):
            options = dict(self.defaults, **{k: v for k, v in g.items() if k != "params"})
            options["params"] = list(g["params"])
            self.param_groups.append(_Group(self, i, options))

    @staticmethod
    def _to_native(options):
        """PyTorch's option spellings as the C++ names: betas=(b1, b2) -> beta1, beta2; flags -> 0/1."""
        out = {}
        for k, v in options.items():
            if k == "betas":
                out["beta1"], out["beta2"] = float(v[0]), float(v[1])
            elif k in ("foreach", "fused", "capturable", "differentiable"):
                continue
            elif isinstance(v, bool):
                out[k] = 1.0 if v else 0.0
            elif isinstance(v, (int, float)):
                out[k] = float(v)
            else:
                raise TypeError(f"optimizer option '{k}' must be a number or a bool, got {type(v).__name__}")
        return out

    def step(self, closure=None):
        loss = run_closure(closure)
        self._native.step()
        return loss

    def zero_grad(self, set_to_none=True):
        self._native.zero_grad(set_to_none)

    def add_param_group(self, group):
        ps = list(group["params"])
        self._native.add_param_group(ps, self._to_native({k: v for k, v in group.items() if k != "params"}))
        options = dict(self.defaults, **group)
        options["params"] = ps
        self.param_groups.append(_Group(self, len(self.param_groups), options))

    def state_dict(self):
        tensors, groups = self._native.state_dict()
        return {"state": tensors, "param_groups": groups}

    def load_state_dict(self, state):
        self._native.load_state_dict(state["state"], state["param_groups"])

    def __repr__(self):
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {v}" for k, v in sorted(g.items()) if k != "params"]
        return "\n".join(lines) + "\n)"


def _optimizer(name, native, defaults, doc):
    return type(name, (Optimizer,), {"_name": native, "_defaults": defaults, "__doc__": doc, "__module__": __name__})


SGD = _optimizer("SGD", "sgd", {"lr": 1e-3, "momentum": 0.0, "dampening": 0.0, "weight_decay": 0.0,
                                "nesterov": False, "maximize": False},
                 "Stochastic gradient descent with momentum (torch.optim.SGD's rule).")
Adam = _optimizer("Adam", "adam", {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0,
                                   "amsgrad": False, "maximize": False}, "Adam (torch.optim.Adam's rule).")
AdamW = _optimizer("AdamW", "adamw", {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2,
                                      "amsgrad": False, "maximize": False}, "AdamW: decoupled weight decay.")
RMSprop = _optimizer("RMSprop", "rmsprop", {"lr": 1e-2, "alpha": 0.99, "eps": 1e-8, "weight_decay": 0.0,
                                            "momentum": 0.0, "centered": False}, "RMSprop.")
Adagrad = _optimizer("Adagrad", "adagrad", {"lr": 1e-2, "lr_decay": 0.0, "weight_decay": 0.0,
                                            "initial_accumulator_value": 0.0, "eps": 1e-10}, "Adagrad.")
Lion = _optimizer("Lion", "lion", {"lr": 1e-4, "betas": (0.9, 0.99), "weight_decay": 0.0}, "Lion (Chen et al. 2023).")

from . import lr_scheduler  # noqa: E402,F401
