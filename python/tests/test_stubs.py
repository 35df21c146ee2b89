"""The checked-in type stubs (python/tessera/_C/*.pyi) are what stubgen makes of
the built module, and mypy accepts calls they describe and rejects wrong ones."""
import os
import pathlib
import subprocess
import sys

import pytest

import tessera

HERE = pathlib.Path(__file__).resolve().parent


def test_the_stubs_are_current(source_dir):
    pytest.importorskip("mypy")
    sys.path.insert(0, str(source_dir / "scripts"))
    import python_stubs
    fresh = python_stubs.generate(pathlib.Path(tessera.__file__).parent.parent)
    assert fresh == python_stubs.current(), "python/tessera/_C/*.pyi are stale: run /usr/bin/python3 scripts/python_stubs.py"


def test_mypy_checks_calls_against_the_stubs(tmp_path):
    pytest.importorskip("mypy")
    pkg = pathlib.Path(tessera.__file__).parent
    (tmp_path / "ok.py").write_text(
        "import tessera._C as C\n"
        "t: C.Tensor = C.sum(C.ops.full([2], 1, dtype=C.float32), 0)\n"
        "u = C.softmax(t, 0)\n")
    (tmp_path / "bad.py").write_text(
        "import tessera._C as C\n"
        "C.softmax(C.ops.full([2], 1, dtype=C.float32), 'zero')\n")
    env = dict(os.environ)
    if "site-packages" not in pkg.parts:
        # A build tree: mypy finds the package through MYPYPATH. An installed one
        # it finds itself (PEP 561, py.typed), and refuses site-packages in MYPYPATH.
        env["MYPYPATH"] = str(pkg.parent)
    def mypy(f):
        return subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent",
                               "--ignore-missing-imports", str(tmp_path / f)],
                              capture_output=True, text=True, env=env, cwd=tmp_path)
    ok = mypy("ok.py")
    assert ok.returncode == 0, ok.stdout
    bad = mypy("bad.py")
    assert bad.returncode == 1 and "softmax" in bad.stdout, bad.stdout


def test_every_public_function_and_class_has_a_docstring():
    """Editors and help() show these: each names what it takes and gives; the
    ops' add their shapes, dtypes and backward from docs/ops.md's generator."""
    import importlib
    import inspect
    import tessera
    missing = []
    for name in ["tessera", "tessera.nn", "tessera.nn.functional", "tessera.nn.init", "tessera.nn.cpp",
                 "tessera.optim", "tessera.optim.lr_scheduler", "tessera.autograd", "tessera.amp",
                 "tessera.utils.data", "tessera.utils.checkpoint", "tessera.distributed", "tessera.llm",
                 "tessera.serve", "tessera.train", "tessera.profiler", "tessera.quantization", "tessera.onnx",
                 "tessera.linalg"]:
        module = importlib.import_module(name)
        for attr in dir(module):
            obj = getattr(module, attr)
            if attr.startswith("_") or inspect.ismodule(obj) or not callable(obj) or isinstance(obj, tessera.dtype):
                continue
            doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
            if not doc or not doc.strip():
                missing.append(f"{name}.{attr}")
    for attr in dir(tessera.ops):  # every op by its ops.def name
        if not attr.startswith("_") and not (getattr(tessera.ops, attr).__doc__ or "").strip():
            missing.append(f"tessera.ops.{attr}")
    assert not missing, missing
    for fn in (tessera.ops.conv2d, tessera.nn.functional.conv2d, tessera.matmul, tessera.sum, tessera.Tensor.sort):
        assert "dtypes" in fn.__doc__, fn
    assert "shapes: [..., n, k] @ [..., k, m] -> [..., n, m]" in tessera.matmul.__doc__
