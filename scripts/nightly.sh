#!/usr/bin/env bash
# The checks too long for CI, for a nightly job (CI runs `scripts/test.sh
# --sanitize`: the suites and the sanitizer builds):
# - every libFuzzer target for SECONDS each (default 30) in the clang
#   ASan+UBSan build of scripts/fuzz.sh, whose build alone takes longer than
#   CI can spare;
# - every wheel (scripts/build_wheels.sh: 3.9, 3.11, 3.13) tested on other
#   Debian releases (scripts/test_wheels.sh: the whole suite on Debian 13, the
#   smoke test on Debian 11). Needs root, for debootstrap and chroot;
# - `pip install` of the source distribution into a fresh venv with pip's
#   build isolation (scripts/test_sdist.sh): the build back-end from the
#   package index, the extension against this machine's -dev packages (CI
#   builds its wheel from the sdist, with the pinned back-end);
# - the soak (scripts/soak.sh) for SOAK_MINUTES (default 30): a training job
#   with every fault at once, kills and restarts, checked for exactly once.
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
echo "== wheels for every Python, tested on Debian 11 and 13"
bash "$root/scripts/build_wheels.sh" "$root/dist/nightly"
bash "$root/scripts/test_wheels.sh" "$root/dist/nightly"
echo "== the source distribution, installed with pip's build isolation"
bash "$root/scripts/build_sdist.sh" "$root/dist/nightly"
bash "$root/scripts/test_sdist.sh" "$root/dist/nightly"
echo "== the soak, ${SOAK_MINUTES:-30} minutes"
bash "$root/scripts/soak.sh" "${SOAK_MINUTES:-30}"
echo "nightly: ok"
