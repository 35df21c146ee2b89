#!/usr/bin/python3
"""Writes python/tessera/_C/*.pyi, the extension module's type stubs, with mypy's
stubgen (Debian's python3-mypy) from the built module, so that editors
complete and check calls. The op functions' stubs come from their docstrings,
which python/src/ops.cpp writes from the signature rows (op_signatures.def).
stubgen 1.0 reads neither "Tuple[Tensor, ...]" nor a bare "*" in a docstring,
so the docstrings say List[Tensor] for the ops that return a tuple of tensors
and "*_: Any" before keyword-only parameters, and this script writes the tuple
and the star. Run after changing the bindings; python/tests/test_stubs.py
fails while the file is stale.

    /usr/bin/python3 scripts/python_stubs.py [--build build] [--check]
"""
import argparse
import os
import re
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
STUBS = ROOT / "python" / "tessera" / "_C"  # a stub package: _C/__init__.pyi and one file per submodule
MODULES = ["tessera._C", "tessera._C.ops", "tessera._C._functional", "tessera._C._linalg", "tessera._C._autograd",
           "tessera._C._optim", "tessera._C._amp", "tessera._C._compile", "tessera._C._serve", "tessera._C._llm", "tessera._C._nn", "tessera._C._train", "tessera._C._profiler", "tessera._C._distributed", "tessera._C._data", "tessera._C._quant",
           "tessera._C._layers"]


def generate(package_root):
    """{file name: stub text} for the tessera._C found under package_root."""
    with tempfile.TemporaryDirectory() as out:
        mods = []
        for m in MODULES:
            mods += ["-m", m]
        code = ("import sys; from mypy.stubgen import main; "
                f"sys.argv = ['stubgen', '-q'] + {mods!r} + ['-o', {out!r}]; main()")
        env = dict(os.environ, PYTHONPATH=str(package_root))
        subprocess.run([sys.executable, "-c", code], check=True, cwd=out, env=env)
        o = pathlib.Path(out) / "tessera"
        stubs = {}
        for p in sorted((o / "_C").glob("*.pyi")):
            text = fix(p.read_text())
            if p.name != "__init__.pyi":  # a submodule's ops name the package's types
                text = "from tessera._C import Tensor, dtype\n" + text
            stubs[p.name] = text
    return stubs


def fix(text):
    """What stubgen 1.0 leaves for a pybind11 module that mypy rejects: the
    tuple type above; pybind11's own names for untyped arguments (handle,
    buffer, object); and Tensor's methods float/int/bool, which shadow the
    builtins inside the class, so annotations name builtins.int and so on."""
    text = text.replace("List[Tensor]", "Tuple[Tensor, ...]").replace("*_: Any, ", "*, ")
    text = re.sub(r"(?<=: )(handle|buffer|capsule|function)\b", "Any", text)
    text = re.sub(r"(?<=-> )(handle|buffer|capsule|function)\b", "Any", text)
    text = re.sub(r"(?<!def )(?<![.\w])\b(int|float|bool)\b(?!\s*\()", r"builtins.\1", text)
    text = re.sub(r"(    def __(eq|ne)__\(.*)$", r"\1  # type: ignore[override]", text, flags=re.M)
    if "builtins." in text:
        text = "import builtins\n" + text
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get("BUILD_DIR", "build"))
    ap.add_argument("--check", action="store_true", help="fail if the checked-in stubs differ")
    ap.add_argument("--package-root", help="where tessera/ is (default: <build>/python)")
    a = ap.parse_args()
    root = pathlib.Path(a.package_root or ROOT / a.build / "python")
    stubs = generate(root)
    if a.check:
        if stubs != current():
            sys.exit("python/tessera/_C/*.pyi are stale: run /usr/bin/python3 scripts/python_stubs.py")
        return
    for old in STUBS.glob("*.pyi"):
        old.unlink()
    STUBS.mkdir(exist_ok=True)
    for name, text in stubs.items():
        (STUBS / name).write_text(text)
    print(f"{STUBS.relative_to(ROOT)}: {len(stubs)} stub files, {sum(t.count('def ') for t in stubs.values())} functions")


def current():
    return {p.name: p.read_text() for p in sorted(STUBS.glob("*.pyi"))}


if __name__ == "__main__":
    main()
