"""Parameter initializers with PyTorch's rules (torch.nn.init), drawing from
Tessera's default generator (tessera.manual_seed)."""
import math

from .. import _C
from ..autograd import no_grad


def _fans(t):
    if t.dim() < 2:
        raise _C.Error(f"fan in and fan out need a tensor of 2 or more dims, got {t.dim()}")
    receptive = 1
    for s in t.shape[2:]:
        receptive *= s
    return t.shape[1] * receptive, t.shape[0] * receptive


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for a nonlinearity, as torch.nn.init.calculate_gain."""
    if nonlinearity in ("linear", "conv1d", "conv2d", "sigmoid"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope ** 2))
    raise ValueError(f"calculate_gain: unsupported nonlinearity '{nonlinearity}'")


@no_grad()
def uniform_(t, a=0.0, b=1.0):
    """Fills t in place with U(a, b) numbers from the global generator; returns t."""
    t.copy_(_C.ops.uniform(list(t.shape), a, b, dtype=t.dtype))
    return t


@no_grad()
def normal_(t, mean=0.0, std=1.0):
    """Fills t in place with N(mean, std^2) numbers; returns t."""
    t.copy_(_C.ops.normal(list(t.shape), mean, std, dtype=t.dtype))
    return t


@no_grad()
def zeros_(t):
    """Fills t with zeros in place; returns t."""
    return t.zero_()


@no_grad()
def ones_(t):
    """Fills t with ones in place; returns t."""
    return t.fill_(1)


@no_grad()
def constant_(t, val):
    """Fills t with val in place; returns t."""
    return t.fill_(val)


def kaiming_uniform_(t, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    """He initialization, uniform: bound gain * sqrt(3 / fan) with fan from mode ('fan_in', 'fan_out')."""
    fan_in, fan_out = _fans(t)
    fan = fan_in if mode == "fan_in" else fan_out
    bound = math.sqrt(3.0) * calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return uniform_(t, -bound, bound)


def kaiming_normal_(t, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    """He initialization, normal: std gain / sqrt(fan) with fan from mode ('fan_in', 'fan_out')."""
    fan_in, fan_out = _fans(t)
    fan = fan_in if mode == "fan_in" else fan_out
    return normal_(t, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan))


def xavier_uniform_(t, gain=1.0):
    """Glorot initialization, uniform: bound gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = _fans(t)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -bound, bound)


def xavier_normal_(t, gain=1.0):
    """Glorot initialization, normal: std gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _fans(t)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))
