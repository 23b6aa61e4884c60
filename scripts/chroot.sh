# Debian chroots for building and testing the wheels: sourced by scripts/build_wheels.sh and
# scripts/test_wheels.sh, never run alone.
#
#   chroot_make DIR SUITE PACKAGE...   debootstrap SUITE (minbase) into DIR once, then install the
#                                      packages; a stamp in DIR skips both when nothing changed
#   chroot_enter DIR                   mount what programs inside expect (/proc, a tmpfs /dev/shm);
#                                      chroot_leave_all (an EXIT trap) unmounts them
#   chroot_run DIR COMMAND...          run COMMAND as root in DIR with a clean environment (host
#                                      variables such as REQUESTS_CA_BUNDLE name host files)
#
# The chroot trusts the CAs this machine added to its own store (a TLS-inspecting proxy's, say),
# so pip and curl inside reach what they reach outside. /dev is never bind-mounted: debootstrap
# made its device nodes, and `rm -rf` of a chroot must never reach the host's /dev.

chroot_mirror=${SHARDSTREAM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
chroot_mounted=()

chroot_make() {
  local dir=$1 suite=$2
  shift 2
  local want
  want=$(printf '%s\n' "$suite" "$chroot_mirror" "$@" | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$dir/.shardstream-chroot" 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  if [ ! -x "$dir/bin/sh" ]; then
    command -v debootstrap >/dev/null || {
      echo "chroot: installing debootstrap" >&2
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
    }
    echo "chroot: debootstrap $suite into $dir (a few minutes)" >&2
    rm -rf "$dir.partial"
    mkdir -p "$(dirname "$dir")"
    if ! debootstrap --variant=minbase --include=ca-certificates "$suite" "$dir.partial" \
           "$chroot_mirror" > "$dir.debootstrap.log" 2>&1; then
      tail -20 "$dir.debootstrap.log" >&2
      echo "chroot: debootstrap $suite failed (log: $dir.debootstrap.log)" >&2
      return 1
    fi
    mv "$dir.partial" "$dir"
  fi
  local added=(/usr/local/share/ca-certificates/*.crt)
  if [ -f "${added[0]}" ]; then
    cp "${added[@]}" "$dir/usr/local/share/ca-certificates/"
  fi
  chroot_enter "$dir"
  chroot_run "$dir" update-ca-certificates >/dev/null 2>&1
  echo "chroot: $suite: apt-get install $*" >&2
  chroot_run "$dir" bash -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@"' \
    apt "$@" > "$dir.apt.log" 2>&1 || { tail -20 "$dir.apt.log" >&2; return 1; }
  echo "$want" > "$dir/.shardstream-chroot"
}

chroot_enter() {
  local dir
  dir=$(cd "$1" && pwd)
  # Name lookups as outside: the resolver, and this host's own name (torchrun resolves it).
  cp /etc/resolv.conf "$dir/etc/resolv.conf"
  cp /etc/hosts "$dir/etc/hosts"
  if ! mountpoint -q "$dir/proc"; then
    mount -t proc proc "$dir/proc"
    chroot_mounted+=("$dir/proc")
  fi
  mkdir -p "$dir/dev/shm"
  if ! mountpoint -q "$dir/dev/shm"; then
    mount -t tmpfs -o size=8g,mode=1777 shm "$dir/dev/shm"
    chroot_mounted+=("$dir/dev/shm")
  fi
}

chroot_leave_all() {
  local m
  for m in "${chroot_mounted[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" || true; done
  chroot_mounted=()
}

chroot_run() {
  local dir=$1
  shift
  chroot "$dir" /usr/bin/env -i \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    ${CHROOT_ENV[@]+"${CHROOT_ENV[@]}"} "$@"
}

# Copies the working tree (tracked files and untracked ones git does not ignore) to DIR.
chroot_copy_tree() {
  local src=$1 dst=$2
  rm -rf "$dst"
  mkdir -p "$dst"
  (cd "$src" && git ls-files --cached --others --exclude-standard -z |
     tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | tar -x -C "$dst"
}
