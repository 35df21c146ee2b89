#!/usr/bin/python3
"""Tessera's ONNX export, checked against ONNX Runtime, and the two runtimes timed.

    /usr/bin/python3 bench/onnx_compat.py                     # all cases, batch 1 and 64 (gpt 1 and 8), 1 and 2 threads
    /usr/bin/python3 bench/onnx_compat.py --cases gpt --iters 5 --dir /tmp/onnx_out
    /usr/bin/python3 bench/onnx_compat.py --cases resnet18 --rounds 5  # alternate the sides 5 times
    /usr/bin/python3 bench/onnx_compat.py --quick             # smoke test: 1 timed iteration

Needs build-bench/bench/tessera_compile_bench, Debian's python3-onnx and numpy,
and the ONNX Runtime package next to this file:
    (cd bench/onnx_ort && npm ci --ignore-scripts)   # onnxruntime-node, pinned in package-lock.json

For every case (mlp, cnn, resnet18, gpt):
  1. export: tessera_compile_bench --case C --batch B --export DIR with B the
     largest batch timed (64; gpt 8) -> C.onnx (opset 17, batch dim dynamic "N"),
     C.input.npy, C.output.npy (Tessera's eager output);
  2. check: onnx.checker.check_model(full_check=True) on C.onnx, and the input's
     batch dimension must be the symbol "N";
  3. compare: ONNX Runtime (node bench/onnx_ort/ort_run.js) on C.onnx and
     C.input.npy must match C.output.npy within --tol (1e-4, max abs diff);
  4. time, for batch 1 and 64 (gpt 1 and 8) and 1 and 2 threads: Tessera's runtime
     on the same file (tessera_compile_bench --onnx C.onnx --input X.npy) vs ORT
     (intra-op threads T, inter-op 1), the median of --iters runs after --warmup.
     The batch-1 input is the first row of the exported one, and ORT's batch-1
     output is checked against the first row of Tessera's output too (the
     models are per-sample in eval mode), which exercises the dynamic batch dim.
Each run is its own process with OMP_NUM_THREADS=T. The exit status is nonzero
if any check fails; the worst difference is printed.

This is a shared 2-vCPU VM under background load: absolute milliseconds are noise
from run to run; the Tessera/ORT ratios, taken side by side in one run, are the
figures to quote (below 1 favours Tessera).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import train_compare as tc  # noqa: E402  (environments)
from common import cpu_simd, log, try_json  # noqa: E402

DEFAULT_BIN = os.path.join(ROOT, "build-bench", "bench", "tessera_compile_bench")
ORT_DIR = os.path.join(HERE, "onnx_ort")
ORT_RUN = os.path.join(ORT_DIR, "ort_run.js")
CASES = ["mlp", "cnn", "resnet18", "gpt"]
BATCHES = {"mlp": (1, 64), "cnn": (1, 64), "resnet18": (1, 64), "gpt": (1, 8)}
THREADS = (1, 2)
DEFAULT_ITERS = {"mlp": 50, "cnn": 30, "resnet18": 10, "gpt": 10}
TIMEOUT_S = 1800


def run_json(cmd, env):
    """Runs cmd; returns the last JSON object on its stdout, or {"error": ...}."""
    return try_json(cmd, env, timeout=TIMEOUT_S)


# ---------------------------------------------------------------------------------
# steps


def export(binary, case, batch, out_dir):
    """Step 1: Tessera writes C.onnx, C.input.npy, C.output.npy; returns their paths or raises."""
    rec = run_json([binary, "--case", case, "--batch", str(batch), "--export", out_dir],
                   tc.env_for("tessera", 1, os.environ))
    if "error" in rec:
        raise RuntimeError(f"export of {case} failed: {rec['error']}")
    base = os.path.join(out_dir, case)
    return base + ".onnx", base + ".input.npy", base + ".output.npy"


def check_model(path):
    """Step 2: the ONNX checker (full_check runs strict shape inference); returns
    (problem or None, opset, the input's first dimension)."""
    model = onnx.load(path)
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=None)
    dim0 = model.graph.input[0].type.tensor_type.shape.dim[0]
    batch_dim = dim0.dim_param or dim0.dim_value
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # onnx raises ValidationError / InferenceError
        return f"{type(e).__name__}: {str(e).splitlines()[0][:300]}", opset, batch_dim
    if batch_dim != "N":
        return f"input batch dimension is {batch_dim!r}, expected the symbol 'N'", opset, batch_dim
    return None, opset, batch_dim


def first_rows(src, batch, out_dir, case, kind):
    """The first `batch` rows of an exported .npy, written beside it (batch = all: the file itself)."""
    a = np.load(src)
    if a.shape[0] == batch:
        return src
    path = os.path.join(out_dir, f"{case}.b{batch}.{kind}.npy")
    np.save(path, np.ascontiguousarray(a[:batch]))
    return path


def run_ort(model, x, ref, threads, iters, warmup):
    """ONNX Runtime on one input; the result has output_shape, max_abs_diff vs ref, median_ms."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    return run_json(["node", ORT_RUN, "--model", model, "--input", x, "--ref", ref, "--threads", str(threads),
                     "--iters", str(iters), "--warmup", str(warmup)], env)


def run_tessera(binary, model, x, threads, iters, warmup):
    """Tessera's runtime on the same file and input; the result has runtime_ms."""
    return run_json([binary, "--onnx", model, "--input", x, "--threads", str(threads), "--iters", str(iters),
                     "--warmup", str(warmup)], tc.env_for("tessera", threads, os.environ))


def prepare_case(binary, case, out_dir, tol):
    """Steps 1-3 for one case; returns a dict with the files, inputs per batch and the checks."""
    res = {"case": case, "export_batch": max(BATCHES[case]), "problems": []}
    try:
        model, x, ref = export(binary, case, res["export_batch"], out_dir)
    except RuntimeError as e:
        res["problems"].append(str(e))
        return res
    res["model"] = model
    res["inputs"] = {b: (first_rows(x, b, out_dir, case, "input"), first_rows(ref, b, out_dir, case, "output"))
                     for b in BATCHES[case]}
    problem, res["opset"], res["batch_dim"] = check_model(model)
    res["checker"] = problem or "ok"
    if problem:
        res["problems"].append(f"{case}: onnx checker: {problem}")
    ort = run_ort(model, x, ref, 1, 1, 0)
    res["ort_check"] = ort
    if "error" in ort:
        res["problems"].append(f"{case}: ORT failed: {ort['error']}")
    elif not ort["max_abs_diff"] <= tol:
        res["problems"].append(f"{case}: ORT vs Tessera eager max abs diff {ort['max_abs_diff']:.3e} > {tol:g}")
    log(f"{case}: exported at batch {res['export_batch']}, opset {res['opset']}, checker {res['checker']}, "
        f"ORT max abs diff {ort.get('max_abs_diff', ort.get('error'))}")
    return res


def time_case(binary, prep, threads_list, iters, warmup, tol, rounds):
    """Step 4: Tessera vs ORT per batch and thread count; ORT's output is checked each time.
    With rounds > 1 the two sides take turns and each side's median round is kept."""
    rows = []
    for batch in BATCHES[prep["case"]]:
        x, ref = prep["inputs"][batch]
        for threads in threads_list:
            ts, os_ = [], []
            for _ in range(rounds):
                ts.append(run_tessera(binary, prep["model"], x, threads, iters, warmup))
                os_.append(run_ort(prep["model"], x, ref, threads, iters, warmup))
            t = tc.median_of_rounds(ts, ("runtime_ms",))
            o = tc.median_of_rounds(os_, ("median_ms",))
            o["max_abs_diff"] = max((r["max_abs_diff"] for r in os_ if "max_abs_diff" in r), default=float("nan"))
            row = {"case": prep["case"], "batch": batch, "threads": threads, "tessera": t, "ort": o}
            if "error" in t:
                prep["problems"].append(f"{prep['case']} batch {batch} threads {threads}: Tessera --onnx failed: "
                                        f"{t['error']}")
            if "error" in o:
                prep["problems"].append(f"{prep['case']} batch {batch} threads {threads}: ORT failed: {o['error']}")
            elif not o["max_abs_diff"] <= tol:
                prep["problems"].append(f"{prep['case']} batch {batch} threads {threads}: ORT max abs diff "
                                        f"{o['max_abs_diff']:.3e} > {tol:g}")
            log(f"{prep['case']} b{batch} t{threads}: tessera {t.get('runtime_ms', t.get('error'))} ms, "
                f"ort {o.get('median_ms', o.get('error'))} ms")
            rows.append(row)
    return rows


def identity_overhead(binary, out_dir, threads_list, iters, warmup, rounds):
    """Each runtime's cost per call apart from the model: a one-node Identity
    model on the MLP's batch-1 input ([1, 1, 28, 28] f32), timed as the models are.
    The difference between the two is binding, not compute (ORT's node binding
    copies the input into and the output out of its own tensors)."""
    import numpy as np
    from onnx import TensorProto, helper
    path = os.path.join(out_dir, "identity.onnx")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 28, 28])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1, 28, 28])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    inp = os.path.join(out_dir, "identity.input.npy")
    np.save(inp, np.random.default_rng(0).standard_normal((1, 1, 28, 28)).astype(np.float32))
    rows = []
    for threads in threads_list:
        ts, os_ = [], []
        for _ in range(rounds):
            ts.append(run_tessera(binary, path, inp, threads, iters, warmup))
            os_.append(run_ort(path, inp, inp, threads, iters, warmup))
        t = tc.median_of_rounds(ts, ("runtime_ms",))
        o = tc.median_of_rounds(os_, ("median_ms",))
        log(f"identity t{threads}: tessera {t.get('runtime_ms', t.get('error'))} ms, "
            f"ort {o.get('median_ms', o.get('error'))} ms")
        rows.append({"threads": threads, "tessera": t, "ort": o})
    return rows


def overhead_table(rows):
    out = ["| threads | Tessera ms | ORT ms |", "|---:|---:|---:|"]
    for r in rows:
        t, o = r["tessera"], r["ort"]
        tm = f"{t['runtime_ms']:.4f}" if "runtime_ms" in t else "err"
        om = f"{o['median_ms']:.4f}" if "median_ms" in o else "err"
        out.append(f"| {r['threads']} | {tm} | {om} |")
    return "\n".join(out)


# ---------------------------------------------------------------------------------
# report


def check_table(preps, tol):
    out = [f"| case | export batch | opset | batch dim | onnx checker (full_check) | ORT vs Tessera eager max abs diff "
           f"| max abs output | within {tol:g} |",
           "|---|---:|---:|---|---|---:|---:|---|"]
    for p in preps:
        o = p.get("ort_check", {"error": "not run"})
        diff = f"{o['max_abs_diff']:.2e}" if "max_abs_diff" in o else "err"
        big = f"{o['ref_max_abs']:.3g}" if "ref_max_abs" in o else "-"
        ok = "yes" if "max_abs_diff" in o and o["max_abs_diff"] <= tol else "NO"
        out.append(f"| {p['case']} | {p['export_batch']} | {p.get('opset', '-')} | {p.get('batch_dim', '-')} | "
                   f"{p.get('checker', 'not run')} | {diff} | {big} | {ok} |")
    return "\n".join(out)


def timing_table(rows):
    out = ["| case | batch | threads | Tessera ms | ORT ms | Tessera/ORT | ORT max abs diff |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        t, o = r["tessera"], r["ort"]
        tm = f"{t['runtime_ms']:.3f}" if "runtime_ms" in t else "err"
        om = f"{o['median_ms']:.3f}" if "median_ms" in o else "err"
        ratio = f"**{t['runtime_ms'] / o['median_ms']:.2f}**" if "runtime_ms" in t and "median_ms" in o else "-"
        diff = f"{o['max_abs_diff']:.2e}" if "max_abs_diff" in o else "err"
        out.append(f"| {r['case']} | {r['batch']} | {r['threads']} | {tm} | {om} | {ratio} | {diff} |")
    return "\n".join(out)


def worst_diff(preps, rows):
    """(diff, where) of the largest ORT-vs-Tessera difference seen anywhere."""
    seen = [(p["ort_check"]["max_abs_diff"], f"{p['case']} batch {p['export_batch']}")
            for p in preps if "max_abs_diff" in p.get("ort_check", {})]
    seen += [(r["ort"]["max_abs_diff"], f"{r['case']} batch {r['batch']} threads {r['threads']}")
             for r in rows if "max_abs_diff" in r["ort"]]
    return max(seen, key=lambda s: s[0] if s[0] == s[0] else float("inf"), default=(None, "-"))


# ---------------------------------------------------------------------------------
# main


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ",".join(CASES))
    ap.add_argument("--iters", type=int, default=None,
                    help="timed iterations (default per case: " +
                         ", ".join(f"{c} {n}" for c, n in DEFAULT_ITERS.items()) + ")")
    ap.add_argument("--warmup", type=int, default=3, help="untimed iterations first (default 3)")
    ap.add_argument("--quick", action="store_true", help="smoke test: 1 timed iteration, 1 warmup")
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate Tessera and ORT this many times per configuration and report each side's "
                         "median round (this VM's speed drifts by up to 1.4x within a minute)")
    ap.add_argument("--threads", default=",".join(map(str, THREADS)), help="comma-separated thread counts")
    ap.add_argument("--tol", type=float, default=1e-4, help="max abs diff allowed, ORT vs Tessera eager")
    ap.add_argument("--dir", default=None, help="where the exported files go (default: a fresh temporary folder)")
    ap.add_argument("--bin", default=DEFAULT_BIN, help="tessera_compile_bench (default %(default)s)")
    ap.add_argument("--iters-per-case", default="",
                    help="timed iterations by case, e.g. resnet18=5,gpt=5 (overrides the defaults)")
    ap.add_argument("--json", help="write the checks and every timed row as JSON to this file")
    args = ap.parse_args()
    args.case_iters = dict(DEFAULT_ITERS)
    for kv in filter(None, args.iters_per_case.split(",")):
        k, v = kv.split("=")
        args.case_iters[k] = int(v)
    args.cases = [c for c in args.cases.split(",") if c]
    args.threads = [int(t) for t in args.threads.split(",") if t]
    bad = [c for c in args.cases if c not in CASES]
    if bad:
        ap.error(f"unknown case(s) {bad}; choose from {CASES}")
    if args.quick:
        args.iters, args.warmup = 1, 1
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    return args


def main():
    args = parse_args()
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"{args.bin} not found: build it first (cmake --build build-bench --target tessera_compile_bench)")
    if not os.path.isdir(os.path.join(ORT_DIR, "node_modules", "onnxruntime-node")):
        sys.exit(f"onnxruntime-node is not installed: (cd {ORT_DIR} && npm ci --ignore-scripts)")
    out_dir = args.dir or tempfile.mkdtemp(prefix="tessera_onnx_")
    os.makedirs(out_dir, exist_ok=True)

    preps, rows = [], []
    for case in args.cases:
        prep = prepare_case(args.bin, case, out_dir, args.tol)
        preps.append(prep)
        if "model" in prep:
            rows += time_case(args.bin, prep, args.threads, args.iters or args.case_iters[case], args.warmup,
                              args.tol, args.rounds)

    overhead = identity_overhead(args.bin, out_dir, args.threads, args.iters or 200, args.warmup, args.rounds)

    model, flags = cpu_simd()
    print(f"CPU: {model} ({os.cpu_count()} logical CPUs; {flags})")
    print(f"ONNX files in {out_dir}; onnx {onnx.__version__}; ORT (onnxruntime-node) "
          f"{next((r['ort']['ort'] for r in rows if 'ort' in r['ort']), '?')}.\n")
    print(check_table(preps, args.tol))
    iters = f"{args.iters}" if args.iters else ", ".join(f"{c} {args.case_iters[c]}" for c in args.cases)
    if args.rounds > 1:
        iters += f"; {args.rounds} alternating rounds per side, median round reported"
    print(f"\nLatency, median ms ({iters} timed iterations after {args.warmup} warmup); "
          f"Tessera/ORT < 1 favours Tessera:\n")
    print(timing_table(rows))
    print("\nPer-call overhead: a one-node Identity model on the batch-1 MLP input, median ms:\n")
    print(overhead_table(overhead))
    diff, where = worst_diff(preps, rows)
    problems = [s for p in preps for s in p["problems"]]
    print(f"\nWorst ORT vs Tessera eager max abs diff: {diff if diff is None else f'{diff:.3e}'} ({where}); "
          f"tolerance {args.tol:g}.")
    if args.json:
        checks = [{k: v for k, v in p.items() if k not in ("inputs", "model")} for p in preps]
        with open(args.json, "w") as f:
            json.dump({"onnx": onnx.__version__, "tol": args.tol, "warmup": args.warmup, "rounds": args.rounds,
                       "iters": {c: args.iters or args.case_iters[c] for c in args.cases},
                       "checks": checks, "rows": rows, "identity": overhead, "worst_diff": diff,
                       "worst_where": where,
                       "problems": [s for p in preps for s in p["problems"]]}, f, indent=1)
    if problems:
        print("\nFAILED:\n" + "\n".join(f"- {s}" for s in problems))
        return 1
    print("All checks passed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
