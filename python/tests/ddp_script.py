"""Run by test_distributed.py under `tessera launch -n 2` (and alone): trains a
Python MLP with DistributedDataParallel, each rank on its half of every batch,
and writes the final weights of rank 0 to argv[1]."""
import sys

import numpy as np

import tessera
import tessera.distributed as dist
import tessera.nn as nn
import tessera.nn.functional as F

dist.init_process_group()
rank, world = dist.get_rank(), dist.get_world_size()
tessera.manual_seed(rank)  # different starts: DDP must broadcast rank 0's
model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
ddp = dist.DistributedDataParallel(model)
opt = tessera.optim.Adam(model.parameters(), lr=0.01)
rng = np.random.default_rng(0)
for step in range(10):
    x = rng.standard_normal((8, 6)).astype(np.float32)
    y = rng.integers(0, 3, 8)
    part = slice(rank * 8 // world, (rank + 1) * 8 // world)
    loss = F.cross_entropy(ddp(tessera.from_numpy(x[part].copy())), tessera.from_numpy(y[part].astype(np.int64)))
    opt.zero_grad()
    loss.backward()
    opt.step()
weights = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
if world > 1:  # every rank ends with the same weights
    for k, v in weights.items():
        top = v.clone()
        dist.all_reduce(top, dist.ReduceOp.MAX)
        low = v.clone()
        dist.all_reduce(low, dist.ReduceOp.MIN)
        assert (top == low).all().item(), k
if rank == 0:
    tessera.save_file(weights, sys.argv[1])
