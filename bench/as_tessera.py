#!/usr/bin/python3
"""Runs a PyTorch script with `torch` meaning `tessera`: the porting claim of
docs/python.md ("rename torch to tessera"), made without editing the script.

    PYTHONPATH=build/python /usr/bin/python3 bench/as_tessera.py bench/train_torch.py --case gpt ...

The modules torch, torch.nn, torch.nn.functional, torch.nn.init, torch.optim,
torch.utils and torch.utils.checkpoint are made tessera's before the script runs.
Its JSON line says "impl": "pytorch" (the script's own text); bench/python_compare.py
relabels it.
"""
import runpy
import sys

import tessera
import tessera.nn.functional
import tessera.nn.init
import tessera.utils.checkpoint

for name, module in {"torch": tessera, "torch.nn": tessera.nn, "torch.nn.functional": tessera.nn.functional,
                     "torch.nn.init": tessera.nn.init, "torch.optim": tessera.optim, "torch.utils": tessera.utils,
                     "torch.utils.checkpoint": tessera.utils.checkpoint, "torch.utils.data": tessera.utils.data}.items():
    sys.modules[name] = module

if len(sys.argv) < 2:
    sys.exit("usage: as_tessera.py SCRIPT [ARGS...]")
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
