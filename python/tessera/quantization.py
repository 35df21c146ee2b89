"""Quantization and pruning (docs/quantization.md).

- quantize_static(model, example, calibration): static int8 of any model
  (Python or C++): traced into a graph, calibrated on your batches
  (min-max, moving average, percentile or entropy observers), BN folded,
  conv/linear(+ReLU) as int8 oneDNN primitives. Returns a callable model.
- quantize_weights(model, "q8_0" | "q4_0" | "int8" | "int4"): weight-only
  quantization of the Linear layers, in place.
- prune(model, sparsity=0.5, method="magnitude" | "structured"): masks
  weights of the Linear and Conv layers (training keeps them zero);
  make_pruning_permanent folds the masks in.
- prepare_qat(model) / convert_qat(cpp_model, example): quantization-aware
  training, then the int8 graph with the scales it learned.

These act on the C++ layers: a zoo model, tessera.nn.cpp layers, and the
Python nn.Linear / nn.Conv1d / nn.Conv2d of a Python model, which are first
replaced in place by the C++ layers holding the same weights
(tessera.nn.cpp.to_cpp): make the optimizer afterwards.
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


def _roots(model, what):
    """The C++ module trees `what` acts on in `model`, with their paths: a C++
    model itself, or the C++ layers of a Python model after its Python Linear
    and Conv layers became C++ ones (tessera.nn.cpp.to_cpp, in place)."""
    from .nn import cpp
    if cpp._cpp_twin(model) is not None:
        raise TypeError(f"{what}: a bare Python {type(model).__name__} cannot change class in place; "
                        "give tessera.nn.cpp.to_cpp(layer), or a model that holds it")
    roots = cpp.cpp_roots(cpp.to_cpp(model))
    if not roots:
        raise TypeError(f"{what}: the model has no Linear or Conv layer (of the C++ library's, or Python's "
                        "nn.Linear / nn.Conv1d / nn.Conv2d, which become them)")
    return roots


def _skip_within(path, skip):
    """The entries of `skip` (module paths of the whole model) inside the C++ tree at `path`, relative to it;
    None when the whole tree is skipped."""
    if path in skip:
        return None
    prefix = path + "." if path else ""
    return [s[len(prefix):] for s in skip if s.startswith(prefix)]


def _each(model, what, run, skip=()):
    """run(native, skip) on each C++ tree; their reports joined, each under its path."""
    reports = []
    for path, m in _roots(model, what):
        inner = _skip_within(path, list(skip))
        if inner is None:
            continue
        r = run(m._native, inner)
        m._refresh()  # the module's tensors changed: the Python tree follows
        reports.append(r if not path else f"{path}:\n{r}")
    return "\n".join(reports)


def quantize_weights(model, format="int8", *, group=32, activations="float", skip=()):
    """Returns a report (a table): what was quantized, what stayed float and why, sizes."""
    return _each(model, "quantize_weights", lambda m, sk: _C._quant.quantize_weights(m, json.dumps(
        {"format": format, "group": group, "activations": activations, "skip": sk})), skip)


def prune(model, sparsity=0.5, *, method="magnitude", global_threshold=False, skip=()):
    """Returns a report (a table) of each layer's zeros."""
    if global_threshold and len(_roots(model, "prune")) > 1:
        raise ValueError("prune: global_threshold ranks the weights of one C++ model; this Python model holds "
                         "several C++ layers, each pruned on its own (prune them with global_threshold=False, "
                         "or build the model from the zoo)")
    return _each(model, "prune", lambda m, sk: _C._quant.prune(m, sparsity, method, global_threshold, sk), skip)


def sparsity_report(model):
    """A table of each Linear and Conv layer's zeros (of the C++ layers; a Python model's become them)."""
    return "\n".join(_C._quant.sparsity_report(m._native) for _, m in _roots(model, "sparsity_report"))


def make_pruning_permanent(model):
    """Folds each pruned layer's mask into its weight and removes the mask (the zeros stay, no longer
    enforced)."""
    _each(model, "make_pruning_permanent", lambda m, sk: _C._quant.make_pruning_permanent(m) or "")


def prepare_qat(model, *, skip=(), learn_scales=False, averaging_constant=0.01, activation_max=0,
                signed_inputs=True):
    """Quantization-aware training (docs/quantization.md): every Linear and
    Conv2d trains with the rounding int8 will apply (its input per tensor, its
    weight per output channel); eval mode runs with the observed scales, so
    evaluating measures the int8 model. Returns a report of the prepared layers."""
    config = {"learn_scales": learn_scales, "averaging_constant": averaging_constant,
              "activation_max": activation_max, "signed_inputs": signed_inputs}
    return _each(model, "prepare_qat", lambda m, sk: _C._quant.prepare_qat(m, json.dumps(dict(config, skip=sk))), skip)


def convert_qat(model, example, calibration=(), **config):
    """The int8 model (and a report) from a QAT-trained C++ model (a zoo model,
    a tree of tessera.nn.cpp layers): each layer keeps the input scale it
    learned; the calibration batches (the example when none are given) set
    the ranges of what QAT did not prepare."""
    from .nn import cpp
    if not isinstance(model, cpp.CppModule):
        raise TypeError("convert_qat: builds the int8 graph by tracing a C++ model (tessera.nn.zoo.build, "
                        "tessera.nn.cpp); a Python model prepared with prepare_qat evaluates with int8 rounding, "
                        "and quantize_static converts it with observed (not learned) scales")
    batches = [[b] if isinstance(b, _C.Tensor) else list(b) for b in calibration] or [[example]]
    result = _C._quant.convert_qat(model._native, example, batches, json.dumps(config))
    model._refresh()
    return result
