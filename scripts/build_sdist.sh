#!/usr/bin/env bash
# Builds the source distribution: scripts/build_sdist.sh [OUT_DIR]   (default dist/)
#
# scikit-build-core's own sdist (every file .gitignore does not exclude: run it in a clean
# checkout; here that is the CMake project, sources, Python package, tests, docs), through its
# PEP 517 hook in the project venv .venv, so no `build` package is
# needed. `pip install shardstream-*.tar.gz` then builds the extension and the command-line tool
# from source where the -dev packages are (docs/building.md names them for Debian/Ubuntu and
# RHEL/Rocky); scripts/test_sdist.sh does exactly that in a fresh venv. Runs scripts/setup.sh
# first, as test.sh does.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out_dir=${1:-dist}
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)

bash scripts/setup.sh
rm -f "$out_dir"/shardstream-*.tar.gz
name=$(.venv/bin/python -c '
import sys
from scikit_build_core.build import build_sdist
print(build_sdist(sys.argv[1]))' "$out_dir" | tail -1)
sdist="$out_dir/$name"
[ -f "$sdist" ] || { echo "build_sdist: no sdist written ($sdist)" >&2; exit 1; }
echo "sdist: $sdist ($(du -h "$sdist" | cut -f1), $(tar tzf "$sdist" | wc -l) files)"
