#!/usr/bin/python3
"""The distributed GPT step of build-bench/bench/tessera_dist_bench (gpt), written
in Python: the zoo's tiny GPT (vocab 256, context 256, 6 heads, 384 wide),
AdamW, this rank's batch, under tessera.distributed.DistributedDataParallel
or ZeroRedundancyOptimizer, one thread per rank. Started as the C++ one is:

    mpirun -np 2 /usr/bin/python3 bench/python_ddp.py --batch 4 --layers 2 --steps 10 [--zero 1|2]

(bench/python_compare.py runs it beside the C++ bench). Prints ONE JSON line
on rank 0: the slowest rank's median step time.
"""
import argparse
import json
import statistics
import time

import tessera
import tessera.distributed as dist
import tessera.nn.functional as F


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=4, help="per rank")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--zero", type=int, default=0, help="1 or 2: ZeroRedundancyOptimizer at that stage")
    a = ap.parse_args()
    tessera.set_num_threads(1)
    world = dist.init_process_group()
    tessera.manual_seed(0)
    model = tessera.nn.zoo.build("gpt", vocab_size=256, block_size=256, n_layer=a.layers, n_head=6, n_embd=384)
    model.train()
    if a.zero and world.size > 1:
        opt = dist.ZeroRedundancyOptimizer(model, tessera.optim.AdamW, stage=a.zero, lr=3e-4, weight_decay=0.1)
        net = model
    else:
        opt = tessera.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
        net = dist.DistributedDataParallel(model) if world.size > 1 else model
    tessera.manual_seed(1 + world.rank)
    tokens = tessera.randint(0, 256, (a.batch, 257))
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    times = []
    for s in range(a.warmup + a.steps):
        if world.size > 1:
            world.barrier()
        t0 = time.perf_counter()
        out = net(x)
        F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)).backward()
        opt.step()
        opt.zero_grad()
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
    slowest = tessera.tensor([statistics.median(times)], dtype=tessera.float64)
    if world.size > 1:
        world.all_reduce(slowest, "max")
    if world.rank == 0:
        print(json.dumps({"bench": "gpt", "impl": "tessera-python", "ranks": world.size, "batch_per_rank": a.batch,
                          "layers": a.layers, "zero": a.zero, "step_s": slowest.item(), "steps": a.steps}),
              flush=True)


if __name__ == "__main__":
    main()
