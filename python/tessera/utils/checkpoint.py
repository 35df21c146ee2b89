"""Activation checkpointing, as torch.utils.checkpoint: the wrapped function's
activations are not kept; the backward pass runs it again (with the same random
numbers, so dropout masks match)."""
from .. import _C


def checkpoint(function, *args, use_reentrant=None, preserve_rng_state=True, **kwargs):
    """Runs function(*args) without keeping its activations; backward runs it again to get them (the RNG state
    is replayed, so dropout masks match). Returns what function returns."""
    tensors = [a for a in args if isinstance(a, _C.Tensor)]
    positions = [i for i, a in enumerate(args) if isinstance(a, _C.Tensor)]

    def run(inputs):
        full = list(args)
        for i, t in zip(positions, inputs):
            full[i] = t
        out = function(*full, **kwargs)
        return out

    outs = _C._amp.checkpoint(run, tensors)
    return outs[0] if len(outs) == 1 else tuple(outs)


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """Runs the modules of a Sequential (or a list) in `segments` checkpointed groups."""
    functions = list(functions.children()) if hasattr(functions, "children") else list(functions)
    if segments < 1:
        raise ValueError(f"checkpoint_sequential: segments must be >= 1, got {segments}")
    size = (len(functions) + segments - 1) // segments

    def run_segment(start, end):
        def forward(x):
            for f in functions[start:end]:
                x = f(x)
            return x
        return forward

    x = input
    for start in range(0, len(functions), size):
        end = min(start + size, len(functions))
        if end == len(functions):  # the last segment runs normally, as in PyTorch
            x = run_segment(start, end)(x)
        else:
            x = checkpoint(run_segment(start, end), x)
    return x
