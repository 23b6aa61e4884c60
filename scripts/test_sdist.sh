#!/usr/bin/env bash
# Tests the source distribution: scripts/test_sdist.sh [SDIST | DIR]   (default dist/, as written
# by scripts/build_sdist.sh)
#
# Installs it as a user would, `pip install shardstream-*.tar.gz` into a fresh venv with pip's
# build isolation (scikit-build-core, pybind11 and numpy from the package index), which compiles
# the extension and the command-line tool against this machine's -dev packages. Then, from a
# neutral directory, tests/smoke/installed.py: shards written and read back (every sample once),
# over http too, and the command-line tool run both ways.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
arg=${1:-$root/dist}
if [ -d "$arg" ]; then
  shopt -s nullglob
  sd=("$arg"/shardstream-*.tar.gz)
  shopt -u nullglob
  [ ${#sd[@]} = 1 ] || { echo "test_sdist: expected one shardstream-*.tar.gz in $arg, found ${#sd[@]};" \
                              "run scripts/build_sdist.sh first" >&2; exit 1; }
  sdist=${sd[0]}
else
  sdist=$arg
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "test_sdist: $sdist"
python3 -m venv "$tmp/venv"
vpy="$tmp/venv/bin/python"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
start=$(date +%s)
"$vpy" -m pip install -q "$sdist"
echo "  built and installed from source in $(( $(date +%s) - start )) s"
cd "$tmp"
"$vpy" "$root/tests/smoke/installed.py"
echo "test_sdist: passed"
