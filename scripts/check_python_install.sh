#!/usr/bin/env bash
# Checks the Python package as a user gets it (what scripts/check_install.sh
# runs last): `pip install --no-build-isolation .` into a fresh venv, then a
# wheel from `pip wheel` installed into a second venv with nothing else of
# Tessera's on the machine's paths, each running the pytest suite from outside
# the checkout. Needs Debian's python3-venv, python3-pip, python3-pytest,
# python3-numpy (scripts/setup.sh --test). The build reuses build-python/ and ccache.
#   scripts/check_python_install.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3
$py -c "import pytest, venv" 2>/dev/null \
  || { echo "check_python_install: needs python3-pytest and python3-venv (scripts/setup.sh --test)" >&2; exit 1; }

run_suite() {  # venv: the suite against the installed package, from a directory outside the checkout
  if ! (cd "$tmp" && TESSERA_SOURCE_DIR=$root "$1/bin/python" -m pytest -q -p no:cacheprovider "$root/python/tests" \
          >"$tmp/pytest.log" 2>&1); then
    tail -40 "$tmp/pytest.log" >&2
    echo "check_python_install: the suite failed against $1 (above)" >&2
    exit 1
  fi
}

$py -m venv --system-site-packages "$tmp/venv"
"$tmp/venv/bin/pip" install -q --no-build-isolation --no-index . >"$tmp/pip.log" 2>&1 || { tail -40 "$tmp/pip.log" >&2; exit 1; }
where=$(cd "$tmp" && "$tmp/venv/bin/python" -c 'import tessera, os; print(os.path.dirname(tessera.__file__))')
case "$where" in "$tmp/venv/"*) ;; *) echo "check_python_install: imported tessera from $where, not the venv" >&2; exit 1 ;; esac
run_suite "$tmp/venv"  # not in $(...): its exit must stop this script
echo "pip install .: tessera imports from the venv; $(grep -E "[0-9]+ passed" "$tmp/pytest.log" | tail -1)"

"$tmp/venv/bin/pip" wheel -q --no-build-isolation --no-index --no-deps -w "$tmp/wheels" . >"$tmp/wheel.log" 2>&1 \
  || { tail -40 "$tmp/wheel.log" >&2; exit 1; }
wheel=$(ls "$tmp"/wheels/tessera-*.whl)
$py -m venv --system-site-packages "$tmp/clean"
"$tmp/clean/bin/pip" install -q --no-index --no-deps "$wheel"
# The wheel's extension finds its own libtessera beside it, never a build tree's.
lib=$(cd "$tmp" && ldd "$tmp"/clean/lib/python3*/site-packages/tessera/_C*.so | awk '/libtessera/ {print $3}')
case "$lib" in "$tmp/clean/"*) ;; *) echo "check_python_install: the wheel's module loads libtessera from $lib" >&2; exit 1 ;; esac
run_suite "$tmp/clean"
echo "wheel $(basename "$wheel") ($(du -m "$wheel" | cut -f1) MB): self-contained; $(grep -E "[0-9]+ passed" "$tmp/pytest.log" | tail -1)"
