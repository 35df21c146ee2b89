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
    """1-D convolution: input [N, C_in, L], weight [C_out, C_in / groups, k], bias [C_out] -> [N, C_out,
    L_out]; padding an int, 'same' or 'valid'. dtypes: f32 (oneDNN), f16/bf16 (computed in f32), f64."""
    padding, same = _conv_padding(padding)
    return _ops.conv1d(input, weight, bias, stride, padding, dilation, groups, padding_same=same)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution: input [N, C_in, H, W], weight [C_out, C_in / groups, kH, kW], bias [C_out] -> [N,
    C_out, H_out, W_out]; stride, padding (an int, a pair, 'same', 'valid'), dilation, groups. dtypes: f32
    (oneDNN), f16/bf16 (computed in f32), f64."""
    padding, same = _conv_padding(padding)
    return _ops.conv2d(input, weight, bias, stride, padding, dilation, groups, padding_same=same)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """The maximum over windows of input [N, C, H, W] -> [N, C, H_out, W_out] (with return_indices, also the
    flat positions in each H x W plane); stride defaults to kernel_size."""
    return _ops.max_pool2d(input, kernel_size, [] if stride is None else stride, padding, dilation, ceil_mode,
                           return_indices)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """The mean over windows of input [N, C, H, W] -> [N, C, H_out, W_out]; stride defaults to kernel_size."""
    if divisor_override is not None:
        raise _C.Error("avg_pool2d: divisor_override is not supported")
    return _ops.avg_pool2d(input, kernel_size, [] if stride is None else stride, padding, ceil_mode, count_include_pad)


def embedding(input, weight, padding_idx=None):
    """Rows of weight [num, dim] at integer ids input [...] -> [..., dim]; the padding_idx row gets no
    gradient."""
    return _ops.embedding(weight, input, padding_idx)


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Resizes input [N, C, H, W] to size (or by scale_factor): mode 'nearest' or 'bilinear' (align_corners)."""
    return _ops.interpolate(input, [] if size is None else size, [] if scale_factor is None else scale_factor, mode,
                            bool(align_corners))


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """input / rms(input) * weight over the last dims (normalized_shape); y has input's shape."""
    return _ops.rms_norm(input, normalized_shape, weight, eps)


def one_hot(tensor, num_classes=-1):
    """Integer classes [...] -> [..., num_classes] of i64 (num_classes=-1: the largest class + 1)."""
    return _ops.one_hot(tensor, num_classes)


def relu6(input):
    """min(max(input, 0), 6); y has input's shape."""
    return _ops.hardtanh(input, 0.0, 6.0)
