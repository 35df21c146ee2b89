#!/usr/bin/env python3
"""The load test of `tessera serve-llm`: bench/load_gen.cpp (`tessera_load openai`) drives
the server over loopback on the same cores, with prompts cut from Debian's fortunes
(tokenized by the served model), 2 compute threads.

  1. closed loop, 1, 4 and 16 concurrent streams, 4 requests each (64 to 192 tokens
     generated, prompts of 64 to 512 tokens, as far as the context allows; Note
     [Streams in lockstep]): aggregate generated tokens/s, TTFT and
     inter-token latency, against llama.cpp's llama-server (built natively by
     bench/build_llama_cpp.sh, or --llama-cpp-bin DIR) on the same file with as many
     slots of the same context (-np N --cont-batching, 2 threads), the same requests
     from the same load generator;
  2. open loop, Poisson arrivals at 25%, 50% and 80% of the closed loop's request
     rate at 16 streams: TTFT and inter-token latency p50/p99; the 50% trace again
     without batching (--max-seqs 1);
  3. 16 users, each prompt a shared 400-token system prompt and a 32-token question,
     64 generated, all at once: peak KV cache in use and p50 TTFT, with and without
     prefix caching (models whose context holds them);
  4. a 2,048-token prompt arriving while 8 streams decode: their p99 inter-token
     latency against the same 8 alone, and its TTFT against an idle server (the 110M
     model, served with --ctx 3072); as served by default and with --decode-slowdown 3;
  5. prompt lookup (--prompt-lookup 8 against none), one stream: prompts of free
     fortunes text, and prompts that repeat a 40-token passage three times;
  6. with --soak-seconds S, a soak of the first model: Poisson arrivals for S seconds at
     80% of the rate it sustains (a closed loop of 16 streams for about a minute on the
     same server first), the errors and the server's resident memory every 5 s;
  7. (alone, with --speculative) speculative decoding with a draft model: the ~20M fortunes model (Q8_0) with the
     ~2M one as its draft (--draft, 8 tokens) against no draft, at 1, 4 and 16 streams
     (closed loop, prompts of 64 to 127 tokens, 128 generated), with the draft
     acceptance from /metrics; and llama-server with and without the same draft
     (--spec-type draft-simple --model-draft, its default draft length) on the same requests;
     and prompt lookup (--prompt-lookup 8 against none) at 1 stream on an echo
     workload: the 2M shape trained here, from scratch, to repeat a passage after
     " | " (examples/configs/fortunes_echo_2m.yaml; about 13 minutes the first time,
     cached), each prompt a passage of 20 to 30 words to repeat;
  8. (alone, with --structured) JSON-schema decoding on the 110M Q4_0 model's 32,000-token
     vocabulary, one stream: inter-token latency with a response_format json_schema
     against none, the first time the schema is sent (its token masks found as the
     matcher reaches new states) and again (found in the grammar's cache); and
     llama-server with and without its json_schema on the same requests.
  The open loop at 50% and the shared system prompt (3) run on llama-server too.

  python3 bench/llm_serve_bench.py [--build-dir build-bench] [--models ...] [--quick] [--speculative]
                                   [--structured] [--llama-cpp-bin DIR | --no-llama] [--json FILE]

Models: the ~20M fortunes model in Q8_0 (scripts/fortunes_models.sh 20m makes it; left
out when missing) and the 110M random model in Q4_0, Q8_0, Q4_K and F16
(bench/llm_compare.py makes them); the 2M fortunes model in Q8_0 as the draft.
"""
import argparse
import json
import os
import random
import re
import subprocess
import tempfile
import time
import urllib.request

from common import CACHE, HERE, ROOT, cpu_model, free_port, llama_cpp, log
FORTUNES = "/usr/share/games/fortunes"


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


class Server:
    """`tessera serve-llm` on a free port, stopped with SIGTERM."""
    kind = "tessera"

    def __init__(self, cli, model, *flags):
        threads = [] if "--threads" in flags else ["--threads", "2"]
        self.start([cli, "serve-llm", model, *threads, *flags], "--port")

    def start(self, cmd, port_flag):
        self.port = free_port()
        # The server's log goes to a file: a pipe nobody reads fills, and a
        # server blocked writing its log stops answering (llama-server does,
        # with a draft model and 16 slots).
        self.log = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(cmd + [port_flag, str(self.port)], stdout=self.log, stderr=subprocess.STDOUT,
                                     text=True)
        deadline = time.time() + 120
        while time.time() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        self.log.seek(0)
        said = self.log.read()[-4000:]  # before stop() closes the log
        self.stop()
        raise RuntimeError(f"{cmd[0]} did not come up: " + said)

    def stop(self):
        """SIGTERM, then SIGKILL after 20 s."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            log(f"{self.proc.args[0]} did not stop in 20 s of SIGTERM: killed")
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class LlamaServer(Server):
    """llama.cpp's llama-server on the same file: `seqs` slots of `ctx` tokens
    each, continuous batching, 2 threads, its defaults otherwise (prompt
    caching on, flash attention auto)."""
    kind = "llama"

    def __init__(self, bins, model, ctx, seqs, *flags):
        self.start([os.path.join(bins, "llama-server"), "-m", model, "--host", "127.0.0.1", "-t", "2", "-tb", "2",
                    "-c", str(ctx * seqs), "-np", str(seqs), "--cont-batching", "--metrics", *flags], "--port")


def fortune_tokens(port):
    """Debian's fortunes as one stream of the served model's token ids."""
    text = []
    for name in sorted(os.listdir(FORTUNES)):
        p = os.path.join(FORTUNES, name)
        if os.path.isfile(p) and not name.endswith(".dat") and not os.path.islink(p):
            with open(p, encoding="utf-8", errors="replace") as f:
                text.append(f.read().replace("\n%\n", "\n\n"))
        if sum(map(len, text)) > 400_000:
            break
    return post(port, "/tokenize", {"prompt": "".join(text)[:400_000], "add_special_tokens": False})["tokens"]


def prompt(pool, rng, n, bos):
    start = rng.randrange(0, len(pool) - n)
    return [bos] + pool[start:start + n - 1]


def load(tool, port, requests, concurrency=0, server="tessera"):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"requests": requests}, f)
    try:
        cmd = [tool, "openai", "--port", str(port), "--requests", f.name, "--server", server]
        if concurrency:
            cmd += ["--concurrency", str(concurrency)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=3600).stdout
        return json.loads(out.strip().splitlines()[-1])
    finally:
        os.unlink(f.name)


def poisson(rng, rate, n):
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        out.append(t)
    return out


SLOWDOWN = 3  # part 4's second run: --decode-slowdown


def long_prompt(tool, port, pool, rng, bos, q):
    """8 streams alone, the 2,048-token prompt alone, then the prompt arriving 1.5 s
    after the streams (fresh prompts for each run: none finds another's blocks in the
    prefix cache)."""
    def streams():
        return [{"prompt": prompt(pool, rng, 64, bos), "max_tokens": 256 if q else 384, "at": 0.0, "tag": "stream"}
                for _ in range(8)]

    def long(at):
        return {"prompt": prompt(pool, rng, 2048, bos), "max_tokens": 16, "at": at, "tag": "long"}
    return {"streams_alone": load(tool, port, streams()), "long_alone": load(tool, port, [long(0.0)]),
            "together": load(tool, port, streams() + [long(1.5)])}


# Note [Streams in lockstep]
# A closed loop whose requests all generate the same number of tokens keeps
# its streams in step on a server that takes in every waiting prompt in one
# step: llama-server (n_batch 2048) prefills the streams' prompts together,
# they decode side by side and end together, and the next prompts arrive
# while nothing decodes, so no inter-token gap ever spans a prefill. Measured
# on the 110M F16 file at 4 streams (Zen 5): with 128 tokens each,
# llama-server's p99 inter-token latency read 56 ms while its longest gap was
# 987 ms; with lengths of 64 to 192 it read 335 ms (Tessera: 174 and 250 ms).
# Real traffic is not in step, so the closed loop's lengths vary.
def bench_model(args, name, path, ctx):
    cli = os.path.join(args.build_dir, "apps", "tessera")
    tool = os.path.join(args.build_dir, "bench", "tessera_load")
    q = args.quick
    rng = random.Random(1)
    res = {"model": name, "path": path, "context": ctx}
    vocab = 0
    serve_ctx = ["--ctx", str(ctx)]
    srv = Server(cli, path, "--max-seqs", "16", "--max-batched-tokens", "512", *serve_ctx)
    try:
        pool = fortune_tokens(srv.port)
        bos = post(srv.port, "/tokenize", {"prompt": "", "add_special_tokens": True})["tokens"] or [1]
        bos = bos[0]
        vocab = 1 + max(pool)
        for v in (8000, 32000):  # the two vocabularies benchmarked
            if vocab <= v:
                vocab = v
                break
        longest = min(512, ctx - 128 - 1)
        # 1. Closed loop.
        res["closed"] = {}
        closed_traces = {}
        for c in (1, 4, 16):
            reqs = []
            for _ in range(max(2, c) if q else max(8, 4 * c)):
                # Lengths vary, 64 to 192 tokens (Note [Streams in lockstep]).
                n = rng.randint(64, min(192, ctx - 64 - 1))
                p = prompt(pool, rng, rng.randint(64, min(512, ctx - n - 1)), bos)
                reqs.append({"prompt": p, "max_tokens": n})
            closed_traces[c] = reqs
            log(f"{name}: closed loop, {c} streams")
            res["closed"][c] = load(tool, srv.port, reqs, c)
        # 2. Open loop at fractions of the closed loop's request rate.
        top = res["closed"][16]["requests"] / res["closed"][16]["wall_s"]
        res["max_rate"] = top
        n = 12 if q else 32
        traces = {}
        res["open"] = {}
        for frac in (0.25, 0.5, 0.8):
            arrivals = poisson(rng, frac * top, n)
            traces[frac] = [{"prompt": prompt(pool, rng, rng.randint(64, longest), bos), "max_tokens": 128, "at": a}
                            for a in arrivals]
            log(f"{name}: open loop at {frac:.0%} of {top:.2f} requests/s")
            res["open"][frac] = load(tool, srv.port, traces[frac])
        # 4. A long prompt among 8 streams.
        if ctx >= 2048 + 64:
            log(f"{name}: a 2,048-token prompt among 8 streams")
            res["long"] = long_prompt(tool, srv.port, pool, rng, bos, q)
    finally:
        srv.stop()
    # 4b. The same with prompt chunks bounded beside decodes.
    if ctx >= 2048 + 64:
        srv = Server(cli, path, "--max-seqs", "16", "--max-batched-tokens", "512", *serve_ctx,
                     "--decode-slowdown", str(SLOWDOWN))
        try:
            log(f"{name}: a 2,048-token prompt among 8 streams, --decode-slowdown {SLOWDOWN}")
            res["long_slowdown"] = long_prompt(tool, srv.port, pool, rng, bos, q)
        finally:
            srv.stop()
    # 2b. Without batching.
    srv = Server(cli, path, "--max-seqs", "1", "--max-batched-tokens", "512", *serve_ctx)
    try:
        log(f"{name}: open loop at 50%, no batching")
        res["open_unbatched"] = load(tool, srv.port, traces[0.5])
    finally:
        srv.stop()
    # 3. A shared system prompt, with and without prefix caching.
    shared_users = None
    if ctx >= 400 + 32 + 64:
        system = prompt(pool, rng, 400, bos)
        users = [{"prompt": system + pool[(i * 997) % (len(pool) - 40):][:32], "max_tokens": 64, "at": 0.0}
                 for i in range(16)]
        res["shared"] = {}
        shared_users = users
        for caching in (True, False):
            srv = Server(cli, path, "--max-seqs", "16", "--max-batched-tokens", "512", *serve_ctx,
                         *([] if caching else ["--no-prefix-caching"]))
            try:
                log(f"{name}: 16 users of one system prompt, prefix caching {'on' if caching else 'off'}")
                res["shared"]["on" if caching else "off"] = load(tool, srv.port, users)
            finally:
                srv.stop()
    # 5. Prompt lookup, one stream.
    res["lookup"] = {}
    for look in (0, 8):
        srv = Server(cli, path, "--max-seqs", "16", "--max-batched-tokens", "512", *serve_ctx,
                     "--prompt-lookup", str(look))
        try:
            r2 = random.Random(5)
            n = 2 if q else 6
            free = [{"prompt": prompt(pool, r2, min(100, longest), bos), "max_tokens": 128} for _ in range(n)]
            rep = []
            for _ in range(n):
                p = prompt(pool, r2, 40, bos)
                rep.append({"prompt": p + p[1:] + p[1:], "max_tokens": 128})
            log(f"{name}: one stream, prompt lookup {look}")
            res["lookup"][look] = {"free": load(tool, srv.port, free, 1), "repeat": load(tool, srv.port, rep, 1)}
        finally:
            srv.stop()
    # 1b, 2c, 3b. llama-server on the same file, the same requests and the
    # same load generator: the closed loops, the open loop at 50% and the
    # shared system prompt.
    if args.llama_bins:
        res["llama_server"] = versus_llama(args, path, ctx, closed_traces, traces[0.5], shared_users)
    return res


def server_counters(port, prefix):
    """A server's counters from /metrics, by name without the prefix."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(prefix) and " " in line:
            name, value = line.rsplit(" ", 1)
            out[name[len(prefix):]] = float(value)
    return out


def versus_llama(args, path, ctx, closed, open_trace, shared_users):
    """The same requests through llama-server (-np N --cont-batching, its
    context per slot the same as Tessera's)."""
    tool = os.path.join(args.build_dir, "bench", "tessera_load")
    out = {"closed": {}}
    for c, reqs in closed.items():
        srv = LlamaServer(args.llama_bins, path, ctx, c)
        try:
            log(f"llama-server: closed loop, {c} streams")
            out["closed"][c] = load(tool, srv.port, reqs, c, "llama")
        finally:
            srv.stop()
    srv = LlamaServer(args.llama_bins, path, ctx, 16)
    try:
        log("llama-server: open loop at 50%")
        out["open_half"] = load(tool, srv.port, open_trace, 0, "llama")
    finally:
        srv.stop()
    if shared_users:
        srv = LlamaServer(args.llama_bins, path, ctx, 16)
        try:
            log("llama-server: 16 users of one system prompt")
            out["shared"] = load(tool, srv.port, shared_users, 0, "llama")
            out["shared"]["counters"] = server_counters(srv.port, "llamacpp:")
        finally:
            srv.stop()
    return out


def spec_counters(port):
    """The server's draft tokens proposed and accepted, from /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {"draft": 0.0, "accepted": 0.0}
    for line in text.splitlines():
        if line.startswith("tessera:spec_decode_num_draft_tokens_total{"):
            out["draft"] = float(line.split()[-1])
        elif line.startswith("tessera:spec_decode_num_accepted_tokens_total{"):
            out["accepted"] = float(line.split()[-1])
    return out


def speculative(args, target, draft):
    """7. The target with and without its draft model, at 1, 4 and 16 streams; and
    llama.cpp with and without the same draft at 1 stream."""
    cli = os.path.join(args.build_dir, "apps", "tessera")
    tool = os.path.join(args.build_dir, "bench", "tessera_load")
    rng = random.Random(11)
    ctx = 256
    res = {"target": target, "draft": draft, "streams": {}, "llama": {}}
    traces = {}
    for c in (1, 4, 16):
        res["streams"][c] = {}
        for mode in ("plain", "draft"):
            flags = ["--draft", draft, "--draft-tokens", "8"] if mode == "draft" else []
            srv = Server(cli, target, "--max-seqs", "16", "--max-batched-tokens", "512", "--ctx", str(ctx), *flags)
            try:
                if c not in traces:
                    pool = fortune_tokens(srv.port)
                    bos = (post(srv.port, "/tokenize", {"prompt": "", "add_special_tokens": True})["tokens"] or [1])[0]
                    n = max(4, c) if args.quick else {1: 32, 4: 64, 16: 128}[c]
                    traces[c] = [{"prompt": prompt(pool, rng, rng.randint(64, ctx - 128 - 1), bos), "max_tokens": 128}
                                 for _ in range(n)]
                log(f"speculative decoding: {c} streams, {mode}")
                r = load(tool, srv.port, traces[c], c)
                r["spec"] = spec_counters(srv.port)
                res["streams"][c][mode] = r
            finally:
                srv.stop()
    # llama-server with and without the same draft model, 1 to 16 streams (its
    # speculative decoding runs per slot), on the same requests.
    if args.llama_bins:
        for c in (1, 4, 16):
            res["llama"][c] = {}
            for mode in ("plain", "draft"):
                # Its own draft length (3): on these files 8 tokens a step ran at 259
                # tokens/s, 8 with p-min 0.75 at 444, its default at 500 (Zen 5).
                flags = ["--spec-type", "draft-simple", "--model-draft", draft] if mode == "draft" else []
                srv = LlamaServer(args.llama_bins, target, ctx, c, *flags)
                try:
                    log(f"speculative decoding: llama-server, {c} streams, {mode}")
                    r = load(tool, srv.port, traces[c], c, "llama")
                    r["counters"] = server_counters(srv.port, "llamacpp:")
                    res["llama"][c][mode] = r
                finally:
                    srv.stop()
    return res


ECHO_CONFIG = os.path.join(ROOT, "examples", "configs", "fortunes_echo_2m.yaml")


def echo_words():
    """Lowercase words of two letters or more that occur at least 5 times in Debian's fortunes."""
    count = {}
    for name in sorted(os.listdir(FORTUNES)):
        path = os.path.join(FORTUNES, name)
        if not os.path.isfile(path) or name.endswith((".dat", ".u8")):
            continue
        with open(path, errors="ignore") as f:
            for w in re.findall(r"[a-z]+", f.read().lower()):
                count[w] = count.get(w, 0) + 1
    return sorted(w for w, c in count.items() if c >= 5 and len(w) > 1)


def echo_line(rng, words, lo, hi):
    return " ".join(rng.choice(words) for _ in range(rng.randint(lo, hi)))


def echo_model(args):
    """The echo model (examples/configs/fortunes_echo_2m.yaml): the 2M shape trained
    from scratch on 60,000 lines of "PASSAGE | PASSAGE" (3 to 30 random fortune words,
    seed 5), as Q8_0 GGUF. Cached under CACHE/llm-bench: trained once (resumed where a
    run stopped), about 13 minutes on 2 cores."""
    cli = os.path.join(args.build_dir, "apps", "tessera")
    base = os.path.join(CACHE, "llm-bench", "echo-2m")
    gguf = base + "-Q8_0.gguf"
    with open(ECHO_CONFIG) as f:
        steps = int(re.search(r"^  steps: (\d+)", f.read(), re.M).group(1))
    done = os.path.join(base, "checkpoints", f"step-{steps:09d}", "state.json")
    if not os.path.exists(done):
        data = base + ".txt"
        if not os.path.exists(data):
            rng, words = random.Random(5), echo_words()
            with open(data + ".part", "w") as f:
                for _ in range(60000):
                    p = echo_line(rng, words, 3, 30)
                    f.write(f"{p} | {p}\n")
            os.replace(data + ".part", data)
        cmd = [cli, "train", ECHO_CONFIG, "--output", base, "--set", f"data.path={data}",
               "--set", f"data.tokenizer={os.path.join(CACHE, 'fortunes', 'fortunes.model')}", "--plain"]
        if os.path.isdir(os.path.join(base, "checkpoints")):
            cmd += ["--resume", "latest"]
        log(f"echo model: training {base} ({steps} steps, about 13 minutes on 2 cores)")
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    if not os.path.exists(gguf) or os.path.getmtime(gguf) < os.path.getmtime(done):
        subprocess.run([cli, "export", base, "--format", "gguf", "--gguf-type", "Q8_0", "--output", gguf], check=True,
                       stdout=subprocess.DEVNULL)
    return gguf


def echo(args, path):
    """Prompt lookup on the echo workload, one stream: each prompt two example lines and
    a passage of 20 to 30 words ending in " |", the reply its copy (stop at the line's
    end); served with --prompt-lookup 8 against none, on one compute thread (a 2M
    model's step is shorter than a parallel region's start and end, as for the draft
    model of part 7). Each side runs twice, in turn, and keeps its faster run (by decode
    rate): single runs of a few milliseconds a request vary by a third here. Before
    timing, each reply is checked against its passage (how many the model copies
    exactly, and but for the first word)."""
    cli = os.path.join(args.build_dir, "apps", "tessera")
    tool = os.path.join(args.build_dir, "bench", "tessera_load")
    rng, words = random.Random(23), echo_words()
    n = 4 if args.quick else 24
    passages, reqs = [], []
    for _ in range(n):
        demo = [echo_line(rng, words, 3, 10) for _ in range(2)]
        p = echo_line(rng, words, 20, 30)
        passages.append(p)
        reqs.append({"prompt": "".join(f"{d} | {d}\n" for d in demo) + p + " |", "max_tokens": 128,
                     "extra": {"stop": ["\n"]}})
    res = {"model": path, "requests": n, "threads": 1, "lookup": {}, "runs": {0: [], 8: []}}
    for rnd in range(2):
        for look in (0, 8):
            srv = Server(cli, path, "--threads", "1", "--max-seqs", "4", "--ctx", "512", "--prompt-lookup", str(look))
            try:
                if rnd == 0 and look == 0:
                    texts = [post(srv.port, "/v1/completions", {"prompt": r["prompt"], "max_tokens": 128,
                                                                 "temperature": 0, "stop": ["\n"]})["choices"][0]["text"]
                             for r in reqs]
                    res["copied"] = sum(t.split() == p.split() for t, p in zip(texts, passages))
                    # The first word, the one token with nothing earlier to copy
                    # from on its line, is the model's hardest (often wrong).
                    res["copied_after_first"] = sum(t.split()[1:] == p.split()[1:] for t, p in zip(texts, passages))
                log(f"echo workload: one stream, prompt lookup {look} (round {rnd + 1} of 2)")
                r = load(tool, srv.port, reqs, 1)
                r["spec"] = spec_counters(srv.port)
                res["runs"][look].append(r)
            finally:
                srv.stop()
    for look, runs in res["runs"].items():
        res["lookup"][look] = max(runs, key=lambda r: r["decode_tokens_per_s"])
    return res


# Strings are bounded so that a random model's answer goes through every
# state of the schema (unbounded, it would stay inside the first string).
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
    "email": {"type": ["string", "null"], "maxLength": 16},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 4},
    "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                                 "zip": {"type": "string", "maxLength": 6}},
                "required": ["city", "zip"], "additionalProperties": False}},
    "required": ["name", "age", "email", "tags", "address"], "additionalProperties": False}


def structured(args, path):
    """8. The same requests with and without a response_format json_schema, one stream."""
    cli = os.path.join(args.build_dir, "apps", "tessera")
    tool = os.path.join(args.build_dir, "bench", "tessera_load")
    rng = random.Random(13)
    srv = Server(cli, path, "--max-seqs", "16", "--max-batched-tokens", "512", "--ctx", "1024")
    try:
        pool = fortune_tokens(srv.port)
        bos = (post(srv.port, "/tokenize", {"prompt": "", "add_special_tokens": True})["tokens"] or [1])[0]
        n = 4 if args.quick else 48
        reqs = [{"prompt": prompt(pool, rng, 64, bos), "max_tokens": 128} for _ in range(n)]
        fmt = {"response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}}
        constrained = [dict(r, extra=fmt) for r in reqs]
        log("structured output: one stream, no schema")
        plain = load(tool, srv.port, reqs, 1)
        log("structured output: one stream, a JSON schema (first time)")
        first = load(tool, srv.port, constrained, 1)
        log("structured output: one stream, the same schema again")
        again = load(tool, srv.port, constrained, 1)
        log("structured output: one stream, no schema again (the drift between runs)")
        plain_again = load(tool, srv.port, reqs, 1)
        out = {"model": path, "schema": SCHEMA, "plain": plain, "first": first, "again": again,
               "plain_again": plain_again}
    finally:
        srv.stop()
    if args.llama_bins:  # llama-server's json_schema (a grammar made from the schema)
        srv = LlamaServer(args.llama_bins, path, 1024, 1)
        try:
            # ignore_eos off: with it, the grammar's end leaves llama-server no
            # token to take ("Unexpected empty grammar stack"), a 500 each time.
            llama_fmt = {"json_schema": SCHEMA, "ignore_eos": False}
            log("structured output: llama-server, one stream, no schema")
            out["llama_plain"] = load(tool, srv.port, reqs, 1, "llama")
            log("structured output: llama-server, one stream, its json_schema")
            out["llama_schema"] = load(tool, srv.port, [dict(r, extra=llama_fmt) for r in reqs], 1, "llama")
        finally:
            srv.stop()
    return out


def soak(args, first):
    """Poisson arrivals at 80% of the model's highest rate for --soak-seconds, in one
    run of the load generator; the server's RSS sampled every 5 s meanwhile."""
    cli = os.path.join(args.build_dir, "apps", "tessera")
    tool = os.path.join(args.build_dir, "bench", "tessera_load")
    rng = random.Random(7)
    ctx = first["context"]
    srv = Server(cli, first["path"], "--max-seqs", "16", "--max-batched-tokens", "512", "--ctx", str(ctx))
    try:
        pool = fortune_tokens(srv.port)
        bos = (post(srv.port, "/tokenize", {"prompt": "", "add_special_tokens": True})["tokens"] or [1])[0]
        # The highest rate as sustained for a minute (a closed loop of 16 streams), not
        # as one burst gave it: 80% of a burst's rate proved more than the machine kept up.
        longest = min(512, ctx - 128 - 1)
        warm = [{"prompt": prompt(pool, rng, rng.randint(64, longest), bos), "max_tokens": 128}
                for _ in range(int(first["max_rate"] * 60) + 16)]
        log(f"{first['model']}: soak, the sustained rate over {len(warm)} requests")
        sustained = load(tool, srv.port, warm, 16)
        rate = 0.8 * sustained["requests"] / sustained["wall_s"]
        n = int(rate * args.soak_seconds)
        reqs = [{"prompt": prompt(pool, rng, rng.randint(64, longest), bos), "max_tokens": 128, "at": a}
                for a in poisson(rng, rate, n)]
        rss = []
        done = []
        import threading

        def sample():
            while not done:
                with open(f"/proc/{srv.proc.pid}/status") as f:
                    rss.append(next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) * 1024)
                time.sleep(5)
        sampler = threading.Thread(target=sample)
        sampler.start()
        log(f"{first['model']}: soak, {n} requests over {args.soak_seconds} s at {rate:.2f}/s")
        try:
            r = load(tool, srv.port, reqs)
        finally:
            done.append(True)
            sampler.join()
        return {"model": first["model"], "seconds": args.soak_seconds, "rate": rate, "result": r, "rss": rss,
                "sustained": sustained, "burst_rate": first["max_rate"]}
    finally:
        srv.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build-bench"))
    ap.add_argument("--models", default="fortunes-20m-Q8_0,random-110M-Q4_0,random-110M-Q8_0,random-110M-Q4_K,"
                                        "random-110M-F16")
    ap.add_argument("--quick", action="store_true", help="fewer requests, for working")
    ap.add_argument("--soak-seconds", type=int, default=0, help="soak the first model this long (0: no soak)")
    ap.add_argument("--speculative", action="store_true", help="part 7 alone (speculative decoding), not 1 to 6")
    ap.add_argument("--structured", action="store_true", help="part 8 alone (JSON-schema decoding), not 1 to 6")
    ap.add_argument("--llama-cpp-bin", help="a folder with llama-server of your own build (default: "
                                            "bench/build_llama_cpp.sh's native build)")
    ap.add_argument("--no-llama", action="store_true", help="Tessera only")
    ap.add_argument("--json")
    args = ap.parse_args()
    subprocess.run(["cmake", "--build", args.build_dir, "--target", "tessera_cli", "tessera_load",
                    "tessera_llm_bench"], check=True, stdout=subprocess.DEVNULL)
    args.llama_bins, llama_info = (None, None) if args.no_llama else llama_cpp(args.llama_cpp_bin)
    results, missing = [], []
    for name in [] if args.speculative or args.structured else args.models.split(","):
        if name.startswith("fortunes"):
            path = os.path.join(CACHE, "fortunes", "models", name + ".gguf")
            ctx = 256
        else:
            path = os.path.join(CACHE, "llm-bench", name + ".gguf")
            ctx = 3072
        if not os.path.exists(path):
            missing.append(name)
            log(f"{name}: {path} is missing (scripts/fortunes_models.sh or bench/llm_compare.py makes it); left out")
            continue
        results.append(bench_model(args, name, path, ctx))
    out = {"models": results, "missing": missing, "quick": args.quick, "llama_cpp": llama_info, "cpu": cpu_model()}
    if args.soak_seconds and results:
        out["soak"] = soak(args, results[0])
    target, draft = (os.path.join(CACHE, "fortunes", "models", f"fortunes-{m}-Q8_0.gguf") for m in ("20m", "2m"))
    if args.structured:
        path = os.path.join(CACHE, "llm-bench", "random-110M-Q4_0.gguf")
        if os.path.exists(path):
            out["structured"] = structured(args, path)
        else:
            log(f"structured output: {path} is missing (bench/llm_compare.py makes it); left out")
            missing.append("random-110M-Q4_0")
    if not args.speculative:
        pass
    elif os.path.exists(target) and os.path.exists(draft):
        out["speculative"] = speculative(args, target, draft)
        out["echo"] = echo(args, echo_model(args))
    else:
        log("speculative decoding: the fortunes 20m and 2m models are missing (scripts/fortunes_models.sh 2m 20m); "
            "left out")
        missing.append("speculative")
    text = json.dumps(out, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
