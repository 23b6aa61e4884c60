#!/usr/bin/env bash
# The checks too long for CI, for a nightly job (CI runs `scripts/test.sh
# --sanitize`: the suites and the sanitizer builds). Today: every libFuzzer
# target for SECONDS each (default 30) in the clang ASan+UBSan build of
# scripts/fuzz.sh, whose build alone takes longer than CI can spare.
#
#   scripts/nightly.sh [SECONDS]
#
# Exits non-zero on the first failure; a fuzzer's reproducer is left in
# build-fuzz/fuzz-artifacts/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-30}"
bash "$root/scripts/setup.sh"  # idempotent: clang-14, the .venv the MDS seeds need
echo "== fuzzers, ${seconds} s each"
bash "$root/scripts/fuzz.sh" "$seconds"
echo "nightly: ok"
