#!/usr/bin/python3
"""Quantized GPT inference, Tessera vs PyTorch, side by side.

    /usr/bin/python3 bench/quant_compare.py RUN_DIR [--threads 1] [--rounds 3] [--eval-batches 50] [--skip-kernels]

RUN_DIR is a `tessera train examples/configs/char_gpt.yaml` run (or one of its
checkpoints). The script runs, in one go:
  1. build-bench/bench/tessera_quant_bench kernels: each quantized format's
     matrix product against f32 at char-GPT and LLM-sized shapes;
  2. tessera_quant_bench gpt RUN_DIR: perplexity on the run's validation split
     and [1, 1] / [1, 128] forward latency, f32 and each format;
  3. PyTorch (Debian's 1.13, bench/train_torch.py's GPT) loaded with the same
     weights: f32 and torch.ao.quantization.quantize_dynamic (int8 weights per
     tensor, int8 activations per tensor) on the oneDNN engine, the same
     forwards, timed in alternating rounds with the same harness shape.
PyTorch runs in its best configuration here (bench/train_compare.py: malloc
thresholds raised). The tied lm_head stays f32 on both sides.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import time

from common import HERE, ROOT, cpu_model


def checkpoint_dir(arg):
    if os.path.exists(os.path.join(arg, "model.safetensors")):
        return arg
    d = os.path.join(arg, "checkpoints") if os.path.isdir(os.path.join(arg, "checkpoints")) else arg
    latest = os.path.join(d, "latest")  # a file naming the newest checkpoint
    if os.path.isfile(latest):
        return os.path.join(d, open(latest).read().strip())
    steps = sorted(x for x in os.listdir(d) if x.startswith("step-"))
    if not steps:
        sys.exit(f"no checkpoint under {arg}")
    return os.path.join(d, steps[-1])


def read_safetensors(path, torch):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if meta["dtype"] != "F32":
            sys.exit(f"{name}: dtype {meta['dtype']}, expected F32 (an f32 training checkpoint)")
        a, b = meta["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32).reshape(meta["shape"])
    return out


def time_call(f, budget):
    """Seconds per call of f: one warm-up call, then repeated for at least `budget` seconds."""
    f()
    reps, t0 = 0, time.perf_counter()
    while True:
        f()
        reps += 1
        t = time.perf_counter()
        if t - t0 >= budget:
            return (t - t0) / reps


def torch_side(ckpt, threads, rounds):
    """Runs in a child process with PyTorch's environment; prints one JSON line."""
    import torch
    sys.path.insert(0, HERE)
    from train_torch import GPT

    torch.set_num_threads(threads)
    state = json.load(open(os.path.join(ckpt, "state.json")))
    mc = state["config"]["model"]
    sd = read_safetensors(os.path.join(ckpt, "model.safetensors"), torch)
    sd = {k.removeprefix("transformer."): v for k, v in sd.items()}
    vocab = sd["wte.weight"].shape[0]
    model = GPT(vocab_size=vocab, block_size=mc["block_size"], n_layer=mc["n_layer"], n_head=mc["n_head"],
                n_embd=mc["n_embd"], bias=mc.get("bias", True))
    sd["lm_head.weight"] = sd["wte.weight"]

    def load(m):  # torch 1.13 has no fused attention: its causal mask buffers are not in the checkpoint
        r = m.load_state_dict(sd, strict=False)
        bad = [k for k in r.missing_keys if not k.endswith(".attn.mask")] + list(r.unexpected_keys)
        if bad:
            sys.exit(f"checkpoint does not fit bench/train_torch.py's GPT: {bad}")
        return m.eval()

    load(model)
    torch.backends.quantized.engine = "onednn"
    linears = {n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head"}
    qmodel = GPT(vocab_size=vocab, block_size=mc["block_size"], n_layer=mc["n_layer"], n_head=mc["n_head"],
                 n_embd=mc["n_embd"], bias=mc.get("bias", True))
    load(qmodel)
    qmodel = torch.ao.quantization.quantize_dynamic(
        qmodel, {n: torch.ao.quantization.default_dynamic_qconfig for n in linears}, dtype=torch.qint8)
    g = torch.Generator().manual_seed(0)
    one = torch.randint(0, vocab, (1, 1), generator=g)
    prompt = torch.randint(0, vocab, (1, 128), generator=g)

    res = {"f32": {"t1": [], "t128": []}, "dynamic_int8": {"t1": [], "t128": []}}
    with torch.inference_mode():
        diff = (qmodel(prompt) - model(prompt)).abs().max().item()
        for _ in range(rounds):
            for name, m in (("f32", model), ("dynamic_int8", qmodel)):
                res[name]["t1"].append(time_call(lambda: m(one), 0.2))
                res[name]["t128"].append(time_call(lambda: m(prompt), 0.3))
    med = lambda v: sorted(v)[len(v) // 2] * 1e6
    print(json.dumps({k: {"us_1": med(v["t1"]), "us_128": med(v["t128"])} for k, v in res.items()} |
                     {"max_logit_diff": diff, "torch": torch.__version__}))


# The shapes of tessera_quant_bench kernels (out x in), at one activation row.
KERNEL_SHAPES = ((384, 128), (128, 512), (4096, 4096), (11008, 4096))


def torch_kernels(threads, rounds):
    """PyTorch's f32 ways to multiply one row by a weight, and its dynamic int8
    Linear, at the kernel shapes (a child process with PyTorch's environment);
    prints one JSON line: {"OUTxIN": {"F.linear": us, ..., "best": path}}."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.backends.quantized.engine = "onednn"
    torch.manual_seed(1)
    out = {}
    with torch.inference_mode():
        for n, k in KERNEL_SHAPES:
            w = torch.randn(n, k) * 0.02
            wt = w.t().contiguous()
            x = torch.randn(1, k)
            lin = torch.nn.Linear(k, n, bias=False)
            lin.weight.data.copy_(w)
            qlin = torch.ao.nn.quantized.dynamic.Linear(k, n, bias_=False, dtype=torch.qint8)
            qlin.set_weight_bias(torch.quantize_per_tensor(w, float(w.abs().max()) / 127, 0, torch.qint8), None)
            paths = {"F.linear(x,W)": lambda: F.linear(x, w), "torch.mv(W,x)": lambda: torch.mv(w, x[0]),
                     "matmul(x,Wt)": lambda: torch.matmul(x, wt), "dynamic int8 Linear": lambda: qlin(x)}
            budget = 0.3 if n * k > 1e6 else 0.1
            times = {p: [] for p in paths}
            for _ in range(rounds):
                for p, f in paths.items():
                    times[p].append(time_call(f, budget))
            rec = {p: sorted(v)[len(v) // 2] * 1e6 for p, v in times.items()}
            f32 = {p: v for p, v in rec.items() if p != "dynamic int8 Linear"}
            rec["best_f32"] = min(f32, key=f32.get)
            out[f"{n}x{k}"] = rec
    print(json.dumps({"kernels": out, "torch": torch.__version__}))


def parse_results(text, tag):
    """The key=value fields of every 'RESULT <tag> ...' line."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[0] == "RESULT" and parts[1] == tag:
            rows.append(dict(p.split("=", 1) for p in parts[2:]))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--eval-batches", type=int, default=50)
    ap.add_argument("--skip-kernels", action="store_true")
    ap.add_argument("--json", help="write every figure (kernels, GPT, PyTorch) as JSON to this file")
    ap.add_argument("--torch-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--torch-kernels-child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_kernels_child:
        torch_kernels(a.threads, a.rounds)
        return
    ckpt = checkpoint_dir(a.run)
    if a.torch_child:
        torch_side(ckpt, a.threads, a.rounds)
        return
    binary = os.path.join(ROOT, "build-bench", "bench", "tessera_quant_bench")
    if not os.path.exists(binary):
        sys.exit(f"{binary} is missing: cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release "
                 "-DTESSERA_BUILD_TESTS=OFF && ninja -C build-bench tessera_quant_bench")
    cpu = cpu_model()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, CPU {cpu}, {os.cpu_count()} cores, "
          f"{a.threads} thread(s), {a.rounds} rounds")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    common = ["--threads", str(a.threads), "--rounds", str(a.rounds)]
    tenv = dict(env, MALLOC_MMAP_THRESHOLD_="1000000000", MALLOC_TRIM_THRESHOLD_="1000000000",
                OPENBLAS_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads))
    tenv.pop("OPENBLAS_CORETYPE", None)
    result = {"threads": a.threads, "rounds": a.rounds, "eval_batches": a.eval_batches, "checkpoint": ckpt}
    if not a.skip_kernels:
        print("\n## Matrix products (Tessera), us per call\n", flush=True)
        kout = subprocess.run([binary, "kernels"] + common, env=env, check=True, capture_output=True,
                              text=True).stdout
        print(kout)
        result["kernels"] = parse_results(kout, "kernel")
        result["kernels_f32"] = parse_results(kout, "kernel_f32")
        r = subprocess.run([sys.executable, __file__, "-", "--torch-kernels-child"] + common, env=tenv, check=True,
                           capture_output=True, text=True)
        result["torch_kernels"] = json.loads(r.stdout.strip().splitlines()[-1])["kernels"]
        print("## One row: PyTorch f32 paths and its dynamic int8 Linear, us per call\n")
        print(json.dumps(result["torch_kernels"], indent=1))
    print("\n## Char GPT (Tessera)\n", flush=True)
    out = subprocess.run([binary, "gpt", ckpt, "--eval-batches", str(a.eval_batches)] + common, env=env, check=True,
                         capture_output=True, text=True).stdout
    print(out)
    tess = {}
    for line in out.splitlines():
        if line.startswith("RESULT gpt"):
            kv = dict(p.split("=", 1) for p in line.split()[2:])
            tess[kv["variant"]] = kv
    r = subprocess.run([sys.executable, __file__, a.run, "--torch-child"] + common, env=tenv, check=True,
                       capture_output=True, text=True)
    t = json.loads(r.stdout.strip().splitlines()[-1])
    result["gpt"] = parse_results(out, "gpt")
    result["torch_gpt"] = t
    print(f"## Char GPT (PyTorch {t['torch']}, quantize_dynamic on oneDNN; max logit change {t['max_logit_diff']:.4f})\n")
    print("| forward | PyTorch f32 us | PyTorch dynamic int8 us | its speed-up | Tessera f32 us | Tessera int8/int8 us "
          "| Tessera q8_0/int8 us | Tessera int8/int8 / PyTorch dynamic |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for key, label in (("us_1", "[1, 1]"), ("us_128", "[1, 128]")):
        pf, pq = t["f32"][key], t["dynamic_int8"][key]
        tf, ti, tq = (float(tess[v][key]) for v in ("f32", "int8/int8", "q8_0/int8"))
        print(f"| {label} | {pf:.1f} | {pq:.1f} | {pf / pq:.2f}x | {tf:.1f} | {ti:.1f} | {tq:.1f} | {ti / pq:.2f}x |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
