#!/usr/bin/env bash
# Tests the source distribution: scripts/test_sdist.sh [SDIST | DIR]   (default dist/, as written
# by scripts/build_sdist.sh)
#
# Installs it as a user would, `pip install shardstream-*.tar.gz` into a fresh venv with pip's
# build isolation (scikit-build-core, pybind11 and numpy from the package index), which compiles
# the extension and the command-line tool against this machine's -dev packages. Then, from a
# neutral directory: writes shards with ShardWriter, reads them back with the Loader (every
# sample once), and runs `shardstream verify` and `python -m shardstream ls` on them.
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
"$vpy" - <<'PY'
import os, subprocess, sys
import numpy as np
import shardstream
assert shardstream.__file__.startswith(sys.prefix), shardstream.__file__
with shardstream.ShardWriter("set", max_samples=50) as w:
    for i in range(200):
        w.write({"__key__": f"s{i:04d}", "x.npy": np.full(4, i, dtype=np.int32), "cls": i % 10})
seen = []
with shardstream.Loader("set/manifest.jsonl", batch_size=32, seed=3) as loader:
    for b in loader:
        seen += [int(v) for v in b["x.npy"][:, 0]]
assert sorted(seen) == list(range(200)), "every sample once"
bindir = os.path.dirname(sys.executable)
r = subprocess.run([os.path.join(bindir, "shardstream"), "verify", "set/manifest.jsonl"],
                   capture_output=True, text=True)
assert r.returncode == 0, r.stdout + r.stderr
r = subprocess.run([sys.executable, "-m", "shardstream", "ls", "set/shard-000000.tar"],
                   capture_output=True, text=True)
assert r.returncode == 0 and "s0000" in r.stdout, r.stdout + r.stderr
print(f"  shardstream {shardstream.__version__} from source: 200 samples read back once; "
      "verify and ls ran")
PY
echo "test_sdist: passed"
