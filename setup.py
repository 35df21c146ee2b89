"""Builds tessera._C and libtessera.so with CMake for pip (pyproject.toml).

The wheel carries the extension and the library side by side in tessera/;
the extension finds the library through its rpath ($ORIGIN), so the wheel
installs on another machine of the same kind without the CMake package.
TESSERA_CMAKE_ARGS adds CMake arguments; TESSERA_BUILD_DIR picks the build
directory (default build-python, reused by later installs)."""
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent


def version():
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(tessera LANGUAGES CXX VERSION ([0-9.]+)\)", text).group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = pathlib.Path(os.environ.get("TESSERA_BUILD_DIR", ROOT / "build-python")).resolve()
        args = ["-G", "Ninja", "-DCMAKE_BUILD_TYPE=RelWithAsserts", f"-DPython_EXECUTABLE={sys.executable}",
                "-DTESSERA_BUILD_APPS=OFF", "-DTESSERA_BUILD_TESTS=OFF", "-DTESSERA_BUILD_BENCH=OFF",
                "-DTESSERA_BUILD_PYTHON=ON"] + shlex.split(os.environ.get("TESSERA_CMAKE_ARGS", ""))
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build)] + args, check=True)
        subprocess.run(["cmake", "--build", str(build), "--target", "tessera_python"], check=True)
        target = pathlib.Path(self.get_ext_fullpath(ext.name)).resolve()
        target.parent.mkdir(parents=True, exist_ok=True)
        staged = build / "python-install"
        shutil.rmtree(staged, ignore_errors=True)
        subprocess.run(["cmake", "--install", str(build), "--component", "python", "--prefix", str(staged)], check=True)
        module = next((staged / "tessera").glob("_C*.so"))
        shutil.copy2(module, target)
        # The library under its SONAME, beside the module (the rpath's $ORIGIN).
        lib = next(p for p in (build / "src").glob("libtessera.so.*") if not p.is_symlink())
        soname = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True).stdout
        soname = re.search(r"SONAME.*\[(.*)\]", soname).group(1)
        shutil.copy2(lib, target.parent / soname)


setup(version=version(), ext_modules=[Extension("tessera._C", sources=[])], cmdclass={"build_ext": CMakeBuild})
