#!/usr/bin/env python3
"""Skinny products: Tessera's own kernel against oneDNN's GEMM, and against
the read bandwidth a streaming read reaches on the same bytes.

Runs build-bench/bench/tessera_gemv_bench on each kernel tier this CPU has
(AVX-512, and AVX2 emulated on an AVX-512 CPU by limiting Tessera and
oneDNN alike), at each thread count, twice per round: with
TESSERA_SKINNY_MAX_ROWS=16 (every product here on the skinny kernel) and =0
(every product on oneDNN). Rounds alternate the two; each figure is the
median over rounds. Prints one table per tier and thread count; --json writes
the table rows and every round.

  python3 bench/gemv_compare.py [--build-dir build-bench] [--threads 1,2] [--rounds 3] [--quick] [--json FILE]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

from common import cpu_flags, cpu_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TIERS = [  # name, environment, the cpuinfo flags it needs; the first AVX-512 one the CPU has runs
    ("avx512_bf16", {"TESSERA_CPU_CAPABILITY": "avx512_bf16", "DNNL_MAX_CPU_ISA": "AVX512_CORE_BF16"},
     ["avx512f", "avx512_bf16"]),
    ("avx512", {"TESSERA_CPU_CAPABILITY": "avx512", "DNNL_MAX_CPU_ISA": "AVX512_CORE_VNNI"}, ["avx512f"]),
    ("avx2", {"TESSERA_CPU_CAPABILITY": "avx2", "DNNL_MAX_CPU_ISA": "AVX2"}, ["avx2", "fma"]),
]


def run(binary, env, threads, quick):
    args = [binary, "--threads", str(threads)] + (["--quick"] if quick else [])
    out = subprocess.run(args, env=dict(os.environ, **env, OMP_NUM_THREADS=str(threads)), check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    res = {}
    for line in out.splitlines():
        m = re.match(r"RESULT (\S+) (\S+) (\S+)", line)
        if m:
            res[m.group(1)] = float(m.group(2))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build-bench"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    if not a.no_build:
        subprocess.run(["cmake", "-S", ROOT, "-B", a.build_dir, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                        "-DTESSERA_BUILD_TESTS=OFF"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["ninja", "-C", a.build_dir, "tessera_gemv_bench"], check=True, stdout=subprocess.DEVNULL)
    binary = os.path.join(a.build_dir, "bench", "tessera_gemv_bench")
    flags = cpu_flags()
    rounds_out, rows_out, skipped = [], [], []
    print(f"# Skinny products on {cpu_model()}, {os.cpu_count()} logical CPUs\n")
    ran_avx512 = False
    for tier, env, needs in TIERS:
        if tier.startswith("avx512") and ran_avx512:
            continue
        if not all(f in flags for f in needs):
            print(f"tier {tier}: not run (the CPU lacks {', '.join(f for f in needs if f not in flags)})\n")
            skipped.append(tier)
            continue
        ran_avx512 = ran_avx512 or tier.startswith("avx512")
        for threads in [int(t) for t in a.threads.split(",")]:
            skinny, dnnl = [], []
            for r in range(a.rounds):
                order = [("skinny", {"TESSERA_SKINNY_MAX_ROWS": "16"}), ("onednn", {"TESSERA_SKINNY_MAX_ROWS": "0"})]
                if r % 2:
                    order.reverse()
                for name, extra in order:
                    res = run(binary, dict(env, **extra), threads, a.quick)
                    (skinny if name == "skinny" else dnnl).append(res)
                    rounds_out.append({"tier": tier, "threads": threads, "round": r, "side": name, "results": res})
            med = lambda runs, key: statistics.median(x[key] for x in runs if key in x)
            print(f"## tier {tier} ({', '.join(f'{k}={v}' for k, v in env.items())}), {threads} thread(s), "
                  f"median of {a.rounds} rounds\n")
            print("| weight | dtype | stream GB/s | m | skinny us | GB/s | % of stream | oneDNN us | skinny / oneDNN |")
            print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
            for key in skinny[0]:
                if not key.startswith("linear/"):
                    continue
                _, shape, dt, m = key.split("/")
                n, k = (int(v) for v in shape.split("x"))
                nbytes = n * k * (4 if dt == "f32" else 2)
                stream = med(skinny + dnnl, f"stream/{shape}/{dt}")
                t_s, t_d = med(skinny, key), med(dnnl, key)
                gbps = nbytes / t_s / 1e3
                rows_out.append({"tier": tier, "threads": threads, "weight": shape, "dtype": dt, "m": int(m[1:]),
                                 "stream_gbps": stream, "skinny_us": t_s, "skinny_gbps": gbps,
                                 "onednn_us": t_d, "rounds": a.rounds})
                print(f"| {shape} | {dt} | {stream:.1f} | {m[1:]} | {t_s:.1f} | {gbps:.1f} | {100 * gbps / stream:.0f}% "
                      f"| {t_d:.1f} | {t_s / t_d:.2f} |")
            print()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu_model(), "rows": rows_out, "tiers_not_run": skipped, "rounds": rounds_out}, f,
                      indent=1)


if __name__ == "__main__":
    sys.exit(main())
