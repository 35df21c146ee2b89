"""The op table from Python against PyTorch: every case of tests/golden/ops.bin
(the data the C++ golden test checks) run through the PyTorch expression that
made it, with `torch` bound to tessera and `F` to tessera.nn.functional — a
PyTorch call ported by renaming the module. Values and gradients, with the C++
test's tolerances."""
import math

import pytest

import tessera
import tessera.nn.functional as F

from golden import compare, load, loosest


def rms(x, shape, w=None, eps=None):
    return F.rms_norm(x, shape, w, eps)


def sdpa(q, k, v, mask=None, dropout_p=0.0, is_causal=False, scale=None):
    return F.scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal, scale=scale)


def bn(x, rm, rv, w, b, training, momentum, eps):
    rm = rm.clone() if rm is not None else None
    rv = rv.clone() if rv is not None else None
    y = F.batch_norm(x, rm, rv, w, b, training, momentum, eps)
    return [y] + [t for t in (rm, rv) if t is not None]


_CASES = None


def cases(source_dir):
    global _CASES
    if _CASES is None:
        _CASES = load(source_dir / "tests/golden/ops.bin")
    return _CASES


def run(case):
    """Returns a list of what differs (empty when the case passes)."""
    inputs = {}
    for i, t in case.inputs.items():
        x = t.clone()
        if i in case.grads:
            x.requires_grad_(True)
        inputs[i] = x
    names = dict(zip("abcdef", [inputs.get(i) for i in range(6)]))
    scope = {"torch": tessera, "F": F, "math": math, "INF": math.inf, "rms": rms, "sdpa": sdpa, "bn": bn, **names}
    call = case.call.split("  [")[0]  # "torch.neg(a)  [f32 reference, rounded]": the note is not code
    try:
        got = eval(call, scope)
    except Exception as e:  # noqa: BLE001 - reported with the case
        return [f"forward raised {type(e).__name__}: {e}"]
    got = [got] if isinstance(got, tessera.Tensor) else list(got)
    if len(got) != len(case.outputs):
        return [f"{len(got)} outputs, PyTorch {len(case.outputs)}"]
    tol = loosest(case)
    problems = []
    for i, g in enumerate(got):
        d = compare(g, case.outputs[i], tol)
        if d:
            problems.append(f"output {i}: {d}")
    wrt = sorted(case.grads)
    if not case.v or not wrt or problems:
        return problems
    outs = [got[i] for i in sorted(case.v)]
    vs = [case.v[i] for i in sorted(case.v)]
    try:
        grads = tessera.autograd.grad(outs, [inputs[i] for i in wrt], vs, allow_unused=True)
    except Exception as e:  # noqa: BLE001
        return [f"backward raised {type(e).__name__}: {e}"]
    for j, i in enumerate(wrt):
        g = grads[j] if grads[j] is not None else tessera.zeros_like(inputs[i])
        d = compare(g, case.grads[i], tol)
        if d:
            problems.append(f"gradient of input {i}: {d}")
    return problems


def test_every_golden_case_runs_from_python_as_in_pytorch(source_dir):
    all_cases = cases(source_dir)
    assert len(all_cases) > 1000
    failures = []
    for case in all_cases:
        problems = run(case)
        if problems:
            failures.append(f"{case.key}  [{case.call}]\n    " + "\n    ".join(problems))
    assert not failures, f"{len(failures)} of {len(all_cases)} cases fail:\n" + "\n".join(failures[:60])


def test_every_op_of_the_table_is_covered_by_a_golden_case_or_is_random_or_internal(source_dir):
    tested = {c.op for c in cases(source_dir)}
    untested = [op for op in tessera._C._op_table if op not in tested]
    # The same set the C++ golden test leaves to other tests (random ops, ops
    # the compiler and the backward pass make, collectives, quantization kernels).
    assert len(untested) < 60, untested
