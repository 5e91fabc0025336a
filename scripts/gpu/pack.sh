#!/usr/bin/env bash
# pack.sh: on a machine with network and Go, pack what scripts/gpu/run.sh needs on a GPU
# machine that has Python torch but no network and no Go:
#   go<version>.linux-amd64.trim.tar.xz  the Go toolchain trimmed to what builds and tests
#                                       (go, compile, link, asm, cgo, vet; the standard
#                                       library without tests, testdata, cmd/ sources, race
#                                       and boringcrypto objects, docs, api, misc, test)
#   vendor/                             `go mod vendor` of this module
#   include/                            headers the GPU machine's torch lacks: gloo's
#                                       (Debian's libgloo-dev, for torch/distributed) and
#                                       the CUDA runtime's crt/ and nv/ (the pip packages
#                                       nvidia-cuda-crt and -cccl in .venv, for NCCL)
#   manifest                            versions and go.mod/go.sum hashes the vendor matches
# into GOTRAIN_GPU_BUNDLE (default .cache/gpu-bundle, git-ignored; under 60 MB so it can
# travel with the working tree). The toolchain tarball is reused while the Go version is
# the same; vendor/ is remade every run.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
OUT=${GOTRAIN_GPU_BUNDLE:-$REPO/.cache/gpu-bundle}
LIMIT_MB=60
GO=${GO:-go}

goroot=$($GO env GOROOT)
gover=$($GO env GOVERSION)
goos_arch=$($GO env GOOS)-$($GO env GOARCH)
[ "$goos_arch" = linux-amd64 ] || { echo "pack: GPU machines are linux-amd64, this Go is $goos_arch" >&2; exit 1; }
mkdir -p "$OUT"

tarball=$OUT/$gover.linux-amd64.trim.tar.xz
if [ ! -s "$tarball" ]; then
  rm -f "$OUT"/go*.linux-amd64.trim.tar.xz
  echo "pack: trimming $goroot ($gover)"
  list=$(mktemp)
  trap 'rm -f "$list" "$tarball.tmp"' EXIT
  (
    cd "$goroot"
    printf '%s\n' VERSION go.env LICENSE bin/go src/go.mod src/go.sum
    for t in asm cgo compile link vet; do echo "pkg/tool/linux_amd64/$t"; done
    find pkg/include lib/time -type f
    # the standard library's packages; cmd/ is only the toolchain's own source
    find src -mindepth 1 \( -path src/cmd -o -name testdata \) -prune \
      -o -type f ! -name '*_test.go' ! -name '*.syso' -path 'src/*/*' -print
  ) | LC_ALL=C sort >"$list"
  tar -C "$goroot" --transform 's,^,go/,' -cf - -T "$list" | xz -T0 -6 >"$tarball.tmp"
  mv "$tarball.tmp" "$tarball"
fi

rm -rf "$OUT/vendor"
$GO mod vendor -o "$OUT/vendor"
# Headers for distributed training on the GPU machine (run.sh builds without them,
# tag nodist or no NCCL, when they are missing here).
rm -rf "$OUT/include"
mkdir -p "$OUT/include"
if [ -d /usr/include/gloo ]; then
  cp -a /usr/include/gloo "$OUT/include/"
else
  echo "pack: no /usr/include/gloo (apt-get install libgloo-dev): the GPU run builds with -tags nodist" >&2
fi
cudainc=$(ls -d "$REPO"/.venv/lib/python3*/site-packages/nvidia/cu13/include 2>/dev/null | head -1)
if [ -n "$cudainc" ] && [ -f "$cudainc/crt/host_config.h" ] && [ -d "$cudainc/nv" ]; then
  cp -a "$cudainc/crt" "$cudainc/nv" "$OUT/include/"
else
  echo "pack: no crt/ and nv/ CUDA headers in .venv (scripts/setup.sh installs them): the GPU run builds without NCCL" >&2
fi

{
  echo "go $gover"
  echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- 2>/dev/null || echo ' (dirty)')"
  echo "go.mod $(sha256sum go.mod | cut -d' ' -f1)"
  echo "go.sum $([ -f go.sum ] && sha256sum go.sum | cut -d' ' -f1 || echo none)"
  echo "packed $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} >"$OUT/manifest"

echo "pack: bundle in $OUT"
du -b "$tarball" | awk '{printf "  %-46s %6.1f MB\n", "go toolchain ('"$(basename "$tarball")"')", $1/1e6}'
du -sb "$OUT/include" | awk '{printf "  %-46s %6.1f MB\n", "include/ (gloo, crt, nv headers)", $1/1e6}'
du -sb "$OUT/vendor" | awk '{printf "  %-46s %6.1f MB (%d modules)\n", "vendor/", $1/1e6, '"$(grep -c '^# ' "$OUT/vendor/modules.txt" 2>/dev/null || echo 0)"'}'
total=$(du -sb "$OUT" | cut -f1)
awk -v t="$total" 'BEGIN{printf "  %-46s %6.1f MB\n", "total", t/1e6}'
if [ "$total" -gt $((LIMIT_MB * 1000000)) ]; then
  echo "pack: bundle is over $LIMIT_MB MB; it will not travel with the working tree" >&2
  exit 1
fi
