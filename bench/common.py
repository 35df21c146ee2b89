"""What the compare scripts of bench/ share: logging, running a measuring
process for its last JSON line (failing, or recording the failure), file
digests, the machine's CPU, free ports and the native llama.cpp reference
(bench/build_llama_cpp.sh)."""
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CACHE = os.environ.get("TESSERA_CACHE", os.path.expanduser("~/.cache/tessera"))
NODE_LLAMA_CPP = "3.21.1"  # pinned in scripts/llm_compat.sh


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def run_json(cmd, cwd=None, env=None, timeout=1200):
    """Runs cmd and returns the JSON object on the last line of its output."""
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({p.returncode}): {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def error_tail(text):
    """The last lines of a failed run's output, without the C++ runtime's terminate boilerplate."""
    lines = [ln.strip().removeprefix("what():").strip() for ln in text.strip().splitlines()
             if ln.strip() and not ln.startswith("terminate called after throwing")]
    return " | ".join(lines[-3:])[-300:]


def try_json(cmd, env=None, key=None, timeout=1800, exit_warns=False):
    """Runs cmd; returns the last JSON object on its stdout (the last with `key`
    when given), or {"error": ...} saying why there is none: a failed case is
    recorded in the report and the others go on. exit_warns: a result from a
    process that then failed is kept, with a "warning"."""
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout} s"}
    except OSError as e:
        return {"error": f"could not start: {e}"}
    rec = None
    for line in p.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and (key is None or key in obj):
                rec = obj
    if rec is not None and p.returncode != 0 and exit_warns:
        rec["warning"] = f"exit {p.returncode}"
    elif rec is None or p.returncode != 0:
        return {"error": f"exit {p.returncode}: {error_tail(p.stderr or p.stdout)}"}
    return rec


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "?"


def cpu_simd():
    """(model name, the SIMD flags of interest: avx*, fma*, amx*)."""
    flags = []
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = [x for x in line.split(":", 1)[1].split() if x.startswith(("avx", "fma", "amx"))]
                break
    return cpu_model(), " ".join(flags) or "?"


def pinned(threads):
    """A one-thread run's CPU, the same for both sides: the cores of a VM can
    differ (on one Zen 5 VM every memory-bound loop ran ~35% slower on CPU 0
    than on CPU 1), and the scheduler would give either side either one."""
    if threads != 1 or not shutil.which("taskset"):
        return []
    return ["taskset", "-c", str(max(os.sched_getaffinity(0)))]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def llama_cpp(bin_dir=None, avx2=False):
    """The folder of llama.cpp's binaries and what it says of its build:
    bin_dir (a user's own build) or the cached native build, made on first
    use (bench/build_llama_cpp.sh; --avx2: the AVX2-tier build)."""
    if bin_dir:
        info = {"build": f"user's build in {bin_dir}"}
        p = subprocess.run([os.path.join(bin_dir, "llama-bench"), "--version"], capture_output=True, text=True)
        info["version"] = (p.stdout + p.stderr).strip().splitlines()[:2]
        return bin_dir, info
    cmd = ["bash", os.path.join(HERE, "build_llama_cpp.sh"), "--print"] + (["--avx2"] if avx2 else [])
    bin_dir = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    info = {}
    with open(os.path.join(os.path.dirname(bin_dir), "build-info.txt")) as f:
        for line in f:
            k, _, v = line.partition(":")
            info[k.strip()] = v.strip()
    return bin_dir, info
