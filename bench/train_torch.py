#!/usr/bin/python3
"""PyTorch reference for the training benchmarks (one training step, timed).

    /usr/bin/python3 bench/train_torch.py --case mlp|cnn|gpt|resnet18 \
        --steps N --warmup W --threads T

Prints ONE JSON line on stdout:
    {"case", "impl": "pytorch", "threads", "ms_per_step" (median of the timed steps),
     "ms_p10", "ms_p90", "steps", "warmup", "batch", "samples_per_s",
     "peak_rss_mib" (ru_maxrss of this process), ... case-specific fields}
mlp adds "s_per_epoch" = ms_per_step * ceil(60000 / 128) / 1000; gpt adds
"tokens_per_s" and "attention" (which attention path was used).

The models are exactly the ones the Tessera side (bench/tessera_train_bench)
builds; do not change them without changing it too. Data are synthetic tensors
made once before timing. The timed step is
    optimizer.zero_grad(set_to_none=True); forward; loss; backward; optimizer.step()

Run it with Debian's /usr/bin/python3 (torch 1.13). The environment matters a
great deal for this build (see /work/shared/PLATFORM.md): bench/train_compare.py
runs it in PyTorch's best configuration and in its default one.
"""
import argparse
import json
import math
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.utils.checkpoint
import torch.nn as nn
import torch.nn.functional as F

CASES = ("mlp", "cnn", "gpt", "resnet18")


# ---------------------------------------------------------------------------------
# models


def make_mlp():
    return nn.Sequential(
        nn.Linear(784, 256), nn.ReLU(),
        nn.Linear(256, 256), nn.ReLU(),
        nn.Linear(256, 10),
    )


def make_cnn():
    # The default Fashion-MNIST model.
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25),
        nn.Linear(128, 10),
    )


# --- nanoGPT-style GPT -----------------------------------------------------------

# torch 1.13 has no public F.scaled_dot_product_attention (it arrived in 2.0;
# 1.13 only has the private, math-only F._scaled_dot_product_attention).
HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")
ATTENTION_PATH = ("F.scaled_dot_product_attention(is_causal=True)" if HAVE_SDPA
                  else "manual: softmax(masked_fill(q@k^T/sqrt(hd), causal, -inf)) @ v")


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, bias):
        super().__init__()
        assert n_embd % n_head == 0
        self.n_head = n_head
        self.n_embd = n_embd
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        if not HAVE_SDPA:
            self.register_buffer("mask", torch.tril(torch.ones(block_size, block_size, dtype=torch.bool))
                                 .view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        hd = C // self.n_head
        q = q.view(B, T, self.n_head, hd).transpose(1, 2)  # [B, nh, T, hd]
        k = k.view(B, T, self.n_head, hd).transpose(1, 2)
        v = v.view(B, T, self.n_head, hd).transpose(1, 2)
        if HAVE_SDPA:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v  # [B, nh, T, hd]
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLPBlock(nn.Module):
    def __init__(self, n_embd, bias):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.gelu = nn.GELU()  # exact (erf)
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, bias):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, elementwise_affine=True)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, bias)
        self.ln_2 = nn.LayerNorm(n_embd, elementwise_affine=True)
        self.mlp = MLPBlock(n_embd, bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab_size=256, block_size=256, n_layer=6, n_head=6, n_embd=384, bias=True, checkpoint=-1):
        super().__init__()
        self.checkpoint = checkpoint  # -1 off, 0 every block, k: checkpoint_sequential with k segments
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head, block_size, bias) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        # nanoGPT's initialisation.
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx):
        B, T = idx.size()
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)  # dropout 0.0: omitted
        if self.checkpoint < 0 or not torch.is_grad_enabled():
            for block in self.h:
                x = block(x)
        elif self.checkpoint == 0:
            for block in self.h:
                x = torch.utils.checkpoint.checkpoint(block, x)
        else:
            x = torch.utils.checkpoint.checkpoint_sequential(self.h, self.checkpoint, x)
        x = self.ln_f(x)
        return self.lm_head(x)  # [B, T, vocab]


# --- ResNet-18, torchvision layout, CIFAR stem --------------------------------------


def conv3x3(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.inplanes = 64
        # CIFAR stem: 3x3 stride 1, no max-pool.
        self.conv1 = nn.Conv2d(3, 64, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(64, 2, 1)
        self.layer2 = self._make_layer(128, 2, 2)
        self.layer3 = self._make_layer(256, 2, 2)
        self.layer4 = self._make_layer(512, 2, 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():  # torchvision's initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def _make_layer(self, planes, blocks, stride):
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        for _ in range(1, blocks):
            layers.append(BasicBlock(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


# ---------------------------------------------------------------------------------
# cases: model, optimizer, data, loss


def rss_mib():
    """The resident set size now (not the peak), in MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def build_case(case, layers=6, checkpoint=-1):
    """Returns (model, optimizer, inputs, targets, loss_fn, batch, extra_json)."""
    extra = {}
    if case == "mlp":
        batch = 128
        model = make_mlp()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        x = torch.randn(batch, 784)
        y = torch.randint(0, 10, (batch,))
        loss_fn = nn.CrossEntropyLoss()
    elif case == "cnn":
        batch = 64
        model = make_cnn()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        x = torch.randn(batch, 1, 28, 28)
        y = torch.randint(0, 10, (batch,))
        loss_fn = nn.CrossEntropyLoss()
    elif case == "gpt":
        batch, seq, vocab = 8, 256, 256
        model = GPT(vocab_size=vocab, block_size=256, n_layer=layers, n_head=6, n_embd=384, bias=True,
                    checkpoint=checkpoint)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
        tokens = torch.randint(0, vocab, (batch, seq + 1))
        x = tokens[:, :-1].contiguous()
        y = tokens[:, 1:].contiguous()
        ce = nn.CrossEntropyLoss()
        loss_fn = lambda logits, tgt: ce(logits.view(-1, logits.size(-1)), tgt.view(-1))
        extra["attention"] = ATTENTION_PATH
        extra["seq_len"] = seq
        extra["params"] = sum(p.numel() for p in model.parameters())  # tied weight counted once
        extra["layers"] = layers
        extra["checkpoint"] = checkpoint
    elif case == "resnet18":
        batch = 32
        model = ResNet18(num_classes=10)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
        x = torch.randn(batch, 3, 32, 32)
        y = torch.randint(0, 10, (batch,))
        loss_fn = nn.CrossEntropyLoss()
    else:
        raise ValueError(case)
    model.train()
    return model, opt, x, y, loss_fn, batch, extra


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", required=True, choices=CASES)
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--precision", default="f32", choices=("f32", "bf16"),
                    help="bf16: the forward under torch.autocast('cpu', torch.bfloat16)")
    ap.add_argument("--layers", type=int, default=6, help="gpt: number of blocks")
    ap.add_argument("--checkpoint", type=int, default=-1,
                    help="gpt: -1 off, 0 checkpoint every block, k checkpoint_sequential with k segments")
    args = ap.parse_args()
    if args.steps < 1:
        sys.exit("--steps must be >= 1")

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    np.random.seed(0)

    model, opt, x, y, loss_fn, batch, extra = build_case(args.case, args.layers, args.checkpoint)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16")
    rss_before = rss_mib()

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast:
            out = model(x)
            loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(max(0, args.warmup)):
        step()
    times = []
    loss = None
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        times.append((time.perf_counter() - t0) * 1e3)

    ms = np.asarray(times)
    median = float(np.median(ms))
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
    res = {
        "case": args.case,
        "impl": "pytorch",
        "threads": args.threads,
        "ms_per_step": round(median, 4),
        "ms_p10": round(float(np.percentile(ms, 10)), 4),
        "ms_p90": round(float(np.percentile(ms, 90)), 4),
        "steps": args.steps,
        "warmup": args.warmup,
        "batch": batch,
        "peak_rss_mib": round(peak_rss_mib, 1),
        # Memory the training steps added on top of the built model: activations,
        # gradients, optimizer state and allocator caches.
        "step_rss_mib": round(max(0.0, peak_rss_mib - rss_before), 1),
        "precision": args.precision,
        "samples_per_s": round(batch * 1e3 / median, 2),
    }
    if args.case == "mlp":
        res["s_per_epoch"] = round(median * math.ceil(60000 / 128) / 1e3, 4)
    if args.case == "gpt":
        res["tokens_per_s"] = round(batch * extra["seq_len"] * 1e3 / median, 1)
    res.update(extra)
    res["final_loss"] = round(float(loss.item()), 5)
    res["torch"] = torch.__version__
    res["torch_threads"] = torch.get_num_threads()
    res["env"] = {k: os.environ[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                                             "OMP_WAIT_POLICY", "OPENBLAS_CORETYPE",
                                             "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
                  if k in os.environ}
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
