"""tessera.train.fit: a training config (examples/configs/*.yaml, or the same
as a dict) built into model, data and optimizer and trained by the C++
Trainer, as `tessera train` does: checkpoints, exact resume, metrics.jsonl,
mixed precision, gradient accumulation and clipping, and under
`tessera launch -n N -- python3 script.py` data, ZeRO, tensor and pipeline
parallelism (docs/training.md, docs/distributed.md).

    summary = tessera.train.fit("examples/configs/fashion_mnist_mlp.yaml",
                                overrides=["train.epochs=1"], output="runs/mlp")

Ctrl-C during fit() saves a checkpoint, stops, and raises KeyboardInterrupt;
fit(..., resume="latest") continues from it."""
import copy
import json
import os

from . import _C

_T = _C._train


def load_config(path):
    """A YAML config as a dict (read by Tessera's reader: keys are checked when built)."""
    return json.loads(_T.load_yaml(str(path)))


def fit(config, *, overrides=(), output=None, resume="", progress=False, profile_steps=-1):
    """Trains the config; returns the run's summary (steps, epochs, eval
    metrics, the checkpoint's path, ...). overrides: "a.b=value" strings, as
    `tessera train --set`."""
    if isinstance(config, (str, os.PathLike)):
        cfg = load_config(config)
        cfg.setdefault("output", os.path.join("runs", os.path.splitext(os.path.basename(str(config)))[0]))
    elif isinstance(config, dict):
        cfg = copy.deepcopy(config)
    else:
        raise TypeError(f"fit: config must be a path to a YAML file or a dict, got {type(config).__name__}")
    text = json.dumps(cfg)
    for o in overrides:
        text = _T.apply_override(text, o)
    cfg = json.loads(text)
    if output is not None:
        cfg["output"] = str(output)
    if "output" not in cfg:
        raise _C.Error("fit: the config has no output (give output= or an 'output:' key)")
    summary, stopped = _T.fit(json.dumps(cfg), resume, 1 if progress else 0, profile_steps)
    if stopped:
        raise KeyboardInterrupt(f"training stopped: a checkpoint was saved in {cfg['output']}; "
                                "continue with fit(..., resume='latest')")
    return json.loads(summary)
