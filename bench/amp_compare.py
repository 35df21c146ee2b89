#!/usr/bin/python3
"""Mixed precision and gradient checkpointing, Tessera vs PyTorch, side by side.

    /usr/bin/python3 bench/amp_compare.py                      # both parts, markdown to stdout
    /usr/bin/python3 bench/amp_compare.py --part precision --markdown out.md
    /usr/bin/python3 bench/amp_compare.py --part checkpoint --layers 6,12 --checkpoint-rounds 1

precision:  the GPT case (6 layers, d 384, ctx 256, batch 8, AdamW) in f32 and in
            bf16 autocast -- Tessera (autocast::Guard) and PyTorch
            (torch.autocast('cpu', torch.bfloat16)) -- at 1 and 2 threads.
checkpoint: the GPT at 6, 12 and 24 layers without checkpointing, with
            round(sqrt(layers)) segments (checkpoint_sequential) and, for Tessera,
            every block checkpointed; step time and the memory the steps add on
            top of the built model ("step_rss_mib", resident set, measured the same
            way in both), plus Tessera's peak of live tensor bytes.

Both sides are the training-step benchmarks of bench/train_compare.py
(build-bench/bench/tessera_train_bench, bench/train_torch.py), each run as its
own process with PyTorch in its best environment (PLATFORM.md). The precision
configurations take turns --rounds times and each keeps its median round (every
round is in the JSON); a checkpointing configuration keeps its best of
--checkpoint-rounds. Standard library only.
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_compare as tc  # noqa: E402
from common import cpu_flags, cpu_simd, log  # noqa: E402

TESSERA = os.path.join(tc.ROOT, "build-bench", "bench", "tessera_train_bench")


def run(impl, threads, args, steps, warmup, timeout=3600):
    if impl == "tessera":
        cmd = [TESSERA, "--case", "gpt", "--steps", str(steps), "--warmup", str(warmup), "--threads", str(threads)]
        env = tc.env_for("tessera", threads, os.environ)
    else:
        cmd = ["/usr/bin/python3", tc.TORCH_SCRIPT, "--case", "gpt", "--steps", str(steps), "--warmup",
               str(warmup), "--threads", str(threads)]
        env = tc.env_for("torch_best", threads, os.environ)
    cmd += args
    rec = tc.run_one(cmd, env, timeout)
    log(impl, threads, " ".join(args), "->", rec.get("ms_per_step", rec.get("error")),
           "ms", rec.get("step_rss_mib", ""), "MiB")
    return rec


def best_of(rounds, *a, **k):
    best = None
    for _ in range(rounds):
        best = tc.better(best, run(*a, **k))
    return best


def ratio(a, b):
    return a / b if a and b else None


def f_ratio(r):
    return f"{r:.2f}x" if r is not None else "n/a"


def precision_part(rounds, steps, warmup, threads_list, torch_bf16):
    """Returns (markdown, rows). PyTorch's bf16 runs only when torch_bf16 is true."""
    rows = []
    for threads in threads_list:
        # The four configurations take turns, `rounds` times (the order
        # reversed every other round); each keeps its median round.
        configs = [(impl, prec) for impl in ("tessera", "torch") for prec in ("f32", "bf16")
                   if not (impl == "torch" and prec == "bf16" and not torch_bf16)]
        recs = {c: [] for c in configs}
        for rnd in range(rounds):
            for impl, prec in (configs if rnd % 2 == 0 else configs[::-1]):
                recs[impl, prec].append(run(impl, threads, ["--precision", prec], steps, warmup))
        r = {c: tc.median_of_rounds(v, ("ms_per_step",)) for c, v in recs.items()}
        if not torch_bf16:
            r["torch", "bf16"] = {"error": "not run: no native bf16 kernels for PyTorch on this CPU"}
        rows.append({"threads": threads, "tessera_f32": r["tessera", "f32"], "tessera_bf16": r["tessera", "bf16"],
                     "torch_f32": r["torch", "f32"], "torch_bf16": r["torch", "bf16"]})
    out = ["| threads | Tessera f32 ms | Tessera bf16 ms | bf16/f32 | PyTorch f32 ms | PyTorch bf16 ms | "
           "bf16/f32 | Tessera bf16 / PyTorch bf16 |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        t32, t16 = tc.get(row["tessera_f32"], "ms_per_step"), tc.get(row["tessera_bf16"], "ms_per_step")
        p32, p16 = tc.get(row["torch_f32"], "ms_per_step"), tc.get(row["torch_bf16"], "ms_per_step")
        out.append(f"| {row['threads']} | {tc.f_ms(t32)} | {tc.f_ms(t16)} | {f_ratio(ratio(t16, t32))} | "
                   f"{tc.f_ms(p32)} | {tc.f_ms(p16)} | {f_ratio(ratio(p16, p32))} | **{f_ratio(ratio(t16, p16))}** |")
    return "\n".join(out), rows


def checkpoint_part(rounds, layers_list, threads, steps, warmup):
    """Returns (markdown, rows)."""
    out = ["| layers | mode | Tessera ms | Tessera step MiB | Tessera peak tensors MiB | PyTorch ms | "
           "PyTorch step MiB | Tessera/PyTorch memory |", "|---|---|---|---|---|---|---|---|"]
    summary, rows = [], []
    for layers in layers_list:
        seg = max(1, round(math.sqrt(layers)))
        modes = [("none", -1), (f"sqrt: {seg} segments", seg), ("every block", 0)]
        base = {}
        for label, ck in modes:
            args = ["--layers", str(layers), "--checkpoint", str(ck)]
            t = best_of(rounds, "tessera", threads, args, steps, warmup)
            # PyTorch's checkpoint_sequential has no every-block mode in bench/train_torch.py.
            p = best_of(rounds, "torch", threads, args, steps, warmup) if ck != 0 else None
            rows.append({"layers": layers, "mode": label, "checkpoint": ck, "segments": seg if ck > 0 else None,
                         "tessera": t, "torch": p})
            tm, tmem = tc.get(t, "ms_per_step"), tc.get(t, "step_rss_mib")
            pm, pmem = tc.get(p, "ms_per_step"), tc.get(p, "step_rss_mib")
            if ck == -1:
                base = {"t_ms": tm, "t_mem": tmem, "t_peak": tc.get(t, "peak_tensor_mib")}
            out.append(f"| {layers} | {label} | {tc.f_ms(tm)} | {tc.f_mib(tmem)} | "
                       f"{tc.f_mib(tc.get(t, 'peak_tensor_mib'))} | {tc.f_ms(pm)} | {tc.f_mib(pmem)} | "
                       f"**{f_ratio(ratio(tmem, pmem))}** |")
            if ck != -1 and tm and base.get("t_ms") and tmem and base.get("t_mem") and base.get("t_peak"):
                summary.append(f"- {layers} layers, {label}: Tessera step time {tm / base['t_ms']:.2f}x of "
                               f"no checkpointing, step memory {tmem / base['t_mem']:.2f}x, peak tensor bytes "
                               f"{tc.get(t, 'peak_tensor_mib') / base['t_peak']:.2f}x")
    return "\n".join(out) + "\n\n" + "\n".join(summary), rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("precision", "checkpoint", "both"), default="both")
    ap.add_argument("--rounds", type=int, default=3,
                    help="precision part: the configurations alternate this many times, each keeps its median")
    ap.add_argument("--checkpoint-rounds", type=int, default=1,
                    help="checkpointing part: runs per configuration, the best kept (default 1)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--layers", default="6,12,24")
    ap.add_argument("--threads", type=int, default=2, help="threads for the checkpoint part")
    ap.add_argument("--precision-threads", default="1,2", help="thread counts for the precision part")
    ap.add_argument("--torch-bf16", choices=("auto", "yes", "no"), default="auto",
                    help="run PyTorch's bf16 step: auto = only on a CPU with avx512_bf16 (elsewhere PyTorch "
                         "1.13 has no native bf16 kernels and the comparison says nothing)")
    ap.add_argument("--markdown", help="also write the tables to this file")
    ap.add_argument("--json", help="write the results as JSON to this file")
    args = ap.parse_args()
    if not os.path.exists(TESSERA):
        sys.exit(f"{TESSERA} is missing: build with cmake -B build-bench -DCMAKE_BUILD_TYPE=Release "
                 "-DTESSERA_BUILD_BENCH=ON && ninja -C build-bench")
    model, flags = cpu_simd()
    native_bf16 = "avx512_bf16" in cpu_flags()
    torch_bf16 = args.torch_bf16 == "yes" or (args.torch_bf16 == "auto" and native_bf16)
    text = [f"CPU: {model} ({flags}); torch {tc.torch_version('/usr/bin/python3')}"]
    result = {"cpu_avx512_bf16": native_bf16, "torch_bf16_run": torch_bf16,
              "settings": {"rounds": args.rounds, "checkpoint_rounds": args.checkpoint_rounds, "steps": args.steps,
                           "warmup": args.warmup}}
    if args.part in ("precision", "both"):
        pthreads = [int(x) for x in args.precision_threads.split(",") if x]
        md, rows = precision_part(args.rounds, args.steps, args.warmup, pthreads, torch_bf16)
        text += ["", "### bf16 autocast vs f32 (GPT 6L, ms per training step)", "", md]
        if not torch_bf16:
            text += ["", "PyTorch's bf16 step was not run: this CPU has no avx512_bf16, where PyTorch 1.13 "
                     "runs bf16 matrix products through a slow reference path."]
        result["precision"] = rows
    if args.part in ("checkpoint", "both"):
        layers = [int(x) for x in args.layers.split(",")]
        md, rows = checkpoint_part(args.checkpoint_rounds, layers, args.threads, args.steps, args.warmup)
        text += ["", f"### Gradient checkpointing (GPT d 384, ctx 256, batch 8, {args.threads} threads)", "", md]
        result["checkpoint"] = {"threads": args.threads, "rows": rows}
    md = "\n".join(text) + "\n"
    print(md)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(md)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
