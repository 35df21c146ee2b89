#!/usr/bin/env python3
"""Side-by-side benchmark: Tessera vs PyTorch (libtorch, C++), one command.

    python3 bench/run.py                # build (Release, build-bench/) and run everything
    python3 bench/run.py --quick        # short smoke run (0.1x the timing budget)
    python3 bench/run.py --cases matmul_256,softmax_fwd --threads 1

For each thread count (1 and 2) it runs, as separate processes:
  * build-bench/bench/tessera_bench   (links libtessera only)
  * build-bench/bench/torch_bench     (links Debian's libtorch 1.13 only), twice:
      - best configuration (docs: /work/shared/PLATFORM.md): MALLOC_MMAP_THRESHOLD_ and
        MALLOC_TRIM_THRESHOLD_ raised, OPENBLAS_CORETYPE unset, OMP_NUM_THREADS and
        OPENBLAS_NUM_THREADS set to the thread count;
      - default configuration: the environment this script was started in, unchanged,
        with only torch::set_num_threads(N) (so OpenBLAS uses its own default
        thread count: all cores).
Both programs call their library's set_num_threads(N).

Ratios are oriented so that > 1 means Tessera is better: time and memory are
PyTorch / Tessera, throughput is Tessera / PyTorch. Targets are judged against
PyTorch's best configuration.

Standard library only; any python3 works.
"""
import argparse
import json
import os
import platform
import re
import selectors
import shutil
import signal
import subprocess
import sys
import time

from common import ROOT, log

# name, unit, lower_is_better, label
CASES = [
    ("overhead_add", "ns", True, "add 1 elem, no autograd"),
    ("overhead_add_grad", "ns", True, "add 1 elem, autograd recording"),
    ("memcpy_16M", "GB/s", False, "memcpy 64 MiB (reference)"),
    ("add_16M", "GB/s", False, "add 16M f32"),
    ("mul_16M", "GB/s", False, "mul 16M f32"),
    ("gelu_16M", "GB/s", False, "gelu 16M f32"),
    ("matmul_256", "GFLOP/s", False, "matmul 256"),
    ("matmul_512", "GFLOP/s", False, "matmul 512"),
    ("matmul_1024", "GFLOP/s", False, "matmul 1024"),
    ("matmul_2048", "GFLOP/s", False, "matmul 2048"),
    ("softmax_fwd", "ms", True, "softmax [4096,1024] fwd"),
    ("softmax_fwdbwd", "ms", True, "softmax [4096,1024] fwd+bwd"),
    ("layernorm_fwd", "ms", True, "layer_norm [4096,1024] fwd"),
    ("layernorm_fwdbwd", "ms", True, "layer_norm [4096,1024] fwd+bwd"),
    ("conv_fwd", "ms", True, "conv2d 32x64x56x56 3x3 fwd"),
    ("conv_fwdbwd", "ms", True, "conv2d 32x64x56x56 3x3 fwd+bwd"),
    ("sdpa_fwd", "ms", True, "causal attention [1,8,1024,64] fwd"),
    ("sdpa_fwdbwd", "ms", True, "causal attention fwd+bwd"),
    ("sdpa_fwd_peak_mem", "MiB", True, "attention fwd peak memory"),
    ("sdpa_peak_mem", "MiB", True, "attention fwd+bwd peak memory"),
]
CASE_INFO = {c[0]: c for c in CASES}
# Reported names -> the case that produces them (a case may report several).
PRODUCER = {"sdpa_fwd_peak_mem": "sdpa_fwd", "sdpa_peak_mem": "sdpa_fwdbwd"}
RUN_CASES = [c[0] for c in CASES if c[0] not in PRODUCER]

# Minimum ratio (oriented, > 1 = Tessera better) each target asks for.
TARGETS = {
    "overhead_add": (1 / 0.33, "time <= 0.33x"),
    "overhead_add_grad": (1 / 0.33, "time <= 0.33x"),
    "add_16M": (1.0, ">= 1.0x and >= 70% of memcpy"),
    "mul_16M": (1.0, ">= 1.0x and >= 70% of memcpy"),
    "gelu_16M": (1.0, ">= 1.0x and >= 70% of memcpy"),
    "matmul_256": (0.95, ">= 0.95x"),
    "matmul_512": (0.95, ">= 0.95x"),
    "matmul_1024": (0.95, ">= 0.95x"),
    "matmul_2048": (0.95, ">= 0.95x"),
    "softmax_fwd": (1.2, ">= 1.2x"),
    "softmax_fwdbwd": (1.2, ">= 1.2x"),
    "layernorm_fwd": (1.2, ">= 1.2x"),
    "layernorm_fwdbwd": (1.2, ">= 1.2x"),
    "conv_fwd": (1.0, ">= 1.0x"),
    "conv_fwdbwd": (1.0, ">= 1.0x"),
    "sdpa_fwd": (1.5, ">= 1.5x faster"),
    "sdpa_fwdbwd": (1.5, ">= 1.5x faster"),
    "sdpa_fwd_peak_mem": (2.0, "peak <= 0.5x"),
    "sdpa_peak_mem": (2.0, "peak <= 0.5x"),
}
MEMCPY_FRACTION = 0.70

# Seconds a single case may take before its process is killed (the case then
# reads "timeout" and the remaining cases run in a fresh process).
DEFAULT_TIMEOUT = 45
CASE_TIMEOUT = {"conv_fwd": 120, "conv_fwdbwd": 180}


# ---------------------------------------------------------------------------------
# build


def build(build_dir):
    ninja = shutil.which("ninja")
    gen = ["-G", "Ninja"] if ninja else []
    if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
        cmd = ["cmake", "-S", ROOT, "-B", build_dir, *gen, "-DTESSERA_BUILD_TESTS=OFF",
               "-DTESSERA_BUILD_BENCH=ON", "-DCMAKE_BUILD_TYPE=Release"]
        log("+", " ".join(cmd))
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    targets = ["tessera_bench"]
    with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
        if re.search(r"^Torch_DIR:PATH=(?!.*NOTFOUND)", f.read(), re.M):
            targets.append("torch_bench")
    cmd = ["cmake", "--build", build_dir, "--target", *targets]
    log("+", " ".join(cmd))
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        log(r.stdout[-4000:])
        log("build failed; fix it or rerun with --no-build to use the binaries already built")
        sys.exit(1)


# ---------------------------------------------------------------------------------
# running one side


def parse_result(line):
    # RESULT <name> <value> <unit> [k=v ...]   |   RESULT <name> n/a <reason>
    parts = line.split(None, 4)
    if len(parts) < 3 or parts[0] != "RESULT":
        return None
    name = parts[1]
    if parts[2] == "n/a":
        return name, {"value": None, "note": line.split("n/a", 1)[1].strip()}
    rec = {"value": float(parts[2]), "unit": parts[3] if len(parts) > 3 else ""}
    for kv in (parts[4].split() if len(parts) > 4 else []):
        if "=" in kv:
            k, v = kv.split("=", 1)
            rec[k] = v
    return name, rec


def run_side(binary, env, threads, cases, extra_args):
    """Runs `binary` over `cases`; a case that hangs past its timeout or crashes
    is recorded as n/a and the rest run in a fresh process."""
    results = {}
    remaining = list(cases)
    while remaining:
        cmd = [binary, "--threads", str(threads), "--cases", ",".join(remaining), *extra_args]
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             bufsize=1, start_new_session=True)
        sel = selectors.DefaultSelector()
        sel.register(p.stdout, selectors.EVENT_READ, "out")
        sel.register(p.stderr, selectors.EVENT_READ, "err")
        current, deadline = None, None
        started = []
        open_streams = 2
        err_tail = []
        while open_streams:
            timeout = None if deadline is None else max(0.0, deadline - time.time())
            events = sel.select(timeout)
            if not events:  # the current case ran past its deadline
                os.killpg(p.pid, signal.SIGKILL)
                results[current] = {"value": None,
                                    "note": f"timeout: killed after {CASE_TIMEOUT.get(current, DEFAULT_TIMEOUT)} s"}
                for rep, prod in PRODUCER.items():
                    if prod == current:
                        results.setdefault(rep, {"value": None, "note": "timeout"})
                break
            for key, _ in events:
                line = key.fileobj.readline()
                if not line:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                    continue
                line = line.rstrip("\n")
                if key.data == "err":
                    m = re.match(r"\[case\] (\S+)", line)
                    if m:
                        current = m.group(1)
                        started.append(current)
                        deadline = time.time() + CASE_TIMEOUT.get(current, DEFAULT_TIMEOUT)
                    else:
                        err_tail = (err_tail + [line])[-5:]
                else:
                    r = parse_result(line)
                    if r:
                        results[r[0]] = r[1]
        p.wait()
        if p.returncode not in (0, -signal.SIGKILL) and current and current not in results:
            results[current] = {"value": None, "note": f"crashed (exit {p.returncode}): {' | '.join(err_tail)[-200:]}"}
        done = set(results) | set(started)
        remaining = [c for c in remaining if c not in done]
        if not started:
            break  # nothing ran at all (binary broken): give up on this side
    for c in CASE_INFO:
        results.setdefault(c, {"value": None, "note": "did not run"})
    return results


def merge(acc, res):
    """Keeps, per case, the best of the rounds (highest throughput, lowest time
    or memory); every round's value is kept under "rounds"."""
    for name, rec in res.items():
        if rec.get("note") == "did not run" and name in acc:
            continue
        prev = acc.get(name)
        rounds = (prev or {}).get("rounds", []) + [rec.get("value")]
        best = rec
        if prev is not None and prev.get("value") is not None:
            v = rec.get("value")
            lower = CASE_INFO[name][2] if name in CASE_INFO else True
            if v is None or (v >= prev["value"] if lower else v <= prev["value"]):
                best = prev
        acc[name] = dict(best, rounds=rounds)


def env_for(kind, threads, base):
    env = dict(base)
    if kind == "tessera":
        env["OMP_NUM_THREADS"] = str(threads)
    elif kind == "torch_best":
        env["MALLOC_MMAP_THRESHOLD_"] = "1000000000"
        env["MALLOC_TRIM_THRESHOLD_"] = "1000000000"
        env.pop("OPENBLAS_CORETYPE", None)
        env["OMP_NUM_THREADS"] = str(threads)
        env["OPENBLAS_NUM_THREADS"] = str(threads)
    # torch_default: the environment as given.
    return env


# ---------------------------------------------------------------------------------
# report


def fmt(v, unit):
    if v is None:
        return "n/a"
    if unit == "ns" or abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def ratio(name, tess, ref):
    if tess is None or ref is None or tess <= 0 or ref <= 0:
        return None
    lower = CASE_INFO[name][2]
    return ref / tess if lower else tess / ref


def machine_info():
    info = {}
    try:
        out = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True).stdout
        for line in out.splitlines():
            k, _, v = line.partition(":")
            info[k.strip()] = v.strip()
    except OSError:
        pass
    flags = info.get("Flags", "").split()
    simd = [f for f in flags if re.match(r"(avx|fma|f16c|amx|sse4)", f)]
    blas = "?"
    try:
        blas = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    except OSError:
        pass
    return {
        "cpu": info.get("Model name", platform.processor()),
        "cpus": info.get("CPU(s)", "?"),
        "l3": info.get("L3 cache", "?"),
        "simd_flags": " ".join(simd),
        "libblas.so.3": blas,
        "kernel": platform.release(),
        "OPENBLAS_CORETYPE (default env)": os.environ.get("OPENBLAS_CORETYPE", "(unset)"),
    }


def print_report(all_results, threads_list, meta, out):
    w = lambda s="": print(s, file=out)
    w("## Machine")
    w()
    for k, v in meta.items():
        w(f"- {k}: {v}")
    w()
    w("Ratio: > 1 means Tessera is better (time and memory: PyTorch / Tessera; "
      "throughput: Tessera / PyTorch). \"best\" = PyTorch in its best configuration, "
      "\"default\" = PyTorch as the environment gives it.")
    w()
    have_torch = any(all_results[t].get("torch_best") for t in threads_list)
    for t in threads_list:
        r = all_results[t]
        w(f"### {t} thread{'s' if t > 1 else ''}")
        w()
        w("| case | unit | Tessera | PyTorch best | ratio vs best | PyTorch default | ratio vs default | target | met |")
        w("|---|---|---:|---:|---:|---:|---:|---|---|")
        for name, unit, lower, label in CASES:
            if all(r.get(side, {}).get(name, {}).get("note") == "did not run" for side in r):
                continue  # not requested
            tv = r["tessera"].get(name, {}).get("value")
            bv = r.get("torch_best", {}).get(name, {}).get("value")
            dv = r.get("torch_default", {}).get(name, {}).get("value")
            rb, rd = ratio(name, tv, bv), ratio(name, tv, dv)
            tgt, met = "", ""
            if name in TARGETS:
                need, desc = TARGETS[name]
                tgt = desc
                if rb is None:
                    met = "n/a"
                else:
                    ok = rb >= need
                    if name in ("add_16M", "mul_16M", "gelu_16M"):
                        mc = r["tessera"].get("memcpy_16M", {}).get("value")
                        frac = tv / mc if (tv and mc) else None
                        ok = ok and frac is not None and frac >= MEMCPY_FRACTION
                        tgt += f" (Tessera at {frac * 100:.0f}% of memcpy)" if frac else ""
                    met = "yes" if ok else "**NO**"
            w(f"| {label} | {unit}{' (lower better)' if lower else ''} | {fmt(tv, unit)} | {fmt(bv, unit)} | "
              f"{'' if rb is None else f'{rb:.2f}x'} | {fmt(dv, unit)} | {'' if rd is None else f'{rd:.2f}x'} | "
              f"{tgt} | {met} |")
        w()
        notes = []
        for side in ("tessera", "torch_best", "torch_default"):
            for name, rec in r.get(side, {}).items():
                if rec.get("value") is None and rec.get("note") not in (None, "did not run"):
                    notes.append(f"- {side} {name}: {rec['note']}")
        if notes:
            w("n/a reasons:")
            w()
            for n in notes:
                w(n)
            w()
    if not have_torch:
        w("(torch_bench was not built or not run: PyTorch columns are empty.)")


# ---------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build-bench"))
    ap.add_argument("--no-build", action="store_true", help="use the binaries already in --build-dir")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all); see --list")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--quick", action="store_true", help="0.1x timing budget (smoke test; figures are rough)")
    ap.add_argument("--min-time", type=float, default=0.5, help="seconds of timed samples per case")
    ap.add_argument("--rounds", type=int, default=2,
                    help="run every side this many times, interleaved; each case keeps its best round")
    ap.add_argument("--skip-default", action="store_true", help="do not run PyTorch's default configuration")
    ap.add_argument("--json", default=None, help="write raw results here (default: BUILD_DIR/bench_results.json)")
    ap.add_argument("--markdown", default=None, help="also write the report to this file")
    args = ap.parse_args()

    if args.list:
        print("\n".join(RUN_CASES))
        return
    cases = [c for c in args.cases.split(",") if c] or RUN_CASES
    bad = [c for c in cases if c not in RUN_CASES]
    if bad:
        sys.exit(f"unknown case(s): {', '.join(bad)}; see --list")
    threads_list = [int(t) for t in args.threads.split(",") if t]

    if not args.no_build:
        build(args.build_dir)
    tess_bin = os.path.join(args.build_dir, "bench", "tessera_bench")
    torch_bin = os.path.join(args.build_dir, "bench", "torch_bench")
    if not os.path.exists(tess_bin):
        sys.exit(f"{tess_bin} is missing: build first")
    have_torch = os.path.exists(torch_bin)
    if not have_torch:
        log("torch_bench was not built (libtorch-dev missing?): only Tessera will run")

    blas = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    if have_torch and "openblas" not in blas and "mkl" not in blas and "blis" not in blas:
        log(f"warning: libtorch's libblas.so.3 is {blas} (the reference BLAS, ~3 GFLOP/s): PyTorch's "
            "matmul is not in its best configuration; install libopenblas0-pthread")

    load1 = os.getloadavg()[0]
    if load1 > 0.7:
        log(f"warning: 1-minute load average is {load1:.2f}: other work is running; figures will be noisy")

    extra = ["--min-time", str(args.min_time)] + (["--quick"] if args.quick else [])
    base_env = dict(os.environ)
    sides = ["tessera"] + (["torch_best"] + ([] if args.skip_default else ["torch_default"]) if have_torch else [])
    all_results = {t: {} for t in threads_list}
    t_start = time.time()
    # Rounds interleave the sides (Tessera, PyTorch best, PyTorch default, again...),
    # and each case keeps its best round, so that a burst of background load on
    # this shared machine hurts neither side more than the other.
    for rnd in range(args.rounds):
        for t in threads_list:
            for side in sides:
                binary = tess_bin if side == "tessera" else torch_bin
                log(f"== round {rnd + 1}/{args.rounds}: {side}, {t} thread(s)")
                s0 = time.time()
                res = run_side(binary, env_for(side, t, base_env), t, cases, extra)
                merge(all_results[t].setdefault(side, {}), res)
                log(f"   {time.time() - s0:.0f} s")
    meta = machine_info()
    try:
        with open(os.path.join(args.build_dir, "CMakeCache.txt")) as f:
            m = re.search(r"^CMAKE_BUILD_TYPE:\w+=(.*)$", f.read(), re.M)
            meta["Tessera build type"] = m.group(1) if m else "?"
    except OSError:
        pass
    try:
        meta["Tessera commit"] = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                                                stdout=subprocess.PIPE, text=True).stdout.strip()
    except OSError:
        pass
    meta["threads"] = ", ".join(map(str, threads_list))
    meta["rounds (best of)"] = str(args.rounds)
    meta["min time per case"] = f"{args.min_time * (0.1 if args.quick else 1):g} s (median of the samples)"
    meta["load average at start (1 min)"] = f"{load1:.2f}"
    meta["total wall time"] = f"{time.time() - t_start:.0f} s"

    print_report(all_results, threads_list, meta, sys.stdout)
    if args.markdown:
        with open(args.markdown, "w") as f:
            print_report(all_results, threads_list, meta, f)
    jpath = args.json or os.path.join(args.build_dir, "bench_results.json")
    with open(jpath, "w") as f:
        json.dump({"meta": meta, "results": {str(k): v for k, v in all_results.items()}}, f, indent=1)
    log(f"raw results: {jpath}")


if __name__ == "__main__":
    main()
