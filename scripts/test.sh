#!/usr/bin/env bash
# Runs every test: the C++ suite (ctest) and the Python suite (pytest), the latter against
# `pip install .`, the self-contained cp311 wheel (built in a Debian 11 chroot by
# scripts/build_wheels.sh, tested by scripts/test_wheel.sh) and the source distribution
# (scripts/build_sdist.sh, scripts/test_sdist.sh). The other Pythons' wheels and the tests on other
# Debian releases (scripts/test_wheels.sh) are scripts/nightly.sh's.
#   scripts/test.sh             normal build in build/
#   scripts/test.sh --sanitize  also the ASan+UBSan and the TSan builds of the C++ suite, and
#                               clang's thread-safety analysis of the library
# Does its own set-up (scripts/setup.sh) first.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
sanitize=0
for a in "$@"; do
  case "$a" in
    --sanitize) sanitize=1 ;;
    *) echo "unknown option $a" >&2; exit 2 ;;
  esac
done
bash scripts/setup.sh
jobs=$(nproc)
export SHARDSTREAM_PYTHON="$root/.venv/bin/python"
# Tests never reach for a real EC2 metadata server; those that test it start their own.
export AWS_EC2_METADATA_DISABLED=true

echo "== C++ build and tests"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs" --timeout 300

echo "== Python package (pip install .) and tests"
.venv/bin/python -m pip install -q --no-build-isolation "$root"
# Run from a neutral directory so the installed package, not the source tree, is tested.
(cd "$root/tests/python" && "$root/.venv/bin/python" -m pytest -q -p no:cacheprovider "$root/tests/python")

echo "== Python wheel (manylinux_2_31, built in a Debian 11 chroot) and tests"
# The wheel pip alone installs (shared libraries bundled), tested in a fresh venv: .venv-wheel.
py=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
bash scripts/build_wheels.sh --python "$py" "$root/dist"
bash scripts/test_wheel.sh "$root/dist"

echo "== Source distribution: pip install from the sdist in a fresh venv (compiles)"
bash scripts/build_sdist.sh "$root/dist"
bash scripts/test_sdist.sh "$root/dist"

if ((sanitize)); then
  echo "== Lock annotations under clang -Wthread-safety"
  CC=clang-14 CXX=clang++-14 cmake -S . -B build-tsa -G Ninja -DCMAKE_BUILD_TYPE=Debug \
        -DSHARDSTREAM_THREAD_SAFETY=ON -DSHARDSTREAM_BUILD_TESTS=OFF -DSHARDSTREAM_BUILD_BENCHMARKS=OFF \
        -DSHARDSTREAM_BUILD_TOOLS=OFF -DSHARDSTREAM_INSTALL=OFF >/dev/null
  cmake --build build-tsa -j"$jobs" --target shardstream
  echo "== C++ tests under ASan+UBSan"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
        -DSHARDSTREAM_SANITIZE=address,undefined -DSHARDSTREAM_BUILD_BENCHMARKS=OFF >/dev/null
  cmake --build build-asan -j"$jobs"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j"$jobs" --timeout 600
  echo "== C++ tests under TSan"
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
        -DSHARDSTREAM_SANITIZE=thread -DSHARDSTREAM_BUILD_BENCHMARKS=OFF >/dev/null
  cmake --build build-tsan -j"$jobs"
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    ctest --test-dir build-tsan --output-on-failure -j"$jobs" --timeout 600
fi
