#!/usr/bin/env python3
"""The load test of `tessera serve` (issue: serving targets in docs/benchmarks.md).

Serves the Fashion-MNIST MLP and CNN (trained runs, exported as compiled
graphs) and drives them with bench/load_gen.cpp (`tessera_load http`: open or
closed loop on loopback, the same machine):

  1. the maximum throughput (closed loop, 64 connections), with and without
     dynamic batching, JSON and binary requests;
  2. the throughput-latency curve: p50/p99 at fixed offered loads;
  3. the HTTP transport: the same service over `tessera serve`'s own (Beast's
     parser over blocking sockets, a thread per connection), over cpp-httplib
     (bench/serve_httplib.cpp) and over asynchronous Boost.Beast
     (bench/serve_beast.cpp: 2 I/O threads, replies posted from the worker);
  4. a soak: 5 minutes at 80% of the MLP's maximum, errors and the server's
     resident memory sampled every 5 s.

  python3 bench/serve_bench.py --mlp RUN --cnn RUN [--soak-seconds 300] [--only max,curve,http,soak]

Build first (Release): cmake --build build-bench --target tessera_cli tessera_load
tessera_serve_httplib tessera_serve_beast.
Results are printed as markdown tables (and as JSON lines with --json FILE).
"""
import argparse
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

from common import ROOT, cpu_model, free_port


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return json.loads(r.read())


class Server:
    """`tessera serve` (or the Beast variant) on a free port, stopped with SIGTERM."""

    def __init__(self, argv, port):
        self.port = port
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if get(port, "/v2/health/ready").get("ready"):
                    return
            except Exception:
                pass
            if self.proc.poll() is not None:
                raise SystemExit("server exited: " + self.proc.stdout.read())
            time.sleep(0.1)
        raise SystemExit("server did not become ready")

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        return self.proc.returncode


def bodies(port, model, workdir):
    """A JSON and a binary-extension request of one example with the model's signature (batch 1)."""
    meta = get(port, f"/v2/models/{model}")
    inp = meta["inputs"][0]
    shape = [1 if d < 0 else d for d in inp["shape"]]
    n = 1
    for d in shape:
        n *= d
    rng = random.Random(0)
    values = [round(rng.random(), 3) for _ in range(n)]  # pixel-like values, as a client would send them
    js = json.dumps({"inputs": [{"name": inp["name"], "shape": shape, "datatype": "FP32", "data": values}]})
    header = json.dumps({"inputs": [{"name": inp["name"], "shape": shape, "datatype": "FP32",
                                     "parameters": {"binary_data_size": 4 * n}}]})
    binary = header.encode() + struct.pack(f"<{n}f", *values)
    paths = {}
    for kind, data in (("json", js.encode()), ("binary", binary)):
        paths[kind] = os.path.join(workdir, f"{model}.{kind}")
        with open(paths[kind], "wb") as f:
            f.write(data)
    return paths, len(header)


def load(args, port, model, body, header_len=None, rate=0, seconds=10, warmup=2, connections=64):
    cmd = [args.load, "http", "--port", str(port), "--path", f"/v2/models/{model}/infer", "--body", body,
           "--connections", str(connections), "--rate", str(rate), "--duration", str(seconds), "--warmup", str(warmup)]
    if header_len is not None:
        cmd += ["--header", f"Inference-Header-Content-Length: {header_len}"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def export(args, run, out):
    subprocess.run([args.tessera, "export", run, "--format", "tessera", "--output", out], check=True,
                   capture_output=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mlp", required=True, help="a trained Fashion-MNIST MLP run (tessera train ..._mlp.yaml)")
    p.add_argument("--cnn", required=True, help="a trained Fashion-MNIST CNN run")
    p.add_argument("--build", default=os.path.join(ROOT, "build-bench"))
    p.add_argument("--seconds", type=float, default=8, help="measured seconds per point")
    p.add_argument("--soak-seconds", type=float, default=300)
    p.add_argument("--only", default="max,curve,http,soak")
    p.add_argument("--json", help="also write every measurement as a JSON line here")
    args = p.parse_args()
    args.tessera = os.path.join(args.build, "apps", "tessera")
    args.load = os.path.join(args.build, "bench", "tessera_load")
    args.beast = os.path.join(args.build, "bench", "tessera_serve_beast")
    args.httplib = os.path.join(args.build, "bench", "tessera_serve_httplib")
    only = set(args.only.split(","))
    records = []

    def record(**kw):
        records.append(kw)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(kw) + "\n")

    work = tempfile.mkdtemp(prefix="tessera-serve-bench-")
    try:
        repo = os.path.join(work, "repo")
        for name, run in (("mlp", args.mlp), ("cnn", args.cnn)):
            export(args, run, os.path.join(repo, name, "1", "model.tsr"))

        def serve(batching=True, http="tessera"):
            port = free_port()
            if http == "beast-async":
                return Server([args.beast, repo, str(port), "2"], port)
            if http == "httplib":
                return Server([args.httplib, repo, str(port), "64"], port)
            argv = [args.tessera, "serve", repo, "--port", str(port), "--threads", "64"]
            if not batching:
                argv += ["--max-batch", "1"]
            return Server(argv, port)

        cpu = cpu_model()
        print(f"# tessera serve load test: {cpu}, {os.cpu_count()} CPUs; generator and server on the same machine\n")

        maxima = {}
        s = serve()
        req = {m: bodies(s.port, m, work) for m in ("mlp", "cnn")}
        s.stop()
        if only & {"max", "curve", "soak"}:
            print("## Maximum throughput (closed loop, 64 connections)\n")
            print("| model | request | batching | req/s | p50 ms | p99 ms | errors |")
            print("|---|---|---|---:|---:|---:|---:|")
            for batching in (True, False):
                s = serve(batching)
                for model in ("mlp", "cnn"):
                    for kind in ("json", "binary"):
                        paths, hlen = req[model]
                        r = load(args, s.port, model, paths[kind], hlen if kind == "binary" else None,
                                 seconds=args.seconds)
                        maxima[(model, kind, batching)] = r["achieved"]
                        record(test="max", model=model, request=kind, batching=batching, **r)
                        print(f"| {model} | {kind} | {'on' if batching else 'off'} | {r['achieved']:.0f} | "
                              f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['errors']} |", flush=True)
                assert s.stop() == 0
            print()

        if "curve" in only:
            print("## Throughput-latency curve (open loop, JSON requests, batching on)\n")
            print("| model | offered req/s | achieved req/s | p50 ms | p90 ms | p99 ms | p99.9 ms | errors |")
            print("|---|---:|---:|---:|---:|---:|---:|---:|")
            s = serve(True)
            for model in ("mlp", "cnn"):
                peak = maxima[(model, "json", True)]
                rates = sorted({round(peak * f, -1) for f in (0.1, 0.25, 0.5, 0.75, 0.9, 1.0)} |
                               ({1000} if model == "cnn" else set()))
                for rate in rates:
                    paths, _ = req[model]
                    r = load(args, s.port, model, paths["json"], rate=rate, seconds=args.seconds)
                    record(test="curve", model=model, **r)
                    print(f"| {model} | {rate:.0f} | {r['achieved']:.0f} | {r['p50_ms']:.2f} | {r['p90_ms']:.2f} | "
                          f"{r['p99_ms']:.2f} | {r['p999_ms']:.2f} | {r['errors']} |", flush=True)
            assert s.stop() == 0
            print()

        if "http" in only:
            print("## HTTP transport: the same service over three (MLP, JSON, batching on)\n")
            print("| transport | offered req/s | achieved req/s | p50 ms | p99 ms | errors |")
            print("|---|---:|---:|---:|---:|---:|")
            for http in ("tessera", "httplib", "beast-async"):
                s = serve(True, http)
                paths, _ = req["mlp"]
                top = load(args, s.port, "mlp", paths["json"], seconds=args.seconds)
                rows = [(0, top)]
                for rate in (2000, 8000):
                    rows.append((rate, load(args, s.port, "mlp", paths["json"], rate=rate, seconds=args.seconds)))
                for rate, r in rows:
                    record(test="http", transport=http, **r)
                    print(f"| {http} | {'max' if rate == 0 else rate} | {r['achieved']:.0f} | {r['p50_ms']:.2f} | "
                          f"{r['p99_ms']:.2f} | {r['errors']} |", flush=True)
                s.stop()
            print()

        if "soak" in only:
            rate = round(0.8 * maxima[("mlp", "json", True)], -1)
            print(f"## Soak: MLP, JSON, batching on, {rate:.0f} req/s (80% of the maximum) for "
                  f"{args.soak_seconds:.0f} s\n")
            s = serve(True)
            paths, _ = req["mlp"]
            cmd = [args.load, "http", "--port", str(s.port), "--path", "/v2/models/mlp/infer", "--body", paths["json"],
                   "--connections", "64", "--rate", str(rate), "--duration", str(args.soak_seconds), "--warmup", "5"]
            gen = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
            samples = []
            t0 = time.time()
            while gen.poll() is None:
                samples.append((time.time() - t0, s.rss_kib()))
                time.sleep(5)
            r = json.loads(gen.stdout.read())
            # After the first 30 s (a tenth of a shorter soak): allocator pools are warm.
            settle = min(30.0, args.soak_seconds / 10)
            rss = [kib for t, kib in samples if t >= settle] or [samples[-1][1]]
            record(test="soak", rate=rate, rss_kib=samples, settle_s=settle, **r)
            print("| offered req/s | achieved req/s | requests | errors | p50 ms | p99 ms | p99.9 ms | "
                  f"RSS at {settle:.0f} s MiB | RSS min-max after MiB | RSS at end MiB |")
            print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            print(f"| {rate:.0f} | {r['achieved']:.0f} | {r['requests']} | {r['errors']} | {r['p50_ms']:.2f} | "
                  f"{r['p99_ms']:.2f} | {r['p999_ms']:.2f} | {rss[0] / 1024:.1f} | {min(rss) / 1024:.1f}-"
                  f"{max(rss) / 1024:.1f} | {rss[-1] / 1024:.1f} |", flush=True)
            code = s.stop()
            record(test="soak_exit", exit_status=code)
            print(f"\nserver exit status after SIGTERM: {code}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
