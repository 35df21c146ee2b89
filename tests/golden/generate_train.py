#!/usr/bin/python3
"""Writes tests/golden/layers.safetensors and tests/golden/optim.safetensors:
PyTorch reference data for Tessera's nn layers, models, optimizers and LR
schedulers.

Run with Debian's python3 (torch 1.13, numpy; the safetensors package is not
needed, the files are written by hand):

    /usr/bin/python3 tests/golden/generate_train.py            # write both files
    /usr/bin/python3 tests/golden/generate_train.py --check    # regenerate in memory,
                                                               # compare with the files on disk

The key layout and the metadata are described in tests/golden/README.md
("Layers, models and optimizers"). In short:

layers.safetensors, one case C per layer configuration ("Linear/basic", ...):
  C/in<i>                 inputs (F64, or F32 for the model cases; I64 indices; BOOL masks)
  C/param/<name>          module.state_dict() before the forward (I64 for num_batches_tracked)
  C/out                   the output
  C/v                     the cotangent; gradients are of sum(out * v)
  C/grad/in<i>            for every floating input
  C/grad/param/<name>     for every parameter
  C/after/<name>          every buffer after the forward (BatchNorm running stats)
  __metadata__[C]         JSON {"type", "args", "train", "call", "dtype", ["note"]}

optim.safetensors, one case C per optimizer / scheduler configuration:
  C/X, C/Y, C/W0, C/b0    the problem; loss = mean((X @ W + b - Y)^2)
  C/W/<k>, C/b/<k>        the parameters after step k = 1..20
  C/lr                    F64 [20], lr of param group 0 after step k's scheduler step
  C/momentum              F64 [20], OneCycleLR cases only (SGD momentum / Adam beta1)
  __metadata__[C]         JSON {"optimizer", "args", ["groups"], ["scheduler"], ...}

Every case draws from its own generators, seeded from SEED and a CRC of the case
name (torch.manual_seed for the default init of the modules, numpy for
everything else), so adding a case does not change the others, and the output
is byte-for-byte deterministic.
"""
import hashlib
import json
import math
import struct
import sys
import warnings
import zlib
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 20240611
HERE = Path(__file__).resolve().parent
STEPS = 20

# =============================================================================
# safetensors, by hand
# =============================================================================
ST_DTYPE = {  # numpy dtype -> (safetensors name, little-endian numpy dtype)
    np.dtype(np.float64): ("F64", "<f8"),
    np.dtype(np.float32): ("F32", "<f4"),
    np.dtype(np.int64): ("I64", "<i8"),
    np.dtype(np.bool_): ("BOOL", "|b1"),
}
ST_NUMPY = {name: np.dtype(le) for name, le in ST_DTYPE.values()}
ST_SIZE = {"F64": 8, "F32": 4, "I64": 8, "BOOL": 1}


def to_numpy(t):
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu().contiguous()
        return t.numpy().copy()
    return np.asarray(t)


def safetensors_bytes(tensors, metadata):
    """tensors: {name: np.ndarray or torch.Tensor}; metadata: {str: str}.
    Tensors are written sorted by name, contiguously, in header order."""
    header = {"__metadata__": {k: metadata[k] for k in sorted(metadata)}}
    blobs, offset = [], 0
    for name in sorted(tensors):
        a = to_numpy(tensors[name])
        st, le = ST_DTYPE[a.dtype]
        b = np.ascontiguousarray(a.astype(le, copy=False)).tobytes()
        assert len(b) == a.size * ST_SIZE[st]
        header[name] = {"dtype": st, "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((-(8 + len(h))) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def read_safetensors(data):
    """A minimal reader that checks the layout. Returns (metadata, {name: ndarray})."""
    assert len(data) >= 8
    (n,) = struct.unpack("<Q", data[:8])
    assert (8 + n) % 8 == 0, "header not padded to 8"
    assert 8 + n <= len(data)
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items())
    body = data[8 + n:]
    names = list(header)
    assert names == sorted(names), "tensors not sorted by name"
    out, pos = {}, 0
    for name in names:
        e = header[name]
        assert set(e) == {"dtype", "shape", "data_offsets"}, name
        b, en = e["data_offsets"]
        assert b == pos, f"{name}: gap or overlap at {pos} vs {b}"
        assert all(isinstance(d, int) and d >= 0 for d in e["shape"]), name
        size = int(np.prod(e["shape"], dtype=np.int64)) * ST_SIZE[e["dtype"]]
        assert en - b == size, f"{name}: {en - b} bytes for shape {e['shape']} {e['dtype']}"
        assert en <= len(body), f"{name}: out of bounds"
        out[name] = np.frombuffer(body[b:en], dtype=ST_NUMPY[e["dtype"]]).reshape(e["shape"])
        pos = en
    assert pos == len(body), "trailing bytes after the last tensor"
    return meta, out


def case_rng(name):
    crc = zlib.crc32(name.encode())
    torch.manual_seed((SEED << 32) ^ crc)
    return np.random.default_rng([SEED, crc])


def jdump(obj):
    return json.dumps(obj, separators=(", ", ": "))


# =============================================================================
# Modules that torch 1.13 does not have (written with the names Tessera expects)
# =============================================================================
class RMSNorm(nn.Module):
    """out = x * rsqrt(mean(x^2, -1, keepdim) + eps) * weight (torch 2.4 / HF Llama)."""

    def __init__(self, normalized_shape, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(normalized_shape))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class GPTLayerNorm(nn.Module):
    """nanoGPT's LayerNorm: bias optional (torch 1.13's LayerNorm has no bias=False)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


def causal_mask(T):
    """bool [T, T], True above the diagonal = masked (PyTorch attn_mask convention)."""
    return torch.ones(T, T, dtype=torch.bool).triu(1)


class CausalSelfAttention(nn.Module):
    """nanoGPT's CausalSelfAttention (the non-flash path), dropout 0."""

    def __init__(self, n_embd, n_head, bias):
        super().__init__()
        assert n_embd % n_head == 0
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(causal_mask(T), float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class GPTMLP(nn.Module):
    def __init__(self, n_embd, bias):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class DecoderBlock(nn.Module):
    """nanoGPT's Block: pre-LayerNorm, causal self-attention, GELU MLP."""

    def __init__(self, d_model, n_head, bias=True):
        super().__init__()
        self.ln_1 = GPTLayerNorm(d_model, bias)
        self.attn = CausalSelfAttention(d_model, n_head, bias)
        self.ln_2 = GPTLayerNorm(d_model, bias)
        self.mlp = GPTMLP(d_model, bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class MLP(nn.Module):
    def __init__(self, in_features, hidden, num_classes):
        super().__init__()
        layers, d = [], in_features
        for h in hidden:
            layers += [nn.Linear(d, h), nn.ReLU()]
            d = h
        layers.append(nn.Linear(d, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class LeNet(nn.Module):
    def __init__(self, channels, hidden, num_classes):
        super().__init__()
        c1, c2 = channels
        self.features = nn.Sequential(
            nn.Conv2d(1, c1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Linear(c2 * 7 * 7, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


class BasicBlock(nn.Module):
    """torchvision.models.resnet.BasicBlock."""
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    """torchvision.models.resnet.ResNet (BasicBlock only), widths configurable,
    "cifar" stem = 3x3 stride-1 conv, no maxpool. torch's default init (not
    torchvision's kaiming_normal_): the parameters are stored anyway."""

    def __init__(self, block, layers, widths, stem, num_classes):
        super().__init__()
        assert block == "basic" and stem == "cifar" and len(layers) == len(widths) == 4
        self.inplanes = widths[0]
        self.conv1 = nn.Conv2d(3, self.inplanes, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(widths[0], layers[0], 1)
        self.layer2 = self._make_layer(widths[1], layers[1], 2)
        self.layer3 = self._make_layer(widths[2], layers[2], 2)
        self.layer4 = self._make_layer(widths[3], layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[3] * BasicBlock.expansion, num_classes)

    def _make_layer(self, planes, blocks, stride):
        downsample = None
        if stride != 1 or self.inplanes != planes * BasicBlock.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * BasicBlock.expansion, 1, stride, bias=False),
                nn.BatchNorm2d(planes * BasicBlock.expansion))
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * BasicBlock.expansion
        for _ in range(1, blocks):
            layers.append(BasicBlock(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class GPT(nn.Module):
    """nanoGPT's GPT, weight tying by using wte.weight as the output projection
    (so there is no lm_head.weight entry in the state_dict)."""

    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, dropout, bias):
        super().__init__()
        assert dropout == 0.0
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList([DecoderBlock(n_embd, n_head, bias) for _ in range(n_layer)]),
            ln_f=GPTLayerNorm(n_embd, bias)))
        self.block_size = block_size

    def forward(self, idx):
        b, t = idx.size()
        assert t <= self.block_size
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        return F.linear(x, self.transformer.wte.weight)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin(T, head_dim, theta, dtype):
    # HF LlamaRotaryEmbedding: inv_freq and the angles in float32, cast to the model dtype.
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = torch.outer(torch.arange(T).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


class LlamaAttention(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, rope_theta):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, dim // n_heads
        self.rope_theta = rope_theta
        self.q_proj = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(n_heads * self.head_dim, dim, bias=False)

    def forward(self, x):
        B, T, _ = x.shape
        hd = self.head_dim
        q = self.q_proj(x).view(B, T, self.n_heads, hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv_heads, hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, hd).transpose(1, 2)
        cos, sin = rope_cos_sin(T, hd, self.rope_theta, x.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.n_heads // self.n_kv_heads   # kv head j serves query heads j*rep .. j*rep+rep-1
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(causal_mask(T), float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.n_heads * hd))


class LlamaMLP(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden_dim, bias=False)
        self.up_proj = nn.Linear(dim, hidden_dim, bias=False)
        self.down_proj = nn.Linear(hidden_dim, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, hidden_dim, norm_eps, rope_theta):
        super().__init__()
        self.input_layernorm = RMSNorm(dim, norm_eps)
        self.self_attn = LlamaAttention(dim, n_heads, n_kv_heads, rope_theta)
        self.post_attention_layernorm = RMSNorm(dim, norm_eps)
        self.mlp = LlamaMLP(dim, hidden_dim)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, vocab_size, dim, n_layers, n_heads, n_kv_heads, hidden_dim, norm_eps, rope_theta):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, dim)
        self.layers = nn.ModuleList([LlamaDecoderLayer(dim, n_heads, n_kv_heads, hidden_dim, norm_eps, rope_theta)
                                     for _ in range(n_layers)])
        self.norm = RMSNorm(dim, norm_eps)

    def forward(self, ids):
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class Llama(nn.Module):
    """HF-Llama-style decoder (LlamaForCausalLM names), untied lm_head."""

    def __init__(self, vocab_size, dim, n_layers, n_heads, n_kv_heads, hidden_dim, norm_eps, rope_theta,
                 max_seq_len, tie_embeddings):
        super().__init__()
        assert not tie_embeddings
        self.max_seq_len = max_seq_len
        self.model = LlamaModel(vocab_size, dim, n_layers, n_heads, n_kv_heads, hidden_dim, norm_eps, rope_theta)
        self.lm_head = nn.Linear(dim, vocab_size, bias=False)

    def forward(self, ids):
        assert ids.shape[1] <= self.max_seq_len
        return self.lm_head(self.model(ids))


CUSTOM = {"RMSNorm": RMSNorm, "DecoderBlock": DecoderBlock, "MLP": MLP, "LeNet": LeNet, "ResNet": ResNet,
          "GPT": GPT, "Llama": Llama}


def tuplify(v):
    if isinstance(v, list):
        return tuple(tuplify(x) for x in v)
    if isinstance(v, dict):
        return {k: tuplify(x) for k, x in v.items()}
    return v


def make_module(type_, args):
    cls = CUSTOM.get(type_) or getattr(nn, type_)
    return cls(**tuplify(args))


# =============================================================================
# Layer / model cases
# =============================================================================
class In:
    """One input: shape, value domain, dtype (None: the case's float dtype).
    Domains: n (normal), pos, prob, logp, simplex (along the last dim), wide
    (normal * 2), int:lo:hi (I64 in [lo, hi)), kpm (BOOL key padding mask,
    True = ignore, position 0 never ignored), same:i (a copy of input i)."""

    def __init__(self, *shape, d="n", dtype=None):
        self.shape, self.d, self.dtype = tuple(shape), d, dtype


def values(rng, shape, d):
    if d == "n":
        return rng.standard_normal(shape)
    if d == "wide":
        return rng.standard_normal(shape) * 2.0
    if d == "pos":
        return rng.uniform(0.5, 2.0, shape)
    if d == "prob":
        return rng.uniform(0.05, 0.95, shape)
    if d == "logp":
        x = rng.standard_normal(shape)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))
    if d == "simplex":
        x = np.exp(rng.standard_normal(shape))
        return x / x.sum(-1, keepdims=True)
    if d.startswith("int:"):
        lo, hi = map(int, d.split(":")[1:])
        return rng.integers(lo, hi, shape).astype(np.int64)
    if d == "kpm":
        m = rng.random(shape) < 0.4
        m[..., 0] = False
        return m
    raise ValueError(f"unknown domain {d}")


class LayerCase:
    def __init__(self, name, type_, args, inputs, train, call, fwd, prep, note, dtype):
        self.name, self.type, self.args, self.inputs = name, type_, args, inputs
        self.train, self.call, self.fwd, self.prep, self.note, self.dtype = train, call, fwd, prep, note, dtype

    def meta(self):
        m = {"type": self.type, "args": self.args, "train": self.train, "call": self.call, "dtype": self.dtype}
        if self.note:
            m["note"] = self.note
        return m


LAYERS = []


def L(name, type_, args, inputs, train=False, call=None, fwd=None, prep=None, note=None, dtype="f64"):
    assert name.split("/")[0] == type_ or type_ in CUSTOM, name
    LAYERS.append(LayerCase(name, type_, args, inputs, train, call or {}, fwd, prep, note, dtype))


def mha_fwd(m, xs, case):
    q, k, v = xs[:3]
    kpm = xs[3] if len(xs) > 3 else None
    mask = causal_mask(q.shape[1] if m.batch_first else q.shape[0]) if case.call.get("causal") else None
    return m(q, k, v, key_padding_mask=kpm, need_weights=False, attn_mask=mask)[0]


def tel_fwd(m, xs, case):
    mask = causal_mask(xs[0].shape[1]) if case.call.get("causal") else None
    return m(xs[0], src_mask=mask)


# ---- Linear, Bilinear, convolutions ------------------------------------------
L("Linear/basic", "Linear", {"in_features": 4, "out_features": 3, "bias": True}, [In(2, 4)])
L("Linear/no_bias", "Linear", {"in_features": 4, "out_features": 3, "bias": False}, [In(3, 4)])
L("Linear/3d", "Linear", {"in_features": 5, "out_features": 2, "bias": True}, [In(2, 3, 5)])
L("Bilinear/basic", "Bilinear", {"in1_features": 3, "in2_features": 4, "out_features": 2, "bias": True},
  [In(3, 3), In(3, 4)])
L("Bilinear/no_bias", "Bilinear", {"in1_features": 2, "in2_features": 3, "out_features": 4, "bias": False},
  [In(2, 2), In(2, 3)])


def conv_args(cin, cout, k, stride=1, padding=0, dilation=1, groups=1, bias=True, **extra):
    a = {"in_channels": cin, "out_channels": cout, "kernel_size": k, "stride": stride, "padding": padding}
    a.update(extra)
    a.update({"dilation": dilation, "groups": groups, "bias": bias})
    return a


L("Conv1d/basic", "Conv1d", conv_args(3, 4, 3), [In(2, 3, 8)])
L("Conv1d/padding", "Conv1d", conv_args(3, 4, 3, padding=1), [In(2, 3, 8)])
L("Conv1d/stride2", "Conv1d", conv_args(3, 4, 3, stride=2, padding=1), [In(2, 3, 9)])
L("Conv1d/dilation", "Conv1d", conv_args(3, 2, 3, padding=2, dilation=2), [In(2, 3, 8)])
L("Conv1d/groups", "Conv1d", conv_args(4, 6, 3, padding=1, groups=2), [In(2, 4, 7)])
L("Conv1d/no_bias", "Conv1d", conv_args(2, 3, 2, bias=False), [In(3, 2, 5)])
L("Conv2d/basic", "Conv2d", conv_args(3, 4, 3), [In(2, 3, 6, 6)])
L("Conv2d/padding1", "Conv2d", conv_args(3, 4, 3, padding=1), [In(2, 3, 5, 5)])
L("Conv2d/stride2", "Conv2d", conv_args(3, 4, 3, stride=2, padding=1), [In(2, 3, 7, 6)])
L("Conv2d/groups2", "Conv2d", conv_args(4, 6, 3, padding=1, groups=2), [In(2, 4, 5, 5)])
L("Conv2d/stride2_groups", "Conv2d", conv_args(4, 4, 3, stride=2, padding=1, groups=2), [In(2, 4, 6, 6)])
L("Conv2d/no_bias", "Conv2d", conv_args(3, 4, 3, padding=1, bias=False), [In(2, 3, 5, 5)])
L("Conv2d/rect_kernel", "Conv2d", conv_args(3, 2, [2, 3], stride=[2, 1], padding=[1, 0]), [In(2, 3, 6, 7)])
L("Conv2d/dilation", "Conv2d", conv_args(2, 3, 3, padding=2, dilation=2), [In(2, 2, 6, 6)])
L("ConvTranspose2d/basic", "ConvTranspose2d", conv_args(3, 2, 3), [In(2, 3, 4, 4)])
L("ConvTranspose2d/stride2_pad1_outpad1", "ConvTranspose2d",
  conv_args(4, 3, 3, stride=2, padding=1, output_padding=1), [In(2, 4, 3, 3)])


# ---- normalization --------------------------------------------------------------
def bn_args(c, eps=1e-5, momentum=0.1, affine=True):
    return {"num_features": c, "eps": eps, "momentum": momentum, "affine": affine, "track_running_stats": True}


BN_NOTE = ("running_mean/running_var set to random values before the call; "
           "train: running_var is updated with the unbiased batch variance")
L("BatchNorm1d/train_2d", "BatchNorm1d", bn_args(3), [In(4, 3)], train=True, note=BN_NOTE)
L("BatchNorm1d/train_3d", "BatchNorm1d", bn_args(3), [In(3, 3, 5)], train=True, note=BN_NOTE)
L("BatchNorm1d/eval_2d", "BatchNorm1d", bn_args(3), [In(4, 3)], note=BN_NOTE)
L("BatchNorm1d/eval_3d", "BatchNorm1d", bn_args(3), [In(3, 3, 5)], note=BN_NOTE)
L("BatchNorm2d/train", "BatchNorm2d", bn_args(3), [In(2, 3, 4, 4)], train=True, note=BN_NOTE)
L("BatchNorm2d/eval", "BatchNorm2d", bn_args(3), [In(2, 3, 4, 4)], note=BN_NOTE)
L("BatchNorm2d/train_momentum_eps", "BatchNorm2d", bn_args(4, eps=1e-3, momentum=0.3), [In(2, 4, 3, 3)],
  train=True, note=BN_NOTE)
L("BatchNorm2d/train_no_affine", "BatchNorm2d", bn_args(3, affine=False), [In(2, 3, 3, 4)], train=True,
  note=BN_NOTE)
L("LayerNorm/last1", "LayerNorm", {"normalized_shape": [5], "eps": 1e-5, "elementwise_affine": True}, [In(2, 3, 5)])
L("LayerNorm/last2", "LayerNorm", {"normalized_shape": [3, 5], "eps": 1e-5, "elementwise_affine": True},
  [In(2, 3, 5)])
L("LayerNorm/no_affine", "LayerNorm", {"normalized_shape": [5], "eps": 1e-5, "elementwise_affine": False},
  [In(2, 3, 5)])
L("LayerNorm/last2_no_affine_eps", "LayerNorm", {"normalized_shape": [3, 4], "eps": 1e-3, "elementwise_affine": False},
  [In(2, 3, 4)])
L("GroupNorm/basic", "GroupNorm", {"num_groups": 2, "num_channels": 4, "eps": 1e-5, "affine": True},
  [In(2, 4, 3, 3)])
L("GroupNorm/3d", "GroupNorm", {"num_groups": 3, "num_channels": 6, "eps": 1e-5, "affine": True}, [In(2, 6, 5)])
L("GroupNorm/one_group_no_affine", "GroupNorm", {"num_groups": 1, "num_channels": 4, "eps": 1e-3, "affine": False},
  [In(2, 4, 2, 3)])
L("GroupNorm/instance", "GroupNorm", {"num_groups": 4, "num_channels": 4, "eps": 1e-5, "affine": True},
  [In(2, 4, 3, 3)])
RMS_NOTE = "torch 1.13 has no RMSNorm: out = x * rsqrt(mean(x^2, -1, keepdim) + eps) * weight"
L("RMSNorm/basic", "RMSNorm", {"normalized_shape": 6, "eps": 1e-6}, [In(2, 3, 6)], note=RMS_NOTE)
L("RMSNorm/2d", "RMSNorm", {"normalized_shape": 4, "eps": 1e-6}, [In(5, 4)], note=RMS_NOTE)
L("RMSNorm/eps", "RMSNorm", {"normalized_shape": 6, "eps": 1e-2}, [In(2, 6, d="prob")], note=RMS_NOTE)


# ---- embedding ------------------------------------------------------------------
def ids_with(value, at):
    """prep hook: write `value` into the index input at flat positions `at`."""
    def f(xs):
        xs[0].view(-1)[list(at)] = value
    return f


L("Embedding/basic", "Embedding", {"num_embeddings": 10, "embedding_dim": 4}, [In(2, 5, d="int:0:10", dtype="i64")])
L("Embedding/padding_idx", "Embedding", {"num_embeddings": 7, "embedding_dim": 3, "padding_idx": 2},
  [In(3, 4, d="int:0:7", dtype="i64")], prep=ids_with(2, (1, 6)),
  note="indices contain padding_idx (its row is zero and gets no gradient) and repeats")

# ---- pooling, reshaping -----------------------------------------------------------
L("MaxPool2d/k2", "MaxPool2d", {"kernel_size": 2}, [In(2, 3, 6, 6)])
L("MaxPool2d/k3s2p1", "MaxPool2d", {"kernel_size": 3, "stride": 2, "padding": 1}, [In(2, 2, 7, 6)])
L("MaxPool2d/rect", "MaxPool2d", {"kernel_size": [2, 3], "stride": [1, 2]}, [In(1, 2, 5, 7)])
L("AvgPool2d/k2", "AvgPool2d", {"kernel_size": 2}, [In(2, 3, 6, 6)])
L("AvgPool2d/k3s2p1", "AvgPool2d", {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": True},
  [In(2, 2, 7, 6)])
L("AvgPool2d/k3s2p1_exclude_pad", "AvgPool2d",
  {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False}, [In(2, 2, 7, 6)])
L("AdaptiveAvgPool2d/global", "AdaptiveAvgPool2d", {"output_size": [1, 1]}, [In(2, 3, 4, 5)])
L("AdaptiveAvgPool2d/nondiv", "AdaptiveAvgPool2d", {"output_size": [3, 2]}, [In(2, 3, 5, 7)])
L("Flatten/default", "Flatten", {"start_dim": 1, "end_dim": -1}, [In(2, 3, 4)])
L("Flatten/middle", "Flatten", {"start_dim": 1, "end_dim": 2}, [In(2, 3, 4, 5)])
L("Unflatten/basic", "Unflatten", {"dim": 1, "unflattened_size": [3, 4]}, [In(2, 12)])
L("Unflatten/last", "Unflatten", {"dim": -1, "unflattened_size": [2, 3]}, [In(2, 4, 6)])

# ---- activations --------------------------------------------------------------------
L("ReLU/basic", "ReLU", {}, [In(3, 5, d="wide")])
L("GELU/none", "GELU", {"approximate": "none"}, [In(3, 5, d="wide")])
L("GELU/tanh", "GELU", {"approximate": "tanh"}, [In(3, 5, d="wide")])
L("SiLU/basic", "SiLU", {}, [In(3, 5, d="wide")])
L("Tanh/basic", "Tanh", {}, [In(3, 5, d="wide")])
L("Sigmoid/basic", "Sigmoid", {}, [In(3, 5, d="wide")])
L("LeakyReLU/0.2", "LeakyReLU", {"negative_slope": 0.2}, [In(3, 5, d="wide")])
L("ELU/basic", "ELU", {"alpha": 1.0}, [In(3, 5, d="wide")])
L("ELU/alpha0.5", "ELU", {"alpha": 0.5}, [In(3, 5, d="wide")])
L("Softplus/basic", "Softplus", {"beta": 1.0, "threshold": 20.0}, [In(3, 5, d="wide")])
L("Softplus/beta2_threshold2", "Softplus", {"beta": 2.0, "threshold": 2.0}, [In(3, 5, d="wide")])
L("Mish/basic", "Mish", {}, [In(3, 5, d="wide")])
L("Hardtanh/basic", "Hardtanh", {"min_val": -1.0, "max_val": 1.0}, [In(3, 5, d="wide")])
L("Softmax/last", "Softmax", {"dim": -1}, [In(2, 3, 4, d="wide")])
L("LogSoftmax/dim1", "LogSoftmax", {"dim": 1}, [In(2, 4, 3, d="wide")])

# ---- attention, transformer ---------------------------------------------------------
MHA_NOTE = ("in0=query, in1=key, in2=value, in3=key_padding_mask (True = ignore); out = attention output "
            "(need_weights=False); grad/in<i> are the gradients through each argument separately")


def mha(embed_dim=8, num_heads=2, batch_first=True, bias=True):
    return {"embed_dim": embed_dim, "num_heads": num_heads, "dropout": 0.0, "bias": bias, "batch_first": batch_first}


L("MultiheadAttention/self_batch_first", "MultiheadAttention", mha(),
  [In(2, 4, 8), In(2, 4, 8, d="same:0"), In(2, 4, 8, d="same:0")], fwd=mha_fwd,
  note=MHA_NOTE + "; self-attention: in0 == in1 == in2, the gradient of the shared tensor is their sum")
L("MultiheadAttention/cross_seq_first", "MultiheadAttention", mha(batch_first=False),
  [In(3, 2, 8), In(5, 2, 8), In(5, 2, 8)], fwd=mha_fwd, note=MHA_NOTE)
L("MultiheadAttention/cross_batch_first", "MultiheadAttention", mha(),
  [In(2, 3, 8), In(2, 5, 8), In(2, 5, 8)], fwd=mha_fwd, note=MHA_NOTE)
L("MultiheadAttention/key_padding_mask", "MultiheadAttention", mha(),
  [In(2, 3, 8), In(2, 5, 8), In(2, 5, 8), In(2, 5, d="kpm", dtype="bool")], fwd=mha_fwd, note=MHA_NOTE)
L("MultiheadAttention/key_padding_mask_seq_first", "MultiheadAttention", mha(batch_first=False),
  [In(4, 3, 8), In(5, 3, 8), In(5, 3, 8), In(3, 5, d="kpm", dtype="bool")], fwd=mha_fwd, note=MHA_NOTE)
CAUSAL_NOTE = "causal: attn_mask = bool upper triangle (query i attends to keys j <= i)"
L("MultiheadAttention/causal", "MultiheadAttention", mha(),
  [In(2, 5, 8), In(2, 5, 8, d="same:0"), In(2, 5, 8, d="same:0")], call={"causal": True}, fwd=mha_fwd,
  note=MHA_NOTE + "; self-attention; " + CAUSAL_NOTE)
L("MultiheadAttention/causal_seq_first", "MultiheadAttention", mha(batch_first=False),
  [In(4, 2, 8), In(4, 2, 8), In(4, 2, 8)], call={"causal": True}, fwd=mha_fwd,
  note=MHA_NOTE + "; " + CAUSAL_NOTE)
L("MultiheadAttention/causal_key_padding_mask", "MultiheadAttention", mha(),
  [In(2, 5, 8), In(2, 5, 8, d="same:0"), In(2, 5, 8, d="same:0"), In(2, 5, d="kpm", dtype="bool")],
  call={"causal": True}, fwd=mha_fwd, note=MHA_NOTE + "; self-attention; " + CAUSAL_NOTE)
L("MultiheadAttention/no_bias", "MultiheadAttention", mha(bias=False),
  [In(2, 4, 8), In(2, 4, 8, d="same:0"), In(2, 4, 8, d="same:0")], fwd=mha_fwd,
  note=MHA_NOTE + "; self-attention")
L("MultiheadAttention/heads4_dim12", "MultiheadAttention", mha(embed_dim=12, num_heads=4),
  [In(2, 3, 12), In(2, 4, 12), In(2, 4, 12)], fwd=mha_fwd, note=MHA_NOTE)


def tel(activation, norm_first):
    return {"d_model": 8, "nhead": 2, "dim_feedforward": 16, "dropout": 0.0, "activation": activation,
            "layer_norm_eps": 1e-5, "batch_first": True, "norm_first": norm_first}


for _act in ("relu", "gelu"):
    for _nf in (False, True):
        L(f"TransformerEncoderLayer/{_act}_{'pre' if _nf else 'post'}norm", "TransformerEncoderLayer",
          tel(_act, _nf), [In(2, 5, 8)], fwd=tel_fwd)
L("TransformerEncoderLayer/gelu_prenorm_causal", "TransformerEncoderLayer", tel("gelu", True), [In(2, 5, 8)],
  call={"causal": True}, fwd=tel_fwd, note="causal: src_mask = bool upper triangle")

DB_NOTE = ("nanoGPT Block: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)); attn: q, k, v = split(c_attn(x), d, -1), "
           "heads [B, n_head, T, d/n_head], causal softmax(q k^T / sqrt(d/n_head)) v, c_proj; "
           "mlp = c_proj(gelu(c_fc(x))) (exact GELU, 4d hidden); LayerNorm eps 1e-5 (weight only if bias false)")
L("DecoderBlock/bias", "DecoderBlock", {"d_model": 8, "n_head": 2, "bias": True}, [In(2, 5, 8)], note=DB_NOTE)
L("DecoderBlock/no_bias", "DecoderBlock", {"d_model": 8, "n_head": 2, "bias": False}, [In(2, 5, 8)], note=DB_NOTE)
L("DecoderBlock/heads4", "DecoderBlock", {"d_model": 12, "n_head": 4, "bias": True}, [In(1, 6, 12)], note=DB_NOTE)

# ---- losses (module form; in0 = input, in1 = target; out is 0-D) ---------------------------
L("CrossEntropyLoss/basic", "CrossEntropyLoss", {"reduction": "mean", "label_smoothing": 0.0},
  [In(4, 5, d="wide"), In(4, d="int:0:5", dtype="i64")])
L("CrossEntropyLoss/label_smoothing", "CrossEntropyLoss", {"reduction": "mean", "label_smoothing": 0.1},
  [In(4, 5, d="wide"), In(4, d="int:0:5", dtype="i64")])
L("CrossEntropyLoss/sum_3d", "CrossEntropyLoss", {"reduction": "sum", "label_smoothing": 0.0},
  [In(2, 5, 3, d="wide"), In(2, 3, d="int:0:5", dtype="i64")])
L("MSELoss/basic", "MSELoss", {"reduction": "mean"}, [In(3, 4), In(3, 4)])
L("MSELoss/sum", "MSELoss", {"reduction": "sum"}, [In(2, 3, 2), In(2, 3, 2)])
L("BCEWithLogitsLoss/basic", "BCEWithLogitsLoss", {"reduction": "mean"}, [In(3, 4, d="wide"), In(3, 4, d="prob")])
L("NLLLoss/basic", "NLLLoss", {"reduction": "mean"}, [In(4, 5, d="logp"), In(4, d="int:0:5", dtype="i64")])
L("L1Loss/basic", "L1Loss", {"reduction": "mean"}, [In(3, 4), In(3, 4)])
L("SmoothL1Loss/basic", "SmoothL1Loss", {"reduction": "mean", "beta": 1.0}, [In(3, 4, d="wide"), In(3, 4)])
L("SmoothL1Loss/beta0.5", "SmoothL1Loss", {"reduction": "mean", "beta": 0.5}, [In(3, 4), In(3, 4)])
L("KLDivLoss/batchmean", "KLDivLoss", {"reduction": "batchmean", "log_target": False},
  [In(3, 4, d="logp"), In(3, 4, d="simplex")])
L("BCELoss/basic", "BCELoss", {"reduction": "mean"}, [In(3, 4, d="prob"), In(3, 4, d="prob")])

# ---- models (float32) -----------------------------------------------------------------------
L("MLP/tiny", "MLP", {"in_features": 12, "hidden": [16, 16], "num_classes": 5}, [In(4, 12)], dtype="f32",
  note="net = Linear(12,16) ReLU Linear(16,16) ReLU Linear(16,5)")
L("LeNet/tiny", "LeNet", {"channels": [4, 8], "hidden": 16, "num_classes": 10}, [In(2, 1, 28, 28)], dtype="f32",
  note="features = Conv2d(1,4,3,p1) ReLU MaxPool2d(2) Conv2d(4,8,3,p1) ReLU MaxPool2d(2); flatten; "
       "classifier = Linear(392,16) ReLU Linear(16,10)")
L("ResNet/tiny_cifar", "ResNet", {"block": "basic", "layers": [1, 1, 1, 1], "widths": [8, 16, 32, 64],
                                  "stem": "cifar", "num_classes": 10},
  [In(2, 3, 16, 16)], train=True, dtype="f32",
  note="torchvision ResNet/BasicBlock names; stem conv1 3x3 s1 p1 no bias, bn1, relu, no maxpool; "
       "layer strides 1,2,2,2; downsample = 1x1 conv (no bias) + BN when the shape changes; "
       "adaptive avg pool, fc; BN running stats randomised before the call, train mode")
L("GPT/tiny", "GPT", {"vocab_size": 32, "block_size": 8, "n_layer": 2, "n_head": 2, "n_embd": 16,
                      "dropout": 0.0, "bias": True},
  [In(2, 8, d="int:0:32", dtype="i64")], dtype="f32",
  note="nanoGPT; logits = ln_f(x) @ transformer.wte.weight^T (tied, no lm_head.weight); all T positions")
L("Llama/tiny", "Llama", {"vocab_size": 32, "dim": 16, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
                          "hidden_dim": 32, "norm_eps": 1e-6, "rope_theta": 10000.0, "max_seq_len": 16,
                          "tie_embeddings": False},
  [In(2, 6, d="int:0:32", dtype="i64")], dtype="f32",
  note="HF Llama names; GQA: kv head j serves query heads 2j, 2j+1 (repeat_interleave); RoPE rotate_half, "
       "inv_freq = 1/theta^(arange(0,hd,2)/hd), emb = cat(freqs, freqs), cos/sin in float32; causal; "
       "mlp = down(silu(gate(x)) * up(x))")

TORCH_DTYPE = {"f64": torch.float64, "f32": torch.float32, "i64": torch.int64, "bool": torch.bool}


def perturb(m, rng):
    """Constant-initialised parameters (norm weights/biases, zero biases) get
    N(0, 0.2^2) noise; BatchNorm running stats get random values."""
    with torch.no_grad():
        for _, p in m.named_parameters():
            if p.numel() > 1 and bool((p == p.reshape(-1)[0]).all()):
                p.add_(torch.from_numpy(rng.standard_normal(tuple(p.shape)) * 0.2).to(p.dtype))
        for name, b in m.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(torch.from_numpy(rng.standard_normal(tuple(b.shape)) * 0.5))
            elif name.endswith("running_var"):
                b.copy_(torch.from_numpy(rng.uniform(0.5, 2.0, tuple(b.shape))))


def run_layer(case, out):
    C = case.name
    rng = case_rng(C)                       # also seeds torch for the default init
    fdt = TORCH_DTYPE[case.dtype]
    m = make_module(case.type, case.args).to(fdt)
    m.train(case.train)
    perturb(m, rng)
    param_names = [n for n, _ in m.named_parameters()]
    sd0 = {k: v.detach().clone() for k, v in m.state_dict().items()}
    buffer_names = [k for k in sd0 if k not in param_names]

    xs, leaves = [], []
    for i, spec in enumerate(case.inputs):
        if spec.d.startswith("same:"):
            t = xs[int(spec.d[5:])].detach().clone()
        else:
            t = torch.from_numpy(np.array(values(rng, spec.shape, spec.d))).to(TORCH_DTYPE[spec.dtype or case.dtype])
        xs.append(t)
    if case.prep:
        case.prep(xs)
    for i, t in enumerate(xs):
        if t.is_floating_point():
            t.requires_grad_(True)
            leaves.append(i)

    y = case.fwd(m, xs, case) if case.fwd else m(*xs)
    assert y.dtype == fdt, (C, y.dtype)
    assert torch.isfinite(y).all(), C
    v = torch.from_numpy(rng.standard_normal(tuple(y.shape))).to(fdt)
    params = [p for _, p in m.named_parameters()]
    grads = torch.autograd.grad(y, [xs[i] for i in leaves] + params, v, allow_unused=True)

    for i, t in enumerate(xs):
        out[f"{C}/in{i}"] = t.detach()
    for k, t in sd0.items():
        out[f"{C}/param/{k}"] = t
    out[f"{C}/out"] = y.detach()
    out[f"{C}/v"] = v
    for j, g in enumerate(grads):
        if j < len(leaves):
            ref, key = xs[leaves[j]], f"{C}/grad/in{leaves[j]}"
        else:
            ref, key = params[j - len(leaves)], f"{C}/grad/param/{param_names[j - len(leaves)]}"
        out[key] = (g if g is not None else torch.zeros_like(ref)).detach()
        assert torch.isfinite(out[key]).all(), key
    sd1 = m.state_dict()
    for k in buffer_names:
        out[f"{C}/after/{k}"] = sd1[k].detach().clone()


# =============================================================================
# Optimizer / scheduler cases (float32)
# =============================================================================
class Lion(torch.optim.Optimizer):
    """lucidrains/lion-pytorch: p = p*(1 - lr*wd); p -= lr*sign(b1*m + (1-b1)*g); m = b2*m + (1-b2)*g."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            lr, wd = group["lr"], group["weight_decay"]
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad, state = p.grad, self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p)
                exp_avg = state["exp_avg"]
                p.data.mul_(1 - lr * wd)
                update = exp_avg.clone().mul_(beta1).add(grad, alpha=1 - beta1).sign_()
                p.add_(update, alpha=-lr)
                exp_avg.mul_(beta2).add_(grad, alpha=1 - beta2)


LION_NOTE = ("torch 1.13 has no Lion; lucidrains/lion-pytorch: p = p * (1 - lr * weight_decay); "
             "p = p - lr * sign(beta1 * m + (1 - beta1) * g); m = beta2 * m + (1 - beta2) * g; m0 = 0")
WC_NOTE = ("WarmupCosine = LambdaLR(lr_lambda): lr = base_lr * f(t), t = scheduler steps taken so far "
           "(0 at construction, so optimizer step k uses f(k-1) and C/lr[k-1] = base_lr * f(k)); "
           "f(t) = (t + 1) / warmup_steps for t < warmup_steps, else min_ratio + (1 - min_ratio) * 0.5 * "
           "(1 + cos(pi * (t - warmup_steps) / (total_steps - warmup_steps))), min_ratio = min_lr / base_lr")


def sgd(lr=0.1, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0):
    return {"lr": lr, "momentum": momentum, "dampening": dampening, "weight_decay": weight_decay,
            "nesterov": nesterov}


def adam(lr=0.05, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False):
    return {"lr": lr, "betas": list(betas), "eps": eps, "weight_decay": weight_decay, "amsgrad": amsgrad}


def rmsprop(lr=0.01, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False):
    return {"lr": lr, "alpha": alpha, "eps": eps, "weight_decay": weight_decay, "momentum": momentum,
            "centered": centered}


OPTIM = []


def O(name, optimizer, args, groups=None, scheduler=None, note=None):
    meta = {"optimizer": optimizer, "args": args}
    if groups is not None:
        meta["groups"] = groups
    if scheduler is not None:
        meta["scheduler"] = scheduler
    if note:
        meta["note"] = note
    meta.update({"dtype": "f32", "steps": STEPS, "loss": "mean((X @ W + b - Y)^2)"})
    OPTIM.append((name, meta))


O("SGD/plain", "SGD", sgd(lr=0.05))
O("SGD/momentum", "SGD", sgd(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01))
O("SGD/nesterov", "SGD", sgd(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01))
O("Adam/basic", "Adam", adam())
O("Adam/weight_decay_amsgrad", "Adam", adam(betas=(0.9, 0.9), weight_decay=0.1, amsgrad=True))
O("AdamW/basic", "AdamW", adam(weight_decay=0.1))
O("AdamW/amsgrad", "AdamW", adam(betas=(0.9, 0.9), weight_decay=0.1, amsgrad=True))
O("RMSprop/plain", "RMSprop", rmsprop())
O("RMSprop/momentum_centered", "RMSprop", rmsprop(momentum=0.5, centered=True, weight_decay=0.05))
O("Adagrad/basic", "Adagrad", {"lr": 0.1, "lr_decay": 0.01, "weight_decay": 0.05,
                               "initial_accumulator_value": 0.1, "eps": 1e-10})
O("Lion/basic", "Lion", {"lr": 1e-3, "betas": [0.9, 0.99], "weight_decay": 0.1}, note=LION_NOTE)
O("Adam/param_groups", "Adam", adam(lr=0.02, weight_decay=0.05), groups=[{}, {"lr": 0.005, "weight_decay": 0.0}])
O("SGD/param_groups", "SGD", sgd(lr=0.05, momentum=0.9), groups=[{"weight_decay": 0.1}, {"lr": 0.2, "momentum": 0.5}])

SCHED_SGD = sgd(lr=0.1, momentum=0.9)
O("StepLR/basic", "SGD", SCHED_SGD, scheduler={"type": "StepLR", "args": {"step_size": 5, "gamma": 0.5}})
O("MultiStepLR/basic", "SGD", SCHED_SGD,
  scheduler={"type": "MultiStepLR", "args": {"milestones": [3, 8, 15], "gamma": 0.3}})
O("ExponentialLR/basic", "SGD", SCHED_SGD, scheduler={"type": "ExponentialLR", "args": {"gamma": 0.9}})
O("CosineAnnealingLR/basic", "SGD", SCHED_SGD,
  scheduler={"type": "CosineAnnealingLR", "args": {"T_max": 10, "eta_min": 0.01}},
  note="20 steps > T_max: torch's (recursive) schedule continues periodically, back up towards base_lr")
O("LinearLR/basic", "SGD", SCHED_SGD,
  scheduler={"type": "LinearLR", "args": {"start_factor": 0.25, "end_factor": 1.0, "total_iters": 8}})
ONECYCLE = {"max_lr": 0.5, "total_steps": 20, "pct_start": 0.3, "anneal_strategy": "cos", "cycle_momentum": True,
            "base_momentum": 0.85, "max_momentum": 0.95, "div_factor": 25.0, "final_div_factor": 1e4,
            "three_phase": False}
ONECYCLE_NOTE = ("OneCycleLR sets lr (and momentum / Adam beta1) at construction; the optimizer's own lr and "
                 "momentum/beta1 are overwritten; the 20th scheduler step is at step_num 20 = total_steps, past "
                 "the last phase end (total_steps - 1), where torch's cosine formula turns back up; "
                 "C/momentum = momentum (SGD) or betas[0] (Adam) of group 0")
O("OneCycleLR/adam", "Adam", adam(lr=0.02), scheduler={"type": "OneCycleLR", "args": ONECYCLE}, note=ONECYCLE_NOTE)
O("OneCycleLR/sgd", "SGD", SCHED_SGD, scheduler={"type": "OneCycleLR", "args": ONECYCLE}, note=ONECYCLE_NOTE)
O("ReduceLROnPlateau/basic", "SGD", SCHED_SGD,
  scheduler={"type": "ReduceLROnPlateau", "args": {"mode": "min", "factor": 0.5, "patience": 2, "threshold": 1e-4,
                                                   "threshold_mode": "rel", "cooldown": 0, "min_lr": 0,
                                                   "eps": 1e-8}},
  note="scheduler.step(loss) with the loss computed before the optimizer step")
O("WarmupCosine/basic", "SGD", SCHED_SGD,
  scheduler={"type": "WarmupCosine", "args": {"warmup_steps": 5, "total_steps": 20, "min_lr": 0.001}},
  note=WC_NOTE)


def make_optimizer(meta, W, b):
    args = tuplify(meta["args"])
    if "groups" in meta:
        params = [dict(params=[p], **tuplify(g)) for p, g in zip((W, b), meta["groups"])]
    else:
        params = [W, b]
    cls = Lion if meta["optimizer"] == "Lion" else getattr(torch.optim, meta["optimizer"])
    return cls(params, **args)


def make_scheduler(meta, opt):
    s = meta.get("scheduler")
    if s is None:
        return None
    a = tuplify(s["args"])
    if s["type"] == "WarmupCosine":
        warm, total = a["warmup_steps"], a["total_steps"]
        min_ratio = a["min_lr"] / meta["args"]["lr"]

        def f(t):
            if t < warm:
                return (t + 1) / warm
            return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * (t - warm) / (total - warm)))
        return torch.optim.lr_scheduler.LambdaLR(opt, f)
    return getattr(torch.optim.lr_scheduler, s["type"])(opt, **a)


def problem():
    rng = np.random.default_rng([SEED, zlib.crc32(b"optim/problem")])
    X = rng.standard_normal((8, 4))
    Y = rng.standard_normal((8, 3))
    W = rng.standard_normal((4, 3)) * 0.5
    b = rng.standard_normal(3) * 0.5
    return [torch.from_numpy(a).float() for a in (X, Y, W, b)]


def run_optim(name, meta, out):
    case_rng(name)
    X, Y, W0, b0 = problem()
    W = W0.clone().requires_grad_(True)
    b = b0.clone().requires_grad_(True)
    opt = make_optimizer(meta, W, b)
    sched = make_scheduler(meta, opt)
    plateau = isinstance(sched, torch.optim.lr_scheduler.ReduceLROnPlateau)
    one_cycle = isinstance(sched, torch.optim.lr_scheduler.OneCycleLR)
    lrs, moms = [], []
    for k in range(1, STEPS + 1):
        opt.zero_grad()
        loss = ((X @ W + b - Y) ** 2).mean()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step(loss.item()) if plateau else sched.step()
        g0 = opt.param_groups[0]
        lrs.append(float(g0["lr"]))
        if one_cycle:
            moms.append(float(g0["betas"][0] if "betas" in g0 else g0["momentum"]))
        out[f"{name}/W/{k}"] = W.detach().clone()
        out[f"{name}/b/{k}"] = b.detach().clone()
        assert torch.isfinite(W).all() and torch.isfinite(b).all(), name
    out[f"{name}/X"], out[f"{name}/Y"], out[f"{name}/W0"], out[f"{name}/b0"] = X, Y, W0, b0
    out[f"{name}/lr"] = np.array(lrs, dtype=np.float64)
    if one_cycle:
        out[f"{name}/momentum"] = np.array(moms, dtype=np.float64)


# =============================================================================
def build():
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    files = {}
    tensors, meta = {}, {}
    for case in LAYERS:
        assert case.name not in meta, f"duplicate case {case.name}"
        try:
            run_layer(case, tensors)
        except Exception as e:
            raise RuntimeError(f"layer case {case.name}: {e}") from e
        meta[case.name] = jdump(case.meta())
    files["layers.safetensors"] = (safetensors_bytes(tensors, meta), len(meta), len(tensors))
    tensors, meta = {}, {}
    for name, m in OPTIM:
        assert name not in meta, f"duplicate case {name}"
        try:
            run_optim(name, m, tensors)
        except Exception as e:
            raise RuntimeError(f"optim case {name}: {e}") from e
        meta[name] = jdump(m)
    files["optim.safetensors"] = (safetensors_bytes(tensors, meta), len(meta), len(tensors))
    return files


def main(argv):
    check = "--check" in argv
    files = build()
    status = 0
    for fname, (data, ncases, ntensors) in files.items():
        meta, tens = read_safetensors(data)          # layout self-check
        assert len(meta) == ncases and len(tens) == ntensors
        for c in meta:                                # every case has tensors, every tensor a case
            assert any(k.startswith(c + "/") for k in tens), c
        for k in tens:
            assert any(k.startswith(c + "/") for c in meta), k
        path = HERE / fname
        sha = hashlib.sha256(data).hexdigest()
        if check:
            same = path.exists() and path.read_bytes() == data
            status |= not same
            print(f"{fname}: {'identical' if same else 'DIFFERS'} ({len(data)} bytes, sha256 {sha})")
        else:
            path.write_bytes(data)
            print(f"wrote {path}: {len(data)} bytes, {ncases} cases, {ntensors} tensors, sha256 {sha}")
    print(f"torch {torch.__version__}, numpy {np.__version__}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
