#!/usr/bin/env bash
# The GPU checks, on a CUDA machine whose python3 holds PyTorch with CUDA,
# CMake, ninja, pytest and pybind11: builds the library and the Python module
# there against that PyTorch, then runs
#   1. tests/python/test_gpu.py (pinned slots, copies that never read a
#      refilled slot, the pageable fallback);
#   2. the C++ training loop example through its CUDA branch;
#   3. benchmarks/gpu_benchmark.py (copy rate, overlap timeline, transformer
#      and ResNet-50 steps against WebDataset, the CPU controls and headspace
#      on the ResNet-50 loop).
# Each step's log and the benchmark's JSON go to OUT_DIR; a failing step does
# not stop the later ones, and the exit status says whether all passed.
#
#   bash scripts/gpu_checks.sh [--deps DIR] [--out OUT_DIR] [--parts P] [--skip-tests]
#                              [--skip-example]
#
# --deps DIR: what scripts/gpu_deps.sh gathered, for a machine with no package
# registry: the Debian packages are unpacked into a private prefix (never into
# /), and a library the machine already has is taken from the machine.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
deps="" p="" ldflags="" out=${OUT:-/tmp/shardstream-gpu} parts="copy,overlap,transformer,resnet,cpu" tests=1 example=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --deps) deps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --parts) parts=$2; shift 2 ;;
    --skip-tests) tests=0; shift ;;
    --skip-example) example=0; shift ;;
    *) echo "gpu_checks: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
work=${GPU_CHECKS_WORK:-/tmp/shardstream-gpu-work}
mkdir -p "$work"
jobs=$(nproc)
failed=()
stamp() { echo "== $(date +%T) $*"; }

stamp "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__,
  "cuda", torch.version.cuda, torch.cuda.get_device_name(0))' || true
echo "cpus $jobs; $(. /etc/os-release && echo "$PRETTY_NAME"); $(g++ --version | head -1)"

cmake_args=()
if [[ -n "$deps" ]]; then
  stamp "unpacking $(ls "$deps"/debs/*.deb | wc -l) Debian packages into $work/prefix"
  p=$work/prefix
  rm -rf "$p" && mkdir -p "$p"
  for f in "$deps"/debs/*.deb; do dpkg -x "$f" "$p"; done
  lib=$p/usr/lib/x86_64-linux-gnu
  # A library shardstream links directly stays the packages' own (the build
  # compiled against its headers, and uses xxHash's state structs); one the
  # others merely need is the machine's when it has it, so that a process
  # holds one copy whatever PyTorch loads beside us.
  direct='^lib(xxhash|spdlog|fmt|archive|curl|spng|webp|webpmux|webpdemux|sharpyuv|jpeg|pkgconf)\.so'
  kept=0 own=0
  for f in "$lib"/lib*.so.*; do
    [[ -f $f && ! -L $f ]] || continue
    if [[ $(basename "$f") =~ $direct ]]; then kept=$((kept + 1)); continue; fi
    soname=$(readelf -d "$f" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
    [[ -n $soname ]] || continue
    sys=$(ldconfig -p | awk -v s="$soname" '$1 == s { print $NF; exit }')
    if [[ -n $sys && $sys != "$lib"/* ]]; then
      ln -sf "$sys" "$f"; own=$((own + 1))
    else
      kept=$((kept + 1))
    fi
  done
  echo "libraries: $own from the machine, $kept from the packages"
  export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  printf '#!/bin/sh\nexec %s/usr/bin/pkgconf "$@"\n' "$p" >"$p/pkg-config"
  chmod +x "$p/pkg-config"
  export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$p/usr/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=$p PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
  cmake_args+=(-DPKG_CONFIG_EXECUTABLE="$p/pkg-config" -DCMAKE_PREFIX_PATH="$p/usr")
  ldflags="-Wl,-rpath-link,$lib"
  if [[ -d $deps/wheels ]] && ! python3 -c 'import webdataset' 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$work/site" \
      "$deps"/wheels/*.whl && export PYTHONPATH=$work/site${PYTHONPATH:+:$PYTHONPATH}
  fi
fi

# The compiler on PATH, whose libstdc++ the machine's Python and PyTorch load
# (CC/CXX may name another toolchain, whose libstdc++ would then be linked
# into the module beside the process's own: two runtimes, one crash).
export CC=$(command -v gcc) CXX=$(command -v g++)
echo "compiler: $CXX ($("$CXX" -dumpfullversion))"
if [[ -n $ldflags ]]; then
  cmake_args+=(-DCMAKE_EXE_LINKER_FLAGS="$ldflags" -DCMAKE_SHARED_LINKER_FLAGS="$ldflags"
               -DCMAKE_MODULE_LINKER_FLAGS="$ldflags")
fi

stamp "building the Python module and the library for the example ($jobs jobs)"
b=$work/build
rm -rf "$b" "$work/build-shared" "$work/example"
python=$(command -v python3)
common=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDSTREAM_BUILD_TESTS=OFF
        -DSHARDSTREAM_BUILD_BENCHMARKS=OFF -DSHARDSTREAM_BUILD_TOOLS=OFF "${cmake_args[@]}")
# The module links the library statically, as pip install does; the example
# uses the installed shared library, as a C++ user would.
if ! { cmake -S . -B "$b" "${common[@]}" -DSHARDSTREAM_SHARED=OFF -DSHARDSTREAM_BUILD_PYTHON=ON \
         -DSHARDSTREAM_INSTALL=OFF -DPython_EXECUTABLE="$python" \
         -Dpybind11_DIR="$("$python" -m pybind11 --cmakedir)" >"$out/build.log" 2>&1 &&
       cmake --build "$b" -j "$jobs" >>"$out/build.log" 2>&1; }; then
  tail -40 "$out/build.log"
  echo "gpu_checks: the build failed (log: $out/build.log)"
  exit 1
fi
if ! readelf -d "$b"/python/_core*.so | grep -q 'NEEDED.*libstdc++'; then
  echo "gpu_checks: the module carries its own libstdc++ (compiler $CXX)"
  exit 1
fi
pkg=$work/py/shardstream
rm -rf "$work/py" && mkdir -p "$pkg"
cp -r python/shardstream/. "$pkg"/ && find "$pkg" -name __pycache__ -prune -exec rm -rf {} +
cp "$b"/python/_core*.so "$pkg"/
export PYTHONPATH=$work/py${PYTHONPATH:+:$PYTHONPATH}
python3 -c 'import shardstream; print("shardstream", shardstream.__version__, "from", shardstream.__file__)' ||
  failed+=("python import")
[[ $example == 0 ]] || { cmake -S . -B "$work/build-shared" "${common[@]}" -DCMAKE_INSTALL_PREFIX="$work/install" \
    >>"$out/build.log" 2>&1 &&
  cmake --build "$work/build-shared" -j "$jobs" >>"$out/build.log" 2>&1 &&
  cmake --install "$work/build-shared" >>"$out/build.log" 2>&1 &&
  cmake -S examples/cpp_training_loop -B "$work/example" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "${cmake_args[@]}" -DCMAKE_PREFIX_PATH="$work/install${p:+;$p/usr}" >>"$out/build.log" 2>&1 &&
  cmake --build "$work/example" >>"$out/build.log" 2>&1; } ||
  { tail -20 "$out/build.log"; failed+=("example build"); }
stamp "built"

# libcudart for processes without PyTorch (the example): PyTorch's own copy.
cudart_dir=$(python3 - <<'PY'
import glob, os, torch
d = os.path.dirname(torch.__file__)
hits = glob.glob(os.path.join(d, "..", "nvidia", "**", "libcudart.so.*"), recursive=True)
print(os.path.dirname(os.path.realpath(hits[0])) if hits else "/usr/local/cuda/lib64")
PY
)

if [[ $tests == 1 ]]; then
  stamp "tests"
  python3 -m pytest -q -p no:cacheprovider tests/python/test_gpu.py \
    -rs 2>&1 | tee "$out/tests.log" | tail -25
  [[ ${PIPESTATUS[0]} == 0 ]] || failed+=(tests)
fi

if [[ $example == 1 ]]; then
stamp "the C++ example through its CUDA branch"
python3 - "$work/tokens" <<'PY'
import sys, numpy as np, shardstream
rng = np.random.default_rng(0)
with shardstream.ShardWriter(sys.argv[1], max_samples=500) as w:
    for i in range(4000):
        w.write({"__key__": f"d{i:06d}", "tokens.npy": rng.integers(0, 32000, int(rng.integers(64, 3000)), dtype=np.int32)})
PY
if LD_LIBRARY_PATH=$cudart_dir:${LD_LIBRARY_PATH:-} "$work/example/train_loop" \
     "$work/tokens/manifest.jsonl" 2 --tokens tokens.npy --seq-len 2048 --batch 64 \
     >"$out/example.log" 2>&1; then
  cat "$out/example.log"
  grep -q "cudaMemcpyAsync" "$out/example.log" && grep -q "cuda_pinned" "$out/example.log" &&
    grep -q "^epoch 1: the last batch's .* match" "$out/example.log" || failed+=(example)
else
  cat "$out/example.log"; failed+=(example)
fi
fi

stamp "benchmark"
PYTHONUNBUFFERED=1 python3 benchmarks/gpu_benchmark.py --dir "$work/data" --json "$out/gpu_benchmark.json" \
  --device cuda --threads "$jobs" --parts "$parts" 2>&1 | tee "$out/benchmark.log" | tail -40
[[ ${PIPESTATUS[0]} == 0 ]] || failed+=(benchmark)

stamp "done"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "gpu_checks: failed: ${failed[*]}"
  exit 1
fi
echo "gpu_checks: all passed"
