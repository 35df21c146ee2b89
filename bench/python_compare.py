#!/usr/bin/python3
"""Tessera from Python against PyTorch from Python, and against Tessera from C++.

    /usr/bin/python3 bench/python_compare.py [--build-dir build-bench] [--rounds 3] [--json out.json] [--quick]

overhead: one op called from Python (bench/python_overhead.py), Tessera and
          PyTorch each in its own process, 1 thread: a 1-element add as an
          operator and as a function, with a Python number, recording autograd;
          a 64x64 matmul; a reduction over a dim; a view. Median ns per call.
steps:    a training step written in Python: bench/train_torch.py run by
          PyTorch, and the same file run by Tessera through bench/as_tessera.py
          (torch meaning tessera); and the same step in C++
          (build-bench/bench/tessera_train_bench, the same models): the MLP
          (784-256-256-10, batch 128, Adam) and the nanoGPT (6 layers, 384 wide,
          context 256, batch 8, AdamW). ms per step, median of the rounds'
          medians.
dist:     the distributed GPT step at 2 ranks (one thread each, mpirun as
          bench/dist_compare.py starts them): bench/python_ddp.py, written in
          Python over tessera.distributed's DistributedDataParallel and
          ZeroRedundancyOptimizer (stages 1, 2), against the same step in C++
          (build-bench/bench/tessera_dist_bench gpt). Seconds per step.
PyTorch runs in its best configuration (bench/train_compare.py's env_for).
The configurations take turns in each round. Standard library only.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_compare as tc  # noqa: E402
from common import log, try_json  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = "/usr/bin/python3"


def env(impl, threads, build_dir):
    e = tc.env_for("torch_best" if impl == "torch" else "tessera", threads, os.environ)
    if impl != "torch":
        e["PYTHONPATH"] = os.path.join(build_dir, "python")
    return e


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else None


def overhead(build_dir, rounds, calls):
    runs = {"tessera": [], "torch": []}
    for r in range(rounds):
        for impl in ("tessera", "torch"):
            rec = try_json([PY, os.path.join(HERE, "python_overhead.py"), "--impl", impl, "--calls", str(calls)],
                           env(impl, 1, build_dir), "ns", timeout=600)
            log("overhead", impl, "round", r, rec.get("ns", rec.get("error")))
            runs[impl].append(rec)
    out = {}
    for impl, recs in runs.items():
        ok = [x for x in recs if "ns" in x]
        if not ok:
            out[impl] = {"error": recs[0].get("error")}
            continue
        out[impl] = {k: median([x["ns"][k] for x in ok]) for k in ok[0]["ns"]}
        if "gil" in ok[0]:
            out[impl + "_gil"] = {k: median([x["gil"][k] for x in ok]) for k in ok[0]["gil"]}
        out[impl + "_version"] = ok[0].get("version")
    return out


def step(impl, case, threads, steps, warmup, build_dir):
    common = ["--case", case, "--steps", str(steps), "--warmup", str(warmup), "--threads", str(threads)]
    if impl == "cpp":
        cmd = [os.path.join(build_dir, "bench", "tessera_train_bench")] + common
    elif impl == "python":
        cmd = [PY, os.path.join(HERE, "as_tessera.py"), os.path.join(HERE, "train_torch.py")] + common
    else:
        cmd = [PY, os.path.join(HERE, "train_torch.py")] + common
    rec = try_json(cmd, env("torch" if impl == "torch" else "tessera", threads, build_dir), "ms_per_step", timeout=1800)
    log("step", impl, case, threads, "->", rec.get("ms_per_step", rec.get("error")))
    return rec


def dist_steps(build_dir, rounds, steps):
    import dist_compare as dc
    env_ = dict(dc.mpi_env(), PYTHONPATH=os.path.join(build_dir, "python"))
    common = ["--batch", "4", "--layers", "2", "--steps", str(steps), "--warmup", "2"]
    rows = []
    for zero in ("0", "1", "2"):
        recs = {"python": [], "cpp": []}
        for _ in range(rounds):
            for impl in recs:
                prog = ([PY, os.path.join(HERE, "python_ddp.py")] if impl == "python"
                        else [os.path.join(build_dir, "bench", "tessera_dist_bench"), "gpt", "--overlap", "1"])
                rec = try_json(["mpirun", "-np", "2", "--bind-to", "none"] + prog + common + ["--zero", zero], env_,
                               "step_s", timeout=1800)
                log("dist", impl, "zero", zero, "->", rec.get("step_s", rec.get("error")))
                recs[impl].append(rec)
        row = {"mode": "ddp" if zero == "0" else "zero" + zero, "ranks": 2}
        for impl, rs in recs.items():
            ok = [r["step_s"] for r in rs if "step_s" in r]
            row[impl] = median(ok) if ok else None
            row[impl + "_rounds"] = [r.get("step_s") for r in rs]
            if not ok:
                row[impl + "_error"] = rs[0].get("error")
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build-bench"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--cases", default="mlp=1,2:30+5,gpt=2:3+1",
                    help="case=threads:steps+warmup, comma-separated (threads joined by '/' or ',')")
    ap.add_argument("--dist-steps", type=int, default=6, help="steps of the distributed GPT (0: skip it)")
    ap.add_argument("--quick", action="store_true", help="one round, few calls and steps")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.calls, a.cases, a.dist_steps = 1, 2000, "mlp=1:3+1", 2
    out = {"rounds": a.rounds, "overhead": overhead(a.build_dir, a.rounds, a.calls), "steps": []}
    for spec in a.cases.split(";") if ";" in a.cases else _split_cases(a.cases):
        case, _, rest = spec.partition("=")
        threads, _, sw = rest.partition(":")
        steps, _, warmup = sw.partition("+")
        for t in threads.replace("/", ",").split(","):
            recs = {"torch": [], "python": [], "cpp": []}
            for _ in range(a.rounds):
                for impl in recs:
                    recs[impl].append(step(impl, case, int(t), int(steps), int(warmup), a.build_dir))
            row = {"case": case, "threads": int(t)}
            for impl, rs in recs.items():
                ok = [r for r in rs if "ms_per_step" in r]
                row[impl] = median([r["ms_per_step"] for r in ok]) if ok else None
                row[impl + "_rounds"] = [r.get("ms_per_step") for r in rs]
                if not ok:
                    row[impl + "_error"] = rs[0].get("error")
                elif impl != "cpp":
                    row[impl + "_attention"] = ok[0].get("attention")
                    row[impl + "_final_loss"] = ok[0].get("final_loss")
            out["steps"].append(row)
    out["dist"] = dist_steps(a.build_dir, a.rounds, a.dist_steps) if a.dist_steps else []
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    else:
        print(json.dumps(out, indent=1))


def _split_cases(s):
    """"mlp=1,2:30+5,gpt=2:3+1" -> ["mlp=1,2:30+5", "gpt=2:3+1"] (a comma before 'name=' starts a case)."""
    parts, cur = [], ""
    for tok in s.split(","):
        if "=" in tok and cur:
            parts.append(cur)
            cur = tok
        else:
            cur = tok if not cur else cur + "," + tok
    if cur:
        parts.append(cur)
    return parts


if __name__ == "__main__":
    main()
