"""tessera.llm from Python: a zoo Llama written as GGUF with a llama.cpp
vocabulary, loaded into the engine; greedy generation equals a greedy decode
of the same model in Python, token for token; streaming, chat, cancellation,
errors; the OpenAI server. The C++ zoo models inside Python Modules."""
import json
import os
import pathlib
import subprocess
import urllib.request

import numpy as np
import pytest

import tessera
import tessera.nn as nn

VOCABS = os.environ.get("TESSERA_LLAMA_CPP_VOCABS")  # scripts/llm_reference.sh
SPM = pathlib.Path(VOCABS or "/nonexistent") / "ggml-vocab-llama-spm.gguf"
needs_vocab = pytest.mark.skipif(not SPM.exists(), reason="no llama.cpp vocabulary (scripts/llm_reference.sh)")


@pytest.fixture(scope="module")
def llama_gguf(tmp_path_factory):
    if not SPM.exists():
        pytest.skip("no llama.cpp vocabulary (scripts/llm_reference.sh)")
    tessera.manual_seed(0)
    model = nn.zoo.build("llama", vocab_size=32000, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=64,
                         max_seq_len=128, tie_embeddings=True)
    # Larger weights than the initialization's, so that greedy tokens are well separated.
    with tessera.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(8.0)
    path = tmp_path_factory.mktemp("llm") / "tiny-llama.gguf"
    tessera.llm.save_gguf(model, path, tokenizer_from=SPM)
    return model, path


def greedy(model, ids, n):
    """Greedy decoding with the zoo model itself (no engine, no cache)."""
    ids = list(ids)
    with tessera.no_grad():
        for _ in range(n):
            logits = model(tessera.tensor([ids]))
            ids.append(int(logits[0, -1].argmax().item()))
    return ids


def test_greedy_generation_equals_the_model_in_python(llama_gguf):
    model, path = llama_gguf
    lm = tessera.llm.load(path, context=128)
    assert lm.architecture == "llama" and lm.vocab_size == 32000
    prompt = "The quick brown fox"
    ids = lm.tokenize(prompt)
    assert ids[0] == 1  # SentencePiece's BOS
    want = greedy(model.eval(), ids, 12)[len(ids):]
    stream = lm.generate(prompt, max_tokens=12, temperature=0, ignore_eos=True, stream=True)
    text = "".join(stream)
    assert stream.result["tokens"] == want
    assert text == lm.detokenize(want)
    assert lm.generate(prompt, max_tokens=12, temperature=0, ignore_eos=True) == text
    assert stream.result["finish_reason"] == "length"


def test_streaming_sampling_stop_and_cancel(llama_gguf):
    _, path = llama_gguf
    lm = tessera.llm.load(path, context=128)
    a = lm.generate("Hello", max_tokens=20, temperature=1.0, seed=7, ignore_eos=True)
    b = lm.generate("Hello", max_tokens=20, temperature=1.0, seed=7, ignore_eos=True)
    assert a == b  # counter-based sampling: the same seed, the same text
    s = lm.generate("Hello", max_tokens=100, temperature=1.0, seed=1, ignore_eos=True, stream=True)
    first = next(iter(s))
    s.close()  # cancels; the engine is free again
    assert isinstance(first, str)
    assert lm.generate("Hello", max_tokens=3, temperature=0, ignore_eos=True) is not None
    with pytest.raises(TypeError, match="unexpected keyword"):
        lm.generate("Hello", temprature=0)
    with pytest.raises(tessera.Error, match="context"):
        lm.generate("word " * 200, max_tokens=1)


def test_the_scheduler_batches_many_requests(llama_gguf):
    """Requests batched by the scheduler give what generate() gives each alone
    (greedy), in fewer engine steps than tokens; events carry the counts."""
    _, path = llama_gguf
    lm = tessera.llm.load(path, context=128, max_sequences=4)
    prompts = ["The quick brown fox", "Hello", "Once upon a time there", "A"]
    alone = [lm.generate(p, max_tokens=6, temperature=0, ignore_eos=True) for p in prompts]
    assert lm.generate_batch(prompts, max_tokens=6, temperature=0, ignore_eos=True) == alone

    s = lm.scheduler()
    ids = [s.submit(p, max_tokens=6, temperature=0, ignore_eos=True) for p in prompts[:2]]
    ids.append(s.submit(lm.tokenize(prompts[2]), max_tokens=6, temperature=0, ignore_eos=True, priority=1))
    texts, finished = {i: "" for i in ids}, {}
    steps = 0
    while s.has_work():
        steps += 1
        for e in s.step():
            texts[e["id"]] += e["text"]
            if e["finished"]:
                finished[e["id"]] = e
    assert [texts[i] for i in ids] == alone[:3]
    assert all(finished[i]["finish_reason"] == "length" and finished[i]["completion_tokens"] == 6 for i in ids)
    assert finished[ids[0]]["prompt_tokens"] == len(lm.tokenize(prompts[0]))
    assert steps < 3 * 6  # batched: the three advance in the same steps
    assert s.stats()["generated_tokens"] >= 18

    s = lm.scheduler()
    a = s.submit("Hello", max_tokens=50, temperature=0, ignore_eos=True)
    s.step()
    s.cancel(a)
    events = list(s.run())
    assert [(e["id"], e["finished"], e["finish_reason"]) for e in events] == [(a, True, "cancelled")]
    with pytest.raises(TypeError, match="unexpected keyword"):
        s.submit("Hello", temprature=0)


@pytest.mark.skipif(not os.path.isdir("/usr/share/games/fortunes"), reason="fortunes is not installed")
def test_a_trained_run_loads_as_tessera_generate_loads_it(source_dir, tmp_path):
    """tessera.llm.load(RUN) takes a run of tessera.train.fit, as `tessera
    generate RUN` does: the same greedy text from both."""
    run = tmp_path / "run"
    tessera.train.fit(source_dir / "examples/configs/char_gpt.yaml", output=run, overrides=[
        "model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.block_size=32", "data.block_size=32",
        "train.steps=4", "train.batch_size=4", "scheduler.warmup_steps=1", "train.eval_every=4", "train.eval_batches=1", "train.checkpoint_every=4", "train.log_every=4"])
    lm = tessera.llm.load(run, context=32)
    assert lm.architecture == "gpt2" and lm.vocab_size > 40  # the fortunes' characters
    text = lm.generate("The ", max_tokens=10, temperature=0, ignore_eos=True)
    assert len(text) == 10  # one character per token
    cli = os.environ.get("TESSERA_CLI")
    if cli and os.path.exists(cli):
        out = subprocess.run([cli, "generate", str(run), "-p", "The ", "-n", "10", "--temp", "0", "--ignore-eos",
                              "--ctx", "32"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.rstrip("\n").endswith(text), (out.stdout, text)
    with pytest.raises(tessera.Error, match="nothing does not exist"):
        tessera.llm.load(tmp_path / "nothing")
    with pytest.raises(tessera.Error, match="weights 'Q5'"):
        tessera.llm.load(run, weights="Q5")


def test_chat_renders_a_template(llama_gguf):
    _, path = llama_gguf
    lm = tessera.llm.load(path, context=128)
    # This model has no template: the plain one (role: text lines).
    reply = lm.chat([{"role": "user", "content": "Hi"}], max_tokens=5, temperature=0, ignore_eos=True)
    assert isinstance(reply, str)
    tmpl = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
    reply2 = lm.chat([{"role": "user", "content": "Hi"}], chat_template=tmpl, max_tokens=5, temperature=0,
                     ignore_eos=True)
    assert isinstance(reply2, str)


def test_bad_files_are_errors(tmp_path):
    (tmp_path / "bad.gguf").write_bytes(b"GGUF" + b"\x00" * 20)
    with pytest.raises(tessera.Error):
        tessera.llm.load(tmp_path / "bad.gguf")
    with pytest.raises(tessera.Error):
        tessera.llm.load(tmp_path / "missing.gguf")


def test_openai_server(llama_gguf):
    _, path = llama_gguf
    with tessera.llm.OpenAIServer(path, name="tiny", port=0, context=128) as server:
        body = {"model": "tiny", "prompt": "The quick brown fox", "max_tokens": 5, "temperature": 0}
        req = urllib.request.Request(f"http://127.0.0.1:{server.port}/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        reply = json.loads(urllib.request.urlopen(req, timeout=60).read())
        assert reply["object"] == "text_completion" and reply["usage"]["completion_tokens"] <= 5
        lm = tessera.llm.load(path, context=128)
        assert reply["choices"][0]["text"] == lm.generate("The quick brown fox", max_tokens=5, temperature=0)


def test_a_cpp_model_inside_a_python_module_trains():
    tessera.manual_seed(0)

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.zoo.build("mlp", in_features=8, hidden=[16], num_classes=16)  # the C++ zoo's MLP
            self.head = nn.Linear(16, 3)                                                    # a Python layer

        def forward(self, x):
            return self.head(tessera.relu(self.body(x)))

    model = Classifier()
    names = [n for n, _ in model.named_parameters()]
    assert names[0].startswith("body.") and names[-1] == "head.bias"
    opt = tessera.optim.Adam(model.parameters(), lr=1e-2)
    x, y = tessera.randn(64, 8), tessera.randint(0, 3, (64,))
    first = None
    for _ in range(50):
        loss = tessera.nn.functional.cross_entropy(model(x), y)
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.5 * first
    sd = model.state_dict()
    assert any(k.startswith("body.") for k in sd)
