#!/usr/bin/python3
"""Tensor and pipeline parallelism (docs/benchmarks.md, section model_parallel).

    /usr/bin/python3 bench/model_parallel_compare.py --build-dir build [--json out.json] [--quick]

0. Round trips of a send and a receive between two ranks (8 floats, 4 MB): the
   latency each pipeline transfer adds.
1. The pipeline bubble with unit-cost stages (sleeps, so oversubscribed ranks
   do not compete for cores), for GPipe, 1F1B and interleaved 1F1B (v = 2) at
   p = 2 and 4, m = 4 and 8, against (p - 1) / (v m + p - 1).
2. Peak activation memory per rank of a GPT pipeline step, GPipe against 1F1B.
3. Tensor parallelism at T = 2 and 4 (with and without sequence
   parallelism): the bytes each collective carried in one training step
   against the analytic count, and parameter bytes per rank against 1/T of
   the split parameters plus the whole ones.
4. Step time of a GPT under every data x tensor x pipeline layout of 2, 4 and
   8 ranks against one process, and the time in collectives. On this 2-core
   machine the ranks share two cores, so these show overheads, not speed-ups.
5. A GPT too large for one process under a 160 MB memory limit (15.8M
   parameters: 253 MB of weights, gradients and AdamW state), built on meta
   and trained at 2 x 2 x 2 on 8 ranks under that limit on every rank, against
   one process without the limit (and that process under the limit, which
   fails): the loss curves over 20 steps and each rank's peak memory.
6. Tensor-parallel serving: the LLM engine's decode step on the 15M fortunes
   model's shape (Q8_0 and F32) split over 2 ranks against one process, with
   1 and 8 sequences decoding, and rank 0's share of the step in the group's
   sums and broadcasts.
Ranks run with one thread each, as `tessera launch` starts them.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import cpu_model, cpu_simd  # noqa: E402
from dist_compare import lines, mpi_env  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    bench = os.path.join(args.build_dir, "bench", "tessera_model_parallel_bench")
    if not os.path.exists(bench):
        sys.exit(f"{bench} is missing: build with -DTESSERA_BUILD_BENCH=ON")
    env = mpi_env()

    def run(np, *a):
        cmd = [bench, *a] if np == 1 else ["mpirun", "-np", str(np), "--bind-to", "none", bench, *a]
        return lines(cmd, env)

    out = {"cpu": cpu_model(), "simd": cpu_simd(), "pingpong": [], "bubble": [], "activations": [], "tensor": [],
           "step": [], "bigmodel": [], "serving": []}
    for n in ("8", "1048576"):
        out["pingpong"] += run(2, "pingpong", "--elements", n, "--iters", "50" if args.quick else "200")
        print(json.dumps(out["pingpong"][-1]), flush=True)
    stage_ms = "5" if args.quick else "20"
    for p in (2,) if args.quick else (2, 4):
        for m in (4,) if args.quick else (4, 8):
            for schedule, v in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2)):
                out["bubble"] += run(p, "bubble", "--schedule", schedule, "--m", str(m), "--v", str(v),
                                     "--stage-ms", stage_ms, "--steps", "1" if args.quick else "3")
                print(json.dumps(out["bubble"][-1]), flush=True)
    for p in (2,) if args.quick else (2, 4):
        for schedule in ("gpipe", "1f1b"):
            out["activations"] += run(p, "activations", "--schedule", schedule, "--m", "8")
            print(json.dumps(out["activations"][-1]), flush=True)
    for t in (2,) if args.quick else (2, 4):
        for sp in ("0", "1"):
            out["tensor"] += run(t, "tensor", "--sp", sp)
            print(json.dumps(out["tensor"][-1]), flush=True)
    layouts = [(1, (1, 1, 1)), (2, (2, 1, 1)), (2, (1, 2, 1)), (2, (1, 1, 2))]
    if not args.quick:
        layouts += [(4, (4, 1, 1)), (4, (1, 4, 1)), (4, (1, 1, 4)), (4, (2, 2, 1)), (4, (1, 2, 2)),
                    (8, (2, 2, 2))]
    for np, l in layouts:
        out["step"] += run(np, "step", "--layout", ",".join(map(str, l)), "--steps", "2" if args.quick else str(args.steps))
        print(json.dumps(out["step"][-1]), flush=True)
    big_steps = "5" if args.quick else "20"
    out["bigmodel"] += run(1, "bigmodel", "--steps", big_steps)
    out["bigmodel"] += run(1, "bigmodel", "--steps", big_steps, "--limit-mb", "160")
    out["bigmodel"] += run(8, "bigmodel", "--layout", "2,2,2", "--steps", big_steps, "--limit-mb", "160")
    for r in out["bigmodel"]:
        print(json.dumps(r)[:300], flush=True)
    for typ in ("q8_0", "f32"):
        for batch in ("1", "8"):
            a = ("serving", "--type", typ, "--batch", batch, "--steps", "32" if args.quick else "128")
            # One process with one thread, and with both cores' threads; then 2 ranks of one thread.
            out["serving"] += lines([bench, *a], env)
            out["serving"] += lines([bench, *a], dict(env, OMP_NUM_THREADS="2"))
            out["serving"] += run(2, *a)
            for r in out["serving"][-3:]:
                print(json.dumps(r), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
