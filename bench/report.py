#!/usr/bin/python3
"""docs/benchmarks.md and its charts, from one command.

    /usr/bin/python3 bench/report.py                   # build, run every section, rewrite the page (< 40 min, 2 cores)
    /usr/bin/python3 bench/report.py --section onnx    # one area; the others keep their own results and headings
    /usr/bin/python3 bench/report.py --quick           # smoke run of every section into build-bench/report-quick/
    /usr/bin/python3 bench/report.py --render-only     # the page and the charts again from docs/benchmarks/*.json
    /usr/bin/python3 bench/report.py --list            # the sections

Each section runs one of the compare scripts in bench/ (each writes its results
as JSON with --json), and its results are stored with their own header -- the
CPU model and ISA from /proc/cpuinfo, the git commit the binaries were built
from, the date, the PyTorch and ONNX Runtime versions, the wall time -- in
docs/benchmarks/<section>.json. The page is rendered from all the section
files, so a section that was not rerun keeps the heading of the machine it
was measured on. The charts (SVG, matplotlib) are rendered from the same files.
The sections' titles, summaries and texts are in bench/sections.md, the
targets they mark met or missed in bench/targets.json; this file holds how
each section is run and rendered (RUNNERS).

It builds build-bench/ (Release) first, and trains the small models some
sections need (Fashion-MNIST MLP and CNN, a character GPT) into
build-bench/report-runs/ with `tessera train`, reusing them when their
configuration has not changed. Needs Debian's /usr/bin/python3 with torch,
numpy, onnx and matplotlib (scripts/setup.sh --bench) and ONNX Runtime
(cd bench/onnx_ort && npm ci --ignore-scripts).
"""
import argparse
import hashlib
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = "/usr/bin/python3"
BUDGET_S = 50 * 60

# ---------------------------------------------------------------------------------
# settings: what each section runs, full and --quick

FULL = {
    "ops": ["--rounds", "2", "--threads", "1,2"],
    "training": ["--cases", "mlp,cnn,gpt,resnet18", "--threads", "1,2", "--rounds", "3",
                 "--case-steps", "mlp=30+5,cnn=20+3,gpt=3+1,resnet18=4+1"],
    "amp": ["--rounds", "3", "--steps", "3", "--warmup", "1", "--layers", "6,12", "--threads", "2",
            "--precision-threads", "1,2"],
    "compile": ["--rounds", "3", "--warmup", "2", "--iters-per-case", "mlp=30,cnn=20,resnet18=5,gpt=5"],
    "training_avx2": ["--cases", "mlp,cnn,gpt,resnet18", "--threads", "1,2", "--rounds", "3", "--skip-default",
                      "--case-steps", "mlp=30+5,cnn=20+3,gpt=3+1,resnet18=4+1"],
    "compile_avx2": ["--rounds", "3", "--warmup", "2", "--no-torch-default",
                     "--iters-per-case", "mlp=30,cnn=20,resnet18=5,gpt=5"],
    "onnx": ["--rounds", "3", "--warmup", "2", "--iters-per-case", "mlp=30,cnn=20,resnet18=5,gpt=5"],
    "gemv": ["--quick", "--rounds", "3", "--threads", "1,2"],
    "quant": ["--threads", "1", "--rounds", "2", "--eval-batches", "20"],
    "ptq": ["--threads", "1", "2", "--rounds", "2"],
    "sparse": ["--rounds", "1", "--finetune-steps", "200", "--repeat", "100"],
    "serve": ["--seconds", "4", "--soak-seconds", "60"],
    "llm": ["--rounds", "3", "--repeat", "3"],
    "llm_serve": ["--soak-seconds", "600"],
    "llm_spec": ["--speculative"],
    "llm_structured": ["--structured"],
    "seam": ["--rounds", "5"],
    "distributed": ["--rounds", "3", "--steps", "20"],
    "model_parallel": ["--steps", "5"],
    "python": ["--rounds", "3"],
}
QUICK = {
    "ops": ["--rounds", "1", "--threads", "1", "--quick", "--skip-default",
            "--cases", "overhead_add,add_16M,matmul_256,softmax_fwd,sdpa_fwd"],
    "training": ["--cases", "mlp,gpt", "--threads", "1", "--rounds", "1", "--steps", "1", "--warmup", "1",
                 "--skip-default"],
    "amp": ["--rounds", "1", "--steps", "1", "--warmup", "0", "--layers", "2", "--threads", "1",
            "--precision-threads", "1"],
    "compile": ["--quick", "--cases", "mlp,cnn", "--threads", "1", "--no-torch-default"],
    "training_avx2": ["--cases", "mlp", "--threads", "1", "--rounds", "1", "--steps", "1", "--warmup", "1",
                      "--skip-default"],
    "compile_avx2": ["--quick", "--cases", "mlp,cnn", "--threads", "1", "--no-torch-default"],
    "onnx": ["--quick", "--cases", "mlp,cnn", "--threads", "1"],
    "gemv": ["--quick", "--rounds", "1", "--threads", "1"],
    "quant": ["--threads", "1", "--rounds", "1", "--eval-batches", "2"],
    "ptq": ["--threads", "1", "--rounds", "1", "--calibration-batches", "2"],
    "sparse": ["--rounds", "1", "--finetune-steps", "5", "--repeat", "5"],
    "serve": ["--seconds", "1", "--soak-seconds", "3", "--only", "max,curve,soak"],
    "llm": ["--rounds", "1", "--repeat", "1", "--types", "Q4_0", "--tiers", "native", "--quick"],
    "llm_serve": ["--quick", "--models", "random-110M-Q4_0"],
    "llm_spec": ["--speculative", "--quick"],
    "llm_structured": ["--structured", "--quick"],
    "seam": ["--quick"],
    "distributed": ["--quick"],
    "model_parallel": ["--quick"],
    "python": ["--quick"],
}
# The trained models: config, overrides (full, quick).
RUNS = {
    "mlp": ("examples/configs/fashion_mnist_mlp.yaml", ["train.epochs=1"], ["train.steps=20"]),
    "cnn": ("examples/configs/fashion_mnist_cnn.yaml", ["train.steps=300"], ["train.steps=20"]),
    "char_gpt": ("examples/configs/char_gpt.yaml",
                 ["train.steps=200", "train.batch_size=16", "train.eval_every=200", "train.checkpoint_every=200"],
                 ["train.steps=10", "train.eval_every=10", "train.checkpoint_every=10", "train.eval_batches=2",
                  "scheduler.warmup_steps=2"]),
}
BUILD_TARGETS = ["tessera_cli", "tessera_bench", "torch_bench", "tessera_train_bench", "tessera_compile_bench",
                 "tessera_quant_bench", "tessera_gemv_bench", "tessera_load", "tessera_serve_httplib",
                 "tessera_serve_beast", "tessera_llm_bench", "tessera_python", "tessera_python_sources",
                 "tessera_dist_bench"]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------
# the machine and the code


def cpu_header():
    info, flags = {}, []
    with open("/proc/cpuinfo") as f:
        for line in f:
            k, _, v = line.partition(":")
            k = k.strip()
            if k and k not in info:
                info[k] = v.strip()
            if k == "flags" and not flags:
                flags = v.split()
    isa = next((f for f in ("avx512_bf16", "avx512_vnni", "avx512f", "avx2") if f in flags), "below avx2")
    if isa == "avx512_bf16" and "amx_int8" in flags:
        isa = "avx512_amx"  # Tessera's tier with int8 products on AMX tiles
    fam, model = int(info.get("cpu family", "0")), int(info.get("model", "0"))
    uarch = None
    if info.get("vendor_id") == "AuthenticAMD":
        if fam == 23:
            uarch = "Zen 2" if model >= 0x30 else "Zen/Zen+"
        elif fam == 25:
            uarch = "Zen 4" if (0x10 <= model <= 0x1F or 0x60 <= model <= 0x7F or 0xA0 <= model <= 0xAF) else "Zen 3"
        elif fam == 26:
            uarch = "Zen 5"
    return {
        "cpu": info.get("model name", platform.processor() or "?"),
        "cpu_id": f"family {fam}, model {model}, stepping {info.get('stepping', '?')}",
        "uarch": uarch,
        "isa": isa,
        "isa_flags": " ".join(f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16")
                              if f in flags),
        "logical_cpus": os.cpu_count(),
        "kernel": platform.release(),
    }


def cpu_counters():
    """(busy seconds of the whole machine, elapsed CPU seconds, CPU seconds of this process and its waited-for
    children): the difference over a section says how much CPU other work took meanwhile."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    busy = v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)
    t = os.times()
    return busy / hz, (busy + v[3] + v[4]) / hz, t.user + t.system + t.children_user + t.children_system


def other_work(before, after):
    """The share of the machine's CPU time that other processes used between two cpu_counters()."""
    busy, total, mine = (a - b for a, b in zip(after, before))
    return max(0.0, (busy - mine) / total) if total > 0 else 0.0


def git(*args, strip=True):
    r = subprocess.run(["git", "-C", ROOT, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return r.stdout.strip() if strip else r.stdout


def code_state():
    """The commit the binaries are built from, and tracked source files that differ from it."""
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "src", "include", "apps", "bench",
                "CMakeLists.txt", "cmake", strip=False).splitlines()
    return {"commit": git("rev-parse", "--short=7", "HEAD") or "?",
            "commit_date": git("log", "-1", "--format=%cd", "--date=format:%Y-%m-%d"),
            "uncommitted": [d[3:] for d in dirty]}


def versions():
    out = {}
    try:
        out["torch"] = subprocess.run([PY, "-c", "import torch; print(torch.__version__)"], stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True, timeout=120).stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        out["torch"] = None
    try:
        with open(os.path.join(HERE, "onnx_ort", "node_modules", "onnxruntime-node", "package.json")) as f:
            out["onnxruntime"] = json.load(f)["version"]
    except (OSError, ValueError, KeyError):
        out["onnxruntime"] = None
    try:
        out["compiler"] = subprocess.run(["c++", "--version"], stdout=subprocess.PIPE, text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        out["compiler"] = None
    r = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "libdnnl-dev"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    out["onednn"] = r.stdout.strip() or None
    return out


# ---------------------------------------------------------------------------------
# build and models


def build(build_dir):
    if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
        subprocess.run(["cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja", "-DTESSERA_BUILD_TESTS=OFF",
                        "-DTESSERA_BUILD_BENCH=ON", "-DCMAKE_BUILD_TYPE=Release", "-DTESSERA_BUILD_PYTHON=ON",
                        f"-DPython_EXECUTABLE={PY}"], check=True, stdout=subprocess.DEVNULL)
    log(f"building {', '.join(BUILD_TARGETS)} in {os.path.relpath(build_dir, ROOT)}/ (Release)")
    r = subprocess.run(["cmake", "--build", build_dir, "--target", *BUILD_TARGETS], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        log(r.stdout[-5000:])
        sys.exit("build failed")


class Runs:
    """Trained run directories under build-bench/report-runs[-quick]/, made on first use."""

    def __init__(self, build_dir, quick):
        self.dir = os.path.join(build_dir, "report-runs-quick" if quick else "report-runs")
        self.quick = quick
        self.tessera = os.path.join(build_dir, "apps", "tessera")
        self.info = {}

    def get(self, name):
        if name in self.info:
            return self.info[name]["dir"], 0.0
        config, full, quick = RUNS[name]
        overrides = quick if self.quick else full
        with open(os.path.join(ROOT, config), "rb") as f:
            stamp = hashlib.sha256(f.read() + json.dumps(overrides).encode()).hexdigest()[:16]
        out = os.path.join(self.dir, name)
        stamp_file = os.path.join(out, "report-stamp")
        t0 = time.time()
        trained_now = False
        if not (os.path.exists(stamp_file) and open(stamp_file).read().strip() == stamp
                and os.path.isdir(os.path.join(out, "checkpoints"))):
            shutil.rmtree(out, ignore_errors=True)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            cmd = [self.tessera, "train", os.path.join(ROOT, config), "--output", out, "--plain"]
            for o in overrides:
                cmd += ["--set", o]
            log("+ " + " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd))
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
            if r.returncode != 0:
                raise RuntimeError(f"training {name} failed: {r.stdout[-2000:]}")
            with open(stamp_file, "w") as f:
                f.write(stamp + "\n")
            trained_now = True
        summary = {}
        try:
            with open(os.path.join(out, "metrics.jsonl")) as f:
                for line in f:
                    if '"summary"' in line:
                        summary = json.loads(line)["summary"]
        except (OSError, ValueError):
            pass
        spent = time.time() - t0
        ev = summary.get("eval") or {}
        self.info[name] = {"dir": out, "config": config, "overrides": overrides, "steps": summary.get("steps"),
                           "epochs": summary.get("epochs"), "train_seconds": summary.get("train_seconds"),
                           "eval_accuracy": ev.get("accuracy"), "eval_perplexity": ev.get("perplexity"),
                           "trained_in_this_run": trained_now}
        return out, spent


# ---------------------------------------------------------------------------------
# running one section


def run_script(args, json_path, log_path, timeout, env=None):
    """Runs a compare script; its stdout (markdown) goes to log_path, its progress to our stderr.
    `env`: variables added to the script's environment (and so to both sides' processes).
    Returns the JSON it wrote (or raises)."""
    if os.path.exists(json_path):
        os.remove(json_path)
    log("+ " + " ".join([f"{k}={v}" for k, v in (env or {}).items()] +
                        [os.path.relpath(a, ROOT) if a.startswith(ROOT + "/") else a for a in args]))
    with open(log_path, "w") as out:
        try:
            r = subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout,
                               cwd=ROOT, env=dict(os.environ, **(env or {})))
            code = r.returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    if not os.path.exists(json_path):
        with open(log_path) as f:
            tail = f.read()[-3000:]
        raise RuntimeError(f"{os.path.basename(args[1])} exited with {code} and wrote no results:\n{tail}")
    return code


def repo_relative(obj, root=ROOT):
    """The same data with paths inside the checkout made relative to it (the stored files are committed)."""
    if isinstance(obj, str):
        return obj.replace(root + "/", "") if root + "/" in obj else obj
    if isinstance(obj, list):
        return [repo_relative(x, root) for x in obj]
    if isinstance(obj, dict):
        return {k: repo_relative(v, root) for k, v in obj.items()}
    return obj


def load_json(path):
    with open(path) as f:
        return json.load(f)


def load_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def sec_ops(ctx):
    j = ctx.tmp("ops.json")
    code = run_script([PY, os.path.join(HERE, "run.py"), "--no-build", "--build-dir", ctx.build_dir, "--json", j,
                       *ctx.settings("ops")], j, ctx.log_path("ops"), ctx.timeout)
    return {"exit": code, **load_json(j)}


def sec_training(ctx):
    j = ctx.tmp("training.json")
    code = run_script([PY, os.path.join(HERE, "train_compare.py"), "--build-dir", ctx.build_dir, "--json", j,
                       *ctx.settings("training")], j, ctx.log_path("training"), ctx.timeout)
    return {"exit": code, **load_json(j)}


# The AVX2 tier on an AVX-512 CPU: both sides limited the same way (Tessera's
# kernels and oneDNN for Tessera, ATen's kernels and oneDNN for PyTorch).
AVX2_TIER = {"TESSERA_CPU_CAPABILITY": "avx2", "DNNL_MAX_CPU_ISA": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2",
             "ATEN_CPU_CAPABILITY": "avx2"}


def avx512_cpu():
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and "avx512f" in line.split() for line in f)
    except OSError:
        return False


def sec_training_avx2(ctx):
    if not avx512_cpu():
        return {"skipped": "this CPU has no AVX-512: the training section above is already the AVX2 tier"}
    j = ctx.tmp("training_avx2.json")
    code = run_script([PY, os.path.join(HERE, "train_compare.py"), "--build-dir", ctx.build_dir, "--json", j,
                       *ctx.settings("training_avx2")], j, ctx.log_path("training_avx2"), ctx.timeout, AVX2_TIER)
    return {"exit": code, "tier_env": AVX2_TIER, **load_json(j)}


def sec_compile_avx2(ctx):
    if not avx512_cpu():
        return {"skipped": "this CPU has no AVX-512: the compile section above is already the AVX2 tier"}
    j = ctx.tmp("compile_avx2.json")
    code = run_script([PY, os.path.join(HERE, "compile_compare.py"), "--json", j, *ctx.settings("compile_avx2")], j,
                      ctx.log_path("compile_avx2"), ctx.timeout, AVX2_TIER)
    return {"exit": code, "tier_env": AVX2_TIER, **load_json(j)}


def tier_note(d):
    env = d.get("tier_env", {})
    return ["", "**AVX2 tier, emulated on this AVX-512 CPU**: both sides limited the same way ("
                + ", ".join(f"`{k}={v}`" for k, v in env.items()) + ")."]


def render_training_avx2(d, h):
    if "skipped" in d:
        return ["", d["skipped"] + "."]
    return tier_note(d) + render_training(d, h)


def render_compile_avx2(d, h):
    if "skipped" in d:
        return ["", d["skipped"] + "."]
    return tier_note(d) + render_compile(d, h)


def sec_amp(ctx):
    j = ctx.tmp("amp.json")
    code = run_script([PY, os.path.join(HERE, "amp_compare.py"), "--json", j, *ctx.settings("amp")], j,
                      ctx.log_path("amp"), ctx.timeout)
    return {"exit": code, **load_json(j)}


def sec_compile(ctx):
    j = ctx.tmp("compile.json")
    code = run_script([PY, os.path.join(HERE, "compile_compare.py"), "--json", j, *ctx.settings("compile")], j,
                      ctx.log_path("compile"), ctx.timeout)
    return {"exit": code, **load_json(j)}


def sec_onnx(ctx):
    j = ctx.tmp("onnx.json")
    code = run_script([PY, os.path.join(HERE, "onnx_compat.py"), "--json", j, "--dir", ctx.tmp("onnx_files"),
                       *ctx.settings("onnx")], j, ctx.log_path("onnx"), ctx.timeout)
    return {"exit": code, **load_json(j)}


def sec_gemv(ctx):
    j = ctx.tmp("gemv.json")
    code = run_script([PY, os.path.join(HERE, "gemv_compare.py"), "--no-build", "--build-dir", ctx.build_dir,
                       "--json", j, *ctx.settings("gemv")], j, ctx.log_path("gemv"), ctx.timeout)
    d = load_json(j)
    return {"exit": code, "rows": d["rows"], "tiers_not_run": d["tiers_not_run"]}


def json_script(ctx, name, script):
    """A section measured by one compare script that writes its JSON (the
    script's settings are the section's)."""
    j = ctx.tmp(name + ".json")
    code = run_script([PY, os.path.join(HERE, script), "--build-dir", ctx.build_dir, "--json", j,
                       *ctx.settings(name)], j, ctx.log_path(name), ctx.timeout)
    return {"exit": code, **load_json(j)}


def sec_seam(ctx):
    return json_script(ctx, "seam", "seam_compare.py")


def sec_distributed(ctx):
    return json_script(ctx, "distributed", "dist_compare.py")


def sec_model_parallel(ctx):
    return json_script(ctx, "model_parallel", "model_parallel_compare.py")


def sec_python(ctx):
    return json_script(ctx, "python", "python_compare.py")


def sec_llm(ctx):
    return json_script(ctx, "llm", "llm_compare.py")


def sec_llm_serve(ctx):
    return json_script(ctx, "llm_serve", "llm_serve_bench.py")


def sec_llm_spec(ctx):
    return json_script(ctx, "llm_spec", "llm_serve_bench.py")


def sec_llm_structured(ctx):
    return json_script(ctx, "llm_structured", "llm_serve_bench.py")


def sec_quant(ctx):
    run, _ = ctx.runs.get("char_gpt")
    j = ctx.tmp("quant.json")
    code = run_script([PY, os.path.join(HERE, "quant_compare.py"), run, "--json", j, *ctx.settings("quant")], j,
                      ctx.log_path("quant"), ctx.timeout)
    return {"exit": code, "model": ctx.runs.info["char_gpt"], **load_json(j)}


def sec_ptq(ctx):
    run, _ = ctx.runs.get("cnn")
    j = ctx.tmp("ptq.json")
    code = run_script([PY, os.path.join(HERE, "ptq_compare.py"), run, "--json", j, "--dir", ctx.tmp("ptq_files"),
                       *ctx.settings("ptq")], j, ctx.log_path("ptq"), ctx.timeout)
    return {"exit": code, "model": ctx.runs.info["cnn"], **load_json(j)}


def sec_sparse(ctx):
    """No compare script: tessera_quant_bench sparse (RESULT lines) and `tessera prune` (its table), parsed here."""
    run, _ = ctx.runs.get("cnn")
    st = ctx.settings("sparse")
    val = lambda k: st[st.index(k) + 1]
    binary = os.path.join(ctx.build_dir, "bench", "tessera_quant_bench")
    logf = open(ctx.log_path("sparse"), "w")

    def call(cmd, threads):
        log("+ " + " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT + "/") else c for c in cmd))
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=ctx.timeout,
                           env=dict(os.environ, OMP_NUM_THREADS=str(threads)), cwd=ROOT)
        logf.write(r.stdout)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:2])} exited with {r.returncode}: {r.stdout[-2000:]}")
        return r.stdout

    out = call([binary, "sparse", "--threads", "1", "--rounds", val("--rounds")], 1)
    crossover = []
    for line in out.splitlines():
        if line.startswith("RESULT sparse "):
            kv = dict(p.split("=", 1) for p in line.split()[2:])
            crossover.append({k: float(v) for k, v in kv.items()})
    prune = {}
    for t in (1, 2):
        text = call([ctx.runs.tessera, "prune", run, "--sparsity", "0.5", "--method", "structured", "--skip",
                     "classifier.3", "--finetune-steps", val("--finetune-steps"), "--repeat", val("--repeat"),
                     "--output", ctx.tmp(f"pruned-{t}")], t)
        rows = {}
        for line in text.splitlines():
            if line.startswith("accuracy "):
                rows["accuracy"] = line.split()[1:3]
                continue
            parts = line.rsplit(None, 3)
            if len(parts) == 4 and (parts[0].startswith("compiled") or parts[0] == "nonzero weights"):
                rows[parts[0].strip()] = parts[1:]
        prune[str(t)] = rows
    logf.close()
    return {"crossover": crossover, "crossover_threads": 1, "prune": prune, "settings": " ".join(st),
            "model": ctx.runs.info["cnn"]}


def sec_serve(ctx):
    mlp, _ = ctx.runs.get("mlp")
    cnn, _ = ctx.runs.get("cnn")
    j = ctx.tmp("serve.jsonl")
    settings = ctx.settings("serve")
    code = run_script([PY, os.path.join(HERE, "serve_bench.py"), "--mlp", mlp, "--cnn", cnn, "--build",
                       ctx.build_dir, "--json", j, *settings], j, ctx.log_path("serve"), ctx.timeout)
    val = lambda k: settings[settings.index(k) + 1] if k in settings else None
    return {"exit": code, "seconds": float(val("--seconds") or 8), "soak_seconds": float(val("--soak-seconds") or 300),
            "records": load_jsonl(j), "models": {"mlp": ctx.runs.info["mlp"], "cnn": ctx.runs.info["cnn"]}}


# ---------------------------------------------------------------------------------
# formatting


def fnum(v, digits=3):
    """A figure with about `digits` significant digits (no exponent)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    v = float(v)
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 10 ** (digits - 1):
        return f"{v:,.0f}"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(a))))
    return f"{v:.{decimals}f}"


def fx(v):
    return "n/a" if v is None else f"{v:.2f}x"


def fr(v):
    return "n/a" if v is None else f"{v:.2f}"


def div(a, b):
    try:
        return float(a) / float(b) if a is not None and b is not None and float(b) > 0 else None
    except (TypeError, ValueError):
        return None


def target(section, key):
    """The bound bench/targets.json sets for a figure of a section."""
    t = TARGETS[section][key]
    return t["at_least"] if "at_least" in t else t["at_most"]


def verdict(section, key, value):
    """"met" or "**missed**": value against its bound in bench/targets.json."""
    t = TARGETS[section][key]
    ok = value >= t["at_least"] if "at_least" in t else value <= t["at_most"]
    return "met" if ok else "**missed**"


def table(head, rows, align=None):
    align = align or ["---"] + ["---:"] * (len(head) - 1)
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def short_machine(h):
    u = f" ({h['uarch']})" if h.get("uarch") else ""
    return f"{h['cpu']}{u}, {h['isa']}"


def machine_line(h):
    """The line above every table: CPU, ISA, commit, date."""
    dirty = f" + uncommitted changes in {len(h['uncommitted'])} files" if h.get("uncommitted") else ""
    return f"*{short_machine(h)}, {h['logical_cpus']} logical CPUs; commit `{h['commit']}`{dirty}; {h['date']}*"


def ms_of(rec, key="ms_per_step"):
    return rec.get(key) if isinstance(rec, dict) else None


# ---------------------------------------------------------------------------------
# rendering each section


def render_ops(d, h):
    sys.path.insert(0, HERE)
    import run as runpy_mod  # the case list and the targets

    out = []
    for t, sides in sorted(d["results"].items(), key=lambda kv: int(kv[0])):
        rows = []
        for name, unit, lower, label in runpy_mod.CASES:
            tv = sides.get("tessera", {}).get(name, {})
            if tv.get("note") == "did not run":
                continue
            tval = tv.get("value")
            b = sides.get("torch_best", {}).get(name, {}).get("value")
            dft = sides.get("torch_default", {}).get(name, {}).get("value")
            met = ""
            if name in runpy_mod.TARGETS and tval and b:
                need, desc = runpy_mod.TARGETS[name]
                oriented = b / tval if lower else tval / b
                ok = oriented >= need
                if name in ("add_16M", "mul_16M", "gelu_16M"):
                    mc = sides["tessera"].get("memcpy_16M", {}).get("value")
                    ok = ok and mc and tval / mc >= runpy_mod.MEMCPY_FRACTION
                    desc += f" (at {100 * tval / mc:.0f}% of memcpy)" if mc else ""
                met = f"{desc}: {'met' if ok else '**missed**'}"
            rows.append([label, unit + (" (lower is better)" if lower else " (higher is better)"), fnum(tval), fnum(b),
                         f"**{fx(div(tval, b))}**", fnum(dft) if "torch_default" in sides else "not run",
                         fx(div(tval, dft)), met])
        out += ["", f"**{t} thread{'s' if int(t) > 1 else ''}**", "", machine_line(h), ""]
        out += table(["case", "unit", "Tessera", "PyTorch best", "Tessera / PyTorch best", "PyTorch default",
                      "Tessera / PyTorch default", "target"], rows,
                     ["---", "---", "---:", "---:", "---:", "---:", "---:", "---"])
        notes = [f"{side} {n}: {r['note']}" for side, recs in sides.items() for n, r in recs.items()
                 if r.get("value") is None and r.get("note") not in (None, "did not run")]
        if notes:
            out += ["", "Not measured: " + "; ".join(notes) + "."]
    meta = d.get("meta", {})
    out += ["", f"Settings: best of {meta.get('rounds (best of)', '?')} round(s), "
                f"{meta.get('min time per case', '?')} per case; libblas.so.3 is "
                f"`{meta.get('libblas.so.3', '?')}`."]
    return out


TRAIN_LABEL = {
    "mlp": "MLP 784-256-256-10, batch 128, Adam",
    "cnn": "LeNet CNN (Fashion-MNIST), batch 64, Adam",
    "gpt": "GPT 6 layers, d 384, ctx 256, batch 8, AdamW",
    "resnet18": "ResNet-18 (CIFAR stem, 32x32), batch 32, SGD",
}


def training_keys(results):
    """The case/threads keys in the page's order (the stored JSON has them sorted by name)."""
    order = list(TRAIN_LABEL)
    return sorted(results, key=lambda k: (order.index(k.split("/")[0]) if k.split("/")[0] in order else 99,
                                          int(k.split("/")[1])))


def render_training(d, h):
    rows = []
    peaks = d.get("meta", {}).get("f32 FMA peak GFLOP/s by threads") or {}
    gflop = d.get("step_gflop", {})
    for key in training_keys(d["results"]):
        r = d["results"][key]
        case, t = key.split("/")
        tv, bv, dv = ms_of(r.get("tessera")), ms_of(r.get("torch_best")), ms_of(r.get("torch_default"))
        def of_peak(ms):
            g, p = gflop.get(case), peaks.get(t)
            return f"{100 * g / (ms / 1e3) / p:.0f}%" if g and p and ms else "-"
        def policy(cfg):
            v = (r.get(cfg) or {}).get("variant", "")
            return "passive" if "PASSIVE" in v else ("default" if v else "-")
        rows.append([TRAIN_LABEL.get(case, case), t, fnum(tv), fnum(bv), f"**{fx(div(tv, bv))}**",
                     fnum(gflop.get(case)), f"{of_peak(tv)} / {of_peak(bv)}",
                     fnum(dv) if "torch_default" in r else "not run", fx(div(tv, dv)),
                     f"{fnum(ms_of(r.get('tessera'), 'peak_rss_mib'))} / {fnum(ms_of(r.get('torch_best'), 'peak_rss_mib'))}",
                     f"{policy('tessera')} / {policy('torch_best')}"])
    meta = d.get("meta", {})
    out = ["", machine_line(h), ""]
    out += table(["case", "threads", "Tessera ms/step", "PyTorch best ms/step", "Tessera / PyTorch best",
                  "GFLOP per step", "% of f32 FMA peak, Tessera / PyTorch best",
                  "PyTorch default ms/step", "Tessera / PyTorch default", "peak RSS MiB, Tessera / PyTorch best",
                  "OpenMP wait policy kept, Tessera / PyTorch best"], rows,
                 ["---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---"])
    if peaks:
        out += ["", "% of peak: the step's FLOPs from the model's shapes (forward and twice that for the backward, less "
                    "the first layer's input gradient; "
                    "the GPT as 6·N·tokens + 12·L·T²·d per sequence, N its parameters outside the embeddings; "
                    "optimizer and pointwise work not counted) per second, over the f32 FMA peak measured on this "
                    f"machine by `tessera_train_bench --case fma_peak` ({meta.get('FMA peak ISA', '?')} vectors): "
                    + ", ".join(f"{fnum(v)} GFLOP/s at {k} thread(s)" for k, v in peaks.items()) + "."]
    errs = [f"{k} {cfg}: {rec['error']}" for k, r in d["results"].items() for cfg in ("tessera", "torch_best",
            "torch_default") if isinstance(r.get(cfg), dict) and "error" in r[cfg]]
    if errs:
        out += ["", "Errors: " + "; ".join(errs)]
    rounds = meta.get("rounds (median of)")
    rounds_text = f"median of {rounds} alternating round(s)" if rounds else f"best of {meta.get('rounds (best of)', '?')} round(s)"
    out += ["", f"Steps per measurement (timed + warm-up): {meta.get('steps (timed + warmup)', '?')}; {rounds_text} "
                f"(every round in the section's JSON, docs/benchmarks/); median step of each process. PyTorch's attention is "
                f"{next((r['torch_best'].get('attention') for r in d['results'].values() if isinstance(r.get('torch_best'), dict) and r['torch_best'].get('attention')), 'its own')}."]
    return out


def render_amp(d, h):
    out = []
    if "precision" in d:
        rows = []
        for r in d["precision"]:
            t32, t16 = ms_of(r["tessera_f32"]), ms_of(r["tessera_bf16"])
            p32, p16 = ms_of(r["torch_f32"]), ms_of(r["torch_bf16"])
            ran = d.get("torch_bf16_run")
            rows.append([r["threads"], fnum(t32), fnum(t16), fx(div(t16, t32)), fnum(p32),
                         fnum(p16) if ran else "not run", fx(div(p16, p32)) if ran else "-",
                         f"**{fx(div(t32, p32))}**", f"**{fx(div(t16, p16))}**" if ran else "-"])
        out += ["", "**bf16 autocast against f32** (GPT 6 layers, d 384, ctx 256, batch 8, AdamW; ms per step)", "",
                machine_line(h), ""]
        out += table(["threads", "Tessera f32", "Tessera bf16", "Tessera bf16 / f32", "PyTorch f32", "PyTorch bf16",
                      "PyTorch bf16 / f32", "Tessera / PyTorch, f32", "Tessera / PyTorch, bf16"], rows)
        if d.get("torch_bf16_run"):
            out += ["", "This CPU has avx512_bf16: both frameworks run native bf16 kernels (oneDNN), so the bf16 "
                        "columns compare like with like."]
        else:
            out += ["", "This CPU has no avx512_bf16. PyTorch 1.13 then runs bf16 matrix products through a "
                        "reference loop, so its bf16 step was not run: a comparison with it would say nothing. "
                        "Tessera's bf16 here widens to f32 for its products; its bf16 / f32 column shows the cost."]
    if "checkpoint" in d:
        ck = d["checkpoint"]
        base = {}
        rows = []
        for r in ck["rows"]:
            t, p = r["tessera"], r.get("torch")
            if r["checkpoint"] == -1:
                base[r["layers"]] = t
            b = base.get(r["layers"], {})
            rows.append([r["layers"], r["mode"], fnum(ms_of(t)), fnum(ms_of(t, "step_rss_mib")),
                         fnum(ms_of(t, "peak_tensor_mib")), fnum(ms_of(p)) if p else "-",
                         fnum(ms_of(p, "step_rss_mib")) if p else "-",
                         f"**{fx(div(ms_of(t), ms_of(p)))}**" if p else "-",
                         f"**{fx(div(ms_of(t, 'step_rss_mib'), ms_of(p, 'step_rss_mib')))}**" if p else "-",
                         fx(div(ms_of(t), ms_of(b))) if r["checkpoint"] != -1 else "-",
                         fx(div(ms_of(t, "peak_tensor_mib"), ms_of(b, "peak_tensor_mib"))) if r["checkpoint"] != -1 else "-"])
        out += ["", f"**Gradient checkpointing** (GPT d 384, ctx 256, batch 8, AdamW, {ck['threads']} threads)", "",
                machine_line(h), ""]
        out += table(["layers", "checkpointing", "Tessera ms", "Tessera step MiB", "Tessera peak tensor MiB",
                      "PyTorch ms", "PyTorch step MiB", "Tessera / PyTorch time", "Tessera / PyTorch step memory",
                      "Tessera time vs none", "Tessera peak tensors vs none"], rows,
                     ["---:", "---"] + ["---:"] * 9)
    s = d.get("settings", {})
    ck = s.get("checkpoint_rounds")
    rounds_text = (f"precision: median of {s.get('rounds')} alternating round(s), checkpointing: best of {ck}"
                   if ck else f"best of {s.get('rounds')} round(s)")
    out += ["", f"Settings: {s.get('steps')} timed steps after {s.get('warmup')} warm-up, {rounds_text}, "
                "each configuration its own process. \"Step MiB\" is the resident memory the steps add on "
                "top of the built model (peak RSS minus RSS before the first step), read the same way on both sides; "
                "\"peak tensor MiB\" is Tessera's `max_memory_allocated()`. PyTorch has no every-block mode in the "
                "script, so that row is Tessera's only."]
    return out


def render_compile(d, h):
    rows, mem, seen = [], [], set()
    for r in d["rows"]:
        t, p, df = r["tessera"], r["torch"], r.get("torch_default", {})
        dft = df.get("script_ms") if isinstance(df, dict) else None
        rows.append([r["case"], r["batch"], r["threads"], fnum(t.get("eager_ms")), fnum(t.get("compiled_ms")),
                     fx(div(t.get("compiled_ms"), t.get("eager_ms"))), fnum(p.get("eager_ms")),
                     fnum(p.get("script_ms")), f"**{fx(div(t.get('compiled_ms'), p.get('script_ms')))}**",
                     fnum(dft) if df.get("error") != "skipped" else "not run",
                     fx(div(t.get("compiled_ms"), dft)) if dft else "-"])
        if (r["case"], r["batch"]) not in seen and "compiled_peak_bytes" in t:
            seen.add((r["case"], r["batch"]))
            e, c, a = t["eager_peak_bytes"], t["compiled_peak_bytes"], t["arena_bytes"]
            mem.append([r["case"], r["batch"], fnum(e / 2**20), fnum(c / 2**20), f"**{fx(div(c, e))}**",
                        fnum(a / 2**20), f"{t.get('max_abs_diff', float('nan')):.1e}"])
    out = ["", "**Latency, ms per forward** (median)", "", machine_line(h), ""]
    out += table(["model", "batch", "threads", "Tessera eager", "Tessera compiled", "compiled / eager",
                  "PyTorch eager", "TorchScript", "Tessera compiled / TorchScript", "TorchScript, PyTorch default env",
                  "Tessera compiled / that"], rows)
    out += ["", "**Memory a forward adds** (Tessera's peak tensor bytes; the arena is the compiled plan's buffer)", "",
            machine_line(h), ""]
    out += table(["model", "batch", "eager MiB", "compiled MiB", "compiled / eager", "arena MiB",
                  "max abs diff compiled vs eager"], mem)
    errs = [f"{r['case']} b{r['batch']} t{r['threads']} {side}: {r[side]['error']}" for r in d["rows"]
            for side in ("tessera", "torch") if "error" in r[side]]
    if errs:
        out += ["", "Errors: " + "; ".join(errs)]
    it = d.get("iters", {})
    out += ["", f"Timed iterations: {', '.join(f'{k} {v}' for k, v in it.items())} after {d.get('warmup')} warm-up; "
                f"{d.get('rounds')} round(s)."]
    return out


def render_onnx(d, h):
    checks = [[c["case"], c.get("export_batch"), c.get("opset", "-"), c.get("batch_dim", "-"), c.get("checker", "-"),
               f"{c['ort_check']['max_abs_diff']:.1e}" if "max_abs_diff" in c.get("ort_check", {}) else "error"]
              for c in d["checks"]]
    rows = [[r["case"], r["batch"], r["threads"], fnum(r["tessera"].get("runtime_ms")), fnum(r["ort"].get("median_ms")),
             f"**{fx(div(r['tessera'].get('runtime_ms'), r['ort'].get('median_ms')))}**"] for r in d["rows"]]
    out = ["", "**Latency on the same .onnx files, ms per run** (median)", "", machine_line(h), ""]
    out += table(["model", "batch", "threads", "Tessera", "ONNX Runtime", "Tessera / ORT"], rows)
    out += ["", "![Inference latency against ONNX Runtime](benchmarks/inference_vs_ort.svg)"]
    if d.get("identity"):
        ident = [[r["threads"], fnum(r["tessera"].get("runtime_ms")), fnum(r["ort"].get("median_ms"))]
                 for r in d["identity"]]
        out += ["", "**Per-call overhead** (a one-node Identity model on the batch-1 MLP input, [1, 1, 28, 28] f32, "
                    "ms per run): what each runtime spends on a call apart from the model, to read beside the "
                    "batch-1 rows above", "", machine_line(h), ""]
        out += table(["threads", "Tessera", "ONNX Runtime"], ident)
    out += ["", "**The exported files** (`onnx.checker.check_model(full_check=True)`; ORT's output against Tessera's "
                "eager one)", "", machine_line(h), ""]
    out += table(["model", "export batch", "opset", "batch dim", "checker", "max abs diff"], checks,
                 ["---", "---:", "---:", "---", "---", "---:"])
    if d.get("problems"):
        out += ["", "**Failed checks**: " + "; ".join(d["problems"])]
    out += ["", f"Timed iterations: {', '.join(f'{k} {v}' for k, v in d.get('iters', {}).items())} after "
                f"{d.get('warmup')} warm-up, {d.get('rounds')} round(s); tolerance {d.get('tol')}."]
    return out


QUANT_ORDER = ["q8_0", "q8_0/int8", "int8", "int8/int8", "q4_0", "q4_0/int8", "int4g32", "int4g32/int8",
               "int4g128/int8"]


def quant_one_row(d):
    """Per shape at one row: Tessera's f32 paths, the fastest; PyTorch's, the fastest; each variant's time."""
    shapes = {}
    for r in d.get("kernels_f32", []):
        shapes.setdefault(r["shape"], {"tessera_f32": {}})["tessera_f32"][r["path"]] = float(r["us"])
    for r in d.get("kernels", []):
        if r["m"] == "1" and r["shape"] in shapes and r["variant"] != "f32":
            shapes[r["shape"]].setdefault("variants", {})[r["variant"]] = float(r["us"])
    for shape, s in shapes.items():
        tf = s["tessera_f32"]
        s["tessera_best"] = min(tf, key=tf.get)
        pt = d.get("torch_kernels", {}).get(shape)
        if pt:
            s["torch_f32"] = {k: v for k, v in pt.items() if k not in ("best_f32", "dynamic int8 Linear")}
            s["torch_best"] = pt["best_f32"]
            s["torch_dynamic_int8"] = pt.get("dynamic int8 Linear")
    return shapes


def render_gemv(d, h):
    out = []
    groups = {}
    for r in d["rows"]:
        groups.setdefault((r["tier"], r["threads"]), []).append(r)
    for (tier, threads), rows in groups.items():
        limits = "Tessera and oneDNN limited to AVX2" if tier == "avx2" else "Tessera's AVX-512 kernels, oneDNN up to AVX512_CORE_BF16"
        out += ["", f"**Tier {tier}** ({limits}), {threads} thread{'s' if threads > 1 else ''}; median of "
                    f"{rows[0]['rounds']} alternating rounds", "", machine_line(h), ""]
        out += table(["weight (out x in)", "dtype", "m", "streaming read GB/s", "skinny us", "skinny GB/s",
                      "% of streaming read", "oneDNN us", "skinny / oneDNN"],
                     [[r["weight"], r["dtype"], r["m"], f"{r['stream_gbps']:.1f}", fnum(r["skinny_us"]),
                       f"{r['skinny_gbps']:.1f}", f"{100 * r['skinny_gbps'] / r['stream_gbps']:.0f}%",
                       fnum(r["onednn_us"]), f"**{r['skinny_us'] / r['onednn_us']:.2f}x**"] for r in rows],
                     ["---", "---", "---:", "---:", "---:", "---:", "---:", "---:", "---:"])
    if d.get("tiers_not_run"):
        out += ["", f"Tiers this CPU cannot run: {', '.join(d['tiers_not_run'])} (not measured here)."]
    return out


def llama_cpp_line(info):
    """What llama.cpp build a figure came from (bench/build_llama_cpp.sh's build-info.txt)."""
    if not info:
        return "llama.cpp: not run"
    if "commit" not in info:
        return f"llama.cpp: {info.get('build', '?')} ({' '.join(info.get('version', []))})"
    return (f"llama.cpp {info['release']} (commit `{info['commit']}`, the tree node-llama-cpp ships), built here by "
            f"`bench/build_llama_cpp.sh{' --avx2' if info.get('variant') == 'avx2' else ''}`: `{info['cmake']}`")


LLM_MEASURES = {"prefill": "prefill 512", "decode": "decode 128", "batch": "aggregate decode"}


def render_llm(d, h):
    out = []
    for tier in d.get("tiers", []):
        rows = []
        for r in tier["rows"]:
            ratio = r["tessera_tps"] / r["llama_tps"]
            said = "" if r["target"] is None else (f">= {r['target']}x: " + ("met" if ratio >= r["target"] else "**missed**"))
            bw = ""
            if "read_gbps" in r:
                share = r["tessera_gbps"] / r["read_gbps"]
                bw = (f"{r['tessera_gbps']:.1f} / {r['llama_gbps']:.1f} of {r['read_gbps']:.1f}: "
                      f"{100 * share:.0f}% (>= {100 * target('llm', 'decode_read_share'):.0f}%: "
                      f"{verdict('llm', 'decode_read_share', share)})")
            what = LLM_MEASURES[r["measure"]] + (f", {r['sequences']} sequences" if r["measure"] == "batch" else "")
            rows.append([r["model"], what, r["threads"], fnum(r["tessera_tps"]), fnum(r["llama_tps"]),
                         f"**{ratio:.2f}x**" if r["target"] is not None else f"{ratio:.2f}x", said, bw])
        name = ("best kernels on both sides" if tier["tier"] == "native" else
                "`TESSERA_CPU_CAPABILITY=avx2` against llama.cpp built without AVX-512")
        at = f" Measured at `{tier['commit']}`." if tier.get("commit") else ""
        later = {}  # rows measured in a run of their own, by commit
        for r in tier["rows"]:
            if r.get("commit", tier.get("commit")) != tier.get("commit"):
                later.setdefault(r["commit"], set()).add(r["model"])
        for commit, names in sorted(later.items()):
            at += f" The rows of {', '.join(sorted(names))} at `{commit}`, in a run of their own."
        out += ["", f"**Tier {tier['tier']}** ({name}). {llama_cpp_line(tier['llama_cpp'])}.{at}", "",
                machine_line(h), ""]
        out += table(["file", "measure", "threads", "Tessera tokens/s", "llama.cpp tokens/s", "Tessera / llama.cpp",
                      "target", "decode GB/s of weights, Tessera / llama.cpp, of a streaming read's"], rows,
                     ["---", "---", "---:", "---:", "---:", "---:", "---", "---:"])
    out += ["", f"Each side's own tool in its default configuration, on the same files and threads: "
                f"`tessera_llm_bench run` against llama-bench (`-p 512 -n 0`, `-p 0 -n 128`) and llama-batched-bench "
                f"(`-npp 8 -ntg 128 -npl 4` and `16`, its S_TG). Within a process a warm-up, then {d['repeat']} timed "
                f"runs, their mean tokens/s (llama-bench's avg_ts); one process per measurement, the two sides "
                f"alternated, the median of {d['rounds']} rounds. Decode reads every weight once per token, so the "
                "last column sets the weight bytes each side read per second beside a plain streaming read of as "
                "many bytes at the same threads (`tessera_llm_bench run --measure bandwidth`, fastest of 5): the "
                "bound decode works against.", "",
            "Files (sha256): " + ", ".join(f"`{os.path.basename(m['path'])}` ({m['writer']}) {m['sha256'][:16]}"
                                           for m in d["models"].values())]
    pp = d.get("perplexity")
    if pp and pp.get("rows"):
        rows = [[r["model"], r.get("context", pp["context"]), f"{r['tessera']:.4f}", f"{r['llama']:.4f}",
                 f"{100 * (r['tessera'] / r['llama'] - 1):+.3f}%",
                 f"within {100 * target('llm', 'perplexity_difference'):g}%: "
                 + verdict("llm", "perplexity_difference", abs(r["tessera"] / r["llama"] - 1))]
                for r in pp["rows"]]
        out += ["", f"**Perplexity**: `tessera perplexity` against llama-perplexity on the same file and text "
                    f"({pp['text']}, `-c CONTEXT --chunks {pp['chunks']}`; the 110M files have random weights, so "
                    "their figures sit near the vocabulary's size; the fortunes models were trained on this "
                    "corpus).", ""]
        out += table(["file", "context", "Tessera", "llama-perplexity", "difference", "target"], rows,
                     ["---", "---:", "---:", "---:", "---:", "---"])
    return out


def render_quant(d, h):
    out = []
    shapes = quant_one_row(d)
    order = sorted(shapes, key=lambda s: -int(s.split("x")[0]) * int(s.split("x")[1]))
    if shapes:
        rows = []
        for sh in order:
            s = shapes[sh]
            tf, pf = s["tessera_f32"], s.get("torch_f32", {})
            rows.append([sh, ", ".join(f"{k} {fnum(v)}" for k, v in tf.items()), f"`{s['tessera_best']}`",
                         ", ".join(f"{k} {fnum(v)}" for k, v in pf.items()) or "n/a", f"`{s.get('torch_best', '-')}`",
                         f"**{fx(div(tf[s['tessera_best']], pf.get(s.get('torch_best'))))}**",
                         fnum(s.get("torch_dynamic_int8"))])
        out += ["", "**f32 at one row** (one activation row times an out x in weight: a decoded token; us per call). "
                    "Each side's fastest f32 path is the reference for the speed-ups below.", "", machine_line(h), ""]
        out += table(["weight (out x in)", "Tessera f32 paths, us", "Tessera's fastest", "PyTorch f32 paths, us",
                      "PyTorch's fastest", "Tessera / PyTorch, fastest f32", "PyTorch dynamic int8 Linear, us"], rows,
                     ["---", "---", "---", "---", "---", "---:", "---:"])
        rows = []
        for v in QUANT_ORDER:
            row = [v]
            for sh in order:
                s = shapes[sh]
                q = s.get("variants", {}).get(v)
                row += [fnum(q), fx(div(s["tessera_f32"][s["tessera_best"]], q)),
                        fx(div(s.get("torch_f32", {}).get(s.get("torch_best")), q))]
            rows.append(row)
        head = ["variant"]
        for sh in order:
            head += [f"{sh} us", "vs Tessera f32", "vs PyTorch f32"]
        out += ["", "**Weight-only quantized, one row: speed-up = f32 time / quantized time** (against each side's "
                    "fastest f32 path above; `FORMAT` keeps float activations, `FORMAT/int8` quantizes them on the "
                    "fly)", "", machine_line(h), ""]
        out += table(head, rows)
        out += ["", "![int8 speed-ups](benchmarks/int8_speedups.svg)"]
        # larger batches: against Tessera's linear()
        big = {}
        for r in d.get("kernels", []):
            if r["m"] != "1":
                big.setdefault((r["shape"], int(r["m"])), {})[r["variant"]] = float(r["us"])
        if big:
            rows = []
            for (sh, m), vs in sorted(big.items(), key=lambda kv: (-int(kv[0][0].split("x")[0]) * int(kv[0][0].split("x")[1]), kv[0][1])):
                rows.append([sh, m, fnum(vs.get("f32"))] + [fx(div(vs.get("f32"), vs.get(v))) for v in QUANT_ORDER])
            out += ["", "**More rows** (m activation rows; speed-up against Tessera's f32 `linear`)", "",
                    machine_line(h), ""]
            out += table(["weight", "m", "f32 us"] + QUANT_ORDER, rows)
    if d.get("gpt"):
        g = {r["variant"]: r for r in d["gpt"]}
        m = d.get("model", {})
        rows = [[r["variant"], f"{float(r['perplexity']):.4f}", f"{float(r['increase_pct']):+.2f}%",
                 f"{float(r['ppl16']):.4f}", f"{float(r['increase16_pct']):+.2f}%"] for r in d["gpt"]]
        out += ["", f"**Character GPT: perplexity** (4 layers, d 128, trained {m.get('steps', '?')} steps by "
                    f"`tessera train {m.get('config', '')}`; {d.get('eval_batches')} validation batches; \"(16)\": "
                    "64 samples fed as 16-token windows, the batch at which the int8-activation paths run)", "",
                machine_line(h), ""]
        out += table(["variant", "perplexity", "change", "perplexity (16)", "change"], rows)
        t = d.get("torch_gpt", {})
        if t:
            rows = []
            for key, label in (("us_1", "[1, 1] (one token)"), ("us_128", "[1, 128] (a prompt)")):
                pf, pq = t["f32"][key], t["dynamic_int8"][key]
                tf = float(g["f32"][key])
                ti, tq = float(g["int8/int8"][key]), float(g["q8_0/int8"][key])
                rows.append([label, fnum(pf), fnum(pq), fnum(tf), fnum(ti), fnum(tq), f"**{fx(div(tf, pf))}**",
                             f"**{fx(div(ti, pq))}**"])
            out += ["", f"**Character GPT: whole forward against PyTorch's `quantize_dynamic`** (us per forward; "
                        f"the same weights; max logit change of PyTorch's int8 {t.get('max_logit_diff', 0):.3f})", "",
                    machine_line(h), ""]
            out += table(["forward", "PyTorch f32", "PyTorch dynamic int8", "Tessera f32", "Tessera int8/int8",
                          "Tessera q8_0/int8", "Tessera / PyTorch, f32", "Tessera int8/int8 / PyTorch dynamic int8"],
                         rows)
    out += ["", f"Settings: {d.get('threads')} thread, medians of {d.get('rounds')} alternating rounds."]
    return out


def render_ptq(d, h):
    rows, ratios = [], []
    for r in d["rows"]:
        t, p, o, oa = r["tessera"], r["torch"], r["ort_us"], r["ort_acc"]
        rows.append([r["threads"], "accuracy %", f"{t['acc_f32']:.2f}", f"{t['acc_int8']:.2f}", f"{p['f32']['acc']:.2f}",
                     f"{p['int8']['acc']:.2f}", f"{oa['f32']:.2f}", f"{oa['int8']:.2f}"])
        for b in (1, 64):
            rows.append([r["threads"], f"batch {b} us", fnum(t[f"us{b}_f32"]), fnum(t[f"us{b}_int8"]),
                         fnum(p["f32"][f"us_{b}"]), fnum(p["int8"][f"us_{b}"]), fnum(o["f32"][str(b)]),
                         fnum(o["int8"][str(b)])])
            ti = t[f"us{b}_int8"]
            ratios.append([r["threads"], b, fx(div(ti, t[f"us{b}_f32"])),
                           fx(div(p["int8"][f"us_{b}"], p["f32"][f"us_{b}"])),
                           fx(div(o["int8"][str(b)], o["f32"][str(b)])),
                           f"**{fx(div(ti, p['int8'][f'us_{b}']))}**", f"**{fx(div(ti, o['int8'][str(b)]))}**"])
    m = d.get("model", {})
    acc = m.get("eval_accuracy")
    epochs = fnum(m.get("epochs"))
    out = ["", f"**Fashion-MNIST CNN, f32 and static int8** (trained {epochs} "
               f"epochs by `tessera train {m.get('config', '')}`"
               f"{f', {100 * acc:.2f}% test accuracy' if acc else ''}; PTQ calibrated on {d.get('calibration_batches')} "
               f"training batches of 64, {d.get('observer')} observers)", "", machine_line(h), ""]
    out += table(["threads", "", "Tessera f32", "Tessera int8", "PyTorch f32", "PyTorch int8", "ORT f32",
                  "ORT int8 (QDQ)"], rows, ["---:", "---"] + ["---:"] * 6)
    out += ["", "**Ratios** (time / time)", "", machine_line(h), ""]
    out += table(["threads", "batch", "Tessera int8 / its f32", "PyTorch int8 / its f32", "ORT int8 / its f32",
                  "Tessera int8 / PyTorch int8", "Tessera int8 / ORT int8"], ratios)
    diffs = ", ".join(f"{r['ort_int8_max_diff']:.3f} ({r['threads']} thread{'s' if r['threads'] > 1 else ''})"
                      for r in d["rows"])
    out += ["", f"ONNX Runtime's int8 logits against Tessera's int8 graph's on the batch-64 input: at most {diffs} "
                f"apart (the script fails beyond 5% of the logits' range). Medians of {d.get('rounds')} alternating "
                f"rounds; PyTorch {d.get('torch')}."]
    return out


def render_sparse(d, h):
    out = []
    cx = d.get("crossover", [])
    if cx:
        sps = sorted({r["sparsity"] for r in cx})
        rows = []
        for (n, k, m) in sorted({(int(r["n"]), int(r["k"]), int(r["m"])) for r in cx}, key=lambda x: (x[0] * x[1], x[2])):
            cells = {r["sparsity"]: r for r in cx if (int(r["n"]), int(r["k"]), int(r["m"])) == (n, k, m)}
            rows.append([f"{n} x {k}", m, fnum(cells[sps[0]]["dense_us"])] +
                        [fx(div(cells[sp]["dense_us"], cells[sp]["sparse_us"])) if sp in cells else "n/a" for sp in sps])
        out += ["", f"**Unstructured: CSR `sparse_linear` against the dense f32 GEMM** on the same randomly pruned "
                    f"weights, {d.get('crossover_threads', 1)} thread; speed-up = dense time / sparse time (above 1 "
                    "the sparse kernel wins)", "", machine_line(h), ""]
        out += table(["weight (out x in)", "m", "dense us"] + [f"{100 * sp:.0f}%" for sp in sps], rows)
    pr = d.get("prune", {})
    if pr:
        rows = []
        for t, r in sorted(pr.items()):
            def pair(key):
                v = r.get(key)
                return (f"{v[0]} -> {v[1]}", fx(div(v[0], v[1]))) if v else ("n/a", "n/a")
            b1, s1 = pair("compiled, batch 1 p50 (ms)")
            b64, s64 = pair("compiled, batch 64 p50 (ms)")
            acc = r.get("accuracy", ["?", "?", "?"])
            rows.append([t, b1, f"**{s1}**", b64, f"**{s64}**", f"{acc[0]} -> {acc[1]}"])
        m = d.get("model", {})
        ft = d.get("settings", "").split("--finetune-steps ")[-1].split()[0] if "--finetune-steps" in d.get("settings", "") else "?"
        out += ["", f"**Structured: half the channels removed** (`tessera prune RUN --sparsity 0.5 --method structured "
                    f"--skip classifier.3`, the CNN trained {fnum(m.get('epochs'))} epochs, {ft} fine-tuning steps; "
                    "the compiled graph drops the pruned channels; p50 of the timed forwards; speed-up = dense time / "
                    "pruned time)", "", machine_line(h), ""]
        out += table(["threads", "compiled batch 1 ms, dense -> pruned", "speed-up", "compiled batch 64 ms, dense -> pruned",
                      "speed-up", "test accuracy, dense -> pruned"], rows,
                     ["---:", "---:", "---:", "---:", "---:", "---:"])
    return out


def unsent_line(d):
    """What the load generator says of tokens llama-server generated but sent in no chunk of their own."""
    closed = [r for m in d["models"] for r in m.get("llama_server", {}).get("closed", {}).values()]
    if not closed or "unsent" not in closed[0]:
        return ""
    unsent, generated = sum(r["unsent"] for r in closed), sum(r["generated"] for r in closed)
    if unsent == 0:
        return (" A request's tokens are the count in its stream's final `usage`; here every one of them also "
                "came in a chunk of its own.")
    return (" A request's tokens are counted from its stream's final `usage`: llama-server sends no chunk for a "
            "token that leaves its text inside an unfinished UTF-8 character (a byte token of the random "
            "models), so a client sees it only with the next, and that inter-token gap spans both "
            f"({unsent:,} of llama-server's {generated:,} closed-loop tokens here).")


def render_llm_serve(d, h):
    ms = lambda v: f"{v * 1000:.0f}" if v >= 0.01 else f"{v * 1000:.1f}"
    out = ["", machine_line(h), ""]
    if d.get("quick"):
        out += ["**Quick run** (fewer requests): for working, not for quoting.", ""]
    rows = []
    for m in d["models"]:
        ref_all = m.get("llama_server", {})
        for c in ("1", "4", "16"):
            r, ref = m["closed"][c], ref_all.get("closed", {}).get(c)
            ratio = r["tokens_per_s"] / ref["tokens_per_s"] if ref else None
            said = ""
            if ratio is not None and c != "1":
                lat_ok = r["ttft_p99"] <= ref["ttft_p99"] and r["itl_p99"] <= ref["itl_p99"]
                said = (f">= {target('llm_serve', 'streams_ratio')}x: " + verdict("llm_serve", "streams_ratio", ratio)
                        + "; p99 TTFT and inter-token no worse: " + ("met" if lat_ok else "**missed**"))
            lat = lambda x: f"{ms(x['ttft_p50'])} / {ms(x['ttft_p99'])}"
            itl = lambda x: f"{ms(x['itl_p50'])} / {ms(x['itl_p99'])}"
            rows.append([m["model"], c, fnum(r["tokens_per_s"]), fnum(ref["tokens_per_s"]) if ref else "n/a",
                         f"**{ratio:.2f}x**" if ratio else "", said, lat(r), lat(ref) if ref else "",
                         itl(r), itl(ref) if ref else "", f"{r['errors']} / {ref['errors'] if ref else ''}"])
    out += ["Closed loop: each stream sends its next request when its last one ends, four requests a stream (64 to "
            "192 tokens generated, streamed; prompts of 64 to 512 tokens cut from fortunes, as far as the context "
            "leaves room); generated tokens per second of wall time, prefill included. The lengths vary because "
            "streams that all generate the same number of tokens stay in lockstep on llama-server (Note [Streams "
            "in lockstep] in `bench/llm_serve_bench.py`): it takes in all their prompts in one step while none "
            "decodes, so no inter-token gap spans a prefill, which real traffic does not do. llama-server gets the "
            f"same requests from the same load generator, with as many slots as streams, each of the same context (`-np N --cont-batching`, 2 "
            f"threads). {llama_cpp_line(d.get('llama_cpp'))}. Errors (Tessera / llama-server): requests that "
            "ended without all their tokens; their tokens are not counted, though their time is, which lowers "
            "that side's tokens/s by up to their share of the requests. llama-server's errors here are its own "
            "500s in the middle of a stream: its output parser refuses some of the random models' text (\"The "
            "model produced output that does not match the expected Content-only format\", `common/chat.cpp`)."
            + unsent_line(d), ""]
    out += table(["model", "streams", "Tessera tokens/s", "llama-server tokens/s", "ratio", "target",
                  "TTFT p50 / p99 ms, Tessera", "llama-server", "inter-token p50 / p99 ms, Tessera", "llama-server",
                  "errors"], rows,
                 ["---", "---:", "---:", "---:", "---:", "---", "---:", "---:", "---:", "---:", "---:"])
    rows = []
    for m in d["models"]:
        for frac, r in m["open"].items():
            rows.append([m["model"], f"{float(frac):.0%} ({float(frac) * m['max_rate']:.2f}/s)",
                         f"{ms(r['ttft_p50'])} / {ms(r['ttft_p99'])}", f"{ms(r['itl_p50'])} / {ms(r['itl_p99'])}",
                         r["errors"]])
        r = m["open_unbatched"]
        rows.append([m["model"], "50%, no batching (--max-seqs 1)", f"{ms(r['ttft_p50'])} / {ms(r['ttft_p99'])}",
                     f"{ms(r['itl_p50'])} / {ms(r['itl_p99'])}", r["errors"]])
        r = m.get("llama_server", {}).get("open_half")
        if r:
            rows.append([m["model"], "50%, llama-server (-np 16)", f"{ms(r['ttft_p50'])} / {ms(r['ttft_p99'])}",
                         f"{ms(r['itl_p50'])} / {ms(r['itl_p99'])}", r["errors"]])
    out += ["", "Open loop: Poisson arrivals at fractions of the closed loop's request rate at 16 streams (its "
                "highest sustained rate here), latencies from each request's scheduled time; the 50% trace again on "
                "a server without batching.", ""]
    out += table(["model", "offered load", "TTFT p50 / p99 ms", "inter-token p50 / p99 ms", "errors"], rows,
                 ["---", "---", "---:", "---:", "---:"])
    rows = []
    for m in d["models"]:
        if "shared" not in m:
            continue
        on, off = m["shared"]["on"], m["shared"]["off"]
        kv = on["peak_kv_usage"] / off["peak_kv_usage"] if off["peak_kv_usage"] else float("nan")
        tt = on["ttft_p50"] / off["ttft_p50"]
        ls = m.get("llama_server", {}).get("shared")
        lc = ls.get("counters", {}) if ls else {}
        cached = (f"{lc.get('prompt_tokens_cached_total', 0):.0f} of "
                  f"{lc.get('prompt_tokens_cached_total', 0) + lc.get('prompt_tokens_total', 0):.0f}") if lc else "n/a"
        rows.append([m["model"], f"{on['peak_kv_usage']:.1%} / {off['peak_kv_usage']:.1%}",
                     f"**{kv:.2f}x** (<= {target('llm_serve', 'shared_prefix_kv')}x: "
                     f"{verdict('llm_serve', 'shared_prefix_kv', kv)})",
                     f"{ms(on['ttft_p50'])} / {ms(off['ttft_p50'])}",
                     f"**{tt:.2f}x** (<= {target('llm_serve', 'shared_prefix_ttft')}x: "
                     f"{verdict('llm_serve', 'shared_prefix_ttft', tt)})",
                     ms(ls["ttft_p50"]) if ls else "n/a", cached])
    if rows:
        out += ["", "16 users at once, each prompt a shared 400-token system prompt and a 32-token question, 64 "
                    "tokens generated: the peak of the KV cache in use and the median TTFT, with prefix caching and "
                    "with `--no-prefix-caching`.", ""]
        out += ["llama-server serves the same 16 requests with its prompt cache (its default); its KV cache is "
                "allocated whole when it starts (16 slots of the context), so its peak in use is not reported: "
                "the prompt tokens it reused from its cache, of all it was sent, are."]
        out += table(["model", "peak KV in use, caching / not", "ratio", "TTFT p50 ms, caching / not", "ratio",
                      "llama-server TTFT p50 ms", "llama-server prompt tokens reused"], rows,
                     ["---", "---:", "---", "---:", "---", "---:", "---:"])
    rows = []
    for m in d["models"]:
        for key, served in (("long", "default"), ("long_slowdown", "`--decode-slowdown 3`")):
            if key not in m:
                continue
            L = m[key]
            itl = L["together"]["tags"]["stream"]["itl_p99"] / L["streams_alone"]["itl_p99"]
            tt = L["together"]["tags"]["long"]["ttft_p50"] / L["long_alone"]["ttft_p50"]
            rows.append([m["model"], served, f"{ms(L['together']['tags']['stream']['itl_p99'])} / "
                                             f"{ms(L['streams_alone']['itl_p99'])}",
                         f"**{itl:.2f}x** (<= {target('llm_serve', 'long_prompt_itl')}x: "
                         f"{verdict('llm_serve', 'long_prompt_itl', itl)})",
                         f"{ms(L['together']['tags']['long']['ttft_p50'])} / {ms(L['long_alone']['ttft_p50'])}",
                         f"**{tt:.2f}x** (<= {target('llm_serve', 'long_prompt_ttft')}x: "
                         f"{verdict('llm_serve', 'long_prompt_ttft', tt)})"])
    if rows:
        out += ["", "A 2,048-token prompt arriving 1.5 s after 8 streams started (64-token prompts, 384 tokens "
                    "each; `--ctx 3072`): the streams' p99 inter-token latency with it and without, and its TTFT "
                    "among them and on an idle server; served by default (prompt chunks up to "
                    "`--max-batched-tokens 512`) and with `--decode-slowdown 3` (a step with prompt chunks "
                    "predicted to take at most 3 times one of the decodes alone).", ""]
        out += table(["model", "served", "streams' p99 inter-token ms, with / without", "ratio",
                      "its TTFT ms, among them / idle", "ratio"], rows, ["---", "---", "---:", "---", "---:", "---"])
    rows = []
    for m in d["models"]:
        if "lookup" not in m:
            continue
        off, on = m["lookup"]["0"], m["lookup"]["8"]
        for w, name, key in (("free", "free fortunes text", "lookup_free_text"), ("repeat", "a passage repeated 3 times",
                                                                               None)):
            ratio = on[w]["tokens_per_s"] / off[w]["tokens_per_s"]
            rows.append([m["model"], name, fnum(off[w]["tokens_per_s"]), fnum(on[w]["tokens_per_s"]), f"**{ratio:.2f}x**",
                         "" if key is None else f">= {target('llm_serve', key)}x: " + verdict("llm_serve", key, ratio)])
    if rows:
        out += ["", "Prompt lookup (`--prompt-lookup 8` against none), one stream, 128 tokens per request, greedy: "
                    "the drafts are the tokens after the latest earlier occurrence of the last tokens, so the "
                    "output is the same either way.", ""]
        out += table(["model", "prompts", "tokens/s without", "with", "speedup", "target"], rows,
                     ["---", "---", "---:", "---:", "---:", "---"])
    if d.get("soak"):
        sk = d["soak"]
        r, rss = sk["result"], sk["rss"]
        half = rss[len(rss) // 2:] or rss
        sustained = (f"80% of the {sk['sustained']['requests'] / sk['sustained']['wall_s']:.2f} requests/s it "
                     f"sustained in a closed loop of 16 streams for {sk['sustained']['wall_s']:.0f} s just before; "
                     f"the first burst gave {sk['burst_rate']:.2f}") if sk.get("sustained") else "80% of its highest rate"
        out += ["", f"Soak: {sk['model']}, Poisson arrivals at {sk['rate']:.2f} requests/s ({sustained}) "
                    f"for {sk['seconds']} s: {r['requests']} requests, {r['errors']} errors, TTFT p50 / p99 "
                    f"{ms(r['ttft_p50'])} / {ms(r['ttft_p99'])} ms, inter-token p99 {ms(r['itl_p99'])} ms; the "
                    f"server's resident memory every 5 s: {rss[0] / 2**20:.0f} MiB at the start, "
                    f"{min(half) / 2**20:.0f} to {max(half) / 2**20:.0f} MiB over the second half, "
                    f"{rss[-1] / 2**20:.0f} MiB at the end. The server generated {r['tokens_per_s']:,.0f} tokens/s "
                    f"of the {sk['rate'] * 128:,.0f} offered"
                    + (": over what this machine sustained during the soak, so the queue grew (its throughput "
                       "varies by about 10% from run to run)." if r["ttft_p99"] > 2 else ".")]
    if d.get("missing"):
        out += ["", "Left out (no file): " + ", ".join(d["missing"]) + "."]
    out += ["", "Speculative decoding with a draft model and JSON-schema decoding are their own sections below."]
    return out


def runs_ratio(sp, c):
    """Tessera's tokens/s with its draft over llama-server's with the same draft, at c streams."""
    mine = sp["streams"].get(c, {}).get("draft")
    theirs = (sp.get("llama", {}).get(c) or {}).get("draft")
    return mine["tokens_per_s"] / theirs["tokens_per_s"] if mine and theirs else None


def render_llm_spec(d, h):
    out = []
    if d.get("speculative"):
        sp = d["speculative"]
        rows = []
        for c, runs in sorted(sp["streams"].items(), key=lambda kv: int(kv[0])):
            plain, draft = runs["plain"], runs["draft"]
            ratio = draft["tokens_per_s"] / plain["tokens_per_s"]
            key = "draft_1_stream" if c == "1" else "draft_16_streams" if c == "16" else None
            spec = draft.get("spec", {})
            acc = spec["accepted"] / spec["draft"] if spec.get("draft") else 0
            rows.append([c, fnum(plain["tokens_per_s"]), fnum(draft["tokens_per_s"]), f"**{ratio:.2f}x**",
                         f"{int(spec.get('draft', 0))} / {acc:.0%}",
                         "" if key is None else f">= {target('llm_spec', key)}x: " + verdict("llm_spec", key, ratio)])
        # Runs before llama-server measured llama.cpp through node-llama-cpp
        # ("plain"/"draft" at the top): not a speed reference, not shown.
        by_streams = {c: ll for c, ll in sp.get("llama", {}).items() if str(c).isdigit()}
        for c, ll in sorted(by_streams.items(), key=lambda kv: int(kv[0])):
            if ll.get("plain") and ll.get("draft"):
                lr = ll["draft"]["tokens_per_s"] / ll["plain"]["tokens_per_s"]
                co = ll["draft"].get("counters", {})
                acc = (co.get("spec_decode_num_accepted_tokens_total", 0) / co["spec_decode_num_draft_tokens_total"]
                       if co.get("spec_decode_num_draft_tokens_total") else 0)
                rows.append([f"{c} (llama-server)", fnum(ll["plain"]["tokens_per_s"]), fnum(ll["draft"]["tokens_per_s"]),
                             f"{lr:.2f}x", f"{int(co.get('spec_decode_num_draft_tokens_total', 0))} / {acc:.0%}",
                             "Tessera with draft / llama-server with draft: "
                             f"**{runs_ratio(sp, c):.2f}x**" if runs_ratio(sp, c) else ""])
        out += ["", f"Speculative decoding with a draft model: {os.path.basename(sp['target'])} with "
                    f"{os.path.basename(sp['draft'])} as its draft (`--draft`, up to 8 tokens a step, the length "
                    "each step chosen by the fitted step costs) against no draft; closed loop, prompts of 64 to 127 "
                    "fortunes tokens, 128 generated, greedy (the same text either way). The llama-server rows: the "
                    "same files and requests through llama-server with as many slots as streams, without and with "
                    "`--spec-type draft-simple --model-draft`, its default draft length (3 tokens; 8 was slower).", ""]
        out += table(["streams", "tokens/s without", "with draft", "speedup", "drafts / accepted", "target"], rows,
                     ["---", "---:", "---:", "---:", "---:", "---"])
    if not d.get("speculative"):
        out += ["", "Not run: " + ", ".join(d.get("missing", [])) + " missing."]
    ec = d.get("echo")
    if ec:
        off, on = ec["lookup"]["0"], ec["lookup"]["8"]
        ratio = on["decode_tokens_per_s"] / off["decode_tokens_per_s"]
        spec = on.get("spec", {})
        acc = spec["accepted"] / spec["draft"] if spec.get("draft") else 0
        out += ["", f"Prompt lookup on an echo workload: {os.path.basename(ec['model'])}, the ~2M shape trained by the "
                    "bench from scratch to repeat a passage after \" | \" (examples/configs/fortunes_echo_2m.yaml), one "
                    f"stream on {ec.get('threads', 2)} compute thread(s), {ec['requests']} requests, each two example "
                    "lines and a passage of 20 to 30 random fortune words to repeat (greedy, stop at the line's end). "
                    f"The model copied {ec['copied_after_first']} of {ec['requests']} passages but for the first word "
                    f"({ec['copied']} exactly): that word has nothing earlier on its line to copy from. Each side ran "
                    "twice in turn; the faster run of each is shown. Decode rate: the tokens after each request's "
                    "first over the time from its first token to its last (what speculation speeds up); tokens/s: "
                    "the same tokens over the whole run, each request's prompt and first token included.", ""]
        out += table(["", "decode tokens/s", "tokens/s", "TTFT p50 (ms)", "e2e p50 (ms)", "drafts / accepted"],
                     [["no lookup", fnum(off["decode_tokens_per_s"]), fnum(off["tokens_per_s"]),
                       f"{off['ttft_p50'] * 1e3:.2f}", f"{off['e2e_p50'] * 1e3:.2f}", ""],
                      ["`--prompt-lookup 8`", fnum(on["decode_tokens_per_s"]), fnum(on["tokens_per_s"]),
                       f"{on['ttft_p50'] * 1e3:.2f}", f"{on['e2e_p50'] * 1e3:.2f}",
                       f"{int(spec.get('draft', 0))} / {acc:.0%}"],
                      ["speedup", f"**{ratio:.2f}x**", f"{on['tokens_per_s'] / off['tokens_per_s']:.2f}x", "", "",
                       f">= {target('llm_spec', 'lookup_echo_decode')}x (decode rate): "
                       + verdict("llm_spec", "lookup_echo_decode", ratio)]],
                     ["---", "---:", "---:", "---:", "---:", "---"])
    else:
        out += ["", "Not measured in this run: prompt lookup on the echo model."]
    return out


def render_llm_structured(d, h):
    st = d.get("structured")
    if not st:
        return ["", "Not run: " + ", ".join(d.get("missing", [])) + " missing."]
    plain, first, again, plain2 = st["plain"], st["first"], st["again"], st["plain_again"]
    base = (plain["itl_p50"] + plain2["itl_p50"]) / 2  # the unconstrained runs before and after
    ms = lambda v: f"{v * 1000:.2f}"
    rows = []
    for name, r, constrained in (("no schema", plain, False), ("JSON schema, first time", first, True),
                                 ("JSON schema, again", again, True), ("no schema, again", plain2, False)):
        rows.append([name, ms(r["itl_p50"]), ms(r["itl_p99"]), fnum(r["generated"] / r["requests"]), r["errors"],
                     f"{1 - base / r['itl_p50']:.0%}" if constrained else ""])
    cost = 1 - base / again["itl_p50"]
    out = ["", f"One stream of {plain['requests']} requests (64-token fortunes prompts, up to 128 tokens, greedy) to "
               f"{os.path.basename(st['model'])} (32,000-token vocabulary), without and with a response_format "
               "json_schema (an object of five properties: strings of at most 6 to 16 characters, an integer, a "
               "nullable string, an array of up to 4 strings, a nested object; bounded so that the random model's "
               "answers go through every state of the schema). The cost is the inter-token latency's p50 against the "
               "unconstrained runs' (the mean of the runs before and after): "
               f"**{cost:.0%}** with the schema's masks cached (target: at most "
               f"{target('llm_structured', 'schema_cost'):.0%}: " + verdict("llm_structured", "schema_cost", cost)
               + "). Requests under the schema stop when their JSON "
               "is complete, so they generate fewer tokens.", ""]
    out += table(["requests", "inter-token ms p50", "p99", "tokens per request", "errors", "cost (p50)"], rows,
                 ["---", "---:", "---:", "---:", "---:", "---:"])
    lp, ls = st.get("llama_plain"), st.get("llama_schema")
    if lp and ls and ls["generated"] and lp["generated"]:
        lcost = 1 - lp["itl_p50"] / ls["itl_p50"]
        out += ["", f"llama-server on the same requests, without and with its `json_schema` (a grammar made from the "
                    f"schema): inter-token p50 {ms(lp['itl_p50'])} and {ms(ls['itl_p50'])} ms (cost {lcost:.0%}); "
                    f"Tessera under the schema, masks cached, against llama-server under it: "
                    f"**{ls['itl_p50'] / again['itl_p50']:.2f}x** faster per token."]
    return out


def render_seam(d, h):
    names = {"add_1": "1-element add, no autograd", "add_1_grad": "1-element add, recording autograd",
             "mlp16_forward": "width-16 MLP, batch 1, forward (no autograd)",
             "mlp16_train_step": "width-16 MLP, batch 1, forward + backward + zero_grad",
             "llm_decode_ms": f"LLM engine decode step ({d.get('model') or 'no model'})"}
    bound = target("seam", "ratio")
    out = ["", f"Before: commit `{d['base']}` (the last before the seam), built by `bench/seam_compare.py`; after: this "
               f"commit; both {d.get('build_type', '?')} builds. {d['threads']} thread, median of {d['rounds']} "
               f"alternating rounds.", "", machine_line(h), ""]
    out += table(["case", "before", "after", "after / before", f"within {100 * (bound - 1):.0f}%"],
                 [[names.get(r["case"], r["case"]), f"{fnum(r['before'])} {r['unit']}", f"{fnum(r['after'])} {r['unit']}",
                   f"**{r['ratio']:.3f}x**", verdict("seam", "ratio", r["ratio"])] for r in d["rows"]])
    return out


def render_python(d, h):
    o = d["overhead"]
    tv, pv = o.get("tessera", {}), o.get("torch", {})
    names = {"add_1_operator": "`a + b`, 1 element", "add_1_function": "`add(a, b)`, 1 element",
             "add_1_scalar": "`a + 1.0`, 1 element", "add_1_autograd": "`a + b`, 1 element, a requires grad",
             "matmul_64_operator": "`a @ b`, 64x64", "matmul_64_function": "`matmul(a, b)`, 64x64",
             "sum_dim_1": "`sum(a, 0)`, 1 element", "view_1": "`a.view(1, 1)`"}
    targeted = {"add_1_operator", "add_1_function", "matmul_64_operator", "matmul_64_function"}
    out = ["", f"**One op called from Python**, 1 thread, median of {d['rounds']} rounds (each the mean of many calls): "
               f"the whole call as Python sees it. Tessera {o.get('tessera_version', '?')} from `build-bench/python`; "
               f"PyTorch {o.get('torch_version', '?')} (Debian's, best configuration).", "", machine_line(h), ""]
    rows = []
    for k, name in names.items():
        t, p = tv.get(k), pv.get(k)
        r = t / p if t and p else None
        rows.append([name, f"{fnum(t)} ns", f"{fnum(p)} ns", f"**{r:.2f}x**" if r else "",
                     verdict("python", "overhead_ratio", r) if k in targeted and r else ""])
    out += table(["call", "Tessera", "PyTorch", "Tessera / PyTorch", f"target <= {target('python', 'overhead_ratio')}x"],
                 rows)
    tg, pg = o.get("tessera_gil"), o.get("torch_gil")
    if tg and pg:
        out += ["", f"**Python threads run ops in parallel** (the GIL is released inside every op): two Python threads "
                    f"each running 300 matmuls of 128x128 (one compute thread per op) against one thread running "
                    f"both shares: Tessera {fnum(tg['serial_ms'])} ms -> {fnum(tg['two_threads_ms'])} ms "
                    f"(**{tg['speedup']:.2f}x**), PyTorch {fnum(pg['serial_ms'])} ms -> {fnum(pg['two_threads_ms'])} "
                    f"ms ({pg['speedup']:.2f}x), on this machine's {os.cpu_count()} logical CPUs."]
    out += ["", "**A training step written in Python**: `bench/train_torch.py` run by PyTorch and, unmodified, by "
                "Tessera (`bench/as_tessera.py`: `torch` means `tessera`); and the same step in C++ "
                "(`tessera_train_bench`, the same models). ms per step, median of the rounds.", ""]
    rows = []
    for r in d["steps"]:
        py, cpp, pt = r.get("python"), r.get("cpp"), r.get("torch")
        rows.append([r["case"], r["threads"], f"{fnum(py)} ms", f"{fnum(pt)} ms", f"{fnum(cpp)} ms",
                     f"**{py / pt:.2f}x**" if py and pt else "", f"**{py / cpp:.3f}x**" if py and cpp else ""])
    out += table(["case", "threads", "Tessera from Python", "PyTorch from Python", "Tessera from C++",
                  "Python: Tessera / PyTorch", "Tessera: Python / C++"], rows)
    att = {r.get("python_attention") for r in d["steps"] if r.get("python_attention")}
    patt = {r.get("torch_attention") for r in d["steps"] if r.get("torch_attention")}
    if att or patt:
        out += ["", f"The GPT's attention: Tessera {', '.join(sorted(att))}; PyTorch {', '.join(sorted(patt))} "
                    "(torch 1.13 has no fused attention)."]
    if d.get("dist"):
        out += ["", "**The distributed GPT step written in Python** (`bench/python_ddp.py`: "
                    "`tessera.distributed.DistributedDataParallel` and `ZeroRedundancyOptimizer` on the zoo's GPT, "
                    "2 layers, batch 4 per rank) against the same step in C++ (`tessera_dist_bench gpt`), 2 ranks of "
                    "one thread under mpirun; seconds per step, the slowest rank's median, median of the rounds.", ""]
        rows = []
        for r in d["dist"]:
            py, cpp = r.get("python"), r.get("cpp")
            rows.append([r["mode"], r["ranks"], f"{fnum(py)} s", f"{fnum(cpp)} s",
                         f"**{py / cpp:.3f}x**" if py and cpp else r.get("python_error", r.get("cpp_error", ""))])
        out += table(["mode", "ranks", "Tessera from Python", "Tessera from C++", "Python / C++"], rows)
    return out


def render_distributed(d, h):
    out = ["", "**Allreduce bus bandwidth**, f32, ProcessGroup against a raw `MPI_Allreduce` in one binary "
               "(median of the slowest rank's times; bus bandwidth = 2 (n-1)/n x bytes / time). *Issued*: "
               "`allreduce(t)->wait()`, handed to the communication thread as DDP's and ZeRO's buckets are; "
               "*blocking*: `all_reduce_sum(t)`, which the communication ops call (run on the caller's thread when "
               "nothing is queued before it)", "", machine_line(h), ""]
    rows, worst = [], {}
    for r in d["allreduce"]:
        ratio = r["tessera_busbw_gbs"] / r["mpi_busbw_gbs"]
        bratio = r["blocking_busbw_gbs"] / r["mpi_busbw_gbs"] if "blocking_busbw_gbs" in r else None
        if r["bytes"] >= 1 << 20:
            for k, v in (("issued", ratio), ("blocking", bratio)):
                if v is not None:
                    worst[k] = min(worst.get(k, v), v)
        size = f"{r['bytes'] >> 20} MB" if r["bytes"] >= 1 << 20 else f"{r['bytes'] >> 10} KB"
        rows.append([r["ranks"], size, f"{fnum(r['tessera_busbw_gbs'])} GB/s",
                     f"{fnum(r['blocking_busbw_gbs'])} GB/s" if bratio else "", f"{fnum(r['mpi_busbw_gbs'])} GB/s",
                     f"**{ratio:.2f}x**", f"**{bratio:.2f}x**" if bratio else "",
                     f"{fnum((r['tessera_s'] - r['mpi_s']) * 1e6)} us"])
    out += table(["ranks", "size", "issued", "blocking", "raw MPI", "issued / MPI", "blocking / MPI",
                  "time added (issued)"], rows)
    for k, v in worst.items():
        out += ["", f"From 1 MB the lowest {k} ratio is {v:.2f}x: {verdict('distributed', 'allreduce_ratio', v)} "
                    f"(target at least {target('distributed', 'allreduce_ratio')}x)."]
    g = {(r.get("impl", "tessera"), r["ranks"], r.get("overlap", True), r.get("zero", 0)): r for r in d["gpt"]}
    t1, p1 = g.get(("tessera", 1, True, 0)), g.get(("pytorch", 1, True, 0))
    out += ["", f"**Data-parallel training step**, the tiny GPT of the training section with 2 layers "
                f"({fnum(t1['params'] / 1e6) if t1 else '?'}M parameters), batch 4 x 256 tokens per rank, AdamW, "
                "1 thread per rank; the step at 2 ranks over one process at the same per-rank batch (the cost of "
                "communication; 1.0 is free)", "", machine_line(h), ""]
    rows = []
    for (impl, ranks, overlap, zero), r in sorted(g.items(), key=lambda kv: (kv[0][0] != "tessera", kv[0][1], not kv[0][2], kv[0][3])):
        base = t1 if impl == "tessera" else p1
        what = "one process" if ranks == 1 else (
            (f"ZeRO-{zero}" if zero else "DDP, overlap on" if overlap else "DDP, overlap off") if impl == "tessera"
            else ("DDP (gloo) + ZeroRedundancyOptimizer" if zero else "DDP (gloo)"))
        exposed = f"{fnum(r['exposed_comm_s'] * 1e3)} ms" if impl == "tessera" and ranks > 1 else ""
        rows.append(["Tessera" if impl == "tessera" else f"PyTorch {r.get('torch', '')}", what, ranks,
                     f"{fnum(r['step_s'] * 1e3)} ms", f"**{r['step_s'] / base['step_s']:.2f}x**" if base else "n/a", exposed])
    out += table(["", "run", "ranks", "step", "over one process", "waited for communication"], rows,
                 ["---", "---", "---:", "---:", "---:", "---:"])
    t2, p2 = g.get(("tessera", 2, True, 0)), g.get(("pytorch", 2, True, 0))
    if t1 and p1 and t2 and p2:
        added_t, added_p = t2["step_s"] - t1["step_s"], p2["step_s"] - p1["step_s"]
        rel = (t2["step_s"] / t1["step_s"]) / (p2["step_s"] / p1["step_s"])
        if added_p <= 0:
            out += ["", f"Time DDP adds to a step: Tessera {fnum(added_t * 1e3)} ms; PyTorch's 2-rank step was not "
                        "slower than its one-process step in this run (the host's noise exceeded its DDP cost), so "
                        "there is no comparison of added time."]
        else:
            out += ["", f"Time DDP adds to a step: Tessera {fnum(added_t * 1e3)} ms, PyTorch {fnum(added_p * 1e3)} ms; "
                        f"Tessera's over PyTorch's {added_t / added_p:.2f}: "
                        f"{verdict('distributed', 'ddp_overhead', added_t / added_p)}."]
        out += [f"As ratios to one process, Tessera's over PyTorch's is {rel:.2f}: {verdict('distributed', 'ddp_ratio', rel)} "
                "(a ratio counts against the faster single-process step: the same milliseconds are a larger share of a "
                "shorter step). Each configuration's rounds: " +
                "; ".join(f"{'Tessera' if k[0] == 'tessera' else 'PyTorch'} {k[1]} rank{'s' if k[1] > 1 else ''}"
                          f"{' overlap off' if k[0] == 'tessera' and not k[2] else ''}"
                          f"{' ZeRO-' + str(k[3]) if k[3] else ''}: "
                          + ", ".join(f"{x * 1e3:.0f}" for x in r.get("rounds", [])) + " ms"
                          for k, r in sorted(g.items(), key=lambda kv: (kv[0][0] != "tessera", kv[0][1])))]
    tz, pz = g.get(("tessera", 2, True, 1)), g.get(("pytorch", 2, True, 1))
    if tz and pz:
        ratio = tz["step_s"] / pz["step_s"]
        out += ["", f"ZeRO-1 at 2 ranks: Tessera {fnum(tz['step_s'] * 1e3)} ms a step, PyTorch's DDP + "
                    f"ZeroRedundancyOptimizer {fnum(pz['step_s'] * 1e3)} ms: {ratio:.2f}x, "
                    f"{verdict('distributed', 'zero1_step', ratio)} (target at most {target('distributed', 'zero1_step')}x)."]
    mem = d.get("memory", [])
    if mem:
        out += ["", "**Memory per rank** of the same GPT under AdamW, after backward of the third step: the bytes of "
                    "the parameters, gradients and optimizer state (distinct buffers, as requested) against ZeRO's "
                    "expected bytes for Ψ f32 parameters (DDP 16Ψ, ZeRO-1 8Ψ + 8Ψ/N, ZeRO-2 4Ψ + 12Ψ/N, ZeRO-3 "
                    "16Ψ/N; gradient shards live from the end of backward to the step; ZeRO-3's gathered units "
                    "show in the peak); the allocator's live bytes at that "
                    "moment (the same buffers in its size classes, the batch subtracted) and the step's peak, which "
                    "adds the activations (each the largest over the ranks)", "", machine_line(h), ""]
        rows, worst = [], 0.0
        for r in sorted(mem, key=lambda r: (r["ranks"], r["zero"])):
            ratio = r["model_states_bytes"] / r["expected_bytes"]
            worst = max(worst, ratio)
            mb = lambda k: f"{r[k] / 1e6:.1f}"
            rows.append([r["ranks"], f"ZeRO-{r['zero']}" if r["zero"] else "DDP", mb("param_bytes"), mb("grad_bytes"),
                         mb("optimizer_bytes"), f"{mb('model_states_bytes')} MB", f"{mb('expected_bytes')} MB",
                         f"**{ratio:.3f}**", f"{mb('live_bytes')} MB", f"{mb('peak_bytes')} MB"])
        out += table(["ranks", "run", "parameters", "gradients", "optimizer", "states", "expected", "states / expected",
                      "allocator live", "peak"], rows)
        out += ["", f"The worst ratio is {worst:.3f}: {verdict('distributed', 'zero_memory', worst)} "
                    f"(target at most {target('distributed', 'zero_memory')})."]
    return out


def render_model_parallel(d, h):
    out = []
    pp = d.get("pingpong", [])
    if pp:
        out += ["", "**Point-to-point round trips** between 2 ranks (`send`, then `recv_now`, as pipeline stages pass "
                    "activations and gradients), median of 200", "", machine_line(h), ""]
        out += table(["elements (f32)", "round trip", "one way", "bandwidth one way"],
                     [[f"{r['elements']:,}", f"{fnum(r['rtt_s'] * 1e6)} us", f"{fnum(r['rtt_s'] * 5e5)} us",
                       f"{fnum(r['elements'] * 4 / (r['rtt_s'] / 2) / 1e9)} GB/s" if r["elements"] > 1000 else ""]
                      for r in pp])
    out += ["", "**Pipeline bubble** with unit-cost stages: each stage sleeps the same time in its forward and in its "
               "backward (20 ms per rank, split over its v stages), so ranks sharing cores do not slow each other; "
               "bubble = 1 - time the stages slept / (ranks x step time), the median of 3 steps, against (p - 1) / "
               "(v m + p - 1) and against the schedule's simulation (sends free)", "", machine_line(h), ""]
    rows, worst = [], 0.0
    for r in d["bubble"]:
        ratio = r["bubble"] / r["ideal"]
        worst = max(worst, ratio)
        rows.append([r["schedule"] + (f" (v = {r['v']})" if r["v"] > 1 else ""), r["ranks"], r["m"],
                     f"{fnum(r['step_s'] * 1e3)} ms", f"{r['bubble']:.3f}", f"{r['ideal']:.3f}",
                     f"{r['simulated']:.3f}", f"**{ratio:.3f}**"])
    out += table(["schedule", "p", "m", "step", "bubble", "(p-1)/(vm+p-1)", "simulated", "measured / ideal"], rows)
    if rows:
        out += ["", f"The largest measured / ideal is {worst:.3f}: {verdict('model_parallel', 'bubble', worst)} "
                    f"(target at most {target('model_parallel', 'bubble')}: within 10%)."]
    acts = d.get("activations", [])
    if acts:
        out += ["", "**Activation memory per stage**, a GPT (2 layers per rank, 128 wide, 128 tokens, 2 rows per "
                    "micro-batch, 8 micro-batches): each rank's peak of live bytes during a step above its live bytes "
                    "before it (the activations it holds for backward, plus its gradients' temporaries)", "",
                machine_line(h), ""]
        by = {(r["ranks"], r["schedule"]): r for r in acts}
        rows = []
        for (p, sched), r in sorted(by.items()):
            if sched != "gpipe" or (p, "1f1b") not in by:
                continue
            g, f = r["peak_above_bytes"], by[(p, "1f1b")]["peak_above_bytes"]
            for rank in range(p):
                rows.append([p, rank, f"{g[rank] / 1e6:.1f} MB", f"{f[rank] / 1e6:.1f} MB", f"**{f[rank] / g[rank]:.2f}**",
                             f"{(p - rank) / r['m']:.2f}"])
        out += table(["p", "rank", "GPipe", "1F1B", "1F1B / GPipe", "micro-batches held (p - r) / m"], rows)
    tp = d.get("tensor", [])
    if tp:
        out += ["", "**Tensor-parallel communication per layer**, one training step of a GPT (128 wide, batch 4 x 128 "
                    "tokens) split over T ranks: the collectives of 8 layers less those of 4, over 4, by operation "
                    "(bytes this rank contributed), against the analytic count (without sequence parallelism 2 "
                    "all-reduces of the activation forward and 2 backward; with it 4 all-gathers of a 1/T block, 4 "
                    "reduce-scatters of the activation, and 6 all-reduces of [C] for the norms' and biases' "
                    "gradients)", "", machine_line(h), ""]
        rows, worst = [], 0.0
        for r in tp:
            got = sum(v["bytes"] for v in r["per_layer"].values())
            want = sum(v["bytes"] for v in r["analytic_per_layer"].values())
            ratio = got / want
            worst = max(worst, abs(ratio - 1))
            ops_str = "; ".join(f"{op} {v['calls']:g} x, {v['bytes'] / 1e3:.0f} KB" for op, v in sorted(r["per_layer"].items()))
            want_str = "; ".join(f"{op} {v['calls']:g} x, {v['bytes'] / 1e3:.0f} KB"
                                 for op, v in sorted(r["analytic_per_layer"].items()))
            rows.append([r["ranks"], "yes" if r["sp"] else "no", ops_str, want_str, f"**{ratio:.3f}**"])
        out += table(["T", "sequence parallel", "measured per layer", "analytic per layer", "bytes measured / analytic"],
                     rows, ["---:", "---", "---", "---", "---:"])
        out += ["", f"The largest difference is {100 * worst:.1f}%: {verdict('model_parallel', 'tensor_bytes', 1 + worst)} "
                    "(target: within 10%)."]
        rows, worst = [], 0.0
        for r in tp:
            ratio = r["param_bytes"] / r["expected_param_bytes"]
            worst = max(worst, abs(ratio - 1))
            rows.append([r["ranks"], "yes" if r["sp"] else "no", f"{r['dense_param_bytes'] / 1e6:.2f} MB",
                         f"{r['param_bytes'] / 1e6:.2f} MB", f"{r['expected_param_bytes'] / 1e6:.2f} MB", f"**{ratio:.3f}**"])
        out += ["", "**Parameters per rank** of the 8-layer GPT under tensor parallelism against 1/T of the split "
                    "parameters plus the whole ones (norms, position embedding, row-parallel biases)", ""]
        out += table(["T", "sequence parallel", "one process", "per rank", "expected", "per rank / expected"], rows,
                     ["---:", "---", "---:", "---:", "---:", "---:"])
        out += ["", f"The largest difference is {100 * worst:.1f}%: {verdict('model_parallel', 'tensor_memory', 1 + worst)} "
                    "(target: within 10%)."]
    steps = d.get("step", [])
    if steps:
        base = next((r for r in steps if r["ranks"] == 1), None)
        out += ["", "**Step time by layout** (data x tensor x pipeline), a 4-layer GPT (128 wide, 0.9M parameters), "
                    "global batch 8 x 128 tokens, AdamW, 1F1B with max(2, P) micro-batches, one thread per rank; the "
                    "slowest rank's step, median of 5, and its seconds in collectives (communication, and waiting "
                    "for the other ranks). The ranks share 2 cores, so no layout can be more than 2x faster than one "
                    "process (one thread) here: scaling efficiency = (one process's step / the step) / min(ranks, 2)", "", machine_line(h), ""]
        rows = []
        for r in steps:
            l = r["layout"]
            eff = base["step_s"] / r["step_s"] / min(r["ranks"], 2) if base and r["ranks"] > 1 else None
            rows.append([f"{l[0]} x {l[1]} x {l[2]}", r["ranks"], f"{fnum(r['step_s'] * 1e3)} ms",
                         f"{r['step_s'] / base['step_s']:.2f}x" if base else "",
                         f"{fnum(r['comm_s'] * 1e3)} ms", f"{100 * r['comm_s'] / r['step_s']:.0f}%",
                         f"{eff:.2f}" if eff is not None else ""])
        out += table(["layout", "ranks", "step", "over one process", "in collectives", "share", "efficiency on 2 cores"],
                     rows, ["---", "---:", "---:", "---:", "---:", "---:", "---:"])
    big = d.get("bigmodel", [])
    if big:
        ref = next((r for r in big if r["ranks"] == 1 and not r["limit_bytes"]), None)
        out += ["", "**A model too large for one process**: a GPT of " + (f"{big[0]['parameters'] / 1e6:.1f}M parameters"
                if big else "") + " (8 layers, 384 wide, vocabulary 4096; AdamW: 16 bytes per parameter), batch 8 x 64 "
                "tokens, trained for " + str(len(ref["losses"]) if ref else 0) + " steps; every rank under "
                "`set_memory_limit`. Split, it is built on meta and each rank materializes only its part (Note "
                "[Materializing a split model]); the losses against one process without the limit", "", machine_line(h), ""]
        rows, worst = [], None
        for r in big:
            l = r["layout"]
            diff = ""
            if ref and r is not ref and r["losses"]:
                dd = max(abs(a - b) for a, b in zip(r["losses"], ref["losses"]))
                worst = dd if worst is None else max(worst, dd)
                diff = f"**{dd:.1e}**"
            rows.append([f"{l[0]} x {l[1]} x {l[2]}", r["ranks"],
                         f"{r['limit_bytes'] / 2**20:.0f} MiB" if r["limit_bytes"] else "none",
                         f"{max(r['peak_bytes']) / 2**20:.0f} MiB", f"{r['losses'][-1]:.5f}" if r["losses"] else "",
                         diff, ("fails: " + r["error"].split(";")[0]) if r["error"] else "trains"])
        out += table(["layout", "ranks", "limit per rank", "largest peak per rank", "last loss",
                      "largest loss difference from one process", "outcome"], rows,
                     ["---", "---:", "---:", "---:", "---:", "---:", "---"])
        if worst is not None:
            out += ["", f"The largest loss difference over the steps is {worst:.1e}: "
                        f"{verdict('model_parallel', 'bigmodel_loss', worst)} (target at most 1e-4)."]
    serving = d.get("serving", [])
    if serving:
        out += ["", "**Tensor-parallel serving** (`serve-llm --tensor-parallel`): the LLM engine's decode step with "
                    "the model split over T ranks (one thread each) against the whole model in one process (one "
                    "thread and two), median of 128 steps after a 64-token prompt per sequence; rank 0's share of the step "
                    "in the group's calls (2 all-reduces per layer and the broadcast of the step). Model: "
                    + serving[0]["model"] + ". T = 2 runs one thread on each of the machine's 2 cores", "", machine_line(h), ""]
        # T = 1 at its better thread count is the reference.
        base = {}
        for r in serving:
            k = (r["type"], r["batch"])
            if r["ranks"] == 1 and (k not in base or r["step_ms"] < base[k]["step_ms"]):
                base[k] = r
        rows = []
        for r in serving:
            b = base.get((r["type"], r["batch"]))
            rows.append([r["type"].upper(), r["batch"], r["ranks"], r.get("threads", 1), f"{r['weight_bytes'] / 1e6:.1f} MB",
                         f"{fnum(r['step_ms'])} ms", f"**{b['step_ms'] / r['step_ms']:.2f}x**" if b and r["ranks"] > 1 else "",
                         f"{100 * r['comm_fraction']:.0f}%" if r["ranks"] > 1 else ""])
        out += table(["weights", "sequences", "T", "threads per rank", "weights read per step per rank", "decode step",
                      "speed-up over the faster T = 1", "in the group's calls"], rows,
                     ["---", "---:", "---:", "---:", "---:", "---:", "---:", "---:"])
    return out


def render_serve(d, h):
    recs = d["records"]
    out = []
    mx = [r for r in recs if r.get("test") == "max"]
    if mx:
        rows = [[r["model"], r["request"], "on" if r["batching"] else "off", fnum(r["achieved"]), fnum(r["p50_ms"]),
                 fnum(r["p99_ms"]), r["errors"]] for r in mx]
        out += ["", "**Maximum throughput** (closed loop, 64 connections)", "", machine_line(h), ""]
        out += table(["model", "request", "batching", "req/s", "p50 ms", "p99 ms", "errors"], rows,
                     ["---", "---", "---", "---:", "---:", "---:", "---:"])
        on = {(r["model"], r["request"]): r["achieved"] for r in mx if r["batching"]}
        off = {(r["model"], r["request"]): r["achieved"] for r in mx if not r["batching"]}
        gains = [f"{m} {k} {fx(div(on[(m, k)], off[(m, k)]))}" for (m, k) in on if (m, k) in off]
        if gains:
            out += ["", "Dynamic batching on / off, throughput: " + ", ".join(gains) + "."]
    cv = [r for r in recs if r.get("test") == "curve"]
    if cv:
        rows = [[r["model"], fnum(r["offered"]), fnum(r["achieved"]), fnum(r["p50_ms"]), fnum(r["p90_ms"]),
                 fnum(r["p99_ms"]), fnum(r["p999_ms"]), r["errors"]] for r in cv]
        out += ["", "**Latency against load** (open loop at fixed offered rates, JSON requests, batching on)", "",
                machine_line(h), ""]
        out += table(["model", "offered req/s", "achieved req/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "errors"],
                     rows, ["---"] + ["---:"] * 7)
        out += ["", "![Serving latency against throughput](benchmarks/serving_latency.svg)"]
    ht = [r for r in recs if r.get("test") == "http"]
    if ht:
        rows = [[r["transport"], "max" if r["offered"] == 0 else fnum(r["offered"]), fnum(r["achieved"]),
                 fnum(r["p50_ms"]), fnum(r["p99_ms"]), r["errors"]] for r in ht]
        top = {r["transport"]: r["achieved"] for r in ht if r["offered"] == 0}
        out += ["", "**HTTP transport**: the same service over three (MLP, JSON, batching on)", "", machine_line(h), ""]
        out += table(["transport", "offered req/s", "achieved req/s", "p50 ms", "p99 ms", "errors"], rows,
                     ["---", "---:", "---:", "---:", "---:", "---:"])
        if "tessera" in top:
            out += ["", "Maximum, `tessera serve` / the others: " + ", ".join(
                f"{k} {fx(div(top['tessera'], v))}" for k, v in top.items() if k != "tessera") + "."]
    sk = [r for r in recs if r.get("test") == "soak"]
    if sk:
        r = sk[0]
        settle = r.get("settle_s", 30)
        rss = [kib for t, kib in r["rss_kib"] if t >= settle] or [r["rss_kib"][-1][1]]
        code = next((x["exit_status"] for x in recs if x.get("test") == "soak_exit"), "?")
        out += ["", f"**Soak**: MLP, JSON, batching on, 80% of its maximum for {d.get('soak_seconds', 0):.0f} s", "",
                machine_line(h), ""]
        out += table(["offered req/s", "achieved req/s", "requests", "errors", "p50 ms", "p99 ms", "p99.9 ms",
                      f"RSS at {settle:.0f} s MiB", "RSS min-max after MiB", "RSS at end MiB", "exit after SIGTERM"],
                     [[fnum(r["offered"]), fnum(r["achieved"]), f"{r['requests']:,}", r["errors"], fnum(r["p50_ms"]),
                       fnum(r["p99_ms"]), fnum(r["p999_ms"]), f"{rss[0] / 1024:.1f}",
                       f"{min(rss) / 1024:.1f}-{max(rss) / 1024:.1f}", f"{rss[-1] / 1024:.1f}", code]])
    ms = d.get("models", {})
    trained = ", ".join(f"{k} {fnum(v.get('epochs'))} epochs" for k, v in ms.items())
    out += ["", f"{d.get('seconds'):g} s measured per point. Models: the MLP and CNN trained by `tessera train` "
                f"({trained}), "
                "exported as compiled graphs."]
    return out


# ---------------------------------------------------------------------------------
# sections: name, title, runner, renderer, prose (what it measures; no figures)

# The sections' code: how each is run and how its data becomes the page's
# tables. Their titles, summaries and texts are data, in bench/sections.md
# (and their targets in bench/targets.json).
RUNNERS = {
    "ops": (sec_ops, render_ops),
    "training": (sec_training, render_training),
    "amp": (sec_amp, render_amp),
    "compile": (sec_compile, render_compile),
    "onnx": (sec_onnx, render_onnx),
    "training_avx2": (sec_training_avx2, render_training_avx2),
    "compile_avx2": (sec_compile_avx2, render_compile_avx2),
    "gemv": (sec_gemv, render_gemv),
    "quant": (sec_quant, render_quant),
    "ptq": (sec_ptq, render_ptq),
    "sparse": (sec_sparse, render_sparse),
    "llm": (sec_llm, render_llm),
    "llm_serve": (sec_llm_serve, render_llm_serve),
    "llm_spec": (sec_llm_spec, render_llm_spec),
    "llm_structured": (sec_llm_structured, render_llm_structured),
    "serve": (sec_serve, render_serve),
    "seam": (sec_seam, render_seam),
    "distributed": (sec_distributed, render_distributed),
    "model_parallel": (sec_model_parallel, render_model_parallel),
    "python": (sec_python, render_python),
}


def read_sections(path):
    """[(name, title, runner, renderer, text)] in the order of bench/sections.md, and {name: summary}."""
    with open(path) as f:
        body = f.read()
    sections, short = [], {}
    for part in body.split("\n## ")[1:]:
        head, _, rest = part.partition("\n")
        name, _, title = head.partition(": ")
        summary, _, text = rest.partition("\n\n")
        if name not in RUNNERS or not summary.startswith("> "):
            raise SystemExit(f"{path}: section '{name}' needs a runner in RUNNERS and a '> ' summary line")
        short[name] = summary[2:]
        sections.append((name, title, *RUNNERS[name], text.rstrip("\n")))
    missing = set(RUNNERS) - set(short)
    if missing:
        raise SystemExit(f"{path}: no text for the sections {', '.join(sorted(missing))}")
    return sections, short


SECTIONS, SHORT = read_sections(os.path.join(HERE, "sections.md"))
SECTION_NAMES = [s[0] for s in SECTIONS]
with open(os.path.join(HERE, "targets.json")) as _f:
    TARGETS = json.load(_f)


# ---------------------------------------------------------------------------------
# charts


def charts(data, out_dir):
    """SVG charts from the section data; returns the files written. Deterministic output:
    fixed hash salt, no date in the metadata, text kept as text."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "tessera-benchmarks", "svg.fonttype": "none", "font.size": 9,
                         "font.family": "DejaVu Sans", "axes.spines.top": False, "axes.spines.right": False})
    TESS, REF, REF2 = "#1f6fb4", "#e08a2c", "#9a9a9a"
    written = []

    def save(fig, name):
        path = os.path.join(out_dir, name)
        fig.savefig(path, format="svg", bbox_inches="tight", metadata={"Date": None})
        plt.close(fig)
        written.append(path)

    def subtitle(section):
        h = data[section]["header"]
        return f"{short_machine(h)}, commit {h['commit']}, {h['date'][:10]}"

    def bars(ax, groups, series, colors, ylabel):
        n = len(series)
        w = 0.8 / n
        for i, (label, values) in enumerate(series):
            xs = [g + (i - (n - 1) / 2) * w for g in range(len(groups))]
            vals = [v if v is not None else 0 for v in values]
            b = ax.bar(xs, vals, w, label=label, color=colors[i])
            for x, v in zip(xs, values):
                if v is None:
                    ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(groups)
        ax.set_ylabel(ylabel)

    # 1. training step time
    if "training" in data:
        res = data["training"]["data"]["results"]
        cases = []
        for k in training_keys(res):
            c = k.split("/")[0]
            if c not in cases:
                cases.append(c)
        fig, axes = plt.subplots(1, len(cases), figsize=(2.6 * len(cases), 3.0), squeeze=False)
        for ax, c in zip(axes[0], cases):
            ts = sorted({int(k.split("/")[1]) for k in res if k.startswith(c + "/")})
            recs = [res[f"{c}/{t}"] for t in ts]
            bars(ax, [f"{t} thr" for t in ts],
                 [("Tessera", [ms_of(r.get("tessera")) for r in recs]),
                  ("PyTorch (best env)", [ms_of(r.get("torch_best")) for r in recs])], [TESS, REF], "ms per step")
            ax.set_title(TRAIN_LABEL.get(c, c).split(",")[0], fontsize=9)
        axes[0][0].legend(frameon=False, fontsize=8)
        fig.suptitle(f"Training step time, lower is better\n{subtitle('training')}", fontsize=9)
        fig.tight_layout()
        save(fig, "training_step.svg")

    # 2. inference latency vs ONNX Runtime: Tessera's time over ORT's, one bar per table row
    if "onnx" in data:
        rows = [r for r in data["onnx"]["data"]["rows"]
                if r["tessera"].get("runtime_ms") and r["ort"].get("median_ms")]
        fig, ax = plt.subplots(figsize=(6.0, 0.28 * len(rows) + 1.2))
        ys = list(range(len(rows)))[::-1]
        ratios = [r["tessera"]["runtime_ms"] / r["ort"]["median_ms"] for r in rows]
        ax.barh(ys, ratios, 0.7, color=[TESS if x <= 1 else REF for x in ratios])
        for y, r, x in zip(ys, rows, ratios):
            ax.text(x + 0.02, y, f"{fnum(r['tessera']['runtime_ms'])} / {fnum(r['ort']['median_ms'])} ms",
                    va="center", fontsize=7)
        ax.set_yticks(ys)
        ax.set_yticklabels([f"{r['case']}, batch {r['batch']}, {r['threads']} thr" for r in rows], fontsize=7)
        ax.axvline(1.0, color="black", linewidth=0.6)
        ax.set_xlim(0, max(ratios + [1.0]) * 1.45)
        ax.set_xlabel("Tessera time / ONNX Runtime time (below 1: Tessera is faster)")
        ax.set_title(f"Inference latency on the same ONNX files (bar labels: Tessera / ORT)\n{subtitle('onnx')}",
                     fontsize=9)
        fig.tight_layout()
        save(fig, "inference_vs_ort.svg")

    # 3. int8 speed-ups: weight-only at one row, and static int8
    panels = []
    if "quant" in data and data["quant"]["data"].get("kernels_f32"):
        panels.append("quant")
    if "ptq" in data:
        panels.append("ptq")
    if panels:
        fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.4), squeeze=False)
        for ax, p in zip(axes[0], panels):
            if p == "quant":
                shapes = quant_one_row(data["quant"]["data"])
                sh = "4096x4096" if "4096x4096" in shapes else max(
                    shapes, key=lambda k: int(k.split("x")[0]) * int(k.split("x")[1]))
                s = shapes[sh]
                variants = [v for v in ("int8", "int8/int8", "q8_0", "q8_0/int8", "q4_0", "q4_0/int8", "int4g32",
                                        "int4g32/int8") if v in s.get("variants", {})]
                tb = s["tessera_f32"][s["tessera_best"]]
                pb = s.get("torch_f32", {}).get(s.get("torch_best"))
                bars(ax, variants, [(f"vs Tessera's fastest f32, {s['tessera_best']}",
                                     [div(tb, s["variants"][v]) for v in variants]),
                                    (f"vs PyTorch's fastest f32, {s.get('torch_best')}",
                                     [div(pb, s["variants"][v]) for v in variants])], [TESS, REF],
                     "speed-up (f32 time / quantized time)")
                ax.tick_params(axis="x", labelsize=7, rotation=30)
                ax.set_title(f"Weight-only quantized product, one row, {sh} weight\n{subtitle('quant')}", fontsize=8)
            else:
                rows = data["ptq"]["data"]["rows"]
                groups, st, sp, so = [], [], [], []
                for r in rows:
                    for b in (1, 64):
                        groups.append(f"batch {b}\n{r['threads']} thr")
                        st.append(div(r["tessera"][f"us{b}_f32"], r["tessera"][f"us{b}_int8"]))
                        sp.append(div(r["torch"]["f32"][f"us_{b}"], r["torch"]["int8"][f"us_{b}"]))
                        so.append(div(r["ort_us"]["f32"][str(b)], r["ort_us"]["int8"][str(b)]))
                bars(ax, groups, [("Tessera", st), ("PyTorch", sp), ("ONNX Runtime", so)], [TESS, REF, REF2],
                     "speed-up (own f32 time / int8 time)")
                ax.tick_params(axis="x", labelsize=7)
                ax.set_title(f"Static int8 CNN against each runtime's own f32\n{subtitle('ptq')}", fontsize=8)
            ax.axhline(1.0, color="black", linewidth=0.6)
            ax.legend(frameon=False, fontsize=7)
        fig.suptitle("int8 speed-ups, higher is better", fontsize=9)
        fig.tight_layout()
        save(fig, "int8_speedups.svg")

    # 4. serving latency against throughput
    if "serve" in data:
        cv = [r for r in data["serve"]["data"]["records"] if r.get("test") == "curve"]
        if cv:
            fig, ax = plt.subplots(figsize=(5.6, 3.4))
            for model, color in (("mlp", TESS), ("cnn", REF)):
                rs = sorted((r for r in cv if r["model"] == model), key=lambda r: r["offered"])
                if not rs:
                    continue
                xs = [r["offered"] for r in rs]
                ax.plot(xs, [r["p50_ms"] for r in rs], "o--", color=color, label=f"{model} p50", markersize=3)
                ax.plot(xs, [r["p99_ms"] for r in rs], "o-", color=color, label=f"{model} p99", markersize=3)
            ax.set_yscale("log")
            ax.set_xlabel("offered requests per second (open loop)")
            ax.set_ylabel("latency, ms (log scale)")
            ax.legend(frameon=False, fontsize=8)
            ax.set_title(f"tessera serve: latency against throughput, JSON requests, batching on\n"
                         f"{subtitle('serve')}", fontsize=9)
            fig.tight_layout()
            save(fig, "serving_latency.svg")
    return written


# ---------------------------------------------------------------------------------
# the page


def render_page(data, out_md):
    L = ["# Benchmarks", "",
         "<!-- Generated by bench/report.py from docs/benchmarks/*.json: do not edit by hand. -->", "",
         "Every figure on this page was produced by one command, which builds the benchmark binaries (Release, "
         "`build-bench/`), trains the small models it needs, runs each area's compare script and rewrites this page "
         "and its charts:", "",
         "```sh",
         "scripts/setup.sh --bench                          # Debian: libtorch, PyTorch, matplotlib, onnx, wrk",
         "(cd bench/onnx_ort && npm ci --ignore-scripts)    # ONNX Runtime (onnxruntime-node, pinned)",
         "/usr/bin/python3 bench/report.py                  # every section (about 81 minutes on 2 cores)",
         "/usr/bin/python3 bench/report.py --section NAME   # one section; the others keep their results",
         "/usr/bin/python3 bench/report.py --quick          # smoke run into build-bench/report-quick/",
         "/usr/bin/python3 bench/report.py --render-only    # this page and the charts from the JSON files",
         "```", "",
         "Each section's results are kept with the machine, commit and date they were measured on in "
         "`docs/benchmarks/<section>.json`; a section that was not rerun keeps its own heading, so two sections may "
         "come from different CPUs. Compare only figures within one table: they were taken side by side in one run. "
         "Earlier runs are in git history.", "",
         "How to read the tables: a ratio \"Tessera / reference\" divides Tessera's figure by the reference's, in "
         "the row's unit, so for times and memory below 1 favours Tessera and for throughputs above 1 does; a "
         "speed-up is a time divided by a faster one. The reference runs in its best configuration on this machine "
         "(glibc malloc thresholds raised so buffers are not returned to the OS and re-faulted, OpenBLAS's core "
         "type detected rather than forced, thread counts set for OpenMP and OpenBLAS), with its default configuration beside it where the table says so. The machines are shared "
         "2-vCPU VMs: the same binary can vary by tens of percent from one minute to the next, so ratios within "
         "about 0.85-1.15 are parity.", ""]
    rows = []
    for name, title, _, _, _ in SECTIONS:
        if name in data:
            h = data[name]["header"]
            rows.append([f"[{title}](#{anchor(title)})", SHORT[name], short_machine(h), f"`{h['commit']}`",
                         h["date"][:10], f"{data[name]['wall_s']:.0f} s"])
        else:
            rows.append([title, SHORT[name], "not run yet", "", "", ""])
    L += table(["section", "what it measures", "CPU, best ISA", "commit", "date", "wall time"], rows,
               ["---", "---", "---", "---", "---", "---:"])
    total = sum(data[n]["wall_s"] for n in data)
    L += ["", f"Wall time of the sections above: {total / 60:.1f} min (each includes training the models it needed, "
              "when they were not already trained; the build is not included)."]
    for name, title, _, render, prose in SECTIONS:
        L += ["", f"## {title}", ""]
        if name not in data:
            L += ["Not run yet: `/usr/bin/python3 bench/report.py --section " + name + "`."]
            continue
        h = data[name]["header"]
        other = h.get("other_work_cpu_share")
        L += [prose.replace("\n", " "), ""]
        dirty = (f" plus uncommitted changes to {', '.join(h['uncommitted'][:6])}"
                 f"{' ...' if len(h['uncommitted']) > 6 else ''}" if h.get("uncommitted") else "")
        v = h.get("versions", {})
        L += [f"> **Measured on** {h['cpu']} ({h['cpu_id']}{', ' + h['uarch'] if h.get('uarch') else ''}), best ISA "
              f"**{h['isa']}** (flags: {h['isa_flags']}), {h['logical_cpus']} logical CPUs, kernel {h['kernel']}; "
              f"Tessera at commit `{h['commit']}`{dirty}, {h.get('build_type', 'Release')}; {h['date']}. PyTorch {v.get('torch')}"
              f"{', ONNX Runtime ' + v['onnxruntime'] if v.get('onnxruntime') and name in ('onnx', 'ptq') else ''}"
              f", oneDNN {v.get('onednn')}, {v.get('compiler')}. Section wall time {data[name]['wall_s']:.0f} s; "
              + (f"load average at start {h['load_at_start']:.2f}" if h.get("load_at_start") is not None
                 else "run by hand, then stored with `--from-json`")
              + f"{'' if other is None else f'; CPU time taken by other processes meanwhile {100 * other:.0f}%'}. "
              f"Command: `{data[name]['command']}`."]
        if other is not None and other > 0.05:
            L += ["", f"**Other work ran on the machine during this section**: other processes used "
                      f"{100 * other:.0f}% of its CPU time. The figures, above all the 2-thread ones, include that "
                      "interference; rerun the section on an idle machine before quoting them."]
        if name == "training":
            L += ["", "![Training step time](benchmarks/training_step.svg)"]
        try:
            L += render(data[name]["data"], h)
        except Exception as e:  # a section from an older script version: say so, keep the page
            L += ["", f"(could not render this section's results: {type(e).__name__}: {e})"]
    text = "\n".join(L) + "\n"
    with open(out_md, "w") as f:
        f.write(text)


def anchor(title):
    a = "".join(c for c in title.lower() if c.isalnum() or c in " -_").replace(" ", "-")
    return a


def load_sections(json_dir):
    data = {}
    for name in SECTION_NAMES:
        p = os.path.join(json_dir, name + ".json")
        if os.path.exists(p):
            data[name] = load_json(p)
    return data


# ---------------------------------------------------------------------------------


class Ctx:
    def __init__(self, args, build_dir, work, runs):
        self.args, self.build_dir, self.work, self.runs = args, build_dir, work, runs
        self.timeout = 1800 if not args.quick else 900

    def settings(self, name):
        return (QUICK if self.args.quick else FULL)[name]

    def tmp(self, name):
        return os.path.join(self.work, name)

    def log_path(self, name):
        return os.path.join(self.work, name + ".log")


def build_type_of(command):
    """The CMake build type of the folder a hand-run command names with --build-dir (default build-bench/)."""
    parts = command.split()
    folder = parts[parts.index("--build-dir") + 1] if "--build-dir" in parts[:-1] else "build-bench"
    try:
        with open(os.path.join(ROOT, folder, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("CMAKE_BUILD_TYPE:"):
                    return line.split("=", 1)[1].strip() or "Release"
    except OSError:
        pass
    return "Release"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--section", action="append", choices=SECTION_NAMES,
                    help="run only this section (repeatable); the others keep their stored results")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run with tiny settings; writes to build-bench/report-quick/ unless --out is given")
    ap.add_argument("--render-only", action="store_true", help="rewrite the page and charts from the stored JSON")
    ap.add_argument("--out", help="where the page goes: OUT/benchmarks.md, OUT/benchmarks/*.json and *.svg "
                                   "(default docs/, or build-bench/report-quick/ with --quick)")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build-bench"))
    ap.add_argument("--no-build", action="store_true", help="use the binaries already in --build-dir")
    ap.add_argument("--list", action="store_true", help="list the sections")
    ap.add_argument("--from-json", action="append", default=[], metavar="SECTION=FILE",
                    help="store a section from the JSON its compare script wrote when run by hand on this machine "
                         "and commit (with --from-command, how it was run), then render")
    ap.add_argument("--from-command", default="", help="the command that wrote the --from-json file")
    ap.add_argument("--from-wall", type=float, default=0, help="its wall time in seconds")
    args = ap.parse_args()
    if args.list:
        for name, title, *_ in SECTIONS:
            print(f"{name:9s} {title}: {SHORT[name]}")
        return 0
    build_dir = os.path.abspath(args.build_dir)
    out = os.path.abspath(args.out or (os.path.join(build_dir, "report-quick") if args.quick else os.path.join(ROOT, "docs")))
    json_dir = os.path.join(out, "benchmarks")
    os.makedirs(json_dir, exist_ok=True)
    md = os.path.join(out, "benchmarks.md")

    for spec in args.from_json:
        name, _, path = spec.partition("=")
        if name not in SECTION_NAMES or not os.path.exists(path):
            log(f"--from-json {spec}: expected SECTION=FILE with a section of --list and an existing file")
            return 2
        with open(path) as f:
            result = json.load(f)
        header = dict(cpu_header(), **code_state(), versions=versions(), load_at_start=None,
                      date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(os.path.getmtime(path))), quick=False,
                      build_type=build_type_of(args.from_command))
        doc = {"section": name, "header": header, "wall_s": args.from_wall, "command": args.from_command or "by hand",
               "settings": args.from_command, "data": repo_relative(result)}
        with open(os.path.join(json_dir, name + ".json"), "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
        log(f"stored {name} from {path}")
    if args.from_json:
        args.render_only = True
    if not args.render_only:
        names = args.section or SECTION_NAMES
        if os.path.realpath(sys.executable) != os.path.realpath(PY):
            log(f"note: running under {sys.executable}; the compare scripts use {PY} (Debian's, with torch)")
        if not args.no_build:
            build(build_dir)
        load = os.getloadavg()[0]
        if load > 0.7:
            log(f"warning: load average {load:.2f} at start: other work is running; figures will be noisy")
        work = os.path.join(build_dir, "report-work-quick" if args.quick else "report-work")
        os.makedirs(work, exist_ok=True)
        ctx = Ctx(args, build_dir, work, Runs(build_dir, args.quick))
        code, ver, cpu = code_state(), versions(), cpu_header()
        t_all = time.time()
        walls, failed = {}, []
        for name, title, runner, _, _ in SECTIONS:
            if name not in names:
                continue
            log(f"\n=== {name}: {title}")
            header = dict(cpu, **code, versions=ver, load_at_start=os.getloadavg()[0],
                          date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), quick=args.quick)
            t0 = time.time()
            c0 = cpu_counters()
            try:
                result = runner(ctx)
            except Exception as e:  # keep going: the other sections still run, this one keeps its old results
                walls[name] = time.time() - t0
                log(f"=== {name} FAILED after {walls[name]:.0f} s: {e}")
                failed.append(name)
                continue
            walls[name] = time.time() - t0
            header["other_work_cpu_share"] = round(other_work(c0, cpu_counters()), 3)
            settings = " ".join(ctx.settings(name))
            doc = {"section": name, "header": header, "wall_s": round(walls[name], 1),
                   "command": f"bench/report.py{' --quick' if args.quick else ''} --section {name}",
                   "settings": settings, "data": repo_relative(result)}
            with open(os.path.join(json_dir, name + ".json"), "w") as f:
                json.dump(doc, f, indent=1, sort_keys=True)
                f.write("\n")
            log(f"=== {name}: {walls[name]:.0f} s (log: {os.path.relpath(ctx.log_path(name), ROOT)})")
        total = time.time() - t_all
        log("\nwall time per section: " + ", ".join(f"{n} {w:.0f} s" for n, w in walls.items()) +
            f"; total {total:.0f} s ({total / 60:.1f} min)")
        if not args.section and not args.quick and total > BUDGET_S:
            log(f"warning: the full run took more than {BUDGET_S // 60} minutes: reduce the settings in FULL")
    else:
        failed = []

    data = load_sections(json_dir)
    files = charts(data, json_dir)
    render_page(data, md)
    log(f"wrote {os.path.relpath(md, ROOT)} and {len(files)} charts in {os.path.relpath(json_dir, ROOT)}/")
    if failed:
        log("failed sections (their stored results, if any, were kept): " + ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
