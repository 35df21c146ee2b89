"""The common layers, with torch.nn's constructors, parameter names and
initialization; each forward is one op of the op table (tessera.nn.functional)."""
import math

from .. import _C
from . import functional as F
from . import init
from .module import Module, Parameter

__all__ = [
    "Linear", "Conv1d", "Conv2d", "ConvTranspose2d", "Embedding", "LayerNorm", "RMSNorm", "GroupNorm",
    "BatchNorm1d", "BatchNorm2d", "Dropout", "ReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "LeakyReLU", "ELU",
    "Softplus", "Mish", "Hardtanh", "Softmax", "LogSoftmax", "Identity", "Flatten", "MaxPool2d", "AvgPool2d",
    "AdaptiveAvgPool2d", "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "BCELoss",
    "BCEWithLogitsLoss", "KLDivLoss",
]


def _empty(*shape):
    return _C.ops.full(list(shape), 0, dtype=_C.get_default_dtype())


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


class Linear(Module):
    """y = x W^T + b. x [..., in_features] -> [..., out_features]; weight [out_features, in_features], bias
    [out_features]; kaiming-uniform init as torch.nn.Linear. dtypes: floats (f32 through oneDNN)."""
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(_empty(out_features, in_features))
        self.bias = Parameter(_empty(out_features)) if bias else None
        if not bias:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class _ConvNd(Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, nd):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise _C.Error(f"in_channels ({in_channels}) and out_channels ({out_channels}) must divide by groups ({groups})")
        k = (kernel_size,) * nd if isinstance(kernel_size, int) else tuple(kernel_size)
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, k
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.weight = Parameter(_empty(out_channels, in_channels // groups, *k))
        if bias:
            self.bias = Parameter(_empty(out_channels))
        else:
            self.register_parameter("bias", None)
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if bias:
            fan_in = (in_channels // groups) * math.prod(k)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}")


class Conv1d(_ConvNd):
    """1-D convolution. x [N, C_in, L] -> [N, C_out, L_out]; weight [C_out, C_in / groups, kernel_size];
    padding an int, 'same' or 'valid'."""
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, 1)

    def forward(self, x):
        return F.conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class Conv2d(_ConvNd):
    """2-D convolution. x [N, C_in, H, W] -> [N, C_out, H_out, W_out]; weight [C_out, C_in / groups, kH, kW];
    stride, padding (an int, a pair, 'same', 'valid'), dilation, groups as torch.nn.Conv2d."""
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, 2)

    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class ConvTranspose2d(Module):
    """Transposed 2-D convolution (Conv2d's gradient as a layer). x [N, C_in, H, W] -> [N, C_out, H_out,
    W_out]; weight [C_in, C_out / groups, kH, kW]."""
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1):
        super().__init__()
        k = _pair(kernel_size)
        self.stride, self.padding, self.output_padding, self.groups, self.dilation = (
            stride, padding, output_padding, groups, dilation)
        self.weight = Parameter(_empty(in_channels, out_channels // groups, *k))
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if bias:
            self.bias = Parameter(_empty(out_channels))
            fan_in = (out_channels // groups) * k[0] * k[1]
            init.uniform_(self.bias, -1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in))
        else:
            self.register_parameter("bias", None)

    def forward(self, x):
        return F.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding, self.output_padding,
                                  self.groups, self.dilation)


class Embedding(Module):
    """Rows of weight [num_embeddings, embedding_dim] looked up by integer ids: [...] (i32 or i64) -> [...,
    embedding_dim]; the padding_idx row is zero and gets no gradient."""
    def __init__(self, num_embeddings, embedding_dim, padding_idx=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.weight = Parameter(_empty(num_embeddings, embedding_dim))
        init.normal_(self.weight)
        if padding_idx is not None:
            with _C_no_grad():
                self.weight[padding_idx] = 0.0

    def forward(self, x):
        return F.embedding(x, self.weight, self.padding_idx)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}"


def _C_no_grad():
    from ..autograd import no_grad
    return no_grad()


class LayerNorm(Module):
    """Normalizes over the last dims (normalized_shape), then weight * x + bias. Any [..., *normalized_shape];
    y has x's shape."""
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        if elementwise_affine:
            self.weight = Parameter(_C.ops.full(list(self.normalized_shape), 1, dtype=_C.get_default_dtype()))
            if bias:
                self.bias = Parameter(_empty(*self.normalized_shape))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class RMSNorm(Module):
    """x / rms(x) * weight over the last dims (normalized_shape); eps defaults to the dtype's machine epsilon.
    y has x's shape."""
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        if elementwise_affine:
            self.weight = Parameter(_C.ops.full(list(self.normalized_shape), 1, dtype=_C.get_default_dtype()))
        else:
            self.register_parameter("weight", None)

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)


class GroupNorm(Module):
    """Normalizes each of num_groups channel groups of x [N, C, ...], then per-channel weight and bias. y has
    x's shape."""
    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True):
        super().__init__()
        self.num_groups, self.eps = num_groups, eps
        if affine:
            self.weight = Parameter(_C.ops.full([num_channels], 1, dtype=_C.get_default_dtype()))
            self.bias = Parameter(_empty(num_channels))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x):
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)


class _BatchNorm(Module):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True):
        super().__init__()
        self.eps, self.momentum = eps, momentum
        if affine:
            self.weight = Parameter(_C.ops.full([num_features], 1, dtype=_C.get_default_dtype()))
            self.bias = Parameter(_empty(num_features))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", _empty(num_features))
            self.register_buffer("running_var", _C.ops.full([num_features], 1, dtype=_C.get_default_dtype()))
            self.register_buffer("num_batches_tracked", _C.ops.full([], 0, dtype=_C.int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def forward(self, x):
        use_batch = self.training or self.running_mean is None
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # a cumulative moving average, as PyTorch's
                momentum = 1.0 / self.num_batches_tracked.item()
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, use_batch, momentum,
                            self.eps)


class BatchNorm1d(_BatchNorm):
    """Batch normalization of x [N, C] or [N, C, L] over the batch (and length): batch statistics while
    training, updating running_mean/var (momentum; None: a cumulative average); the running ones in eval."""
    pass


class BatchNorm2d(_BatchNorm):
    """Batch normalization of x [N, C, H, W] per channel: batch statistics while training, updating
    running_mean/var (momentum; None: a cumulative average); the running ones in eval."""
    pass


class Dropout(Module):
    """Zeroes each element with probability p while training and scales the rest by 1 / (1 - p); the identity
    in eval. y has x's shape."""
    def __init__(self, p=0.5):
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)


def _activation(name, fn, *params, doc=""):
    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        for i, (p, default) in enumerate(params):
            setattr(self, p, args[i] if i < len(args) else kwargs.get(p, default))

    def forward(self, x):
        return fn(x, *[getattr(self, p) for p, _ in params])

    return type(name, (Module,), {"__init__": __init__, "forward": forward, "__module__": __name__,
                                  "__doc__": doc + " Any shape; y has x's shape."})


ReLU = _activation("ReLU", lambda x: F.relu(x), doc="max(x, 0).")
GELU = _activation("GELU", lambda x, a: F.gelu(x, approximate=a), ("approximate", "none"),
                   doc="x * Phi(x) (approximate='tanh': the tanh form).")
SiLU = _activation("SiLU", lambda x: F.silu(x), doc="x * sigmoid(x).")
Tanh = _activation("Tanh", lambda x: F.tanh(x), doc="tanh(x).")
Sigmoid = _activation("Sigmoid", lambda x: F.sigmoid(x), doc="1 / (1 + exp(-x)).")
Mish = _activation("Mish", lambda x: F.mish(x), doc="x * tanh(softplus(x)).")
LeakyReLU = _activation("LeakyReLU", lambda x, s: F.leaky_relu(x, s), ("negative_slope", 0.01),
                        doc="x, or negative_slope * x below 0.")
ELU = _activation("ELU", lambda x, a: F.elu(x, a), ("alpha", 1.0), doc="x, or alpha * (exp(x) - 1) below 0.")
Softplus = _activation("Softplus", lambda x, b, t: F.softplus(x, b, t), ("beta", 1.0), ("threshold", 20.0),
                       doc="log(1 + exp(beta * x)) / beta (x itself above threshold).")
Hardtanh = _activation("Hardtanh", lambda x, lo, hi: F.hardtanh(x, lo, hi), ("min_val", -1.0), ("max_val", 1.0),
                       doc="x clamped to [min_val, max_val].")
Softmax = _activation("Softmax", lambda x, d: F.softmax(x, d), ("dim", -1),
                      doc="exp(x) normalized to sum 1 along dim.")
LogSoftmax = _activation("LogSoftmax", lambda x, d: F.log_softmax(x, d), ("dim", -1),
                         doc="log of softmax along dim (computed stably).")
Identity = _activation("Identity", lambda x: x, doc="x itself.")


class Flatten(Module):
    """x with dims start_dim..end_dim joined into one."""
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)


class MaxPool2d(Module):
    """The maximum over each kernel_size window of x [N, C, H, W] -> [N, C, H_out, W_out]; stride defaults to
    kernel_size."""
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.ceil_mode, self.return_indices = dilation, ceil_mode, return_indices

    def forward(self, x):
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                            self.return_indices)


class AvgPool2d(Module):
    """The mean over each kernel_size window of x [N, C, H, W] -> [N, C, H_out, W_out]; stride defaults to
    kernel_size."""
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, x):
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)


class AdaptiveAvgPool2d(Module):
    """Means over windows that tile x [N, C, H, W] into output_size -> [N, C, *output_size]."""
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x):
        return F.adaptive_avg_pool2d(x, self.output_size)


class _Loss(Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        self.reduction = reduction


class CrossEntropyLoss(_Loss):
    """log_softmax then NLL: input [N, C] (or [N, C, d...]) logits, target [N] class indices (or probabilities
    of input's shape); weight, ignore_index, label_smoothing, reduction ('mean', 'sum', 'none')."""
    def __init__(self, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__(reduction)
        self.register_buffer("weight", weight)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, self.weight, ignore_index=self.ignore_index, reduction=self.reduction,
                               label_smoothing=self.label_smoothing)


class NLLLoss(_Loss):
    """Negative log-likelihood of log-probabilities [N, C] at target [N]; weight, ignore_index, reduction."""
    def __init__(self, weight=None, ignore_index=-100, reduction="mean"):
        super().__init__(reduction)
        self.register_buffer("weight", weight)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, self.weight, ignore_index=self.ignore_index, reduction=self.reduction)


class MSELoss(_Loss):
    """Mean (or sum, or none) of (input - target)^2; both of one shape."""
    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """Mean (or sum, or none) of |input - target|; both of one shape."""
    def forward(self, input, target):
        return F.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    """Huber-like loss with threshold beta: 0.5 d^2 / beta below it, |d| - 0.5 beta above; both of one shape."""
    def __init__(self, reduction="mean", beta=1.0):
        super().__init__(reduction)
        self.beta = beta

    def forward(self, input, target):
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class BCELoss(_Loss):
    """Binary cross entropy of probabilities input against target of its shape; weight, reduction."""
    def __init__(self, weight=None, reduction="mean"):
        super().__init__(reduction)
        self.register_buffer("weight", weight)

    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Binary cross entropy of logits (sigmoid fused, stable) against target of input's shape; weight,
    pos_weight, reduction."""
    def __init__(self, weight=None, reduction="mean", pos_weight=None):
        super().__init__(reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, self.weight, reduction=self.reduction,
                                                  pos_weight=self.pos_weight)


class KLDivLoss(_Loss):
    """KL divergence: input holds log-probabilities, target probabilities (log_target: log-probabilities);
    reduction also 'batchmean'."""
    def __init__(self, reduction="mean", log_target=False):
        super().__init__(reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)
