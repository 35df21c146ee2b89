#!/usr/bin/python3
"""Static int8 (post-training quantization) of the Fashion-MNIST CNN: Tessera vs
PyTorch vs ONNX Runtime, side by side.

    /usr/bin/python3 bench/ptq_compare.py RUN_DIR [--threads 1 2] [--rounds 3] [--calibration-batches 16]
                                          [--observer minmax] [--dir /tmp/ptq_compare]

RUN_DIR is a `tessera train examples/configs/fashion_mnist_cnn.yaml` run (or one
of its checkpoints). For each thread count, in one go:
  1. build-bench/bench/tessera_quant_bench cnn RUN_DIR --export DIR: Tessera's
     PTQ (calibrated on the first B training batches of 64), accuracy on the
     10,000 test images, batch-1 and batch-64 latency of the compiled f32 graph
     and of the int8 graph; it writes the int8 graph as QDQ ONNX (int8.onnx),
     the f32 graph (f32.onnx), the calibration images and the test split;
  2. PyTorch (Debian's 1.13) with the same weights: f32 and eager-mode static
     quantization on its oneDNN engine (conv+relu / linear+relu fused, the
     engine's default qconfig: histogram observer for activations, per-channel
     weights), calibrated on the same images, the same forwards timed;
  3. ONNX Runtime (bench/onnx_ort, onnxruntime-node) on Tessera's int8.onnx
     (which it fuses into QLinearConv / QGemm) and f32.onnx: accuracy on the
     test split, and the same two latencies (median of its runs).
Each side runs in its own process with OMP_NUM_THREADS=T; PyTorch with glibc's
malloc thresholds raised (its best configuration here, bench/train_compare.py).
"""
import argparse
import json
import os
import subprocess
import sys
import time

from common import HERE, ROOT, cpu_model

sys.path.insert(0, HERE)


def torch_side(run, export_dir, threads, rounds):
    """Runs in a child process; prints one JSON line."""
    import copy
    import numpy as np
    import torch
    from quant_compare import checkpoint_dir, read_safetensors, time_call
    from train_torch import make_cnn

    torch.set_num_threads(threads)
    ckpt = checkpoint_dir(run)
    sd = read_safetensors(os.path.join(ckpt, "model.safetensors"), torch)
    names = {"features.0": "0", "features.3": "3", "classifier.0": "7", "classifier.3": "10"}
    model = make_cnn()
    model.load_state_dict({names[k.rsplit(".", 1)[0]] + "." + k.rsplit(".", 1)[1]: v for k, v in sd.items()})
    model.eval()
    torch.backends.quantized.engine = "onednn"
    q = copy.deepcopy(model)
    torch.ao.quantization.fuse_modules(q, [["0", "1"], ["3", "4"], ["7", "8"]], inplace=True)
    q = torch.nn.Sequential(torch.ao.quantization.QuantStub(), q, torch.ao.quantization.DeQuantStub()).eval()
    q.qconfig = torch.ao.quantization.get_default_qconfig("onednn")
    torch.ao.quantization.prepare(q, inplace=True)
    calib = torch.from_numpy(np.load(os.path.join(export_dir, "calib_x.npy")))
    with torch.inference_mode():
        for b in calib.split(64):
            q(b)
    torch.ao.quantization.convert(q, inplace=True)
    x = torch.from_numpy(np.load(os.path.join(export_dir, "eval_x.npy")))
    y = torch.from_numpy(np.load(os.path.join(export_dir, "eval_y.npy")))

    def accuracy(m):
        with torch.inference_mode():
            right = sum((m(b).argmax(1) == t).sum().item() for b, t in zip(x.split(500), y.split(500)))
        return 100.0 * right / len(y)

    x1, x64 = x[:1].contiguous(), x[:64].contiguous()
    res = {"f32": {"t1": [], "t64": []}, "int8": {"t1": [], "t64": []}}
    with torch.inference_mode():
        for _ in range(rounds):
            for name, m in (("f32", model), ("int8", q)):
                res[name]["t1"].append(time_call(lambda: m(x1), 0.3))
                res[name]["t64"].append(time_call(lambda: m(x64), 0.5))
    med = lambda v: sorted(v)[len(v) // 2] * 1e6
    out = {k: {"us_1": med(v["t1"]), "us_64": med(v["t64"])} for k, v in res.items()}
    out["f32"]["acc"] = accuracy(model)
    out["int8"]["acc"] = accuracy(q)
    out["torch"] = torch.__version__
    print(json.dumps(out))


def ort(export_dir, model, x, threads, iters, save=None, ref=None):
    cmd = ["node", os.path.join(HERE, "onnx_ort", "ort_run.js"), "--model", os.path.join(export_dir, model),
           "--input", os.path.join(export_dir, x), "--threads", str(threads), "--iters", str(iters), "--warmup", "5"]
    if save:
        cmd += ["--save-output", save]
    if ref:
        cmd += ["--ref", ref]
    r = subprocess.run(cmd, check=True, capture_output=True, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    return json.loads(r.stdout.strip().splitlines()[-1])


def ort_accuracy(export_dir, model, threads):
    import numpy as np
    out = os.path.join(export_dir, "ort_" + model + ".npy")
    ort(export_dir, model, "eval_x.npy", threads, 1, save=out)
    pred = np.load(out).argmax(1)
    return 100.0 * float((pred == np.load(os.path.join(export_dir, "eval_y.npy"))).mean())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calibration-batches", type=int, default=16)
    ap.add_argument("--observer", default="minmax")
    ap.add_argument("--dir", default="/tmp/ptq_compare")
    ap.add_argument("--json", help="write every side's figures as JSON to this file")
    ap.add_argument("--torch-child", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_child:
        torch_side(a.run, a.dir, a.torch_child, a.rounds)
        return
    binary = os.path.join(ROOT, "build-bench", "bench", "tessera_quant_bench")
    if not os.path.exists(binary):
        sys.exit(f"{binary} is missing: cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release "
                 "-DTESSERA_BUILD_TESTS=OFF && ninja -C build-bench tessera_quant_bench")
    if not os.path.isdir(os.path.join(HERE, "onnx_ort", "node_modules")):
        sys.exit("ONNX Runtime is missing: (cd bench/onnx_ort && npm ci --ignore-scripts)")
    cpu = cpu_model()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, CPU {cpu}, {os.cpu_count()} cores, "
          f"{a.rounds} rounds, {a.calibration_batches} calibration batches of 64, observer {a.observer}")
    rows = []
    for t in a.threads:
        env = dict(os.environ, OMP_NUM_THREADS=str(t))
        out = subprocess.run([binary, "cnn", a.run, "--threads", str(t), "--rounds", str(a.rounds),
                              "--calibration-batches", str(a.calibration_batches), "--observer", a.observer,
                              "--export", a.dir], env=env, check=True, capture_output=True, text=True).stdout
        if t == a.threads[0]:
            print("\n" + out)
        kv = next(dict(p.split("=", 1) for p in l.split()[2:]) for l in out.splitlines() if l.startswith("RESULT cnn"))
        tess = {k: float(v) for k, v in kv.items() if k != "observer"}
        tenv = dict(env, MALLOC_MMAP_THRESHOLD_="1000000000", MALLOC_TRIM_THRESHOLD_="1000000000",
                    OPENBLAS_NUM_THREADS=str(t), MKL_NUM_THREADS=str(t))
        r = subprocess.run([sys.executable, __file__, a.run, "--dir", a.dir, "--rounds", str(a.rounds),
                            "--torch-child", str(t)], env=tenv, check=True, capture_output=True, text=True)
        pt = json.loads(r.stdout.strip().splitlines()[-1])
        o = {m: {b: ort(a.dir, m + ".onnx", f"x{b}.npy", t, 50 if b == 1 else 20)["median_ms"] * 1e3 for b in (1, 64)}
             for m in ("f32", "int8")}
        o_acc = {m: ort_accuracy(a.dir, m + ".onnx", t) for m in ("f32", "int8")}
        # ORT's int8 logits against Tessera's int8 graph's on the batch-64 input.
        chk = ort(a.dir, "int8.onnx", "x64.npy", t, 1, ref=os.path.join(a.dir, "y64_int8.npy"))
        if chk["max_abs_diff"] > 0.05 * chk["ref_max_abs"]:
            sys.exit(f"ORT's int8 logits differ from Tessera's by {chk['max_abs_diff']:.4f} "
                     f"(logits up to {chk['ref_max_abs']:.2f})")
        o_acc["diff"] = chk["max_abs_diff"]
        rows.append((t, tess, pt, o, o_acc))
    print(f"## Fashion-MNIST CNN, static int8 (PyTorch {rows[0][2]['torch']} on oneDNN, ONNX Runtime on the QDQ file)\n")
    print("| threads | | Tessera f32 | Tessera int8 | PyTorch f32 | PyTorch int8 | ORT f32 | ORT int8 (QDQ) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for t, ts, pt, o, oa in rows:
        print(f"| {t} | accuracy % | {ts['acc_f32']:.2f} | {ts['acc_int8']:.2f} | {pt['f32']['acc']:.2f} | "
              f"{pt['int8']['acc']:.2f} | {oa['f32']:.2f} | {oa['int8']:.2f} |")
        for b in (1, 64):
            print(f"| {t} | batch {b} us | {ts[f'us{b}_f32']:.1f} | {ts[f'us{b}_int8']:.1f} | {pt['f32'][f'us_{b}']:.1f} | "
                  f"{pt['int8'][f'us_{b}']:.1f} | {o['f32'][b]:.1f} | {o['int8'][b]:.1f} |")
    print("\nmax |ORT int8 logits - Tessera int8 logits| on the batch-64 input: " +
          ", ".join(f"{r[4]['diff']:.4f} ({r[0]} thread{'s' if r[0] > 1 else ''})" for r in rows))
    print("\n| threads | batch | Tessera int8 / its f32 | PyTorch int8 / its f32 | Tessera int8 / PyTorch int8 "
          "| Tessera int8 / ORT int8 |")
    print("|---|---|---:|---:|---:|---:|")
    for t, ts, pt, o, oa in rows:
        for b in (1, 64):
            ti = ts[f"us{b}_int8"]
            print(f"| {t} | {b} | {ti / ts[f'us{b}_f32']:.2f} | {pt['int8'][f'us_{b}'] / pt['f32'][f'us_{b}']:.2f} | "
                  f"{ti / pt['int8'][f'us_{b}']:.2f} | {ti / o['int8'][b]:.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rounds": a.rounds, "calibration_batches": a.calibration_batches, "observer": a.observer,
                       "torch": rows[0][2]["torch"],
                       "rows": [{"threads": t, "tessera": ts, "torch": pt,
                                 "ort_us": {m: {str(b): v for b, v in d.items()} for m, d in o.items()},
                                 "ort_acc": {"f32": oa["f32"], "int8": oa["int8"]}, "ort_int8_max_diff": oa["diff"]}
                                for t, ts, pt, o, oa in rows]}, f, indent=1)


if __name__ == "__main__":
    main()
