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


def _scheduler(name, doc):
    return type(name, (_Scheduler,), {"_native_cls": getattr(_O, name), "__module__": __name__,
                                      "__doc__": doc + " step() once per epoch (or per step, as you schedule)."})


StepLR = _scheduler("StepLR", "lr times gamma every step_size steps.")
MultiStepLR = _scheduler("MultiStepLR", "lr times gamma at each of the milestones.")
ExponentialLR = _scheduler("ExponentialLR", "lr times gamma every step.")
CosineAnnealingLR = _scheduler("CosineAnnealingLR", "lr along a half cosine from the initial lr to eta_min over T_max.")
LinearLR = _scheduler("LinearLR", "lr scaled linearly from start_factor to end_factor over total_iters.")
WarmupCosineLR = _scheduler("WarmupCosineLR", "Linear warmup over warmup_steps, then a cosine decay to min_lr.")
OneCycleLR = _scheduler("OneCycleLR", "The one-cycle policy (up to max_lr, then annealed), step for step as PyTorch's.")
ReduceLROnPlateau = _scheduler("ReduceLROnPlateau", "lr times factor when step(metric) has not improved for "
                               "patience steps.")
