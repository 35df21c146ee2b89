#!/usr/bin/python3
"""Side-by-side training benchmark: Tessera vs PyTorch, one command.

    /usr/bin/python3 bench/train_compare.py                       # all cases, 1 and 2 threads, 3 rounds
    /usr/bin/python3 bench/train_compare.py --cases mlp,cnn --threads 2 --markdown out.md
    /usr/bin/python3 bench/train_compare.py --steps 2 --rounds 1 --cases mlp   # smoke test

For every case and thread count T it runs, each as its own process:
  * Tessera: build-bench/bench/tessera_train_bench --case C --steps N --warmup W --threads T
    (inherited environment plus OMP_NUM_THREADS=T; at T >= 2 it also tries
    OMP_WAIT_POLICY=PASSIVE and keeps whichever variant is faster, as PyTorch's best does);
  * PyTorch "best" configuration (see /work/shared/PLATFORM.md): bench/train_torch.py with
    MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ raised, OPENBLAS_CORETYPE unset,
    OMP_NUM_THREADS / OPENBLAS_NUM_THREADS / MKL_NUM_THREADS = T; at T >= 2 it also
    tries OMP_WAIT_POLICY=PASSIVE and keeps whichever variant is faster;
  * PyTorch "default" configuration: the inherited environment with only OMP_NUM_THREADS=T.
The implementations alternate within a round (the order is reversed every other
round), the whole set is repeated --rounds times, and each configuration keeps
its best (lowest) median ms/step, so that a burst of background load hurts no
side more than another.

Both programs print one JSON line: {"case", "impl", "threads", "ms_per_step" (median),
"ms_p10", "ms_p90", "steps", "peak_rss_mib", "samples_per_s", mlp: "s_per_epoch"}.
Ratio = Tessera / PyTorch-best ms per step: lower is better for Tessera.

Standard library only.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

from common import cpu_simd, log, try_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_SCRIPT = os.path.join(ROOT, "bench", "train_torch.py")

CASES = ["mlp", "cnn", "gpt", "resnet18"]
# (timed steps, warmup steps) per case
DEFAULT_STEPS = {"mlp": (50, 5), "cnn": (50, 5), "gpt": (5, 1), "resnet18": (10, 2)}
CASE_LABEL = {
    "mlp": "MLP 784-256-256-10, batch 128, Adam",
    "cnn": "CNN (Fashion-MNIST default), batch 64, Adam",
    "gpt": "GPT 6L/6H/384, ctx 256, batch 8, AdamW",
    "resnet18": "ResNet-18 (CIFAR stem), batch 32, SGD+momentum",
}
CONFIGS = ["tessera", "torch_best", "torch_default"]


# ---------------------------------------------------------------------------------
# environments


def conv_flops(cin, cout, k, hw_out):
    """Multiply-adds of one image through a k x k convolution, as FLOPs (2 per MAC)."""
    return 2 * cin * cout * k * k * hw_out * hw_out


def step_flops(case):
    """FLOPs of one training step from the model's shapes: forward, and twice that
    for the backward (inputs' and weights' gradients) less the first layer's
    input gradient, which no one asks for; for the GPT the formula
    6*N*tokens + 12*L*T^2*d per sequence, N the parameters outside the
    embeddings. Optimizer and pointwise work are not counted."""
    if case == "mlp":  # 784-256-256-10, batch 128
        return 128 * (3 * 2 * (784 * 256 + 256 * 256 + 256 * 10) - 2 * 784 * 256)
    if case == "cnn":  # LeNet: conv 1->32 3x3 @28, pool, conv 32->64 3x3 @14, pool, 3136->128->10; batch 64
        fwd = conv_flops(1, 32, 3, 28) + conv_flops(32, 64, 3, 14) + 2 * (3136 * 128 + 128 * 10)
        return 64 * (3 * fwd - conv_flops(1, 32, 3, 28))
    if case == "gpt":  # 6 layers, d 384, context 256, batch 8
        L, d, T, B = 6, 384, 256, 8
        n = L * (12 * d * d + 13 * d) + 2 * d  # attention, MLP, their biases and norms; final norm
        return 6 * n * B * T + 12 * L * T * T * d * B
    if case == "resnet18":  # CIFAR stem at 32x32, batch 32
        fwd = conv_flops(3, 64, 3, 32) + 4 * conv_flops(64, 64, 3, 32)
        for cin, c, hw in ((64, 128, 16), (128, 256, 8), (256, 512, 4)):
            fwd += conv_flops(cin, c, 3, hw) + 3 * conv_flops(c, c, 3, hw) + conv_flops(cin, c, 1, hw)
        fwd += 2 * 512 * 10
        return 32 * (3 * fwd - conv_flops(3, 64, 3, 32))
    return None


def fma_peak(binary, threads, base):
    """The machine's f32 FMA peak for `threads` threads, GFLOP/s (tessera_train_bench --case fma_peak)."""
    try:
        p = subprocess.run([binary, "--case", "fma_peak", "--threads", str(threads)], env=env_for("tessera", threads, base),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120, stdin=subprocess.DEVNULL)
        rec = json.loads(p.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as e:
        log(f"warning: FMA peak for {threads} thread(s) not measured: {e}")
        return None, None
    return rec.get("gflops"), rec.get("isa")


def env_for(config, threads, base, passive=False):
    env = dict(base)
    t = str(threads)
    if config == "tessera":
        env["OMP_NUM_THREADS"] = t
        if passive:
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        else:
            env.pop("OMP_WAIT_POLICY", None)
    elif config == "torch_best":
        env["MALLOC_MMAP_THRESHOLD_"] = "1000000000"
        env["MALLOC_TRIM_THRESHOLD_"] = "1000000000"
        env.pop("OPENBLAS_CORETYPE", None)
        env["OMP_NUM_THREADS"] = t
        env["OPENBLAS_NUM_THREADS"] = t
        env["MKL_NUM_THREADS"] = t
        if passive:
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        else:
            env.pop("OMP_WAIT_POLICY", None)
    elif config == "torch_default":
        env["OMP_NUM_THREADS"] = t
    else:
        raise ValueError(config)
    return env


# ---------------------------------------------------------------------------------
# running one process


def run_one(cmd, env, timeout):
    """Runs cmd; returns the last JSON object with ms_per_step it printed, or
    {"error": ...}."""
    return try_json(cmd, env, "ms_per_step", timeout, exit_warns=True)


def better(a, b):
    """The record with the lower ms_per_step (records with errors lose)."""
    if a is None or "ms_per_step" not in a:
        return b
    if b is None or "ms_per_step" not in b:
        return a
    return b if b["ms_per_step"] < a["ms_per_step"] else a


# ---------------------------------------------------------------------------------
# machine info


def median_of_rounds(recs, keys):
    """The first successful record, its timing keys replaced by their median over
    all successful rounds (or the first error if every round failed); each
    round's value is kept too, in order, under KEY_rounds."""
    ok = [r for r in recs if "error" not in r]
    if not ok:
        return recs[0]
    out = dict(ok[0])
    for k in keys:
        out[k + "_rounds"] = [r[k] for r in ok]
        vals = sorted(r[k] for r in ok)
        out[k] = vals[len(vals) // 2]
    out["rounds"] = len(ok)
    return out


def torch_version(python):
    try:
        return subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              timeout=60).stdout.strip() or "?"
    except (OSError, subprocess.TimeoutExpired):
        return "?"


# ---------------------------------------------------------------------------------
# report


def f_ms(v):
    if v is None:
        return "n/a"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def f_mib(v):
    return "n/a" if v is None else f"{v:.0f}"


def get(rec, key):
    return rec.get(key) if rec else None


def print_report(results, cases, threads_list, meta, notes, out):
    w = lambda s="": print(s, file=out)
    w("# Training step: Tessera vs PyTorch")
    w()
    for k, v in meta.items():
        w(f"- {k}: {v}")
    w()
    w("ms/step = median over the timed steps; the median round of --rounds alternating ones. Ratio = Tessera / PyTorch best "
      "(lower is better; < 1 means Tessera is faster). \"best\" = PyTorch in its best configuration, "
      "\"default\" = PyTorch in the inherited environment with only OMP_NUM_THREADS set. "
      "Peak RSS = ru_maxrss of the whole process.")
    w()
    peaks = meta.get("f32 FMA peak GFLOP/s by threads") or {}
    w("| case | threads | Tessera ms/step | PyTorch best ms/step | PyTorch default ms/step | "
      "Tessera / PyTorch best | GFLOP/step | % of FMA peak, Tessera / PyTorch best | Tessera peak RSS MiB | "
      "PyTorch best peak RSS MiB | s/epoch Tessera / PyTorch best |")
    w("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|")
    for c in cases:
        for t in threads_list:
            r = results[(c, t)]
            tv = get(r.get("tessera"), "ms_per_step")
            bv = get(r.get("torch_best"), "ms_per_step")
            dv = get(r.get("torch_default"), "ms_per_step")
            ratio = f"{tv / bv:.2f}x" if (tv and bv) else "n/a"
            epoch = ""
            if c == "mlp":
                te, be = get(r.get("tessera"), "s_per_epoch"), get(r.get("torch_best"), "s_per_epoch")
                epoch = f"{'n/a' if te is None else f'{te:.2f}'} / {'n/a' if be is None else f'{be:.2f}'}"
            gf, peak = step_flops(c) / 1e9, peaks.get(str(t))
            pct = lambda ms: f"{100 * gf / (ms / 1e3) / peak:.0f}%" if ms and peak else "n/a"
            w(f"| {c} | {t} | {f_ms(tv)} | {f_ms(bv)} | {f_ms(dv)} | {ratio} | {gf:.2f} | {pct(tv)} / {pct(bv)} | "
              f"{f_mib(get(r.get('tessera'), 'peak_rss_mib'))} | {f_mib(get(r.get('torch_best'), 'peak_rss_mib'))} | "
              f"{epoch} |")
    w()
    w("Cases:")
    w()
    for c in cases:
        w(f"- {c}: {CASE_LABEL[c]}")
    w()
    # Details: spread of the kept runs, every round's median, which best variant won.
    w("<details><summary>Details (p10/p90 of the kept run; every round's median)</summary>")
    w()
    w("| case | threads | config | ms/step | p10 | p90 | samples/s | peak RSS MiB | rounds (median ms/step) | note |")
    w("|---|---:|---|---:|---:|---:|---:|---:|---|---|")
    for c in cases:
        for t in threads_list:
            r = results[(c, t)]
            for cfg in CONFIGS:
                rec = r.get(cfg)
                if rec is None:
                    continue
                rounds = ", ".join(f_ms(x) for x in r.get(cfg + "_rounds", []))
                note = rec.get("error", "") or rec.get("variant", "")
                if rec.get("attention"):
                    note = (note + "; " if note else "") + "attention: " + rec["attention"]
                w(f"| {c} | {t} | {cfg} | {f_ms(rec.get('ms_per_step'))} | {f_ms(rec.get('ms_p10'))} | "
                  f"{f_ms(rec.get('ms_p90'))} | {rec.get('samples_per_s', 'n/a')} | "
                  f"{f_mib(rec.get('peak_rss_mib'))} | {rounds} | {note} |")
    w()
    w("</details>")
    if notes:
        w()
        w("Notes:")
        w()
        for n in notes:
            w(f"- {n}")


# ---------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from {','.join(CASES)}")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--steps", type=int, default=None,
                    help="timed steps for every case (default per case: "
                         + ", ".join(f"{c} {s}" for c, (s, _) in DEFAULT_STEPS.items()) + ")")
    ap.add_argument("--warmup", type=int, default=None,
                    help="warmup steps for every case (default per case: "
                         + ", ".join(f"{c} {w}" for c, (_, w) in DEFAULT_STEPS.items()) + ")")
    ap.add_argument("--case-steps", default="",
                    help="timed+warmup steps by case, e.g. gpt=3+1,resnet18=4+1 (overrides the defaults)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved repetitions; each configuration keeps its median round (default 3)")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build-bench"))
    ap.add_argument("--python", default="/usr/bin/python3", help="interpreter with torch (Debian's)")
    ap.add_argument("--skip-default", action="store_true", help="do not run PyTorch's default configuration")
    ap.add_argument("--timeout", type=float, default=900, help="seconds one process may run (default 900)")
    ap.add_argument("--markdown", default=None, help="also write the report to this file")
    ap.add_argument("--json", default=None, help="write the raw results to this file")
    args = ap.parse_args()

    cases = [c for c in args.cases.split(",") if c]
    bad = [c for c in cases if c not in CASES]
    if bad:
        sys.exit(f"unknown case(s): {', '.join(bad)}; choose from {', '.join(CASES)}")
    threads_list = [int(t) for t in args.threads.split(",") if t]
    if not cases or not threads_list or args.rounds < 1:
        sys.exit("nothing to run")

    tess_bin = os.path.join(args.build_dir, "bench", "tessera_train_bench")
    have_tess = os.access(tess_bin, os.X_OK)
    notes = []
    if not have_tess:
        msg = (f"Tessera binary {tess_bin} is missing (build the bench target tessera_train_bench, "
               f"e.g. cmake --build {os.path.relpath(args.build_dir, ROOT)} --target tessera_train_bench): "
               f"running the PyTorch side only")
        log("NOTE: " + msg)
        notes.append(msg)
    if not os.access(args.python, os.X_OK):
        sys.exit(f"{args.python} not found: pass --python with an interpreter that has torch")

    load1 = os.getloadavg()[0]
    if load1 > 0.7:
        msg = f"1-minute load average at start was {load1:.2f}: other work was running; figures may be noisy"
        log("warning: " + msg)
        notes.append(msg)

    base_env = dict(os.environ)
    results = {(c, t): {} for c in cases for t in threads_list}
    peaks = {t: fma_peak(tess_bin, t, base_env) for t in threads_list} if have_tess else {}

    case_steps = dict(DEFAULT_STEPS)
    for kv in filter(None, args.case_steps.split(",")):
        k, v = kv.split("=")
        st, _, wu = v.partition("+")
        case_steps[k] = (int(st), int(wu or 0))

    def steps_for(c):
        s, w = case_steps[c]
        return (args.steps if args.steps is not None else s), (args.warmup if args.warmup is not None else w)

    t_start = time.time()
    for rnd in range(args.rounds):
        for c in cases:
            steps, warmup = steps_for(c)
            common = ["--case", c, "--steps", str(steps), "--warmup", str(warmup)]
            for t in threads_list:
                # (config, variant label, command, env)
                runs = []
                if have_tess:
                    tess_cmd = [tess_bin, *common, "--threads", str(t)]
                    runs.append(("tessera", "OMP_WAIT_POLICY unset" if t >= 2 else "", tess_cmd,
                                 env_for("tessera", t, base_env)))
                    if t >= 2:  # the same choice PyTorch's best configuration gets
                        runs.append(("tessera", "OMP_WAIT_POLICY=PASSIVE", tess_cmd,
                                     env_for("tessera", t, base_env, passive=True)))
                torch_cmd = [args.python, TORCH_SCRIPT, *common, "--threads", str(t)]
                runs.append(("torch_best", "OMP_WAIT_POLICY unset", torch_cmd, env_for("torch_best", t, base_env)))
                if t >= 2:
                    runs.append(("torch_best", "OMP_WAIT_POLICY=PASSIVE", torch_cmd,
                                 env_for("torch_best", t, base_env, passive=True)))
                if not args.skip_default:
                    runs.append(("torch_default", "", torch_cmd, env_for("torch_default", t, base_env)))
                if rnd % 2 == 1:
                    runs.reverse()
                res = results[(c, t)]
                round_best = {}
                for cfg, variant, cmd, env in runs:
                    log(f"== round {rnd + 1}/{args.rounds}: {c}, {t} thread(s), {cfg}"
                        f"{' (' + variant + ')' if variant else ''}")
                    s0 = time.time()
                    rec = run_one(cmd, env, args.timeout)
                    if variant:
                        rec["variant"] = variant
                    if "error" in rec:
                        log(f"   failed: {rec['error']}")
                    else:
                        log(f"   {rec['ms_per_step']:.2f} ms/step (p10 {rec.get('ms_p10', float('nan')):.2f}, "
                            f"p90 {rec.get('ms_p90', float('nan')):.2f}), peak RSS "
                            f"{rec.get('peak_rss_mib', float('nan')):.0f} MiB, {time.time() - s0:.1f} s")
                    round_best[cfg] = better(round_best.get(cfg), rec)
                    res.setdefault(cfg + "_all", []).append(rec)
                for cfg, rec in round_best.items():
                    res.setdefault(cfg + "_rounds", []).append(rec.get("ms_per_step"))
                    res.setdefault(cfg + "_round_recs", []).append(rec)
    # Each configuration keeps its median round (its record, memory included).
    for res in results.values():
        for key in [k for k in res if k.endswith("_round_recs")]:
            recs = res.pop(key)
            ok = sorted((r for r in recs if "error" not in r), key=lambda r: r["ms_per_step"])
            res[key.removesuffix("_round_recs")] = ok[len(ok) // 2] if ok else recs[0]

    cpu, simd = cpu_simd()
    meta = {
        "CPU": cpu,
        "SIMD flags": simd,
        "logical CPUs": str(os.cpu_count()),
        "kernel": platform.release(),
        "PyTorch": f"{torch_version(args.python)} ({args.python})",
        "OPENBLAS_CORETYPE in the inherited environment": os.environ.get("OPENBLAS_CORETYPE", "(unset)"),
        "threads": ", ".join(map(str, threads_list)),
        "rounds (median of)": str(args.rounds),
        "steps (timed + warmup)": ", ".join(f"{c} {'+'.join(map(str, steps_for(c)))}" for c in cases),
        "load average at start (1 min)": f"{load1:.2f}",
        "f32 FMA peak GFLOP/s by threads": {str(t): p[0] for t, p in peaks.items()},
        "FMA peak ISA": next((p[1] for p in peaks.values() if p[1]), None),
        "total wall time": f"{time.time() - t_start:.0f} s",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    }
    try:
        meta["Tessera commit"] = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                                text=True).stdout.strip() or "?"
    except OSError:
        pass
    if not have_tess:
        meta["Tessera"] = "not run (binary missing)"

    print_report(results, cases, threads_list, meta, notes, sys.stdout)
    if args.markdown:
        with open(args.markdown, "w") as f:
            print_report(results, cases, threads_list, meta, notes, f)
        log(f"report written to {args.markdown}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "notes": notes, "step_gflop": {c: step_flops(c) / 1e9 for c in cases},
                       "results": {f"{c}/{t}": v for (c, t), v in results.items()}}, f, indent=1)
        log(f"raw results written to {args.json}")


if __name__ == "__main__":
    main()
