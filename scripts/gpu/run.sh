#!/usr/bin/env bash
# run.sh [--dry-run] RESULTS_DIR: build and test gotrain on a GPU machine that has Python
# torch (a CUDA build) but no network and no Go, using the bundle scripts/gpu/pack.sh made
# (.cache/gpu-bundle: a trimmed Go toolchain and `go mod vendor`), and compare it with
# PyTorch, eager and compiled, on the same weights and batches.
#
# Steps, in order of priority, each skipped with a log line when what it needs does not
# exist yet (the budget, below, decides what else is left out):
#   toolchain  unpack Go from the bundle
#   libtorch   find libtorch inside python3's torch package (LIBTORCH)
#   build      go build -mod=vendor -tags cuda ./...   (links libtorch_cuda)
#   gpucheck   cmd/gpucheck --require-cuda --json: driver, CUDA in libtorch, matmul TFLOP/s
#              (float32, bfloat16)
#   sdpa       the SDPA backend libtorch picks for the GPT and ViT attention shapes in bf16
#              and fp16, outputs and gradients against an fp32 reference written with
#              plain ops (bench/gpu sdpa), and the backend Python picks for the same inputs
#   train-M-P  the training step of M (gpt: GPT-2 small on 8×1024 tokens; vit: vit_b_16 on
#              64 images; cnn: the seed's CNN on 128 images) in P (fp32, bf16 autocast):
#              gotrain (bench/gpu train) against PyTorch (bench/gpu/bench.py train) on the
#              same weights, batches and fused AdamW, PyTorch eager and, for gpt-bf16,
#              vit-bf16 and cnn-fp32, compiled by torch.compile in its default mode and in
#              mode="reduce-overhead" (CUDA graphs), compile time apart from step time:
#              median step time, tokens/s or samples/s, peak memory
#   profile-gpt-bf16  where GPT-2's step time goes: kernels per step and time per kernel
#              class (matmul, attention, norm, elementwise, loss, optimizer, ...) in gotrain
#              (libtorch's profiler) and in PyTorch eager and compiled (torch.profiler)
#   test-graphs  go test -tags cuda -run CUDAGraphs ./trainer: the CUDA-graph tests first
#   graphs     CUDA-GRAPH RUNS: cmd/train --cuda-graphs against the same run without, on
#              the seed's CNN (after train-cnn-fp32, PyTorch eager and reduce-overhead);
#              skipped while cmd/train has no --cuda-graphs
#   test       go test -tags cuda ./...                 (the suite plus cuda-tagged tests),
#              with what is left of the budget, at least GOTRAIN_GPU_TEST_RESERVE seconds
# and, while time remains before the test step's reserve:
#   train-vit-fp32, train-gpt-fp32  the same, eager only (fp32 memory and speed)
#   hostsync-M torch.HostReads of the Trainer across optimizer steps between logging
#              points (bench/gpu hostsync): must be 0
#   gpucheck-tf32  gpucheck with TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1: float32 matmuls in TF32
#   matmul-python  gpucheck's N×N matmuls timed from Python torch (bench/gpu/bench.py matmul)
#   gpubench   gotrain's Trainer vs the seed's Python loop on the GPU: the default CNN,
#              float32 and bf16 autocast (bench/cmd/goloop, bench/python/seed_loop.py)
#
# RESULTS_DIR receives two files, since at most 8 come back from the GPU machine:
#   run.log           everything printed, ending with the summary tables
#   results.tar.gz    every result: results.json (versions, GPU, each step's status, time
#                     and, when it failed, the tail of its output; test counts and
#                     failures; matmul TFLOP/s; the SDPA cases; the training table with
#                     gotrain/PyTorch ratios of throughput and peak memory for each PyTorch
#                     mode; the profiles; host reads), tests.json (go test -json) and the
#                     JSON of every benchmark (train-*, profile-*, sdpa-*, hostsync-*,
#                     gpubench-*, matmul-python, graphs-*)
# The archive is rewritten after every step, so a run stopped from outside keeps what it
# measured. Exits non-zero if any step or check failed. The whole run stays under
# GOTRAIN_GPU_BUDGET seconds (default 470: 8 minutes of device time once the machine is
# up; 1800 for a dry run, whose first build alone can take 15 minutes on a busy 2-core
# machine): each step runs under `timeout` with what is left, and after the build every
# step but the tests leaves the test step GOTRAIN_GPU_TEST_RESERVE seconds (default 120;
# 60 for a dry run). Each step's seconds are in the summary: tune the caps with them.
# When the build fails, the run stops there.
#
# vendor/ holds only the packages imported when pack.sh ran: run pack.sh right before
# sending the tree ("import lookup disabled by -mod=vendor" means it is stale).
#
# --dry-run (or GOTRAIN_GPU_DRYRUN=1) runs the same steps here, on the CPU: the .venv's
# torch (a CUDA build, linked with -tags cpu), gpucheck --libtorch-only, the SDPA,
# training (eager and both compile modes), host-read and matmul steps at tiny (-smoke)
# shapes, and the tests of bench/gpu (GOTRAIN_GPU_TEST_PKGS); gpucheck-tf32, graphs and
# gpubench are skipped with the reason recorded. It keeps its Go build cache
# (GOTRAIN_GPU_GOCACHE, default ~/.cache/gotrain/gpu-dryrun-go, with -trimpath), so only
# the first dry run compiles cgotorch. `make gpu-dryrun` packs the bundle and runs it.
# Other knobs: GOTRAIN_PYTHON (default python3, or .venv/bin/python for a dry run),
# GOTRAIN_GPU_BUNDLE, GOTRAIN_GPU_GOCACHE (default: fresh), GOTRAIN_GPU_PKGS (what to
# build and test, default ./...), GOTRAIN_GPU_TEST_PKGS (what to test, default
# GOTRAIN_GPU_PKGS), GOTRAIN_GPUCHECK_ARGS, GOTRAIN_GPU_SKIP (step names to skip, e.g.
# "test" for a rerun of the benchmarks alone, or "gpubench train-gpt-fp32"),
# GOTRAIN_GPU_MODES (PyTorch's modes for the compiled rows, default
# "eager,default,reduce-overhead").
#
# With the device tool: run `scripts/gpu/pack.sh` here, then
#   command: scripts/gpu/run.sh $OUT/results    carry: [".cache/gpu-bundle"]   timeout_s: 540
set -uo pipefail

# bash reads a script while it runs it: run a copy, so that editing or updating the tree
# during a run cannot change the run under way.
if [ -z "${GOTRAIN_RUNSH_REPO:-}" ]; then
  GOTRAIN_RUNSH_REPO=$(cd "$(dirname "$0")/../.." && pwd)
  export GOTRAIN_RUNSH_REPO
  copy=$(mktemp "${TMPDIR:-/tmp}/gotrain-run.XXXXXX") && cp "$0" "$copy" && exec bash "$copy" "$@"
  exit 2
fi
REPO=$GOTRAIN_RUNSH_REPO
trap 'rm -f "$0"' EXIT # the copy this runs from
DRYRUN=${GOTRAIN_GPU_DRYRUN:-0}
if [ "${1:-}" = --dry-run ]; then
  DRYRUN=1
  shift
fi
[ $# = 1 ] || { echo "usage: scripts/gpu/run.sh [--dry-run] RESULTS_DIR" >&2; exit 2; }
mkdir -p "$1" || exit 2
RESULTS=$(cd "$1" && pwd)
BUNDLE=${GOTRAIN_GPU_BUNDLE:-$REPO/.cache/gpu-bundle}
PKGS=${GOTRAIN_GPU_PKGS:-./...}
TEST_PKGS=${GOTRAIN_GPU_TEST_PKGS:-$PKGS}
BUDGET=${GOTRAIN_GPU_BUDGET:-470}
TEST_RESERVE=${GOTRAIN_GPU_TEST_RESERVE:-120}
MODES=${GOTRAIN_GPU_MODES:-eager,default,reduce-overhead}
TRIMPATH=
BUILD_CAP=300
if [ "$DRYRUN" = 1 ]; then
  # A dry run shares a small CPU machine, whose cold cgo build alone can take 5 minutes
  # and where torch.compile takes a minute a model.
  BUDGET=${GOTRAIN_GPU_BUDGET:-1800}
  BUILD_CAP=1200
  TEST_RESERVE=${GOTRAIN_GPU_TEST_RESERVE:-60}
  PY=${GOTRAIN_PYTHON:-$REPO/.venv/bin/python}
  TAGS=cpu
  GPUCHECK_ARGS=${GOTRAIN_GPUCHECK_ARGS:---libtorch-only --json}
  TEST_PKGS=${GOTRAIN_GPU_TEST_PKGS:-./bench/gpu/...}
  # A kept build cache (paths trimmed, so the fresh source copy hits it): cgotorch is
  # compiled by the first dry run only.
  GOTRAIN_GPU_GOCACHE=${GOTRAIN_GPU_GOCACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gotrain/gpu-dryrun-go}
  TRIMPATH=-trimpath
  # bench/gpu at shapes a CPU runs in seconds
  DEV=cpu SMOKE=-smoke TRAIN_ARGS="-warmup 3 -steps 2" CNN_ARGS="-warmup 3 -steps 2" HOSTSYNC_STEPS=3 MATMUL_N=256
else
  PY=${GOTRAIN_PYTHON:-python3}
  # torch/distributed needs gloo's headers, which pack.sh brings in include/.
  if [ -d "$BUNDLE/include/gloo" ]; then TAGS=cuda; else TAGS="cuda nodist"; fi
  # torch/data decodes JPEGs with libjpeg-turbo; without its headers, Go's decoder.
  printf '#include <stdio.h>\n#include <jpeglib.h>\n' | ${CC:-cc} -E - >/dev/null 2>&1 || TAGS="$TAGS nolibjpeg"
  GPUCHECK_ARGS=${GOTRAIN_GPUCHECK_ARGS:---require-cuda --json}
  # reduce-overhead records its CUDA graphs in the warm-up steps: at least 3 of them. The
  # CNN's steps take milliseconds: more of them.
  DEV=cuda SMOKE= TRAIN_ARGS="-warmup 3 -steps 10" CNN_ARGS="-warmup 5 -steps 100" HOSTSYNC_STEPS=10 MATMUL_N=10000 # N: gpucheck's default --size
fi
SKIP=" ${GOTRAIN_GPU_SKIP:-} "

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gotrain-gpu.XXXXXX")
trap 'rm -rf "$WORK" "$0"' EXIT # $0: the copy this runs from
# STAGE collects every result; finish packs it into RESULTS/results.tar.gz.
STAGE=$WORK/results
mkdir -p "$STAGE"
STEPS=$WORK/steps.tsv
: >"$STEPS"
mkdir -p "$WORK/logs" # each step's output, for results.json when it fails

log() { echo "run.sh: $*"; }

# record NAME STATUS SECONDS NOTE
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$STEPS"; }
skip() { log "SKIP $1: $2"; record "$1" skipped 0 "$2"; }

# HOLD is the time step keeps back for the test step: its reserve, once the build is done.
HOLD=0

# optional NAME CAP CMD...: step, when CAP seconds fit before the test step's reserve;
# else skipped with the reason. For the figures that matter less than the tests.
optional() {
  local name=$1 cap=$2
  if [ $((BUDGET - SECONDS - TEST_RESERVE)) -lt "$cap" ]; then
    skip "$name" "no time left before the test step's ${TEST_RESERVE}s reserve"
    return 0
  fi
  step "$@"
}

# step NAME CAP CMD...: run CMD (a command or one of the exported functions below) under
# timeout, for CAP seconds or what is left of the budget.
step() {
  local name=$1 cap=$2 left t0 rc status
  shift 2
  case $SKIP in *" $name "*)
    skip "$name" "GOTRAIN_GPU_SKIP"
    return 0
    ;;
  esac
  left=$((BUDGET - SECONDS - 5 - HOLD))
  if [ "$left" -lt 10 ]; then
    log "FAIL $name: no time left in the ${BUDGET}s budget (${HOLD}s of it kept for the tests)"
    record "$name" timeout 0 "no time left"
    return 1
  fi
  [ "$cap" -le "$left" ] || cap=$left
  log "=== $name (timeout ${cap}s)"
  t0=$SECONDS
  timeout -k 10 "$cap" bash -o pipefail -c '"$@"' "$name" "$@" 2>&1 | tee "$WORK/logs/$name.log"
  rc=${PIPESTATUS[0]}
  case $rc in
    0) status=passed ;;
    124 | 137) status=timeout ;;
    *) status=failed ;;
  esac
  log "=== $name: $status (rc $rc, $((SECONDS - t0)) s)"
  record "$name" "$status" $((SECONDS - t0)) "rc $rc"
  archive
  return $rc
}

unpack_go() {
  local tarball
  tarball=$(ls "$BUNDLE"/go*.linux-amd64.trim.tar.xz 2>/dev/null | head -1)
  [ -n "$tarball" ] || { echo "no Go toolchain in $BUNDLE: run scripts/gpu/pack.sh on a machine with Go" >&2; return 1; }
  tar -C "$WORK" -xJf "$tarball" && "$WORK/go/bin/go" version
}

# torch_info: what python3's torch is, as JSON, into $WORK/torch.json.
torch_info() {
  "$PY" - >"$WORK/torch.json" <<'EOF' && cat "$WORK/torch.json"
import json, os, torch
cuda = torch.cuda.is_available()
print(json.dumps({
    "torch": torch.__version__,
    "torch_cuda": torch.version.cuda,
    "cuda_available": cuda,
    "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
    "libtorch": os.path.dirname(torch.__file__),
}))
EOF
}

# copy_source: the module without caches, plus the bundle's vendor/, in $WORK/src, so
# a vendor/ never appears in the working tree.
copy_source() {
  mkdir -p "$WORK/src" &&
    tar -C "$REPO" --exclude=./.git --exclude=./.venv --exclude=./.cache --exclude=./vendor \
      --exclude=./build --exclude=./runs --exclude=./.whl --exclude=./.gl -cf - . | tar -C "$WORK/src" -xf - &&
    cp -a "$BUNDLE/vendor" "$WORK/src/vendor" || return 1
  local want
  want=$(awk '$1 == "go.mod" {print $2}' "$BUNDLE/manifest" 2>/dev/null)
  if [ "$want" != "$(sha256sum "$WORK/src/go.mod" | cut -d' ' -f1)" ]; then
    echo "go.mod changed since scripts/gpu/pack.sh made vendor/; run it again" >&2
    return 1
  fi
}

# cgo_env: the flags libtorch.mk derives for LIBTORCH (its print-env target).
cgo_env() {
  local env
  # NCCL's headers: the nvidia-* packages beside torch, plus the crt/ and nv/ headers
  # pack.sh brings (include/), which the CUDA runtime's headers include.
  local cudainc
  cudainc="$(ls -d "$LIBTORCH"/../nvidia/*/include 2>/dev/null | tr '\n' ' ') $BUNDLE/include"
  if command -v make >/dev/null && env=$(make -s --no-print-directory -C "$WORK/src" -f libtorch.mk LIBTORCH="$LIBTORCH" CUDA_INCDIRS="$cudainc" print-env); then
    eval "$env"
    case " $CGO_CXXFLAGS " in # gloo's headers, unless NCCL's search already added the dir
      *" -isystem $BUNDLE/include "*) ;;
      *) [ -d "$BUNDLE/include" ] && CGO_CXXFLAGS="$CGO_CXXFLAGS -isystem $BUNDLE/include" ;;
    esac
    case "$CGO_CXXFLAGS" in *GOTRAIN_NCCL*) log "NCCL: headers found, building with NCCL" ;; *) log "NCCL: headers missing, building without NCCL" ;; esac
  else
    log "no make or no libtorch.mk print-env: using the plain torch package flags"
    export CGO_CXXFLAGS="-isystem $LIBTORCH/include -isystem $LIBTORCH/include/torch/csrc/api/include"
    export CGO_LDFLAGS="-L$LIBTORCH/lib -Wl,-rpath,$LIBTORCH/lib"
  fi
  export CGO_ENABLED=1 GOTRAIN_PYTHON=$PY
  echo "CGO_CXXFLAGS=$CGO_CXXFLAGS"
  echo "CGO_LDFLAGS=$CGO_LDFLAGS"
}

# gotest OUTFILE ARGS...: go test -json into OUTFILE, its output readable in the log.
gotest() {
  local out=$1
  shift
  go test -json "$@" | tee "$out" |
    "$PY" -uc 'import json, sys
for line in sys.stdin:
    try:
        sys.stdout.write(json.loads(line).get("Output", ""))
    except ValueError:
        sys.stdout.write(line)'
}

# gpucheck ARGS...: build cmd/gpucheck and run it; its report goes to $WORK/gpucheck.out.
gpucheck() {
  go build -tags "$TAGS" -o "$WORK/gpucheck" ./cmd/gpucheck || return
  "$WORK/gpucheck" "$@" >"$WORK/gpucheck.out"
  local rc=$?
  cat "$WORK/gpucheck.out"
  return $rc
}

# gpubench: gotrain's Trainer against the seed's Python loop on this GPU, on the same data
# and initial weights: the default CNN in float32 and under bf16 autocast. Each writes
# one JSON result line (median epoch time, losses) to $STAGE/gpubench-W-{go,python}.json.
gpubench() {
  go build -tags "$TAGS" -o "$WORK/goloop" ./bench/cmd/goloop || return
  local w d
  for w in cnn cnn-bf16; do
    d="$WORK/gpubench-$w"
    mkdir -p "$d"
    "$WORK/goloop" -prep "$d" -workload "$w" -steps 100 -seed 1 || return
    "$WORK/goloop" -dir "$d" -workload "$w" -threads 4 -warmup 1 -reps 3 -device cuda >"$STAGE/gpubench-$w-go.json" || return
    "$PY" bench/python/seed_loop.py --workload "$w" --dir "$d" --threads 4 --warmup 1 --reps 3 --device cuda >"$STAGE/gpubench-$w-python.json" || return
    tail -n 1 "$STAGE/gpubench-$w-go.json" "$STAGE/gpubench-$w-python.json"
  done
}

# gpucheck_tf32 ARGS...: gpucheck again in a process whose libtorch starts with TF32
# float32 matmuls (the variable is read when libtorch loads); report in gpucheck-tf32.out.
gpucheck_tf32() {
  TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 "$WORK/gpucheck" "$@" >"$WORK/gpucheck-tf32.out"
  local rc=$?
  cat "$WORK/gpucheck-tf32.out"
  return $rc
}

# matmul_python: gpucheck's matmuls timed from Python torch in this run.
matmul_python() {
  "$PY" bench/gpu/bench.py matmul "$MATMUL_N" "$DEV" >"$STAGE/matmul-python.json" && cat "$STAGE/matmul-python.json"
}

# gpu_bin: bench/gpu, built once.
gpu_bin() {
  [ -x "$WORK/gpubench" ] || go build -tags "$TAGS" -o "$WORK/gpubench" ./bench/gpu
}

# sdpa_check: gotrain's SDPA check, then Python's backend choice for the same cases.
sdpa_check() {
  gpu_bin || return
  local rc=0
  # shellcheck disable=SC2086
  "$WORK/gpubench" sdpa -device "$DEV" $SMOKE >"$STAGE/sdpa-go.json" || rc=$?
  cat "$STAGE/sdpa-go.json"
  "$PY" bench/gpu/bench.py sdpa "$STAGE/sdpa-go.json" >"$STAGE/sdpa-python.json" || rc=1
  cat "$STAGE/sdpa-python.json"
  return $rc
}

# train_one MODEL PRECISION MODES: the training step in gotrain, then in Python on the
# weights and spec gotrain wrote (removed afterwards: GPT-2 small is 500 MB), once per
# PyTorch mode (eager, default, reduce-overhead): one JSON line each.
train_one() {
  gpu_bin || return
  local d=$WORK/train-$1-$2 rc=0 args=$TRAIN_ARGS
  [ "$1" = cnn ] && args=$CNN_ARGS
  # shellcheck disable=SC2086
  "$WORK/gpubench" train -model "$1" -precision "$2" -dir "$d" -device "$DEV" $SMOKE $args >"$STAGE/train-$1-$2-go.json" &&
    "$PY" bench/gpu/bench.py train "$d" --modes "$3" >"$STAGE/train-$1-$2-python.json" || rc=1
  rm -rf "$d"
  "$PY" - "$STAGE/train-$1-$2-go.json" "$STAGE/train-$1-$2-python.json" <<'EOF' || rc=1
import json, sys
rows = [json.load(open(sys.argv[1]))] + [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
for r in rows:
    print("%-24s %10.4f s/step %12.0f %s  peak %8.1f MiB  first loss %.5f  compile %s" % (
        r["impl"], r["median_step_s"], r["items_per_s"], r["unit"], r["peak_bytes"] / 2**20, r["first_loss"],
        "%.1f s" % r["compile_s"] if "compile_s" in r else "-"))
EOF
  return $rc
}

# profile_one MODEL PRECISION: kernels per step and time per kernel class, gotrain against
# PyTorch eager and torch.compile (bench/gpu profile), into profile-MODEL-PRECISION.json.
profile_one() {
  gpu_bin || return
  # shellcheck disable=SC2086
  "$WORK/gpubench" profile -model "$1" -precision "$2" -device "$DEV" $SMOKE -python "$PY" -modes eager,default >"$STAGE/profile-$1-$2.json"
}

# CUDA-GRAPH RUNS (issue 35, item 2): cmd/train on the seed's CNN with --cuda-graphs and
# without, on the same seed and synthetic data: wall time and samples/s of each run and
# whether the epochs' losses agree within float tolerance, in graphs.json (the command
# lines and outputs in graphs-*.log). Eager PyTorch and reduce-overhead on the same CNN
# come from train-cnn-fp32, which runs just before it.
graphs_run() {
  go build -tags "$TAGS" -o "$WORK/train" ./cmd/train || return
  local v t0 rc=0 args=(--model cnn --synthetic 25600 --batch-size 128 --epochs 2 --seed 1 --device "$DEV" --runs-dir "$WORK/graphs-runs")
  for v in eager graphs; do
    local extra=()
    [ $v = graphs ] && extra=(--cuda-graphs)
    t0=$(date +%s%N)
    echo "+ train ${args[*]} --experiment $v ${extra[*]}" | tee "$STAGE/graphs-$v.log"
    "$WORK/train" "${args[@]}" --experiment "$v" "${extra[@]}" >>"$STAGE/graphs-$v.log" 2>&1 || rc=1
    echo "wall_s $((($(date +%s%N) - t0) / 1000000)).e-3" >>"$STAGE/graphs-$v.log"
    tail -n 5 "$STAGE/graphs-$v.log"
  done
  "$PY" - "$WORK/graphs-runs" "$STAGE" <<'EOF' || rc=1
import json, os, sys
import torch
runs, stage = sys.argv[1:]
out = {}
for v in ("eager", "graphs"):
    wall = [l.split()[1] for l in open(os.path.join(stage, "graphs-%s.log" % v)) if l.startswith("wall_s ")]
    ck = os.path.join(runs, v, "checkpoints", "last.pt")
    hist = torch.load(ck, weights_only=True).get("history") if os.path.exists(ck) else None
    out[v] = {"wall_s": float(wall[-1]) if wall else None, "history": hist}
# The losses agree within float tolerance (the graphed optimizer runs its capturable
# kernel); the times differ by design.
def close(a, b):
    return all(x == y or (x != x and y != y) or abs(x - y) <= 1e-4 * max(1.0, abs(x)) for x, y in zip(a, b))
keys = ("train_loss", "val_loss", "val_acc")
h = [out[v]["history"] for v in ("eager", "graphs")]
for v in ("eager", "graphs"):
    out[v]["samples_per_sec"] = [r.get("samples_per_sec") for r in out[v]["history"] or []]
out["same_history"] = bool(h[0]) and h[1] is not None and len(h[0]) == len(h[1]) and all(
    close([float(a.get(k) or 0) for k in keys], [float(b.get(k) or 0) for k in keys]) for a, b in zip(h[0], h[1]))
json.dump(out, open(os.path.join(stage, "graphs.json"), "w"), indent=2)
print("graphs: wall %s s eager, %s s graphs; samples/s %s eager, %s graphs; same losses: %s" % (
    out["eager"]["wall_s"], out["graphs"]["wall_s"], out["eager"]["samples_per_sec"],
    out["graphs"]["samples_per_sec"], out["same_history"]))
sys.exit(0 if out["same_history"] else 1)
EOF
  return $rc
}

has_cuda_graphs() { "$WORK/train" -h 2>&1 | grep -q -- '-cuda-graphs'; }

# hostsync_one MODEL: the Trainer's host reads between logging points, bf16 autocast.
hostsync_one() {
  gpu_bin || return
  # shellcheck disable=SC2086
  "$WORK/gpubench" hostsync -model "$1" -precision bf16 -device "$DEV" $SMOKE -steps "$HOSTSYNC_STEPS" >"$STAGE/hostsync-$1.json"
  local rc=$?
  cat "$STAGE/hostsync-$1.json"
  return $rc
}

export -f unpack_go torch_info copy_source gotest gpucheck gpubench gpucheck_tf32 matmul_python gpu_bin sdpa_check train_one hostsync_one graphs_run profile_one
export REPO WORK STAGE PY BUNDLE TAGS RESULTS DEV SMOKE TRAIN_ARGS CNN_ARGS HOSTSYNC_STEPS MATMUL_N

has_go_files() { [ -d "$WORK/src/$1" ] && [ -n "$(find "$WORK/src/$1" -name '*.go' -print -quit)" ]; }

main() {
  log "gotrain GPU run $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname); dry run: $DRYRUN; tags: $TAGS; budget ${BUDGET}s"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  [ -f "$BUNDLE/manifest" ] && sed 's/^/bundle: /' "$BUNDLE/manifest"

  step toolchain 60 unpack_go || return
  export GOROOT=$WORK/go PATH=$WORK/go/bin:$PATH GOTOOLCHAIN=local GOFLAGS="-mod=vendor $TRIMPATH" GOPROXY=off
  export GOCACHE=${GOTRAIN_GPU_GOCACHE:-$WORK/gocache} GOTMPDIR=$WORK
  mkdir -p "$GOCACHE"
  command -v g++ >/dev/null || log "warning: no g++ on PATH; cgo cannot compile cgotorch"

  step libtorch 60 torch_info || return
  LIBTORCH=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["libtorch"])' "$WORK/torch.json")
  export LIBTORCH
  step source 60 copy_source || return
  cd "$WORK/src" || return
  cgo_env

  local rc
  # shellcheck disable=SC2086
  step build "$BUILD_CAP" go build -tags "$TAGS" $PKGS
  rc=$?
  # A build that ran out of time would run out again; one that failed may be gloo's.
  if [ $rc != 0 ] && [ $rc != 124 ] && [ $rc != 137 ] && [[ $TAGS != *nodist* ]]; then
    log "the build with distributed support failed; the rest runs with -tags nodist"
    TAGS="$TAGS nodist"
    export TAGS
    # shellcheck disable=SC2086
    step build-nodist "$BUILD_CAP" go build -tags "$TAGS" $PKGS
    rc=$?
  fi
  if [ $rc != 0 ]; then
    log "no build: the remaining steps are skipped"
    return 1
  fi
  HOLD=$TEST_RESERVE

  if has_go_files cmd/gpucheck; then
    # shellcheck disable=SC2086
    step gpucheck 120 gpucheck $GPUCHECK_ARGS
  else
    skip gpucheck "cmd/gpucheck does not exist yet"
  fi

  # Issue 39's order: the CUDA-graph tests, the seed's CNN with graphs against eager and
  # reduce-overhead, then gotrain against PyTorch eager and compiled; the suite gets its
  # reserve; the rest fills in.
  if [ "$DRYRUN" = 1 ]; then
    skip test-graphs "dry run: CUDA graphs need a GPU"
  else
    step test-graphs 120 gotest "$STAGE/tests-graphs.json" -tags "$TAGS" -count=1 -timeout 110s -run CUDAGraphs ./trainer
  fi
  step train-cnn-fp32 120 train_one cnn fp32 "$MODES"
  # ---- CUDA-GRAPH RUNS (issue 35, item 2): cmd/train --cuda-graphs, when it exists ----
  if [ "$DRYRUN" = 1 ]; then
    skip graphs "dry run: CUDA graphs need a GPU"
  elif ! go build -tags "$TAGS" -o "$WORK/train" ./cmd/train; then
    skip graphs "cmd/train did not build"
  elif ! has_cuda_graphs; then
    skip graphs "cmd/train has no --cuda-graphs flag yet"
  else
    step graphs 120 graphs_run
  fi
  # ---- end of the CUDA-graph runs ----
  step sdpa 90 sdpa_check
  step train-gpt-bf16 240 train_one gpt bf16 "$MODES"
  step train-vit-bf16 180 train_one vit bf16 "$MODES"
  step profile-gpt-bf16 120 profile_one gpt bf16


  optional train-vit-fp32 60 train_one vit fp32 eager
  optional hostsync-gpt 45 hostsync_one gpt
  optional hostsync-vit 45 hostsync_one vit
  optional train-gpt-fp32 60 train_one gpt fp32 eager
  if [ "$DRYRUN" = 1 ]; then
    skip gpucheck-tf32 "dry run: no GPU (TF32 is a CUDA matmul mode)"
  elif [ -x "$WORK/gpucheck" ]; then
    # shellcheck disable=SC2086
    optional gpucheck-tf32 40 gpucheck_tf32 $GPUCHECK_ARGS
  else
    skip gpucheck-tf32 "gpucheck did not build"
  fi
  optional matmul-python 40 matmul_python
  if [ "$DRYRUN" = 1 ]; then
    skip gpubench "dry run: no GPU"
  else
    optional gpubench 120 gpubench
  fi

  HOLD=0
  local left=$((BUDGET - SECONDS - 10))
  [ "$left" -gt 30 ] || left=30
  # shellcheck disable=SC2086
  step test "$left" gotest "$STAGE/tests.json" -tags "$TAGS" -count=1 -timeout "$((left - 15))s" $TEST_PKGS
}

# summarize: results.json in STAGE and the tables in the log (scripts/gpu/summarize.py).
summarize() {
  "$PY" "$REPO/scripts/gpu/summarize.py" "$WORK" "$STAGE" "$DRYRUN" "$TAGS" "$SECONDS"
}

# archive: every result in RESULTS/results.tar.gz (written whole, then renamed). step
# calls it after each step, so a run stopped from outside still leaves what it measured.
archive() {
  tar -C "$STAGE" -czf "$RESULTS/results.tar.gz.part" . && mv -f "$RESULTS/results.tar.gz.part" "$RESULTS/results.tar.gz"
}

{
  main
  summarize
} 2>&1 | tee "$RESULTS/run.log"
rc=${PIPESTATUS[0]}
archive
exit "$rc"
