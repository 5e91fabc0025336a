#!/usr/bin/env bash
# trixie.sh: a cached Debian 13 "trixie" chroot with libtorch 2.6 (libtorch-dev,
# python3-torch), the oldest libtorch gotrain supports, and a runner that executes a
# command in it with the repository, the host's Go and Go caches mounted in.
#
#   scripts/chroot/trixie.sh build        make the chroot unless a valid one is cached
#   scripts/chroot/trixie.sh run CMD...   build if needed, then run CMD in the repository
#   scripts/chroot/trixie.sh shell        an interactive shell there
#   scripts/chroot/trixie.sh check        exit 0 if the cached chroot is valid
#   scripts/chroot/trixie.sh rebuild      throw the cache away and build again
#
# The chroot lives outside the clone, so fresh CI clones reuse it:
#   GOTRAIN_CHROOT  the chroot root, default ${XDG_CACHE_HOME:-$HOME/.cache}/gotrain/trixie
#   GOTRAIN_CHROOT_GOCACHE  Go's build cache for it, default <chroot>-gocache
# A cached chroot is valid when its stamp lists the same packages and
# `dpkg-query -W libtorch-dev` inside reports 2.6; otherwise it is rebuilt (missing
# packages only are installed when just the list grew).
#
# In the chroot: the repository is /src/gotrain (read-write), the host's GOROOT is
# /usr/local/go (read-only, run with GOTOOLCHAIN=local), the host's module cache is
# bind-mounted so nothing needs downloading, and /proc, /sys, /dev are mounted only
# while a command runs; a trap unmounts them however the script ends. Needs root.
#
# Python: GOTRAIN_PYTHON (and GOTRAIN_PYTHON26) is trixie's /usr/bin/python3 with torch
# 2.6, so every interop test runs against 2.6. Trixie packages torch, torchvision, numpy
# and yaml but not tensorboard's Python package. Commands run with CI unset, so
# internal/testpy skips a test whose Python module the chroot lacks rather than failing
# it; the modules the chroot must have are checked by its caller (scripts/chroot/test.mk),
# and CI=true strictness applies to the host run, whose virtualenv has them all.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
R=${GOTRAIN_CHROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/gotrain/trixie}
GOCACHE_DIR=${GOTRAIN_CHROOT_GOCACHE:-$R-gocache}
MIRROR=${GOTRAIN_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=trixie
# libopenblas0-openmp is the BLAS Debian's libtorch is tested with; make runs libtorch.mk.
# libgloo-dev: the gloo headers c10d's ProcessGroupGloo.hpp includes (torch/distributed).
# dataset-fashion-mnist: the real data set torch/data's parity tests read
# (/usr/share/datasets/fashion-mnist), so they run here instead of skipping.
# libjpeg62-turbo-dev: libjpeg-turbo, torch/data's JPEG decoder.
PACKAGES="libtorch-dev libgloo-dev python3-torch g++ make libopenblas0-openmp python3-numpy python3-yaml ca-certificates dataset-fashion-mnist libjpeg62-turbo-dev"
# Installed when the suite has them; tests that import the others skip in the chroot.
OPTIONAL_PACKAGES="python3-torchvision python3-tensorboard"
STAMP=.gotrain-chroot
SRC=/src/gotrain

log() { echo "trixie: $*" >&2; }
die() { log "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, mount, chroot)"

mounted=()
umount_all() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" || log "could not unmount ${mounted[i]}"
  done
  mounted=()
}
trap umount_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# mnt ARGS... TARGET: mount and remember TARGET for the trap.
mnt() {
  local target=${*: -1}
  mkdir -p "$target"
  mount "$@"
  mounted+=("$target")
}

# unmount_leftovers ROOT: lazily unmount what a killed run left mounted under ROOT.
unmount_leftovers() {
  local m
  for m in root/.cache/go-build root/go/pkg/mod usr/local/go src/gotrain dev/pts dev sys proc; do
    if mountpoint -q "$1/$m"; then umount -l "$1/$m"; fi
  done
}

# remove ROOT: delete a chroot tree, never what a stale bind mount exposes inside it
# (the repository, GOROOT, caches: --one-file-system does not stop at a bind mount of
# the same file system).
remove() {
  unmount_leftovers "$1"
  if awk -v r="$1/" 'index($2, r) == 1 {found = 1} END {exit !found}' /proc/self/mounts; then
    die "mounts remain under $1; not removing it"
  fi
  rm -rf --one-file-system "$1"
}

mount_system() {
  local root=$1
  mnt -t proc proc "$root/proc"
  mnt -t sysfs sysfs "$root/sys"
  mnt --bind /dev "$root/dev"
  mnt --bind /dev/pts "$root/dev/pts"
}

in_root() { local root=$1; shift; chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }

valid() {
  [ -f "$R/$STAMP" ] && [ "$(sed -n 1p "$R/$STAMP")" = "$PACKAGES" ] || return 1
  case "$(chroot "$R" dpkg-query -W -f '${Version}' libtorch-dev 2>/dev/null)" in
    2.6.*) return 0 ;;
  esac
  return 1
}

# apt_install ROOT: install PACKAGES and those OPTIONAL_PACKAGES the suite has, then
# record in the stamp the list and what was left out.
apt_install() {
  local root=$1 p have=() missing=()
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  in_root "$root" apt-get update -qq
  for p in $OPTIONAL_PACKAGES; do
    if in_root "$root" apt-cache show "$p" >/dev/null 2>&1; then have+=("$p"); else missing+=("$p"); fi
  done
  [ ${#missing[@]} = 0 ] || log "not in $SUITE (tests that import them skip in the chroot): ${missing[*]}"
  # shellcheck disable=SC2086
  in_root "$root" DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    $PACKAGES "${have[@]}" >/dev/null
  in_root "$root" apt-get clean
  rm -rf "$root"/var/lib/apt/lists/*
  printf '%s\n%s\n' "$PACKAGES" "${missing[*]}" >"$root/$STAMP"
}

build() {
  if valid; then return 0; fi
  if [ -f "$R/$STAMP" ] && chroot "$R" dpkg-query -W libtorch-dev >/dev/null 2>&1; then
    log "package list changed: installing into $R"
    mount_system "$R"
    apt_install "$R"
    umount_all
    valid || die "chroot $R still invalid after installing"
    return 0
  fi
  command -v debootstrap >/dev/null || { log "installing debootstrap"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
  local tmp=$R.tmp start=$SECONDS
  if [ -d "$tmp" ]; then
    # a build that died; it may still hold mounts
    remove "$tmp"
  fi
  mkdir -p "$(dirname "$R")"
  log "debootstrap $SUITE into $tmp"
  debootstrap --variant=minbase "$SUITE" "$tmp" "$MIRROR" >"$tmp.log" 2>&1 || { tail -20 "$tmp.log" >&2; die "debootstrap failed (log: $tmp.log)"; }
  log "installing $PACKAGES"
  mount_system "$tmp"
  apt_install "$tmp"
  in_root "$tmp" python3 -c 'import torch; print("trixie: torch", torch.__version__)' >&2
  umount_all
  if [ -d "$R" ]; then
    remove "$R"
  fi
  mv "$tmp" "$R"
  rm -f "$tmp.log"
  log "built $R in $((SECONDS - start)) s ($(du -shx "$R" | cut -f1))"
  valid || die "chroot $R invalid after building"
}

# run CMD...: run CMD in $SRC inside the chroot with the mounts and the Go environment.
run() {
  local goroot gomodcache goproxy tty=()
  goroot=$(go env GOROOT)
  gomodcache=$(go env GOMODCACHE)
  goproxy=$(go env GOPROXY)
  mkdir -p "$gomodcache" "$GOCACHE_DIR"
  unmount_leftovers "$R"  # from a run killed before its trap ran; the lock says none is live
  mount_system "$R"
  cp /etc/resolv.conf "$R/etc/resolv.conf"
  mnt --bind "$REPO" "$R$SRC"
  mnt --bind -o ro "$goroot" "$R/usr/local/go"
  mnt --bind "$gomodcache" "$R/root/go/pkg/mod"
  mnt --bind "$GOCACHE_DIR" "$R/root/.cache/go-build"
  [ -t 0 ] && tty=(TERM="${TERM:-xterm}")
  chroot "$R" /usr/bin/env -i \
    PATH=/usr/local/go/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "${tty[@]}" \
    GOTOOLCHAIN=local GOFLAGS=-mod=mod GOPROXY="$goproxy" \
    GOROOT=/usr/local/go GOMODCACHE=/root/go/pkg/mod GOCACHE=/root/.cache/go-build \
    GOTRAIN_PYTHON=/usr/bin/python3 GOTRAIN_PYTHON26=/usr/bin/python3 \
    /bin/sh -c 'cd "$0" && exec "$@"' "$SRC" "$@"
}

# Only one build or run at a time per chroot: runs share its mount points.
mkdir -p "$(dirname "$R")"
exec 9>"$R.lock"
flock 9

case "${1:-}" in
  build) build ;;
  rebuild) remove "$R"; build ;;
  check) valid ;;
  run) shift; [ $# -gt 0 ] || die "usage: $0 run CMD..."; build; run "$@" ;;
  shell) build; run /bin/bash ;;
  *) die "usage: $0 build|rebuild|check|run CMD...|shell" ;;
esac
