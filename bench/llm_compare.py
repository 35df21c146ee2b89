#!/usr/bin/python3
"""Tessera's LLM engine against llama.cpp (npm's node-llama-cpp, pinned by
scripts/llm_compat.sh) on the same GGUF files.

    /usr/bin/python3 bench/llm_compare.py [--build-dir build-bench] [--rounds 3] [--json out.json]

The files: random-weight Llama models shaped like a 110M model (width 768, 12
layers, 12 heads, feed-forward 2048, llama.cpp's 32,000-piece SentencePiece
vocabulary), written by `tessera_llm_bench make-model` in F16, Q8_0, Q4_0 and Q4_K (as `tessera
quantize-gguf` writes it: the output matrix in Q6_K),
cached under $TESSERA_CACHE/llm-bench (default ~/.cache/tessera) with their
sha256. Measurements (`tessera_llm_bench run` and `bench/llm_llamacpp.mjs`, one
process each, the engines alternated, median of the rounds):
  prefill   512 prompt tokens in one step, 2 threads
  decode    64 tokens one at a time after an 8-token prompt, 1 thread (and 2, reported without a ratio:
            node-llama-cpp starts a thread per decode call)
  batch     16 sequences decoding together, 32 steps, 2 threads: aggregate tokens/s, and the RSS growth
            past the loaded model (weights read once first on both sides)
  bandwidth a streaming read of as many bytes as a decoded token's weights, 1 and 2 threads: the bound
            decode works against
And the fortunes models Tessera trained (scripts/fortunes_models.sh; those in the cache), in F32, F16, Q8_0 and
Q4_0: held-out perplexity over 16 windows of 128 tokens on both sides (`tessera_llm_bench eval`,
scripts/llm_compat_fortunes.mjs), prefill of 128 tokens at 2 threads and decode at 1 thread.
"""
import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CACHE = os.environ.get("TESSERA_CACHE", os.path.expanduser("~/.cache/tessera"))
VERSION = "3.21.1"
TYPES = ["F16", "Q8_0", "Q4_0", "Q4_K"]
# (measure, threads, tokens, sequences, target ratio by type or None)
CASES = [
    ("prefill", 2, 512, 1, {"F16": 1.0, "Q8_0": 1.3, "Q4_0": 1.0, "Q4_K": 1.0}),
    ("decode", 1, 64, 1, {"F16": 1.0, "Q8_0": 1.3, "Q4_0": 1.15, "Q4_K": 1.0}),
    ("decode", 2, 64, 1, None),
    ("batch", 2, 32, 16, {"F16": 2.0, "Q8_0": 2.0, "Q4_0": 2.0, "Q4_K": 2.0}),
]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def run_json(cmd, cwd=None):
    out = subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True, timeout=600).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build-bench"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--json")
    args = ap.parse_args()
    bench = os.path.join(args.build_dir, "bench", "tessera_llm_bench")
    if not os.path.exists(bench):
        subprocess.run(["cmake", "--build", args.build_dir, "--target", "tessera_llm_bench"], check=True)
    subprocess.run(["bash", os.path.join(ROOT, "scripts", "llm_compat.sh"), "--install-only"], check=True)
    pkg = os.path.join(CACHE, "node-llama-cpp")
    vocab = os.path.join(CACHE, f"llama.cpp-{VERSION}", "models", "ggml-vocab-llama-spm.gguf")
    subprocess.run(["cp", os.path.join(HERE, "llm_llamacpp.mjs"), pkg], check=True)
    models = {}
    os.makedirs(os.path.join(CACHE, "llm-bench"), exist_ok=True)
    for t in args.types.split(","):
        path = os.path.join(CACHE, "llm-bench", f"random-110M-{t}.gguf")
        if not os.path.exists(path):
            log(f"writing {path}")
            subprocess.run([bench, "make-model", "--size", "M", "--type", t, "--vocab", vocab, "--out", path,
                            "--seed", "1"], check=True)
        models[t] = {"path": path, "sha256": sha256(path), "bytes": os.path.getsize(path)}

    results = {}
    bandwidth = {}  # (type, threads): streaming-read GB/s over as many bytes as a token's weights, per round
    system_info = ""
    for rnd in range(args.rounds):
        for t, m in models.items():
            for threads in (1, 2):
                r = run_json([bench, "run", "--model", m["path"], "--threads", str(threads), "--measure", "bandwidth"])
                bandwidth.setdefault((t, threads), []).append(r["gb_per_s"])
            for measure, threads, tokens, seqs, _ in CASES:
                key = f"{t}/{measure}/{threads}"
                tes = [bench, "run", "--model", m["path"], "--threads", str(threads), "--measure", measure,
                       "--tokens", str(tokens), "--seqs", str(seqs), "--ctx", "1024"]
                ref = ["node", "llm_llamacpp.mjs", m["path"], measure, str(threads), str(tokens), str(seqs), "1024"]
                order = [("tessera", tes, None), ("llama.cpp", ref, pkg)]
                if rnd % 2:
                    order.reverse()
                for name, cmd, cwd in order:
                    r = run_json(cmd, cwd)
                    system_info = r.get("system_info", system_info)
                    results.setdefault(key, {}).setdefault(name, []).append(r)
                    log(f"round {rnd + 1} {key} {name}: {r['tokens_per_s']:.1f} tokens/s")

    rows = []
    for t in models:
        for measure, threads, tokens, seqs, target in CASES:
            runs = results[f"{t}/{measure}/{threads}"]
            med = {n: statistics.median(r["tokens_per_s"] for r in rs) for n, rs in runs.items()}
            rss = {n: statistics.median(r["rss_growth"] for r in rs) for n, rs in runs.items()}
            first = runs["tessera"][0]
            row = {"type": t, "measure": measure, "threads": threads, "tokens": tokens, "sequences": seqs,
                   "tessera_tps": med["tessera"], "llama_tps": med["llama.cpp"],
                   "tessera_rounds": [r["tokens_per_s"] for r in runs["tessera"]],
                   "llama_rounds": [r["tokens_per_s"] for r in runs["llama.cpp"]],
                   "tessera_rss": rss["tessera"], "llama_rss": rss["llama.cpp"],
                   "kv_bytes_per_token": first["kv_bytes_per_token"],
                   "weight_bytes_per_token": first["weight_bytes_per_token"],
                   "target": target[t] if target else None}
            if measure == "decode":
                row["tessera_gbps"] = med["tessera"] * first["weight_bytes_per_token"] / 1e9
                row["read_gbps"] = statistics.median(bandwidth[(t, threads)])
            rows.append(row)
            ratio = "" if target is None else f" ratio {med['tessera'] / med['llama.cpp']:.2f} (target {target[t]})"
            print(f"{t} {measure} {threads}t: Tessera {med['tessera']:.1f}, llama.cpp {med['llama.cpp']:.1f} "
                  f"tokens/s{ratio}; RSS growth {rss['tessera'] / 2**20:.0f} / {rss['llama.cpp'] / 2**20:.0f} MiB")
    out = {"rows": rows, "models": models, "rounds": args.rounds, "node_llama_cpp": VERSION,
           "llama_system_info": system_info, "fortunes": fortunes(bench, pkg, args.rounds)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


FORTUNES_CASES = [("prefill", 2, 128), ("decode", 1, 64)]


def fortunes(bench, pkg, rounds):
    """The fortunes models in the cache: perplexity and speed, both engines."""
    fdir = os.path.join(CACHE, "fortunes")
    subprocess.run(["cp", os.path.join(ROOT, "scripts", "llm_compat_fortunes.mjs"), pkg], check=True)
    rows = []
    for size in ["2m", "15m", "20m"]:
        for t in ["F32", "F16", "Q8_0", "Q4_0"]:
            path = os.path.join(fdir, "models", f"fortunes-{size}-{t}.gguf")
            if not os.path.exists(path):
                continue
            base = os.path.join(fdir, "models", f"bench-{size}-{t}")
            subprocess.run([bench, "eval", "--model", path, "--config",
                            os.path.join(ROOT, "examples", "configs", f"fortunes_llama_{size}.yaml"), "--tokenizer",
                            os.path.join(fdir, "fortunes.model"), "--windows", "16", "--greedy", "64", "--out",
                            base + ".tessera.json"], check=True, capture_output=True)
            subprocess.run(["node", "llm_compat_fortunes.mjs", path, base + ".tessera.json", base + ".llama.json"],
                           cwd=pkg, check=True, capture_output=True)
            mine, ref = json.load(open(base + ".tessera.json")), json.load(open(base + ".llama.json"))
            row = {"size": size, "type": t, "sha256": sha256(path), "tessera_ppl": mine["perplexity"],
                   "llama_ppl": ref["perplexity"],
                   "greedy_same": next((i for i, (a, b) in enumerate(zip(mine["greedy"], ref["greedy"])) if a != b),
                                       len(ref["greedy"])),
                   # The rule of scripts/llm_compat.sh: along Tessera's path, llama.cpp's
                   # top token at the positions whose top two differ by 1e-3 or more.
                   "greedy_clear": sum(m >= 1e-3 for _, m in ref["forced"]),
                   "greedy_clear_same": sum(m >= 1e-3 and t == g for (t, m), g in zip(ref["forced"], mine["greedy"]))}
            for measure, threads, tokens in FORTUNES_CASES:
                runs = {"tessera": [], "llama.cpp": []}
                for rnd in range(rounds):
                    # Prompt ids within the 8,000-piece vocabulary.
                    order = [("tessera", [bench, "run", "--model", path, "--threads", str(threads), "--measure",
                                          measure, "--tokens", str(tokens), "--ctx", "256", "--spread", "7900"], None),
                             ("llama.cpp", ["node", "llm_llamacpp.mjs", path, measure, str(threads), str(tokens), "1",
                                            "256", "7900"], pkg)]
                    if rnd % 2:
                        order.reverse()
                    for name, cmd, cwd in order:
                        runs[name].append(run_json(cmd, cwd)["tokens_per_s"])
                row[f"{measure}_tessera"] = statistics.median(runs["tessera"])
                row[f"{measure}_llama"] = statistics.median(runs["llama.cpp"])
            log(f"fortunes {size} {t}: perplexity {row['tessera_ppl']:.3f} / {row['llama_ppl']:.3f}, prefill "
                f"{row['prefill_tessera']:.0f} / {row['prefill_llama']:.0f}, decode {row['decode_tessera']:.0f} / "
                f"{row['decode_llama']:.0f} tokens/s")
            rows.append(row)
    return rows


if __name__ == "__main__":
    main()
