"""Mixed precision: autocast (ops run in bfloat16 or float16 where the op
table's amp column says they may) and GradScaler (dynamic loss scaling for
float16), as torch.autocast and torch.cuda.amp.GradScaler."""
from . import _C

autocast = _C._amp.autocast
is_autocast_enabled = _C._amp.is_autocast_enabled


class GradScaler:
    """scaler.scale(loss).backward(); scaler.step(opt); scaler.update()."""

    def __init__(self, init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 enabled=True):
        self._native = _C._amp.GradScaler(init_scale, growth_factor, backoff_factor, growth_interval, enabled)

    def scale(self, loss):
        return self._native.scale(loss)

    def unscale_(self, optimizer):
        self._native.unscale_(optimizer._native)

    def step(self, optimizer, *args, **kwargs):
        """Steps unless a gradient was inf or NaN; returns whether it stepped."""
        return self._native.step(optimizer._native)

    def update(self, new_scale=None):
        self._native.update(new_scale)

    def get_scale(self):
        return self._native.get_scale()

    def is_enabled(self):
        return self._native.is_enabled()

    def state_dict(self):
        import json
        return json.loads(self._native.state_dict())

    def load_state_dict(self, state):
        import json
        self._native.load_state_dict(json.dumps(state))
