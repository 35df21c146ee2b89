#!/usr/bin/python3
"""Writes tests/golden/grad_scaler.safetensors: PyTorch 1.13's own GradScaler
(torch.cuda.amp.GradScaler, its Python state machine unchanged) driven through
a forced-overflow scenario on CPU, step by step, for Tessera's GradScaler tests.

Needs Debian's python3-torch (torch 1.13) and numpy; the safetensors package is
not needed (the file is written by hand). Run from anywhere:

    /usr/bin/python3 tests/golden/generate_amp.py            # write the file, print the table
    /usr/bin/python3 tests/golden/generate_amp.py --check    # regenerate in memory, compare
                                                             # byte for byte with the file on disk

Scenario (N = 14 steps, all float32):
  w = [0.5, -1, 2, 0.25]; SGD(lr=0.1, momentum=0.9)
  GradScaler(init_scale=2**16, growth_factor=2, backoff_factor=0.5, growth_interval=3)
  x_t = [1 + 0.1 t, -0.5, 0.25 t, 1]; x_t[1] = +inf at t = 2, 3; x_t[2] = nan at t = 8;
  x_11 = [3e38, 1, 1, 1] (finite, but scale * grad overflows to inf in backward)
  each step: zero_grad(set_to_none=True); scaler.scale((w * x_t).sum()).backward();
             scaler.unscale_(opt); clip_grad_norm_([w], max_norm=1.0); scaler.step(opt); scaler.update()

Tensors (names sorted in the file): inputs [N,4] F32, scale_before [N] F64 (get_scale() before
scale()), scale_after [N] F64 (after update()), skipped [N] F64 (1 = optimizer step skipped),
growth_tracker [N] F64 (state_dict()["_growth_tracker"] after update()), weights [N,4] F32 (w after
the step), unscaled_grad [N,4] F32 (w.grad right after unscale_, before clipping), momentum [N,4]
F32 (SGD momentum buffer after the step, zeros before the first real step).

How torch 1.13 is made to run GradScaler on CPU (the only patches; see the comments below):
  1. CPU kernels for aten::_amp_foreach_non_finite_check_and_unscale_ and aten::_amp_update_scale_
     (1.13 has CUDA ones only), registered with torch.library, mirroring AmpKernels.cu.
  2. torch.cuda.is_available() returns True while the GradScaler is constructed, else it disables itself.
  3. grad_scaler.py's two `assert <tensor>.is_cuda or ... 'xla'` lines used on this path are removed.
"""
import inspect
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np
import torch
import torch.cuda.amp.grad_scaler as gs

OUT = Path(__file__).resolve().parent / "grad_scaler.safetensors"
N = 14
LR, MOMENTUM, MAX_NORM = 0.1, 0.9, 1.0
INIT_SCALE, GROWTH, BACKOFF, INTERVAL = 2.0**16, 2.0, 0.5, 3

# =============================================================================
# 1. CPU kernels, following aten/src/ATen/native/cuda/AmpKernels.cu (1.13)
# =============================================================================
AMP_LIB = torch.library.Library("aten", "IMPL")  # keep a reference: dropping it unregisters


def non_finite_check_and_unscale_(grads, found_inf, inv_scale):
    # CUDA lambda, per element: if (!isfinite(val)) *found_inf = 1.f;
    #                           return inv_scale == 1.f ? val : val * inv_scale;   (float32)
    for g in grads:
        assert g.dtype == torch.float32  # (the CUDA kernel also takes f64/f16; not needed here)
        if not bool(torch.isfinite(g).all()):
            found_inf.fill_(1.0)
        if inv_scale.item() != 1.0:
            g.mul_(inv_scale)  # float32 * float32 -> float32, in place


def update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    # The single-thread CUDA kernel. The products are double (float * double), stored back to float.
    if found_inf.item():
        scale.fill_(scale.item() * backoff_factor)  # fill_ rounds the double to float32
        growth_tracker.fill_(0)
    else:
        successful = int(growth_tracker.item()) + 1
        if successful == growth_interval:
            new_scale = torch.tensor(scale.item() * growth_factor, dtype=torch.float32)
            if bool(torch.isfinite(new_scale)):  # do not grow the scale past fp32 bounds to inf
                scale.copy_(new_scale)
            growth_tracker.fill_(0)
        else:
            growth_tracker.fill_(successful)
    return scale


AMP_LIB.impl("_amp_foreach_non_finite_check_and_unscale_", non_finite_check_and_unscale_, "CPU")
AMP_LIB.impl("_amp_update_scale_", update_scale_, "CPU")

# =============================================================================
# 3. grad_scaler.py asserts that the loss (in scale()) and the scale / found_inf tensors (in
#    _MultiDeviceReplicator) are CUDA or XLA tensors. Nothing else on this path is device-specific,
#    so re-execute the module's own source with exactly those two asserts turned into `pass`.
# =============================================================================
_src = inspect.getsource(gs)
for _a in ("assert outputs.is_cuda or outputs.device.type == 'xla'",
           "assert master_tensor.is_cuda or master_tensor.device.type == 'xla'"):
    assert _src.count(_a) == 1, f"grad_scaler.py changed: {_a!r}"
    _src = _src.replace(_a, "pass  # CPU golden run: " + _a[len("assert "):])
exec(compile(_src, gs.__file__, "exec"), gs.__dict__)


def make_scaler():
    # 2. GradScaler.__init__ disables itself (with a warning) when torch.cuda.is_available() is False.
    real = torch.cuda.is_available
    torch.cuda.is_available = lambda: True
    try:
        scaler = gs.GradScaler(init_scale=INIT_SCALE, growth_factor=GROWTH,
                               backoff_factor=BACKOFF, growth_interval=INTERVAL)
    finally:
        torch.cuda.is_available = real
    assert scaler.is_enabled()
    return scaler


def inputs():
    x = torch.tensor([[1 + 0.1 * t, -0.5, 0.25 * t, 1.0] for t in range(N)], dtype=torch.float32)
    x[2, 1] = x[3, 1] = math.inf
    x[8, 2] = math.nan
    x[11] = torch.tensor([3e38, 1.0, 1.0, 1.0])
    return x


def run():
    xs = inputs()
    w = torch.tensor([0.5, -1.0, 2.0, 0.25], dtype=torch.float32, requires_grad=True)
    opt = torch.optim.SGD([w], lr=LR, momentum=MOMENTUM)
    scaler = make_scaler()
    rec = {k: [] for k in ("scale_before", "scale_after", "skipped", "growth_tracker",
                           "weights", "unscaled_grad", "momentum")}
    for t in range(N):
        rec["scale_before"].append(scaler.get_scale())
        opt.zero_grad(set_to_none=True)
        loss = (w * xs[t]).sum()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        rec["unscaled_grad"].append(w.grad.detach().clone())
        torch.nn.utils.clip_grad_norm_([w], max_norm=MAX_NORM)
        found_inf = sum(v.item() for v in scaler._per_optimizer_states[id(opt)]["found_inf_per_device"].values())
        scaler.step(opt)  # SGD.step returns None either way, so skipping is read from found_inf
        scaler.update()
        rec["skipped"].append(1.0 if found_inf else 0.0)
        rec["scale_after"].append(scaler.get_scale())
        rec["growth_tracker"].append(float(scaler.state_dict()["_growth_tracker"]))
        rec["weights"].append(w.detach().clone())
        buf = opt.state[w].get("momentum_buffer")
        rec["momentum"].append(torch.zeros(4) if buf is None else buf.clone())
    out = {"inputs": xs.numpy()}
    for k, v in rec.items():
        out[k] = torch.stack(v).numpy() if isinstance(v[0], torch.Tensor) else np.array(v, dtype=np.float64)
    return out


DESCRIPTION = (
    f"torch {torch.__version__} torch.cuda.amp.GradScaler on CPU (CPU kernels registered for "
    "_amp_foreach_non_finite_check_and_unscale_ / _amp_update_scale_, mirroring AmpKernels.cu). "
    f"w0=[0.5,-1,2,0.25] f32; SGD(lr={LR}, momentum={MOMENTUM}); GradScaler(init_scale={INIT_SCALE:g}, "
    f"growth_factor={GROWTH}, backoff_factor={BACKOFF}, growth_interval={INTERVAL}); N={N} steps; "
    "x_t=[1+0.1t,-0.5,0.25t,1], x_2[1]=x_3[1]=+inf, x_8[2]=nan, x_11=[3e38,1,1,1]; loss=sum(w*x_t); "
    "step: zero_grad(set_to_none) ; scale(loss).backward() ; unscale_ ; "
    f"clip_grad_norm_(max_norm={MAX_NORM}) ; step ; update")

# =============================================================================
# safetensors, by hand (same layout as generate_train.py: names sorted, header padded to 8)
# =============================================================================
ST = {np.dtype(np.float32): ("F32", "<f4"), np.dtype(np.float64): ("F64", "<f8")}


def safetensors_bytes(tensors, metadata):
    header, blobs, off = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        st, le = ST[tensors[name].dtype]
        b = np.ascontiguousarray(tensors[name], dtype=le).tobytes()
        header[name] = {"dtype": st, "shape": list(tensors[name].shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-(8 + len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def read_safetensors(data):
    (n,) = struct.unpack("<Q", data[:8])
    assert (8 + n) % 8 == 0
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__")
    body, out, pos = data[8 + n:], {}, 0
    for name, e in header.items():
        b, en = e["data_offsets"]
        assert b == pos and en <= len(body), name
        out[name] = np.frombuffer(body[b:en], dtype={"F32": "<f4", "F64": "<f8"}[e["dtype"]]).reshape(e["shape"])
        pos = en
    assert pos == len(body)
    return meta, out


def main(argv):
    data = run()
    blob = safetensors_bytes(data, {"description": DESCRIPTION})
    if "--check" in argv:
        same = OUT.read_bytes() == blob
        print(f"{OUT}: {'identical' if same else 'DIFFERS'}")
        return 0 if same else 1
    OUT.write_bytes(blob)

    meta, back = read_safetensors(OUT.read_bytes())  # verify the round trip
    assert meta == {"description": DESCRIPTION} and list(back) == sorted(data)
    for k in data:
        assert back[k].dtype == data[k].dtype and np.array_equal(back[k], data[k], equal_nan=True), k

    print(f" t  {'scale_before':>12} skip {'scale_after':>12} trk  w")
    for t in range(N):
        print(f"{t:2d}  {back['scale_before'][t]:12g} {int(back['skipped'][t]):4d} {back['scale_after'][t]:12g}"
              f" {int(back['growth_tracker'][t]):3d}  {np.array2string(back['weights'][t], precision=6)}")
    print(f"wrote {OUT} ({len(blob)} bytes, {len(back)} tensors)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
