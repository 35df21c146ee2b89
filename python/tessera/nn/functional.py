"""tessera.nn.functional: the ops PyTorch has in torch.nn.functional, bound from
the op table, plus PyTorch's spellings the table's signatures do not cover
(conv padding='same', embedding's argument order, pooling's stride=None)."""
from .. import _C
from .._C._functional import *  # noqa: F401,F403

_ops = _C.ops


def _conv_padding(padding):
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise ValueError(f"padding must be 'same', 'valid', an int or a tuple, got '{padding}'")
        return 0, padding == "same"
    return padding, False


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    padding, same = _conv_padding(padding)
    return _ops.conv1d(input, weight, bias, stride, padding, dilation, groups, padding_same=same)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    padding, same = _conv_padding(padding)
    return _ops.conv2d(input, weight, bias, stride, padding, dilation, groups, padding_same=same)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return _ops.max_pool2d(input, kernel_size, [] if stride is None else stride, padding, dilation, ceil_mode,
                           return_indices)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    if divisor_override is not None:
        raise _C.Error("avg_pool2d: divisor_override is not supported")
    return _ops.avg_pool2d(input, kernel_size, [] if stride is None else stride, padding, ceil_mode, count_include_pad)


def embedding(input, weight, padding_idx=None):
    return _ops.embedding(weight, input, padding_idx)


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    return _ops.interpolate(input, [] if size is None else size, [] if scale_factor is None else scale_factor, mode,
                            bool(align_corners))


def rms_norm(input, normalized_shape, weight=None, eps=None):
    return _ops.rms_norm(input, normalized_shape, weight, eps)


def one_hot(tensor, num_classes=-1):
    return _ops.one_hot(tensor, num_classes)


def relu6(input):
    return _ops.hardtanh(input, 0.0, 6.0)
