#!/usr/bin/env python3
"""What the device seam costs: the same per-op benchmark (bench/seam_overhead.cpp:
a 1-element add with and without autograd recording, and a width-16 MLP at
batch 1, forward and training step) and the LLM engine's decode step, built
against the library from before the seam (BASE, built once into the cache)
and the one being measured, run alternately in one session on one thread.
Each figure is the median over rounds; the ratio is after / before.

  python3 bench/seam_compare.py [--build-dir build] [--rounds 5] [--quick] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from common import CACHE, cpu_simd, log, pinned

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = "42e30b3"  # the last commit before the seam: "review: load_gen's token count in one place"


def cache_value(build_dir, key):
    with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
        for line in f:
            if line.startswith(key + ":"):
                return line.rstrip("\n").split("=", 1)[1]
    return ""


def build_type(build_dir):
    return cache_value(build_dir, "CMAKE_BUILD_TYPE") or "?"


def base_build(btype, flags):
    """The library and LLM bench of BASE, built once per build type (the one
    measured: both sides compiled alike), tests and apps off."""
    src = os.path.join(CACHE, "seam-base", BASE)
    build = os.path.join(src, "build-" + btype)
    lib = os.path.join(build, "src", "libtessera.so")
    if os.path.exists(lib) and os.path.exists(os.path.join(build, "bench", "tessera_llm_bench")):
        return src, build
    if not os.path.exists(src):
        log(f"checking out {BASE} into {src}")
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "-f", "--detach", src, BASE], check=True,
                       capture_output=True)
    log(f"building {BASE} (the library before the seam) in {build}")
    subprocess.run(["cmake", "-S", src, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=" + btype,
                    f"-DCMAKE_CXX_FLAGS_{btype.upper()}={flags}",
                    "-DTESSERA_BUILD_TESTS=OFF", "-DTESSERA_BUILD_APPS=OFF", "-DTESSERA_BUILD_BENCH=ON"],
                   check=True, capture_output=True)
    subprocess.run(["cmake", "--build", build, "-j2", "--target", "tessera", "tessera_llm_bench"], check=True,
                   capture_output=True)
    return src, build


def overhead_binary(src, build, out):
    """bench/seam_overhead.cpp compiled against one tree's headers and library."""
    subprocess.run(["g++", "-O2", "-std=c++20", "-fopenmp", os.path.join(ROOT, "bench", "seam_overhead.cpp"),
                    "-I", os.path.join(src, "include"), "-I", os.path.join(build, "include"),
                    "-L", os.path.join(build, "src"), "-ltessera", "-Wl,-rpath," + os.path.join(build, "src"),
                    "-o", out], check=True)
    return out


def overhead(binary, quick):
    out = subprocess.run(pinned(1) + [binary, "--rounds", "5" if quick else "15"], check=True,
                         stdout=subprocess.PIPE, text=True, env=dict(os.environ, OMP_NUM_THREADS="1")).stdout
    return {name: float(v) for name, v in (line.split() for line in out.splitlines() if line.strip())}


def decode_model():
    for p in (os.path.join(CACHE, "fortunes", "models", "fortunes-20m-Q8_0.gguf"),
              os.path.join(CACHE, "llm-bench", "random-110M-Q8_0.gguf")):
        if os.path.exists(p):
            return p
    return None


def decode_ms(bench, model, tokens):
    out = subprocess.run(pinned(1) + [bench, "run", "--model", model, "--threads", "1", "--measure", "decode",
                                      "--tokens", str(tokens), "--repeat", "3", "--spread", "7900"],
                         check=True, stdout=subprocess.PIPE, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    j = json.loads(out.stdout.strip().splitlines()[-1])
    return 1000.0 / j["tokens_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    rounds = 2 if a.quick else a.rounds
    btype = build_type(a.build_dir)
    # The same compiler flags as the build measured (a custom type such as
    # RelWithAsserts has its flags in the cache, not in CMake's defaults).
    base_src, base_bld = base_build(btype, cache_value(a.build_dir, f"CMAKE_CXX_FLAGS_{btype.upper()}"))
    work = os.path.join(CACHE, "seam-base", "bin")
    os.makedirs(work, exist_ok=True)
    trees = {"before": (base_src, base_bld), "after": (ROOT, a.build_dir)}
    bins = {k: overhead_binary(s, b, os.path.join(work, f"seam_overhead_{k}")) for k, (s, b) in trees.items()}
    model = decode_model()
    runs = {k: [] for k in trees}
    for r in range(rounds):
        for k in (("before", "after") if r % 2 == 0 else ("after", "before")):
            res = overhead(bins[k], a.quick)
            if model:
                res["llm_decode_ms"] = decode_ms(os.path.join(trees[k][1], "bench", "tessera_llm_bench"), model,
                                                 16 if a.quick else 64)
            runs[k].append(res)
            log(f"round {r + 1} {k}: " + ", ".join(f"{n} {v:.1f}" for n, v in res.items()))
    rows = []
    for name in runs["after"][0]:
        before = statistics.median(x[name] for x in runs["before"])
        after = statistics.median(x[name] for x in runs["after"])
        rows.append({"case": name, "before": before, "after": after, "ratio": after / before,
                     "unit": "ms" if name.endswith("_ms") else "ns"})
    for r in rows:
        print(f"{r['case']:<20} before {r['before']:10.1f} {r['unit']}  after {r['after']:10.1f} {r['unit']}  "
              f"{r['ratio']:.3f}x")
    out = {"base": BASE, "build_type": btype, "rounds": rounds, "rows": rows, "runs": runs, "model": os.path.basename(model) if model else None,
           "cpu": cpu_simd()[0], "simd": cpu_simd()[1], "threads": 1}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
