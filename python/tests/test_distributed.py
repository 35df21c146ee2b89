"""tessera.distributed under `tessera launch -n 2`: collectives, and a Python
model trained with DistributedDataParallel or ZeRO (stages 1-3) equal to one
process on the whole batches, weights and optimizer state."""
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import tessera

CLI = os.environ.get("TESSERA_CLI")  # set by the build's ctest entry
HERE = pathlib.Path(__file__).resolve().parent
needs_cli = pytest.mark.skipif(not CLI or not os.path.exists(CLI), reason="TESSERA_CLI (the tessera command) not set")


def run(args, **kw):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), OMP_NUM_THREADS="1")
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=300, **kw)


def test_one_process_is_a_group_of_one():
    import tessera.distributed as dist
    dist.init_process_group()
    assert dist.get_world_size() == 1 and dist.get_rank() == 0
    t = tessera.ones(3)
    dist.all_reduce(t)
    assert t.tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(tessera.Error, match="reduce op"):
        dist.all_reduce(t, "prod")


@needs_cli
@pytest.mark.parametrize("mode", ["ddp", "zero1", "zero2", "zero3"])
def test_data_parallel_over_two_ranks_equals_one_process(tmp_path, mode):
    alone = run([sys.executable, str(HERE / "ddp_script.py"), str(tmp_path / "alone.safetensors"), mode])
    assert alone.returncode == 0, alone.stderr[-2000:]
    two = run([CLI, "launch", "-n", "2", "--", sys.executable, str(HERE / "ddp_script.py"),
               str(tmp_path / "two.safetensors"), mode])
    assert two.returncode == 0, (two.stdout + two.stderr)[-3000:]
    a, b = tessera.load_file(str(tmp_path / "alone.safetensors")), tessera.load_file(str(tmp_path / "two.safetensors"))
    assert set(a) == set(b)
    for k in a:
        assert np.allclose(a[k].numpy(), b[k].numpy(), atol=1e-5), k


def test_data_parallel_layouts_and_errors():
    import tessera.distributed as dist
    import tessera.nn as nn
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    ddp = dist.DistributedDataParallel(model, bucket_cap_mb=0.0002, first_bucket_mb=0.0001)
    assert ddp.buckets() == [["2.bias"], ["2.weight"], ["0.bias"], ["0.weight"]]  # backward's order
    with pytest.raises(tessera.Error, match="compression 'int4'"):
        dist.DistributedDataParallel(nn.Linear(2, 2), compression="int4")
    zero = dist.ZeroRedundancyOptimizer(nn.Linear(6, 16), tessera.optim.AdamW, stage=2, lr=0.1)
    assert zero.segments() == [["bias", "weight"]] and zero.shard_numel() == 16 * 7
    assert zero.param_groups[0]["lr"] == 0.1
    with pytest.raises(ValueError, match="stage 3 .* needs a C\\+\\+ model"):
        dist.ZeroRedundancyOptimizer(nn.Linear(6, 16), tessera.optim.Adam, stage=3)
    with pytest.raises(tessera.Error, match="stage must be 1, 2 or 3"):
        dist.ZeroRedundancyOptimizer([nn.Parameter(tessera.ones(3))], tessera.optim.Adam, stage=4)
