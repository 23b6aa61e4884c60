#!/usr/bin/env bash
# The soak: a 4-rank training job with every fault at once, kills, restarts and world-size
# changes, checked for exactly-once delivery. Prints a report; exits 1 when a check fails.
#   bash scripts/soak.sh [minutes, default 30] [more tests/soak/soak.py options]
# Needs root for node 1's tmpfs (ENOSPC); without it that fault is left out and said so.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
[ -x .venv/bin/python ] && .venv/bin/python -c 'import torchdata, moto' 2>/dev/null || bash scripts/setup.sh
.venv/bin/python -c 'import shardstream' 2>/dev/null \
  || .venv/bin/python -m pip install -q --no-build-isolation "$root"
minutes="${1:-30}"
shift || true
exec .venv/bin/python tests/soak/soak.py --minutes "$minutes" "$@"
