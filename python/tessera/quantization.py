"""Quantization and pruning (docs/quantization.md).

- quantize_static(model, example, calibration): static int8 of any model
  (Python or C++): traced into a graph, calibrated on your batches
  (min-max, moving average, percentile or entropy observers), BN folded,
  conv/linear(+ReLU) as int8 oneDNN primitives. Returns a callable model.
- quantize_weights(cpp_model, "q8_0" | "q4_0" | "int8" | "int4"): weight-only
  quantization of a C++ model's Linear layers (tessera.nn.zoo), in place.
- prune(cpp_model, sparsity=0.5, method="magnitude" | "structured"): masks
  weights of a C++ model's Linear and Conv layers (training keeps them zero);
  make_pruning_permanent folds the masks in.
"""
import json

from . import _C
from ._compile import _capture


def quantize_static(model, example, calibration, *, observer="minmax", skip=(), **config):
    """Returns (the int8 model, a report of what was quantized and what stayed
    float). calibration: an iterable of batches (a tensor or a tuple of tensors per batch)."""
    # Traced with a dynamic batch (the first dim of every input), so calibration
    # and use may take any batch size; an example of batch 1 is repeated to 2.
    args = (example,) if isinstance(example, _C.Tensor) else tuple(example)
    args = tuple(a if a.shape[0] >= 2 else _C.cat([a] * 2) for a in args)
    g = _capture(model, args, True, None)
    batches = [[b] if isinstance(b, _C.Tensor) else list(b) for b in calibration]
    if not batches:
        raise ValueError("quantize_static: give at least one calibration batch")
    cfg = dict(config, observer=observer)
    if skip:
        cfg["skip"] = list(skip)
    return _C._quant.quantize_static(g, batches, json.dumps(cfg))  # (int8 model, report text)


def _native(model):
    native = getattr(model, "_native", None)
    if native is None or not isinstance(native, _C._nn.Module):
        raise TypeError("this works on the C++ library's modules (tessera.nn.zoo.build(...), CppModule); "
                        "a Python model is quantized through quantize_static")
    return native


def _refreshed(model, report):
    if hasattr(model, "_refresh"):
        model._refresh()  # the module's tensors changed: the Python tree follows
    return report


def quantize_weights(model, format="int8", *, group=32, activations="float", skip=()):
    """Returns a report (a table): what was quantized, what stayed float and why, sizes."""
    return _refreshed(model, _C._quant.quantize_weights(_native(model), json.dumps(
        {"format": format, "group": group, "activations": activations, "skip": list(skip)})))


def prune(model, sparsity=0.5, *, method="magnitude", global_threshold=False, skip=()):
    """Returns a report (a table) of each layer's zeros."""
    return _refreshed(model, _C._quant.prune(_native(model), sparsity, method, global_threshold, list(skip)))


def sparsity_report(model):
    return _C._quant.sparsity_report(_native(model))


def make_pruning_permanent(model):
    _C._quant.make_pruning_permanent(_native(model))
    _refreshed(model, None)
