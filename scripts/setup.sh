#!/usr/bin/env bash
# setup.sh: make this machine able to build, train and test gotrain.
#  - .venv: a project virtualenv with the pinned torch (its package carries libtorch),
#    torchvision, tensorboard and numpy (scripts/requirements.txt);
#  - Debian's dataset-fashion-mnist;
#  - Debian's libgloo-dev (headers torch/distributed compiles against).
# Idempotent: a second run finds everything in place and downloads nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
REQ=scripts/requirements.txt
stamp="$VENV/.gotrain-requirements"

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  python3 -m venv "$VENV"
fi
if ! cmp -s "$REQ" "$stamp"; then
  echo "setup: installing $(grep -v '^#' "$REQ" | tr '\n' ' ')into $VENV (several GB on first run; pip caches downloads)"
  "$VENV/bin/pip" install --disable-pip-version-check -q -r "$REQ"
  cp "$REQ" "$stamp"
fi

fmnist=/usr/share/datasets/fashion-mnist
if [ ! -e "$fmnist/train-images-idx3-ubyte.gz" ] && ! dpkg -s dataset-fashion-mnist >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian's dataset-fashion-mnist"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null
  else
    echo "setup: Fashion-MNIST missing; run: sudo apt-get install dataset-fashion-mnist (or pass a data dir)" >&2
  fi
fi

# c10d's ProcessGroupGloo.hpp includes gloo's headers, which PyTorch's wheel does not
# ship; Debian's libgloo-dev provides them (torch/distributed; build tag nodist skips it).
if [ ! -e /usr/include/gloo/algorithm.h ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian's libgloo-dev (gloo headers for torch/distributed)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libgloo-dev >/dev/null
  else
    echo "setup: gloo headers missing; run: sudo apt-get install libgloo-dev (or build with -tags nodist)" >&2
  fi
fi
