"""Run by test_distributed.py under `tessera launch -n 2` (and alone): trains a
model with the data parallelism argv[2] names, each rank on its half of every
batch, and writes the final weights of rank 0 to argv[1].
  ddp    a Python MLP under DistributedDataParallel, every other step
         accumulating two micro-batches under no_sync()
  zero1, zero2
         the same MLP under ZeroRedundancyOptimizer at that stage
  zero3  a C++ zoo MLP under ZeroRedundancyOptimizer at stage 3"""
import sys

import numpy as np

import tessera
import tessera.distributed as dist
import tessera.nn as nn
import tessera.nn.functional as F

path, mode = sys.argv[1], sys.argv[2]
dist.init_process_group()
rank, world = dist.get_rank(), dist.get_world_size()
tessera.manual_seed(rank)  # different starts: the data parallelism must broadcast rank 0's
if mode == "zero3":
    model = nn.zoo.build("mlp", in_features=6, hidden=[16], num_classes=3)
else:
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
if mode == "ddp":
    net = dist.DistributedDataParallel(model, bucket_cap_mb=0.0002, first_bucket_mb=0.0001)  # several buckets
    opt = tessera.optim.Adam(model.parameters(), lr=0.01)
else:
    net = model
    opt = dist.ZeroRedundancyOptimizer(model, tessera.optim.Adam, stage=int(mode[-1]), lr=0.01,
                                       bucket_cap_mb=0.0002, first_bucket_mb=0.0001)
rng = np.random.default_rng(0)


def micro_batch():
    x = rng.standard_normal((8, 6)).astype(np.float32)
    y = rng.integers(0, 3, 8)
    part = slice(rank * 8 // world, (rank + 1) * 8 // world)
    return F.cross_entropy(net(tessera.from_numpy(x[part].copy())), tessera.from_numpy(y[part].astype(np.int64)))


for step in range(10):
    opt.zero_grad()
    if mode == "ddp" and step % 2:
        with net.no_sync():
            (micro_batch() / 2).backward()
        (micro_batch() / 2).backward()
    else:
        micro_batch().backward()
    opt.step()
state = opt.state_dict()  # a collective under ZeRO: every rank takes part
if mode == "zero3":
    with opt.whole_parameters():
        weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
else:
    weights = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
weights.update({"opt." + k: v.contiguous() for k, v in state["state"].items()})
if world > 1:  # every rank ends with the same weights and state
    for k, v in weights.items():
        top = v.clone()
        dist.all_reduce(top, dist.ReduceOp.MAX)
        low = v.clone()
        dist.all_reduce(low, dist.ReduceOp.MIN)
        assert (top == low).all().item(), k
if rank == 0:
    tessera.save_file(weights, path)
