#!/usr/bin/python3
"""Tessera's LLM engine against llama.cpp built natively from source
(bench/build_llama_cpp.sh: CPU only, Release, GGML_NATIVE) on the same GGUF
files, threads and token counts.

    /usr/bin/python3 bench/llm_compare.py [--build-dir build-bench] [--rounds 3] [--repeat 3]
        [--tiers native,avx2] [--llama-cpp-bin DIR] [--json out.json]

The files: random-weight Llama models shaped like a 110M model (width 768, 12
layers, 12 heads, feed-forward 2048, llama.cpp's 32,000-piece SentencePiece
vocabulary) written by `tessera_llm_bench make-model` in F16, Q8_0, Q4_0 and
Q4_K (as `tessera quantize-gguf` writes it: the output matrix in Q6_K), and
the same F16 weights quantized by llama.cpp's own llama-quantize to Q8_0, Q4_0
and Q4_K_M; and the fortunes models Tessera trained (scripts/fortunes_models.sh)
that the cache holds, in Q8_0 and F16. Cached under $TESSERA_CACHE/llm-bench
(default ~/.cache/tessera) with their sha256.

The measures, each side's own tool in its default configuration, the same
threads (one process per measurement, the two alternated, the median of the
rounds; within a process, as llama-bench does: a warm-up, then --repeat timed
runs, their mean tokens/s):
  prefill  512 prompt tokens, 2 threads          llama-bench -p 512 -n 0
  decode   128 tokens one at a time, 1 and 2     llama-bench -p 0 -n 128
  batch    4 and 16 sequences, 8-token prompts,  llama-batched-bench -npp 8 -ntg 128 -npl N (S_TG)
           then 128 steps, 2 threads: aggregate decode tokens/s
  read     a streaming read of as many bytes as a decoded token's weights, 1 and 2 threads
           (tessera_llm_bench run --measure bandwidth): the bound decode works against
And perplexity: `tessera perplexity` against llama-perplexity on the Tessera-written F16, Q8_0 and Q4_0
files, the first 200 KB of Debian's fortunes, -c 512 (256 for the fortunes models, the context
they were trained on), 8 chunks, 2 threads.
Tiers: `native` (Tessera's best kernels, llama.cpp's GGML_NATIVE build) and,
on a CPU with AVX-512, `avx2` (TESSERA_CPU_CAPABILITY=avx2 against llama.cpp
built with AVX-512 off: bench/build_llama_cpp.sh --avx2).
"""
import argparse
import json
import os
import statistics
import subprocess

from common import CACHE, ROOT, NODE_LLAMA_CPP, cpu_flags, cpu_model, llama_cpp, log, pinned, run_json, sha256

TYPES = ["F16", "Q8_0", "Q4_0", "Q4_K"]
LLAMA_QUANTIZE = {"Q8_0": "Q8_0", "Q4_0": "Q4_0", "Q4_K": "Q4_K_M"}  # our name: llama-quantize's type
# (measure, threads, tokens, sequences)
CASES = [("prefill", 2, 512, 1), ("decode", 1, 128, 1), ("decode", 2, 128, 1), ("batch", 2, 128, 4),
         ("batch", 2, 128, 16)]


def target(measure, threads, seqs, wtype):
    """The issue's targets, Tessera / llama.cpp (None: reported, no target)."""
    if measure == "prefill":
        return 1.0
    if measure == "decode" and threads == 1:
        return 1.1 if wtype in ("Q4_0", "Q8_0") else 1.0
    if measure == "batch" and seqs == 16:
        return 1.2
    return None


def models(bench, bins, types, quick):
    out = {}
    d = os.path.join(CACHE, "llm-bench")
    os.makedirs(d, exist_ok=True)
    vocab = os.path.join(CACHE, f"llama.cpp-{NODE_LLAMA_CPP}", "models", "ggml-vocab-llama-spm.gguf")
    for t in types:
        path = os.path.join(d, f"random-110M-{t}.gguf")
        if not os.path.exists(path):
            log(f"writing {path}")
            subprocess.run([bench, "make-model", "--size", "M", "--type", t, "--vocab", vocab, "--out", path,
                            "--seed", "1"], check=True)
        out[f"110M {t}"] = {"path": path, "type": t, "writer": "Tessera", "spread": 20000}
    if not quick:
        f16 = out.get("110M F16", {}).get("path")
        for t in types:
            if t not in LLAMA_QUANTIZE or not f16:
                continue
            path = os.path.join(d, f"random-110M-llamaq-{LLAMA_QUANTIZE[t]}.gguf")
            if not os.path.exists(path):
                log(f"writing {path} with llama-quantize")
                subprocess.run([os.path.join(bins, "llama-quantize"), f16, path, LLAMA_QUANTIZE[t]], check=True,
                               capture_output=True)
            out[f"110M {LLAMA_QUANTIZE[t]} (llama-quantize)"] = {"path": path, "type": t, "writer": "llama-quantize",
                                                                 "spread": 20000}
        for t in ("Q8_0", "F16"):
            path = os.path.join(CACHE, "fortunes", "models", f"fortunes-20m-{t}.gguf")
            if os.path.exists(path):
                out[f"fortunes 20M {t}"] = {"path": path, "type": t, "writer": "Tessera", "spread": 7900,
                                            "context": 256}  # the context it was trained on
    for m in out.values():
        m["sha256"], m["bytes"] = sha256(m["path"]), os.path.getsize(m["path"])
    return out


def tessera_cmd(bench, m, measure, threads, tokens, seqs, repeat):
    return pinned(threads) + [bench, "run", "--model", m["path"], "--threads", str(threads), "--measure", measure, "--tokens",
            str(tokens), "--seqs", str(seqs), "--ctx", "256" if measure == "batch" else "1024", "--repeat",
            str(repeat), "--spread", str(m["spread"])]


def llama_run(bins, m, measure, threads, tokens, seqs, repeat):
    """llama.cpp's tokens/s for one measure (the mean over its timed runs)."""
    if measure in ("prefill", "decode"):
        p, n = (tokens, 0) if measure == "prefill" else (0, tokens)
        out = subprocess.run(pinned(threads) + [os.path.join(bins, "llama-bench"), "-m", m["path"], "-t", str(threads), "-p", str(p),
                              "-n", str(n), "-r", str(repeat), "-o", "json"], check=True, capture_output=True,
                             text=True, timeout=1200).stdout
        r = json.loads(out)[0]
        return r["avg_ts"], r
    # llama-batched-bench runs once per process after its own warm-up: repeat it.
    cells = -(-seqs * (8 + tokens) // 256) * 256
    speeds = []
    cmd = [os.path.join(bins, "llama-batched-bench"), "-m", m["path"], "-t", str(threads), "-tb", str(threads), "-c",
           str(cells), "-b", "2048", "-ub", "512", "-npp", "8", "-ntg", str(tokens), "-npl", str(seqs),
           "--output-format", "jsonl"]
    failures = 0
    while len(speeds) < repeat:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
        text = out.stdout + out.stderr
        line = next((l for l in text.splitlines() if l.startswith("{") and "speed_tg" in l), None)
        if line is None:  # at times it exits 0 without its result (seen on the 20M F16 file): said, run again
            log(f"llama-batched-bench gave no result (exit {out.returncode}): {text[-600:]}; running it again")
            failures += 1
            if failures == 3:
                raise RuntimeError(f"llama-batched-bench failed 3 times: {' '.join(cmd)}")
            continue
        r = json.loads(line)
        speeds.append(r["speed_tg"])
    return statistics.mean(speeds), r


PPL_CTX, PPL_CHUNKS = 512, 8


def perplexity_text():
    """Debian's fortunes, the first 200 KB, as one text file (the same for both sides)."""
    path = os.path.join(CACHE, "llm-bench", "fortunes-200k.txt")
    if not os.path.exists(path):
        d = "/usr/share/games/fortunes"
        text = ""
        for name in sorted(os.listdir(d)):
            p = os.path.join(d, name)
            if os.path.isfile(p) and not name.endswith(".dat") and not os.path.islink(p):
                with open(p, encoding="utf-8", errors="replace") as f:
                    text += f.read()
            if len(text) > 200_000:
                break
        with open(path, "w") as f:
            f.write(text[:200_000])
    return path


def final_estimate(text):
    for line in text.splitlines():
        if "Final estimate: PPL = " in line:
            return float(line.split("PPL = ")[1].split()[0])
    raise RuntimeError("no 'Final estimate' in:\n" + text[-2000:])


def perplexities(cli, bins, ms):
    """`tessera perplexity` against llama-perplexity: same file, text, context, chunks, threads."""
    text = perplexity_text()
    rows = []
    for name, m in ms.items():
        if m["writer"] != "Tessera" or m["type"] not in ("F16", "Q8_0", "Q4_0"):
            continue
        ctx = m.get("context", PPL_CTX)
        args = ["-f", text, "-c", str(ctx), "--chunks", str(PPL_CHUNKS), "-t", "2"]
        ours = subprocess.run([cli, "perplexity", m["path"], *args], check=True, capture_output=True, text=True,
                              timeout=1800)
        theirs = subprocess.run([os.path.join(bins, "llama-perplexity"), "-m", m["path"], *args, "-b", "512"],
                                check=True, capture_output=True, text=True, timeout=1800)
        row = {"model": name, "context": ctx, "tessera": final_estimate(ours.stdout),
               "llama": final_estimate(theirs.stdout + theirs.stderr)}
        log(f"perplexity {name}: Tessera {row['tessera']:.4f}, llama-perplexity {row['llama']:.4f}")
        rows.append(row)
    return {"context": PPL_CTX, "chunks": PPL_CHUNKS, "text": "the first 200 KB of Debian's fortunes", "rows": rows}


def run_tier(tier, bench, bins, info, ms, rounds, repeat):
    env = dict(os.environ)
    if tier == "avx2":
        env["TESSERA_CPU_CAPABILITY"] = "avx2"
    results, reads, meta = {}, {}, {}
    for rnd in range(rounds):
        for name, m in ms.items():
            for threads in (1, 2):
                r = run_json(pinned(threads) + [bench, "run", "--model", m["path"], "--threads", str(threads),
                              "--measure", "bandwidth"],
                             env=env)
                reads.setdefault((name, threads), []).append(r["gb_per_s"])
            for case in CASES:
                measure, threads, tokens, seqs = case
                key = (name, case)
                sides = [("tessera", lambda: run_json(tessera_cmd(bench, m, *case, repeat), env=env)),
                         ("llama.cpp", lambda: llama_run(bins, m, *case, repeat))]
                if rnd % 2:
                    sides.reverse()
                for side, fn in sides:
                    if side == "tessera":
                        r = fn()
                        tps = r["tokens_per_s"]
                        meta[name] = r
                    else:
                        tps, _ = fn()
                    results.setdefault(key, {}).setdefault(side, []).append(tps)
                    log(f"{tier} round {rnd + 1} {name} {measure} {threads}t x{seqs}: {side} {tps:.1f} tokens/s")
    rows = []
    for name, m in ms.items():
        for case in CASES:
            measure, threads, tokens, seqs = case
            runs = results[(name, case)]
            med = {s: statistics.median(v) for s, v in runs.items()}
            row = {"model": name, "type": m["type"], "writer": m["writer"], "measure": measure, "threads": threads,
                   "tokens": tokens, "sequences": seqs, "tessera_tps": med["tessera"], "llama_tps": med["llama.cpp"],
                   "tessera_rounds": runs["tessera"], "llama_rounds": runs["llama.cpp"],
                   "target": target(measure, threads, seqs, m["type"])}
            if measure == "decode":
                wb = meta[name]["weight_bytes_per_token"]
                row["weight_bytes_per_token"] = wb
                row["tessera_gbps"] = med["tessera"] * wb / 1e9
                row["llama_gbps"] = med["llama.cpp"] * wb / 1e9
                row["read_gbps"] = statistics.median(reads[(name, threads)])
            rows.append(row)
            ratio = med["tessera"] / med["llama.cpp"]
            print(f"{tier} {name} {measure} {threads}t x{seqs}: Tessera {med['tessera']:.1f}, llama.cpp "
                  f"{med['llama.cpp']:.1f} tokens/s, {ratio:.2f}x" +
                  (f" (target {row['target']})" if row["target"] else ""), flush=True)
    return {"tier": tier, "llama_cpp": info, "rows": rows,
            "kv_bytes_per_token": {n: r["kv_bytes_per_token"] for n, r in meta.items()}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build-bench"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per process (llama-bench's -r)")
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--tiers", help="native and/or avx2 (default: both where the CPU has AVX-512)")
    ap.add_argument("--llama-cpp-bin", help="a folder with llama-bench, llama-batched-bench and llama-quantize of "
                                            "your own build (native tier only)")
    ap.add_argument("--quick", action="store_true", help="Tessera-written files only")
    ap.add_argument("--only", help="measure only the files whose name contains this (e.g. fortunes)")
    ap.add_argument("--json")
    args = ap.parse_args()
    bench = os.path.join(args.build_dir, "bench", "tessera_llm_bench")
    subprocess.run(["cmake", "--build", args.build_dir, "--target", "tessera_llm_bench", "tessera_cli"], check=True,
                   capture_output=True)
    flags = cpu_flags()
    tiers = args.tiers.split(",") if args.tiers else ["native"] + (["avx2"] if "avx512f" in flags else [])
    out = {"cpu": cpu_model(), "rounds": args.rounds, "repeat": args.repeat, "tiers": []}
    ms = None
    for tier in tiers:
        bins, info = llama_cpp(args.llama_cpp_bin if tier == "native" else None, avx2=tier == "avx2")
        if ms is None:
            ms = models(bench, bins, args.types.split(","), args.quick)
            if args.only:
                ms = {n: m for n, m in ms.items() if args.only in n}
            out["models"] = ms
        log(f"tier {tier}: llama.cpp {info}")
        if tier == "native":
            out["perplexity"] = perplexities(os.path.join(args.build_dir, "apps", "tessera"), bins, ms)
        out["tiers"].append(run_tier(tier, bench, bins, info, ms, args.rounds, args.repeat))
        if args.json:  # each tier kept as soon as it is measured
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
