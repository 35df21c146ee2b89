#!/usr/bin/python3
"""Compiled inference, Tessera vs PyTorch/TorchScript, side by side.

    /usr/bin/python3 bench/compile_compare.py                        # all cases, 1 and 2 threads
    /usr/bin/python3 bench/compile_compare.py --cases resnet18,gpt --iters 10
    /usr/bin/python3 bench/compile_compare.py --quick --cases mlp    # smoke test: 1 timed iteration
    /usr/bin/python3 bench/compile_compare.py --cases resnet18 --rounds 3  # alternate the sides 3 times

What it measures, for every case (mlp, cnn, resnet18, gpt), batch (1 and 32; gpt
1 and 8) and thread count T (1 and 2), each as its own process:
  * Tessera: build-bench/bench/tessera_compile_bench --case C --batch B --threads T
    (OMP_NUM_THREADS=T; at T >= 2 also OMP_WAIT_POLICY=PASSIVE, the faster kept, as for
    PyTorch below): the eager forward and the compiled one
    (tessera::compile::compile), median ms of --iters runs after --warmup, their
    peak tensor bytes, the compiled plan's arena, and max |compiled - eager|;
  * PyTorch (this file re-run with --torch-worker, so that the thread settings
    take effect in a fresh process): the same architecture, eval() and
    torch.no_grad(), eager and TorchScript (torch.jit.trace -> torch.jit.freeze ->
    torch.jit.optimize_for_inference), the same --iters and --warmup, median ms,
    torch.set_num_threads(T). Its environment follows /work/shared/PLATFORM.md
    ("Comparing fairly with PyTorch here"): the best configuration (malloc
    thresholds raised, OPENBLAS_CORETYPE unset, OMP/OPENBLAS/MKL_NUM_THREADS=T; at
    T >= 2 also OMP_WAIT_POLICY=PASSIVE, the faster of the two kept) is the
    reference; the default one (only OMP_NUM_THREADS=T) is reported beside it.
The models are bench/train_torch.py's (the ones Tessera's benchmarks mirror):
mlp = Flatten + 784-256-256-10 on [N,1,28,28]; cnn = the Fashion-MNIST LeNet;
resnet18 = ResNet-18, CIFAR stem, 10 classes, [N,3,32,32]; gpt = nanoGPT, 6
layers, 6 heads, 384 wide, vocab 256, context 64, on [N,64] int64 ids. Weights
are random on both sides (only speed and memory are compared here; numerical
parity with an independent runtime is bench/onnx_compat.py's job).

Output: the CPU model, then markdown tables on stdout (progress on stderr).
Ratios below 1 favour Tessera's compiled path. This is a shared 2-vCPU VM under
background load: absolute milliseconds are noise from run to run; the ratios,
taken side by side in one run, are the figures to quote. Standard library only in
this process; torch is imported only by the --torch-worker subprocesses.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import train_compare as tc  # noqa: E402  (environments; standard library only)
from common import cpu_simd, log, try_json  # noqa: E402

DEFAULT_BIN = os.path.join(ROOT, "build-bench", "bench", "tessera_compile_bench")
TORCH_PYTHON = "/usr/bin/python3"  # Debian's, with torch 1.13
CASES = ["mlp", "cnn", "resnet18", "gpt"]
BATCHES = {"mlp": (1, 32), "cnn": (1, 32), "resnet18": (1, 32), "gpt": (1, 8)}
THREADS = (1, 2)
DEFAULT_ITERS = {"mlp": 50, "cnn": 30, "resnet18": 10, "gpt": 10}
GPT_SEQ = 64
TIMEOUT_S = 1800


# ---------------------------------------------------------------------------------
# the PyTorch side (runs inside a --torch-worker subprocess)


def torch_model(case):
    """The PyTorch model and a matching input for a case (imports torch)."""
    import torch
    import train_torch as tt

    if case == "mlp":
        return torch.nn.Sequential(torch.nn.Flatten(), tt.make_mlp()), lambda b: torch.randn(b, 1, 28, 28)
    if case == "cnn":
        return tt.make_cnn(), lambda b: torch.randn(b, 1, 28, 28)
    if case == "resnet18":
        return tt.ResNet18(num_classes=10), lambda b: torch.randn(b, 3, 32, 32)
    if case == "gpt":
        model = tt.GPT(vocab_size=256, block_size=GPT_SEQ, n_layer=6, n_head=6, n_embd=384, bias=True)
        return model, lambda b: torch.randint(0, 256, (b, GPT_SEQ))
    raise ValueError(case)


def median_ms(fn, warmup, iters):
    """The median of iters timed calls after warmup untimed ones (the C++ side's rule)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def torch_worker(case, batch, threads, iters, warmup):
    """Times eager PyTorch and its TorchScript path; prints one JSON line."""
    import warnings

    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model, make_input = torch_model(case)
    model.eval()
    x = make_input(batch)
    with torch.no_grad():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TracerWarnings about Python ints in view()
            script = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(model, x)))
        want = model(x)
        got = script(x)
        eager_ms = median_ms(lambda: model(x), warmup, iters)
        script_ms = median_ms(lambda: script(x), warmup, iters)
    env_keys = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY",
                "OPENBLAS_CORETYPE", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
    print(json.dumps({
        "case": case, "batch": batch, "threads": threads, "iters": iters,
        "eager_ms": eager_ms, "script_ms": script_ms,
        "script_max_abs_diff": float((got - want).abs().max()),
        "output_shape": list(want.shape),
        "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
        "env": {k: os.environ[k] for k in env_keys if k in os.environ},
    }), flush=True)


# ---------------------------------------------------------------------------------
# running the two sides (from the driver process)


def run_tessera(binary, case, batch, threads, iters, warmup):
    """Tessera's best configuration: the faster (by compiled ms) of plain and, at T >= 2,
    OMP_WAIT_POLICY=PASSIVE -- the same choice PyTorch's best configuration gets."""
    cmd = [binary, "--case", case, "--batch", str(batch), "--threads", str(threads),
           "--iters", str(iters), "--warmup", str(warmup)]
    best = try_json(cmd, tc.env_for("tessera", threads, os.environ), "compiled_ms", TIMEOUT_S)
    if threads >= 2:
        passive = try_json(cmd, tc.env_for("tessera", threads, os.environ, passive=True), "compiled_ms", TIMEOUT_S)
        if "error" not in passive:
            passive["omp_wait_policy"] = "PASSIVE"
        if "error" in best or ("error" not in passive and passive["compiled_ms"] < best["compiled_ms"]):
            best = passive
    return best


def run_torch(config, case, batch, threads, iters, warmup, passive=False):
    cmd = [TORCH_PYTHON, os.path.abspath(__file__), "--torch-worker", "--cases", case, "--batch", str(batch),
           "--threads", str(threads), "--iters", str(iters), "--warmup", str(warmup)]
    return try_json(cmd, tc.env_for(config, threads, os.environ, passive=passive), "script_ms", TIMEOUT_S)


def run_torch_best(case, batch, threads, iters, warmup):
    """PyTorch's best configuration: the faster (by TorchScript ms) of plain and, at
    T >= 2, OMP_WAIT_POLICY=PASSIVE."""
    best = run_torch("torch_best", case, batch, threads, iters, warmup)
    if threads >= 2:
        passive = run_torch("torch_best", case, batch, threads, iters, warmup, passive=True)
        if "error" in best or ("error" not in passive and passive["script_ms"] < best["script_ms"]):
            best = passive
    return best


def measure(binary, case, batch, threads, iters, warmup, with_default, rounds):
    """One configuration: Tessera, PyTorch best and (optionally) PyTorch default.
    With rounds > 1 the two sides alternate (Tessera, PyTorch, Tessera, ...) so that
    the host's slow and fast spells fall on both; each side's figure is the median
    of its round medians."""
    tess, best = [], []
    for _ in range(rounds):
        tess.append(run_tessera(binary, case, batch, threads, iters, warmup))
        best.append(run_torch_best(case, batch, threads, iters, warmup))
    row = {"case": case, "batch": batch, "threads": threads,
           "tessera": tc.median_of_rounds(tess, ("eager_ms", "compiled_ms")),
           "torch": tc.median_of_rounds(best, ("eager_ms", "script_ms")),
           "torch_default": (run_torch("torch_default", case, batch, threads, iters, warmup)
                             if with_default else {"error": "skipped"})}
    t, p, d = row["tessera"], row["torch"], row["torch_default"]
    log(f"{case} b{batch} t{threads}: tessera eager/compiled {t.get('eager_ms', t.get('error'))} / "
        f"{t.get('compiled_ms', '')} ms; torch eager/script {p.get('eager_ms', p.get('error'))} / "
        f"{p.get('script_ms', '')} ms; default script {d.get('script_ms', d.get('error'))} ms")
    return row


# ---------------------------------------------------------------------------------
# report


def ms(rec, key):
    return f"{rec[key]:.3f}" if key in rec else "err"


def ratio(a, ka, b, kb):
    return f"{a[ka] / b[kb]:.2f}" if ka in a and kb in b and b[kb] > 0 else "-"


def mib(n):
    return f"{n / 2**20:.2f}"


def latency_table(rows):
    out = ["| case | batch | threads | Tessera eager ms | Tessera compiled ms | compiled/eager | "
           "torch eager ms | TorchScript ms | Tessera compiled/TorchScript | TorchScript ms (torch default env) |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        t, p, d = r["tessera"], r["torch"], r["torch_default"]
        out.append(f"| {r['case']} | {r['batch']} | {r['threads']} | {ms(t, 'eager_ms')} | {ms(t, 'compiled_ms')} | "
                   f"{ratio(t, 'compiled_ms', t, 'eager_ms')} | {ms(p, 'eager_ms')} | {ms(p, 'script_ms')} | "
                   f"**{ratio(t, 'compiled_ms', p, 'script_ms')}** | "
                   f"{ms(d, 'script_ms') if 'error' not in d or d['error'] != 'skipped' else '-'} |")
    return "\n".join(out)


def memory_lines(rows):
    """Tessera's peak tensor bytes per forward, eager vs compiled, and the arena;
    one line per case and batch (memory does not depend on the thread count)."""
    out = ["| case | batch | eager peak MiB | compiled peak MiB | arena MiB | compiled/eager | nodes | "
           "max abs diff compiled vs eager |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    seen, resnet = set(), []
    for r in rows:
        t = r["tessera"]
        if (r["case"], r["batch"]) in seen or "compiled_peak_bytes" not in t:
            continue
        seen.add((r["case"], r["batch"]))
        e, c, a = t["eager_peak_bytes"], t["compiled_peak_bytes"], t["arena_bytes"]
        rat = f"{c / e:.2f}" if e > 0 else "-"
        out.append(f"| {r['case']} | {r['batch']} | {mib(e)} | {mib(c)} | {mib(a)} | {rat} | {t['nodes']} | "
                   f"{t['max_abs_diff']:.2e} |")
        if r["case"] == "resnet18":
            resnet.append(f"ResNet-18 batch {r['batch']}: eager peak {mib(e)} MiB vs compiled peak {mib(c)} MiB "
                          f"vs arena {mib(a)} MiB (compiled/eager {rat})")
    return "\n".join(out + ([""] + resnet if resnet else []))


def errors(rows):
    out = []
    for r in rows:
        for side in ("tessera", "torch", "torch_default"):
            err = r[side].get("error")
            if err and err != "skipped":
                out.append(f"- {r['case']} batch {r['batch']} threads {r['threads']} {side}: {err}")
    return "\n".join(out)


def torch_notes(rows):
    """PyTorch's own check (TorchScript vs eager) and the version and environment it ran with."""
    recs = [r["torch"] for r in rows if "script_ms" in r["torch"]]
    if not recs:
        return ""
    worst = max(recs, key=lambda p: p["script_max_abs_diff"])
    passive = sum(1 for p in recs if p["env"].get("OMP_WAIT_POLICY") == "PASSIVE")
    return (f"PyTorch {recs[0]['torch']}; TorchScript vs eager max abs diff {worst['script_max_abs_diff']:.2e} "
            f"({worst['case']} batch {worst['batch']}); OMP_WAIT_POLICY=PASSIVE was the faster variant in "
            f"{passive} of {sum(1 for p in recs if p['threads'] >= 2)} two-thread configurations.")


def print_report(rows, iters_note):
    model, flags = cpu_simd()
    print(f"CPU: {model} ({os.cpu_count()} logical CPUs; {flags})")
    print(f"Timed iterations: {iters_note}. Medians in ms; ratios < 1 favour Tessera's compiled path.\n")
    print(latency_table(rows))
    print("\nTessera memory per forward (peak tensor bytes a forward adds; arena = the compiled plan's buffer):\n")
    print(memory_lines(rows))
    notes = torch_notes(rows)
    if notes:
        print("\n" + notes)
    errs = errors(rows)
    if errs:
        print("\nErrors:\n" + errs)


# ---------------------------------------------------------------------------------
# main


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ",".join(CASES))
    ap.add_argument("--iters", type=int, default=None,
                    help="timed iterations per measurement (default per case: " +
                         ", ".join(f"{c} {n}" for c, n in DEFAULT_ITERS.items()) + ")")
    ap.add_argument("--warmup", type=int, default=3, help="untimed iterations first (default 3)")
    ap.add_argument("--quick", action="store_true", help="smoke test: 1 timed iteration, 1 warmup")
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate Tessera and PyTorch this many times per configuration and report "
                         "the median round (default 1)")
    ap.add_argument("--threads", default=",".join(map(str, THREADS)), help="comma-separated thread counts")
    ap.add_argument("--bin", default=DEFAULT_BIN, help="tessera_compile_bench (default %(default)s)")
    ap.add_argument("--no-torch-default", action="store_true",
                    help="skip PyTorch's default-environment run (its best configuration is always run)")
    ap.add_argument("--iters-per-case", default="",
                    help="timed iterations by case, e.g. resnet18=5,gpt=5 (overrides the defaults)")
    ap.add_argument("--json", help="write every row (both sides' records) as JSON to this file")
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)  # --torch-worker only
    args = ap.parse_args()
    args.cases = [c for c in args.cases.split(",") if c]
    args.threads = [int(t) for t in args.threads.split(",") if t]
    bad = [c for c in args.cases if c not in CASES]
    if bad:
        ap.error(f"unknown case(s) {bad}; choose from {CASES}")
    if args.quick:
        args.iters, args.warmup = 1, 1
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    args.case_iters = dict(DEFAULT_ITERS)
    for kv in filter(None, args.iters_per_case.split(",")):
        k, v = kv.split("=")
        args.case_iters[k] = int(v)
    return args


def main():
    args = parse_args()
    if args.torch_worker:
        torch_worker(args.cases[0], args.batch, args.threads[0], args.iters or 1, args.warmup)
        return 0
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"{args.bin} not found: build it first (cmake --build build-bench --target tessera_compile_bench)")
    rows = []
    for case in args.cases:
        iters = args.iters or args.case_iters[case]
        for batch in BATCHES[case]:
            for threads in args.threads:
                rows.append(measure(args.bin, case, batch, threads, iters, args.warmup, not args.no_torch_default,
                                    args.rounds))
    iters_note = (f"{args.iters} per measurement" if args.iters else
                  ", ".join(f"{c} {args.case_iters[c]}" for c in args.cases)) + f", after {args.warmup} warmup"
    if args.rounds > 1:
        iters_note += f"; {args.rounds} alternating rounds per side, median round reported"
    print_report(rows, iters_note)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"iters": {c: args.iters or args.case_iters[c] for c in args.cases}, "warmup": args.warmup,
                       "rounds": args.rounds, "rows": rows}, f, indent=1)
    return 1 if errors(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
