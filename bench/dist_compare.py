#!/usr/bin/python3
"""Distributed training against raw MPI and PyTorch (docs/benchmarks.md, section distributed).

    /usr/bin/python3 bench/dist_compare.py --build-dir build [--json out.json] [--quick]

1. Allreduce bus bandwidth: ProcessGroup::allreduce against a raw MPI_Allreduce
   in one binary (bench/tessera_dist_bench.cpp), 4 KB to 64 MB, at 2 and 4 ranks.
2. Data-parallel step time of the tiny GPT (bench/train_torch.py's, 2 layers)
   at 2 ranks and the per-rank batch, against one process at that batch, with
   overlap on and off and ZeRO-1/2/3, and the same ratio for PyTorch 1.13's
   DDP on gloo; and PyTorch's ZeroRedundancyOptimizer at 2 ranks.
3. Memory per rank of that GPT under DDP and ZeRO-1/2/3 at 2 and 4 ranks:
   parameters, gradients and AdamW state against ZeRO's expected bytes.
Ranks run with one thread each, started as `tessera launch` starts them
(mpirun, oversubscription allowed, yielding waits, the launcher's malloc settings).
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import cpu_model, cpu_simd  # noqa: E402

TUNABLES = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967295:glibc.malloc.arena_max=1"


def mpi_env():
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_mpi_yield_when_idle="1",
               GLIBC_TUNABLES=TUNABLES, OMPI_MCA_btl_vader_single_copy_mechanism="none")
    if os.getuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def lines(cmd, env=None, timeout=1800):
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5, help="GPT runs per configuration, alternating; the median is kept")
    args = ap.parse_args()
    bench = os.path.join(args.build_dir, "bench", "tessera_dist_bench")
    if not os.path.exists(bench):
        sys.exit(f"{bench} is missing: build with -DTESSERA_BUILD_BENCH=ON")
    env = mpi_env()
    iters = "5" if args.quick else "30"
    sizes = "4096,1048576" if args.quick else "4096,65536,1048576,4194304,16777216,67108864"
    steps = 3 if args.quick else args.steps
    rounds = 1 if args.quick else args.rounds
    res = {"cpu": cpu_model(), "simd": cpu_simd(), "allreduce": [], "gpt": []}
    for n in (2, 4):
        res["allreduce"] += lines(["mpirun", "-np", str(n), "--bind-to", "none", bench, "allreduce", "--iters", iters,
                                   "--sizes", sizes], env)
        print(f"allreduce at {n} ranks done", file=sys.stderr)

    def median_of(runs):
        runs = sorted(runs, key=lambda r: r["step_s"])
        return runs[len(runs) // 2]

    # Memory per rank: DDP and ZeRO-1/2/3 at 2 and 4 ranks (one run each; the bytes do not drift).
    res["memory"] = []
    for n in (2, 4):
        for zero in (0, 1, 2, 3):
            res["memory"] += lines(["mpirun", "-np", str(n), "--bind-to", "none", bench, "memory", "--batch", "4",
                                    "--layers", "2", "--zero", str(zero)], env)
    print("memory done", file=sys.stderr)

    # The runs alternate, round after round, so that a change in the host's speed meets them all alike.
    # A configuration: (implementation, ranks, mode): mode is ddp, ddp-sync (no overlap), zero1 or zero2.
    common = ["--batch", "4", "--layers", "2", "--steps", str(steps), "--warmup", "2"]
    configs = [("tessera", 1, "ddp"), ("tessera", 2, "ddp"), ("tessera", 2, "ddp-sync"), ("tessera", 2, "zero1"),
               ("tessera", 2, "zero2"), ("tessera", 2, "zero3"), ("pytorch", 1, "ddp"), ("pytorch", 2, "ddp"),
               ("pytorch", 2, "zero1")]
    runs = {c: [] for c in configs}
    for rnd in range(rounds):
        for impl, ranks, mode in configs:
            zero = mode[4:] if mode.startswith("zero") else "0"
            if impl == "tessera":
                r = lines(["mpirun", "-np", str(ranks), "--bind-to", "none", bench, "gpt", *common, "--overlap",
                           "0" if mode == "ddp-sync" else "1", "--zero", zero], env)[0]
                r["impl"] = "tessera"
            else:
                r = lines(["/usr/bin/python3", os.path.join(HERE, "dist_torch.py"), "--ranks", str(ranks), *common,
                           "--zero", zero], dict(os.environ, OMP_NUM_THREADS="1"))[0]
            runs[(impl, ranks, mode)].append(r)
            print(f"round {rnd + 1}: {impl} ranks {ranks} {mode}: {r['step_s']:.4f} s", file=sys.stderr)
    for c in configs:
        r = median_of(runs[c])
        r["rounds"] = [x["step_s"] for x in runs[c]]
        r["mode"] = c[2]
        res["gpt"].append(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
