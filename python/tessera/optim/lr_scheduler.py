"""The LR schedulers (C++), with torch.optim.lr_scheduler's constructors:
each takes a tessera.optim optimizer and sets its groups' lr at every step()
(the param groups' dicts show it)."""
from .. import _C

_O = _C._optim


class _Scheduler:
    _native_cls = None

    def __init__(self, optimizer, *args, **kwargs):
        kwargs.pop("verbose", None)
        kwargs.pop("last_epoch", None)
        self.optimizer = optimizer
        self._native = self._native_cls(optimizer._native, *args, **kwargs)
        self._sync()

    def _sync(self):
        for g, lr in zip(self.optimizer.param_groups, self._native.get_last_lr()):
            dict.__setitem__(g, "lr", lr)

    def step(self, metric=None):
        self._native.step(metric)
        self._sync()

    def get_last_lr(self):
        return self._native.get_last_lr()

    @property
    def last_epoch(self):
        return self._native.last_epoch

    def state_dict(self):
        import json
        return json.loads(self._native.state_dict())

    def load_state_dict(self, state):
        import json
        self._native.load_state_dict(json.dumps(state))
        self._sync()


def _scheduler(name):
    return type(name, (_Scheduler,), {"_native_cls": getattr(_O, name), "__module__": __name__})


StepLR = _scheduler("StepLR")
MultiStepLR = _scheduler("MultiStepLR")
ExponentialLR = _scheduler("ExponentialLR")
CosineAnnealingLR = _scheduler("CosineAnnealingLR")
LinearLR = _scheduler("LinearLR")
WarmupCosineLR = _scheduler("WarmupCosineLR")
OneCycleLR = _scheduler("OneCycleLR")
ReduceLROnPlateau = _scheduler("ReduceLROnPlateau")
