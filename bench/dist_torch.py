#!/usr/bin/python3
"""PyTorch's reference for the distributed benchmarks: the tiny GPT of
bench/train_torch.py under DistributedDataParallel on gloo (Debian's PyTorch
1.13 has no MPI or NCCL backend), at the per-rank batch, and
ZeroRedundancyOptimizer; or alone (--ranks 1).

    /usr/bin/python3 bench/dist_torch.py --ranks 2 --batch 4 --layers 2 --steps 10 [--zero 1]

starts its ranks itself (torchrun fails on Debian's Python 3.11): RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT set by hand, one thread each. Prints
ONE JSON line: the slowest rank's median step time.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(args):
    import numpy as np
    import torch
    import torch.distributed as dist
    sys.path.insert(0, HERE)
    from train_torch import GPT

    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = GPT(vocab_size=256, block_size=256, n_layer=args.layers, n_head=6, n_embd=384, bias=True)
    model.train()
    if world > 1:
        # The causal masks are bool buffers, which gloo cannot broadcast; they are equal on every rank.
        masks = [n for n, b in model.named_buffers() if b.dtype == torch.bool]
        torch.nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, masks)
        model = torch.nn.parallel.DistributedDataParallel(model)
    if args.zero and world > 1:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=3e-4,
                                      weight_decay=0.1)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    g = torch.Generator().manual_seed(1 + rank)
    tokens = torch.randint(0, 256, (args.batch, 257), generator=g)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    ce = torch.nn.CrossEntropyLoss()
    times = []
    for s in range(args.warmup + args.steps):
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        out = model(x)
        ce(out.view(-1, out.size(-1)), y.view(-1)).backward()
        opt.step()
        if s >= args.warmup:
            times.append(time.perf_counter() - t0)
    med = torch.tensor([float(np.median(times))], dtype=torch.float64)
    if world > 1:
        dist.all_reduce(med, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(json.dumps({"bench": "gpt", "impl": "pytorch", "ranks": world, "batch_per_rank": args.batch,
                          "layers": args.layers, "zero": args.zero, "step_s": med.item(), "steps": args.steps,
                          "torch": torch.__version__}), flush=True)
    if world > 1:
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4, help="per rank")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--zero", type=int, default=0, help="1: ZeroRedundancyOptimizer")
    args = ap.parse_args()
    if "RANK" in os.environ or args.ranks == 1:
        return rank_main(args)
    port = str(free_port())
    procs = []
    for r in range(args.ranks):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.ranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, __file__, *sys.argv[1:]], env=env))
    codes = [p.wait() for p in procs]
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
