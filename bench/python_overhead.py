#!/usr/bin/python3
"""The cost of one op called from Python, Tessera or PyTorch (one process per
library; bench/python_compare.py runs both side by side).

    PYTHONPATH=build-bench/python /usr/bin/python3 bench/python_overhead.py --impl tessera
    /usr/bin/python3 bench/python_overhead.py --impl torch

Each case is the total time of the call from Python (argument parsing, the op,
the result object), the median over --rounds rounds of --calls calls, in ns.
Prints one JSON line.
"""
import argparse
import json
import statistics
import time


def timed(fn, calls, rounds):
    for _ in range(max(calls // 10, 100)):
        fn()
    per = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter_ns() - t0) / calls)
    return round(statistics.median(per), 1)


def two_threads(lib, n=128, calls=300, rounds=5):
    """The GIL released inside ops: two Python threads each running `calls`
    n x n matmuls (one compute thread per op) against one thread running both
    shares. Returns the median times (ms) and serial / threaded."""
    import threading
    a, b = lib.randn(n, n), lib.randn(n, n)

    def work():
        for _ in range(calls):
            a @ b

    work()
    serial, threaded = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        work()
        work()
        serial.append(time.perf_counter() - t0)
        threads = [threading.Thread(target=work) for _ in range(2)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        threaded.append(time.perf_counter() - t0)
    s, t = statistics.median(serial), statistics.median(threaded)
    return {"serial_ms": round(s * 1e3, 2), "two_threads_ms": round(t * 1e3, 2), "speedup": round(s / t, 2)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--impl", choices=("tessera", "torch"), required=True)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    if a.impl == "tessera":
        import tessera as lib
    else:
        import torch as lib
    lib.set_num_threads(a.threads)
    lib.manual_seed(0)
    x1, y1 = lib.randn(1), lib.randn(1)
    g1 = lib.randn(1, requires_grad=True)
    m1, m2 = lib.randn(64, 64), lib.randn(64, 64)
    cases = {
        "add_1_operator": lambda: x1 + y1,
        "add_1_function": lambda: lib.add(x1, y1),
        "add_1_scalar": lambda: x1 + 1.0,
        "add_1_autograd": lambda: g1 + y1,
        "matmul_64_operator": lambda: m1 @ m2,
        "matmul_64_function": lambda: lib.matmul(m1, m2),
        "sum_dim_1": lambda: lib.sum(x1, 0),
        "view_1": lambda: x1.view(1, 1),
    }
    out = {"impl": a.impl, "threads": a.threads, "calls": a.calls, "rounds": a.rounds, "ns": {}}
    for name, fn in cases.items():
        out["ns"][name] = timed(fn, a.calls, a.rounds)
    out["gil"] = two_threads(lib)
    out["version"] = lib.__version__
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
