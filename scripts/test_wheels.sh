#!/usr/bin/env bash
# Tests the wheels on other Debian releases: scripts/test_wheels.sh [--only 11|13] [DIR]
# (default dist/, as written by scripts/build_wheels.sh)
#
# Each release is a clean chroot made with debootstrap (build-chroot/<suite>-test): its own
# Python, no -dev packages, no compiler. The source tree is copied in and scripts/test_wheel.sh
# runs there as it runs here: a fresh venv, ldd proving every library but glibc's and libstdc++'s
# comes from the wheel, then the tests.
#   Debian 13 (trixie: glibc 2.41, Python 3.13): the cp313 wheel and the whole Python suite, with
#     the pinned test requirements from PyPI (torch among them).
#   Debian 11 (bullseye: glibc 2.31, the oldest the wheels' tag admits; Python 3.9): the cp39
#     wheel with tests/smoke/installed.py (`--smoke`). The pinned requirements need Python 3.10
#     (numpy 2.4, torch 2.13), so the suite cannot run there; the smoke test takes every native
#     path the suite would on an old glibc: the writer, the Loader, shuffling, JPEG/PNG/WebP
#     decoding, libcurl over http, and the bundled command-line tool. Then pip's refusals, and
#     HTTPS with the CA bundle where RHEL keeps it (tests/smoke/https_ca.py).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
only=
wheels=dist
while (($#)); do
  case "$1" in
    --only) only=$2; shift 2 ;;
    --only=*) only=${1#--only=}; shift ;;
    -*) echo "test_wheels: unknown option $1" >&2; exit 2 ;;
    *) wheels=$1; shift ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "test_wheels: debootstrap and chroot need root" >&2; exit 1; }
wheels=$(cd "$wheels" && pwd)

# shellcheck source=scripts/chroot.sh
source "$root/scripts/chroot.sh"
trap chroot_leave_all EXIT

# The one wheel of Python tag $1 in $wheels. None, or several (another version left beside it),
# is an error: which one ran must not depend on how ls sorts.
one_wheel() {
  local found=("$wheels"/shardstream-*-"$1"-*manylinux*.whl)
  [ -e "${found[0]}" ] ||
    { echo "test_wheels: no $1 wheel in $wheels (scripts/build_wheels.sh)" >&2; return 1; }
  ((${#found[@]} == 1)) ||
    { echo "test_wheels: ${#found[@]} $1 wheels in $wheels (${found[*]##*/}): keep one" >&2; return 1; }
  echo "${found[0]}"
}

# test_in RELEASE SUITE PYTAG [test_wheel.sh options] -- PACKAGE...
test_in() {
  local release=$1 suite=$2 pytag=$3
  shift 3
  local opts=()
  while [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
  local whl
  whl=$(one_wheel "$pytag") || return 1
  local dir="$root/build-chroot/$suite-test" start=$SECONDS
  echo "== Debian $release ($suite): $(basename "$whl")"
  chroot_make "$dir" "$suite" "$@"
  chroot_enter "$dir"
  chroot_copy_tree "$root" "$dir/opt/shardstream"
  mkdir -p "$dir/opt/wheels"
  rm -f "$dir"/opt/wheels/*.whl
  cp "$whl" "$dir/opt/wheels/"
  echo "  glibc $(chroot_run "$dir" ldd --version | head -1 | awk '{print $NF}')," \
       "$(chroot_run "$dir" python3 --version)"
  CHROOT_ENV=(AWS_EC2_METADATA_DISABLED=true)
  chroot_run "$dir" bash -c 'cd /opt/shardstream && bash scripts/test_wheel.sh "$@"' test_wheel \
    "${opts[@]+"${opts[@]}"}" "/opt/wheels/$(basename "$whl")"
  CHROOT_ENV=()
  echo "== Debian $release: passed in $((SECONDS - start)) s"
}

# pip must refuse a wheel the machine cannot run, with its usual message, rather than install one
# that fails at import: a Python it was not built for (Debian 11's 3.9 and the cp313 wheel), and
# a glibc older than the tag (pip told it runs on manylinux_2_28).
refusals() {
  local dir="$root/build-chroot/bullseye-test" whl log
  log=$(mktemp)
  chroot_run "$dir" bash -c 'rm -rf /tmp/refuse && python3 -m venv /tmp/refuse &&
                             /tmp/refuse/bin/pip install -q --upgrade pip' > "$log" 2>&1 ||
    { cat "$log" >&2; return 1; }
  if compgen -G "$wheels/shardstream-*-cp313-*manylinux*.whl" > /dev/null; then
    whl=$(one_wheel cp313) || return 1
    cp "$whl" "$dir/opt/wheels/"
    if chroot_run "$dir" /tmp/refuse/bin/pip install --no-deps "/opt/wheels/$(basename "$whl")" \
         > "$log" 2>&1; then
      echo "test_wheels: pip on Python 3.9 installed the cp313 wheel" >&2; return 1
    fi
    grep -q "is not a supported wheel on this platform" "$log" ||
      { cat "$log" >&2; echo "test_wheels: pip refused the cp313 wheel without its usual message" >&2; return 1; }
    echo "  pip on Python 3.9 refuses the cp313 wheel: $(grep -m1 'is not a supported wheel' "$log")"
  fi
  whl=$(one_wheel cp39) || return 1
  whl=/opt/wheels/$(basename "$whl")
  # pip told the machine is manylinux_2_31 takes the wheel (the control), told 2_28 refuses it.
  chroot_run "$dir" /tmp/refuse/bin/pip install --dry-run --no-deps --only-binary=:all: \
    --platform manylinux_2_31_x86_64 --target /tmp/refuse-target "$whl" > "$log" 2>&1 ||
    { cat "$log" >&2; echo "test_wheels: pip for manylinux_2_31 refused the wheel" >&2; return 1; }
  if chroot_run "$dir" /tmp/refuse/bin/pip install --dry-run --no-deps --only-binary=:all: \
       --platform manylinux_2_28_x86_64 --target /tmp/refuse-target "$whl" > "$log" 2>&1; then
    echo "test_wheels: pip installed a manylinux_2_31 wheel for a glibc 2.28 platform" >&2; return 1
  fi
  grep -q "is not a supported wheel on this platform" "$log" ||
    { cat "$log" >&2; echo "test_wheels: pip refused the glibc 2.28 install without its usual message" >&2; return 1; }
  echo "  pip for a glibc 2.28 platform refuses the manylinux_2_31 wheel (and takes it for 2.31)"
  rm -f "$log"
}

# The wheels' libcurl names Debian's CA bundle. With that file gone and one where RHEL keeps its
# own, HTTPS must work (src/http/ca_bundle.cc); with none anywhere, fail naming the CA file; and a
# bundle without the server's CA must not trust it (the control). Run in the Debian 11 chroot, its
# bundle put back after.
ca_layouts() {
  local dir="$root/build-chroot/bullseye-test"
  local tls="$dir/opt/tlsck" deb="$dir/etc/ssl/certs/ca-certificates.crt" rc=0
  command -v openssl >/dev/null || { echo "test_wheels: the HTTPS check needs openssl" >&2; return 1; }
  rm -rf "$tls" "$dir/etc/pki"
  mkdir -p "$tls"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tls/key.pem" -out "$tls/cert.pem" -days 1 \
    -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" 2>/dev/null
  run_ca() {
    chroot_run "$dir" /opt/shardstream/.venv-wheel/bin/python \
      /opt/shardstream/tests/smoke/https_ca.py /opt/tlsck "$1" 2>&1 | grep -v '^data set:'
    return "${PIPESTATUS[0]}"
  }
  echo "  HTTPS, Debian's CA bundle moved away:"
  mv "$deb" "$deb.saved"
  mkdir -p "$dir/etc/pki/tls/certs"
  cp "$tls/cert.pem" "$dir/etc/pki/tls/certs/ca-bundle.crt"
  run_ca read || rc=1       # the bundle where RHEL keeps it
  rm -rf "$dir/etc/pki"
  run_ca no-bundle || rc=1  # none anywhere
  mv "$deb.saved" "$deb"
  run_ca untrusted || rc=1  # Debian's, without the server's CA
  rm -rf "$tls"
  return $rc
}

if [ -z "$only" ] || [ "$only" = 11 ]; then
  test_in 11 bullseye cp39 --smoke -- python3 python3-venv
  refusals
  ca_layouts
fi
if [ -z "$only" ] || [ "$only" = 13 ]; then
  test_in 13 trixie cp313 -- python3 python3-venv zstd procps
fi
