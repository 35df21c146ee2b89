"""tessera.llm: language models in GGUF files (llama.cpp's format) on
Tessera's engine — tokenizers, generation streamed as an iterator of text,
chat with the model's template — and the OpenAI-compatible server.

    lm = tessera.llm.load("model.gguf")
    for piece in lm.generate("The meaning of life is", max_tokens=64, stream=True):
        print(piece, end="", flush=True)
    print(lm.chat([{"role": "user", "content": "Hello"}], temperature=0))

A model trained by `tessera train` (or tessera.train.fit) loads from its run
directory, tessera.llm.load("runs/tiny_gpt"), as `tessera generate RUN` does;
tessera.llm.save_gguf(zoo_model, path, tokenizer_from="vocab.gguf") writes a
zoo model as a GGUF file llama.cpp reads.
"""
from . import _C

_L = _C._llm


class LLM:
    """A language model on Tessera's engine (paged KV cache, the CPU's best kernels): tokenize, detokenize,
    generate, chat, generate_batch, scheduler. Load with tessera.llm.load(path)."""
    def __init__(self, path, *, context=0, kv_memory=0, max_sequences=4, threads=0, weights="F32"):
        """path: a GGUF file, or a run (or checkpoint) of `tessera train` / tessera.train.fit
        holding a Llama or GPT trained on text, converted for the engine to
        `weights` (F32, F16, BF16, Q8_0, Q4_0) with the tokenizer it was trained with."""
        self._native = _L.LLM(str(path), context, kv_memory, max_sequences, threads, weights)

    architecture = property(lambda self: self._native.architecture)
    vocab_size = property(lambda self: self._native.vocab_size)
    context = property(lambda self: self._native.context)
    chat_template = property(lambda self: self._native.chat_template)

    def tokenize(self, text, add_special=True, parse_special=False):
        return self._native.tokenize(text, add_special, parse_special)

    def detokenize(self, ids, remove_special=True):
        """The text of token ids (bytes decoded as UTF-8, invalid sequences replaced)."""
        return self._native.detokenize(list(ids), remove_special).decode("utf-8", errors="replace")

    def generate(self, prompt, *, stream=False, **sampling):
        """Text after `prompt`. Sampling: max_tokens (256), temperature (0.8; 0 is
        greedy), top_k, top_p, min_p, repeat_penalty, presence_penalty,
        frequency_penalty, seed, stop (a string or a list), ignore_eos.
        stream=True: an iterator of text pieces as they are made."""
        s = self._native.stream(prompt, **sampling)
        return s if stream else "".join(s)

    def chat(self, messages, *, stream=False, chat_template="", **sampling):
        """The assistant's reply to `messages` ([{"role", "content"}]), rendered
        with the model's chat template (or `chat_template`; without either, one
        line per message)."""
        s = self._native.stream_chat(messages, chat_template, **sampling)
        return s if stream else "".join(s)


    def scheduler(self, **options):
        """A Scheduler for many requests on this model's engine (max_sequences at once)."""
        return Scheduler(self, **options)

    def generate_batch(self, prompts, **sampling):
        """The text after each prompt, generated together in batched steps (the
        scheduler's continuous batching): what generate() gives for each, in
        the time of fewer, larger steps. The options are generate()'s."""
        s = self.scheduler()
        ids = [s.submit(p, **sampling) for p in prompts]
        texts = {i: [] for i in ids}
        for event in s.run():
            texts[event["id"]].append(event["text"])
        return ["".join(texts[i]) for i in ids]


class Scheduler:
    """Many requests on one LLM, batched step by step as the OpenAI server
    batches them (continuous batching, paged KV cache; docs/llm.md):

        s = lm.scheduler()
        a = s.submit("Once upon a time", max_tokens=32, temperature=0)
        b = s.submit(lm.tokenize("The answer is"), max_tokens=8, priority=1)
        for event in s.run():            # or: while s.has_work(): s.step()
            print(event["id"], event["text"], event["finished"])

    submit() takes generate()'s options and a priority (higher is admitted
    first); each event is a dict: id, text (what became final this step), token
    (None for a finish without one), finished, finish_reason, prompt_tokens,
    completion_tokens, cached_tokens. max_wait_seconds bounds a request's wait
    whatever its priority; lookup_tokens turns on prompt-lookup speculative decoding."""

    def __init__(self, lm, *, max_wait_seconds=0.0, lookup_tokens=0):
        self._native = _L.Scheduler(lm._native, max_wait_seconds=max_wait_seconds, lookup_tokens=lookup_tokens)

    def submit(self, prompt, **options):
        return self._native.submit(prompt, **options)

    def cancel(self, request_id):
        self._native.cancel(request_id)

    def step(self):
        return self._native.step()

    def has_work(self):
        return self._native.has_work()

    def stats(self):
        return self._native.stats()

    def run(self):
        """Steps until every request has finished, yielding the events."""
        while self._native.has_work():
            yield from self._native.step()


def load(path, **options):
    """An LLM from a GGUF file or a run of tessera train (LLM's options: context, kv_memory, max_sequences,
    threads, weights)."""
    return LLM(path, **options)


def save_gguf(model, path, *, tokenizer_from="", type="F32"):
    """A Llama or GPT of the zoo (tessera.nn.zoo.build) as a GGUF file, with the
    tokenizer of another GGUF file (llama.cpp needs one to load it)."""
    native = getattr(model, "_native", model)
    _C._nn.save_gguf(native, str(path), str(tokenizer_from), type)


class OpenAIServer:
    """The OpenAI-compatible server (/v1/completions, /v1/chat/completions,
    streaming, many requests batched; docs/llm.md) on a GGUF file or a run
    of tessera train, in this process on its own threads. port 0 picks a free one."""

    def __init__(self, path, *, name="model", host="127.0.0.1", port=8000, api_key="", max_sequences=16, context=0):
        self._native = _L.OpenAIServer(str(path), name, host, port, api_key, max_sequences, context)

    @property
    def port(self):
        return self._native.port

    def stop(self):
        self._native.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False
