#!/usr/bin/env bash
# Checks Tessera as a package (what scripts/test.sh runs after the tests):
# `cmake --install` into a scratch prefix; examples/consumer built against it
# with find_package(Tessera CONFIG) and with pkg-config, and run; every
# installed header compiled with only the package's own dependencies; the
# library's exported symbols limited to Tessera's; and Tessera as a
# subproject (add_subdirectory) configuring neither tests nor benchmarks and
# leaving the parent's build type alone; then the Python package
# (scripts/check_python_install.sh) when the build has it.
#   scripts/check_install.sh [build dir, default build]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-${BUILD_DIR:-build}}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
lib=$(ls "$prefix"/lib/libtessera.so.*.*.* | head -1)
soname=$(readelf -d "$lib" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
echo "installed: $(basename "$lib") (SONAME $soname), $(find "$prefix/include/tessera" -name '*.h' | wc -l) headers, $(ls "$prefix"/lib/cmake/Tessera | tr '\n' ' ')"
[ -n "$soname" ] || { echo "check_install: libtessera has no SONAME" >&2; exit 1; }
"$prefix/bin/tessera" --version >/dev/null

# The consumer, through the CMake package and through pkg-config.
cmake -S examples/consumer -B "$tmp/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
"$tmp/consumer/consumer"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
g++ $(pkg-config --cflags tessera) examples/consumer/main.cpp -o "$tmp/consumer_pc" $(pkg-config --libs tessera) \
  -Wl,-rpath,"$prefix/lib"
"$tmp/consumer_pc" >/dev/null
echo "examples/consumer: built with find_package(Tessera) and with pkg-config, and ran"

# Every public header, with nothing on the include path but the package and Debian's defaults.
(cd "$prefix/include" && find tessera -name '*.h' | sort | sed 's/.*/#include "&"/') > "$tmp/headers.cpp"
g++ -std=c++20 -fopenmp -fsyntax-only -I"$prefix/include" "$tmp/headers.cpp"
if grep -rnE '#include [<"](boost|simdjson|yaml-cpp|oneapi|dnnl|onnx|google|httplib|CLI)' "$prefix/include"; then
  echo "check_install: a public header includes a private dependency (above)" >&2
  exit 1
fi
echo "public headers: all compile together, and none includes Boost, simdjson, yaml-cpp, oneDNN, ONNX or httplib"

# Exported symbols: Tessera's only.
foreign=$(nm -DC --defined-only "$lib" | awk '$2 ~ /[TWVDBR]/' | cut -d' ' -f3- | grep -v -E '^(tessera::|typeinfo (name )?for tessera::|vtable for tessera::|VTT for tessera::|guard variable for tessera::|TLS (init|wrapper) function for tessera::|_init$|_fini$)' || true)
if [ -n "$foreign" ]; then
  echo "check_install: libtessera exports symbols outside Tessera's API:" >&2
  echo "$foreign" | head -20 >&2
  exit 1
fi
echo "exported symbols: $(nm -DC --defined-only "$lib" | awk '$2 ~ /[TWVDBR]/' | wc -l), all in namespace tessera"

# As a subproject: no tests, no benchmarks, the parent's build type.
mkdir -p "$tmp/parent"
cat > "$tmp/parent/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(parent CXX)
add_subdirectory($PWD tessera)
if(TARGET tessera_tests OR TARGET tessera_bench OR TARGET tessera_cli OR TARGET tessera_python)
  message(FATAL_ERROR "Tessera as a subproject configured its tests, benchmarks, command line or Python module")
endif()
if(CMAKE_BUILD_TYPE)
  message(FATAL_ERROR "Tessera as a subproject set the build type to \${CMAKE_BUILD_TYPE}")
endif()
CMAKE
cmake -S "$tmp/parent" -B "$tmp/parent-build" -G Ninja >/dev/null
echo "as a subproject: the library only, the parent's build type"

# The Python package, when this build has it: pip into a venv, and a wheel elsewhere.
if [ -d "$build/python" ]; then
  scripts/check_python_install.sh
fi
