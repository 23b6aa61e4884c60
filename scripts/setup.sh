#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian 12 machine: system packages, then a
# project-local Python virtual environment (.venv) with pinned packages.
# Used by both README commands and by .ci/run. Safe to run repeatedly.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

debs=(build-essential cmake ninja-build pkg-config git
      libarchive-dev libcurl4-openssl-dev libzstd-dev libxxhash-dev libspdlog-dev
      libjpeg62-turbo-dev libturbojpeg0-dev libspng-dev libwebp-dev
      libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev
      libarchive-tools tar gzip zstd curl nginx-light
      clang-14 libclang-rt-14-dev python3 python3-venv python3-dev)

missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_=""; [ "$(id -u)" = 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# nginx-light starts a system service on install; the tests run their own.
if command -v systemctl >/dev/null && systemctl is-active --quiet nginx 2>/dev/null; then
  systemctl stop nginx || true
fi

req="$root/python/requirements-dev.txt"
stamp="$root/.venv/.requirements.sha"
nodeps="$root/python/requirements-nodeps.txt"
want=$(cat "$req" "$nodeps" | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: creating .venv with pinned Python packages"
  python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r "$req"
  .venv/bin/python -m pip install -q --no-deps -r "$nodeps"
  echo "$want" > "$stamp"
fi
