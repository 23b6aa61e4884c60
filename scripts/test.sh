#!/usr/bin/env bash
# Runs every test: the C++ suite (ctest), then the Python suite (pytest) against the self-contained
# cp311 wheel, built from the source distribution (scripts/build_sdist.sh) in a Debian 11 chroot
# (scripts/build_wheels.sh) and installed alone in a fresh venv (scripts/test_wheel.sh): one build
# proves the sdist complete, the wheel self-contained and the package right. The other Pythons'
# wheels, the tests on other Debian releases (scripts/test_wheels.sh) and `pip install` of the sdist
# with pip's build isolation (scripts/test_sdist.sh) are scripts/nightly.sh's.
#   scripts/test.sh             normal build in build/
#   scripts/test.sh --sanitize  also the ASan+UBSan and the TSan builds of the C++ suite, and
#                               clang's thread-safety analysis of the library
# Does its own set-up (scripts/setup.sh) first. Each step prints how long it took.
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
t0=$SECONDS
phase_start=$SECONDS
phase() {  # ends the step before (printing its time) and names the next
  [ -z "${phase_name:-}" ] || echo "-- $phase_name: $((SECONDS - phase_start)) s"
  phase_name=$1 phase_start=$SECONDS
  [ -z "$phase_name" ] || echo "== $phase_name"
}
phase "Set-up"
bash scripts/setup.sh
jobs=$(nproc)
export SHARDSTREAM_PYTHON="$root/.venv/bin/python"
# Tests never reach for a real EC2 metadata server; those that test it start their own.
export AWS_EC2_METADATA_DISABLED=true

# Under --sanitize (CI), line tables only (-g1): a quarter less compile time than -g, and stack
# traces still name file and line. Without it, RelWithDebInfo's own -g (set again, as a run with
# --sanitize before leaves -g1 in build/'s cache).
if ((sanitize)); then debug_info=-g1; else debug_info=-g; fi

phase "C++ build and tests"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 $debug_info -DNDEBUG" -DSHARDSTREAM_UNITY_LIBRARY=OFF >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs" --timeout 300

phase "Source distribution, and the cp311 wheel built from it (manylinux_2_31, in a Debian 11 chroot)"
py=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
bash scripts/build_sdist.sh "$root/dist"
sdist=("$root"/dist/shardstream-*.tar.gz)
bash scripts/build_wheels.sh --python "$py" --sdist "${sdist[0]}" "$root/dist"

phase "Python suite against the wheel, installed alone in a fresh venv"
bash scripts/test_wheel.sh "$root/dist"

if ((sanitize)); then
  # These three builds compile the library in unity batches (SHARDSTREAM_UNITY_LIBRARY): they exist
  # to test it, and it compiles in half the time. The normal build keeps a unit per file.
  phase "Lock annotations under clang -Wthread-safety"
  CC=clang-14 CXX=clang++-14 cmake -S . -B build-tsa -G Ninja -DCMAKE_BUILD_TYPE=Debug \
        -DSHARDSTREAM_THREAD_SAFETY=ON -DSHARDSTREAM_UNITY_LIBRARY=ON -DSHARDSTREAM_BUILD_TESTS=OFF \
        -DSHARDSTREAM_BUILD_BENCHMARKS=OFF -DSHARDSTREAM_BUILD_TOOLS=OFF -DSHARDSTREAM_INSTALL=OFF >/dev/null
  cmake --build build-tsa -j"$jobs" --target shardstream
  phase "C++ tests under ASan+UBSan"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
        -DSHARDSTREAM_SANITIZE=address,undefined -DSHARDSTREAM_UNITY_LIBRARY=ON \
        -DSHARDSTREAM_BUILD_BENCHMARKS=OFF >/dev/null
  cmake --build build-asan -j"$jobs"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j"$jobs" --timeout 600
  phase "C++ tests under TSan"
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
        -DSHARDSTREAM_SANITIZE=thread -DSHARDSTREAM_UNITY_LIBRARY=ON \
        -DSHARDSTREAM_BUILD_BENCHMARKS=OFF >/dev/null
  cmake --build build-tsan -j"$jobs"
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    ctest --test-dir build-tsan --output-on-failure -j"$jobs" --timeout 600
fi
phase ""
echo "test.sh: every step passed in $((SECONDS - t0)) s"
