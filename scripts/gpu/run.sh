#!/usr/bin/env bash
# run.sh RESULTS_DIR: build and test gotrain on a GPU machine that has Python torch (a
# CUDA build) but no network and no Go, using the bundle scripts/gpu/pack.sh made
# (.cache/gpu-bundle: a trimmed Go toolchain and `go mod vendor`).
#
# Steps, each skipped with a log line when what it needs does not exist yet:
#   toolchain  unpack Go from the bundle
#   libtorch   find libtorch inside python3's torch package (LIBTORCH)
#   build      go build -mod=vendor -tags cuda ./...   (links libtorch_cuda)
#   gpucheck   cmd/gpucheck --require-cuda --json: driver, CUDA in libtorch, matmul TFLOP/s
#              (float32, bfloat16)
#   gpucheck-tf32  the same with TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1: float32 matmuls in TF32
#   matmul-python  the same N×N matmuls timed from Python torch (bench/gpu/bench.py matmul)
#   sdpa       the SDPA backend libtorch picks for the GPT and ViT attention shapes in bf16
#              and fp16, outputs and gradients against an fp32 reference written with
#              plain ops (bench/gpu sdpa), and the backend Python picks for the same inputs
#   train-M-P  the training step of M (gpt: GPT-2 small on 8×1024 tokens; vit: vit_b_16 on
#              64 images) in P (fp32, bf16 autocast): gotrain (bench/gpu train) against
#              transformers / torchvision (bench/gpu/bench.py train) on the same weights,
#              batches and fused AdamW: median step time, tokens/s or samples/s, peak memory
#   hostsync-M torch.HostReads of the Trainer across optimizer steps between logging
#              points (bench/gpu hostsync): must be 0
#   gpubench   gotrain's Trainer vs the seed's Python loop on the GPU: the default CNN,
#              float32 and bf16 autocast (bench/cmd/goloop, bench/python/seed_loop.py)
#   test       go test -tags cuda ./...                 (the suite plus cuda-tagged tests),
#              with what is left of the budget
# RESULTS_DIR receives results.json (versions, GPU, each step's status, time and, when it
# failed, the tail of its output; test counts and failures; matmul TFLOP/s of gotrain and
# Python; the SDPA cases; gotrain/Python ratios of throughput and peak memory; host reads),
# run.log (everything printed), tests.json (go test -json) and the JSON of every
# benchmark (gpubench-*, matmul-python, sdpa-*, train-*, hostsync-*). Exits non-zero if
# any step or check failed. The whole run stays under GOTRAIN_GPU_BUDGET seconds (default
# 460; 1200 for a dry run): each step is run under `timeout` with what is left. When the
# build fails, the run stops there.
#
# vendor/ holds only the packages imported when pack.sh ran: run pack.sh right before
# sending the tree ("import lookup disabled by -mod=vendor" means it is stale).
#
# GOTRAIN_GPU_DRYRUN=1 runs the CPU-safe part here instead: the .venv's torch (a CUDA
# build, linked with -tags cpu), gpucheck --libtorch-only, the Python matmul, SDPA,
# training and host-read steps on the CPU at tiny (-smoke) shapes, and the cpu-tag suite;
# gpucheck-tf32 and gpubench are skipped with the reason recorded.
# Other knobs: GOTRAIN_PYTHON (default python3, or .venv/bin/python for a dry run),
# GOTRAIN_GPU_BUNDLE, GOTRAIN_GPU_GOCACHE (default: fresh), GOTRAIN_GPU_PKGS (what to
# build and test, default ./...), GOTRAIN_GPUCHECK_ARGS, GOTRAIN_GPU_SKIP (step names to
# skip, e.g. "test" for a rerun of the benchmarks alone, or "gpubench train-gpt-fp32").
#
# With the device tool: run `scripts/gpu/pack.sh` here, then
#   command: scripts/gpu/run.sh $OUT/results    carry: [".cache/gpu-bundle"]   timeout_s: 540
set -uo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
[ $# = 1 ] || { echo "usage: $0 RESULTS_DIR" >&2; exit 2; }
mkdir -p "$1" || exit 2
RESULTS=$(cd "$1" && pwd)
BUNDLE=${GOTRAIN_GPU_BUNDLE:-$REPO/.cache/gpu-bundle}
PKGS=${GOTRAIN_GPU_PKGS:-./...}
DRYRUN=${GOTRAIN_GPU_DRYRUN:-0}
BUDGET=${GOTRAIN_GPU_BUDGET:-460}
if [ "$DRYRUN" = 1 ]; then
  # A dry run shares a small CPU machine, whose cold cgo build alone can take 5 minutes.
  BUDGET=${GOTRAIN_GPU_BUDGET:-1200}
  PY=${GOTRAIN_PYTHON:-$REPO/.venv/bin/python}
  TAGS=cpu
  GPUCHECK_ARGS=${GOTRAIN_GPUCHECK_ARGS:---libtorch-only --json}
  # bench/gpu at shapes a CPU runs in seconds
  DEV=cpu SMOKE=-smoke TRAIN_ARGS="-warmup 1 -steps 2" HOSTSYNC_STEPS=3 MATMUL_N=256
else
  PY=${GOTRAIN_PYTHON:-python3}
  # torch/distributed needs gloo's headers, which pack.sh brings in include/.
  if [ -d "$BUNDLE/include/gloo" ]; then TAGS=cuda; else TAGS="cuda nodist"; fi
  # torch/data decodes JPEGs with libjpeg-turbo; without its headers, Go's decoder.
  printf '#include <stdio.h>\n#include <jpeglib.h>\n' | ${CC:-cc} -E - >/dev/null 2>&1 || TAGS="$TAGS nolibjpeg"
  GPUCHECK_ARGS=${GOTRAIN_GPUCHECK_ARGS:---require-cuda --json}
  DEV=cuda SMOKE= TRAIN_ARGS="-warmup 3 -steps 10" HOSTSYNC_STEPS=10 MATMUL_N=10000 # N: gpucheck's default --size
fi
SKIP=" ${GOTRAIN_GPU_SKIP:-} "

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gotrain-gpu.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
STEPS=$WORK/steps.tsv
: >"$STEPS"
mkdir -p "$WORK/logs" # each step's output, for results.json when it fails

log() { echo "run.sh: $*"; }

# record NAME STATUS SECONDS NOTE
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$STEPS"; }
skip() { log "SKIP $1: $2"; record "$1" skipped 0 "$2"; }

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
  left=$((BUDGET - SECONDS - 5))
  if [ "$left" -lt 10 ]; then
    log "FAIL $name: no time left in the ${BUDGET}s budget"
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
# one JSON result line (median epoch time, losses) to $RESULTS/gpubench-W-{go,python}.json.
gpubench() {
  go build -tags "$TAGS" -o "$WORK/goloop" ./bench/cmd/goloop || return
  local w d
  for w in cnn cnn-bf16; do
    d="$WORK/gpubench-$w"
    mkdir -p "$d"
    "$WORK/goloop" -prep "$d" -workload "$w" -steps 100 -seed 1 || return
    "$WORK/goloop" -dir "$d" -workload "$w" -threads 4 -warmup 1 -reps 3 -device cuda >"$RESULTS/gpubench-$w-go.json" || return
    "$PY" bench/python/seed_loop.py --workload "$w" --dir "$d" --threads 4 --warmup 1 --reps 3 --device cuda >"$RESULTS/gpubench-$w-python.json" || return
    tail -n 1 "$RESULTS/gpubench-$w-go.json" "$RESULTS/gpubench-$w-python.json"
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
  "$PY" bench/gpu/bench.py matmul "$MATMUL_N" "$DEV" >"$RESULTS/matmul-python.json" && cat "$RESULTS/matmul-python.json"
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
  "$WORK/gpubench" sdpa -device "$DEV" $SMOKE >"$RESULTS/sdpa-go.json" || rc=$?
  cat "$RESULTS/sdpa-go.json"
  "$PY" bench/gpu/bench.py sdpa "$RESULTS/sdpa-go.json" >"$RESULTS/sdpa-python.json" || rc=1
  cat "$RESULTS/sdpa-python.json"
  return $rc
}

# train_one MODEL PRECISION: the training step in gotrain, then in Python on the weights
# and spec gotrain wrote (removed afterwards: GPT-2 small is 500 MB).
train_one() {
  gpu_bin || return
  local d=$WORK/train-$1-$2 rc=0
  # shellcheck disable=SC2086
  "$WORK/gpubench" train -model "$1" -precision "$2" -dir "$d" -device "$DEV" $SMOKE $TRAIN_ARGS >"$RESULTS/train-$1-$2-go.json" &&
    "$PY" bench/gpu/bench.py train "$d" >"$RESULTS/train-$1-$2-python.json" || rc=1
  rm -rf "$d"
  tail -c 2000 "$RESULTS/train-$1-$2-go.json" "$RESULTS/train-$1-$2-python.json"
  return $rc
}

# hostsync_one MODEL: the Trainer's host reads between logging points, bf16 autocast.
hostsync_one() {
  gpu_bin || return
  # shellcheck disable=SC2086
  "$WORK/gpubench" hostsync -model "$1" -precision bf16 -device "$DEV" $SMOKE -steps "$HOSTSYNC_STEPS" >"$RESULTS/hostsync-$1.json"
  local rc=$?
  cat "$RESULTS/hostsync-$1.json"
  return $rc
}

export -f unpack_go torch_info copy_source gotest gpucheck gpubench gpucheck_tf32 matmul_python gpu_bin sdpa_check train_one hostsync_one
export REPO WORK PY BUNDLE TAGS RESULTS DEV SMOKE TRAIN_ARGS HOSTSYNC_STEPS MATMUL_N

has_go_files() { [ -d "$WORK/src/$1" ] && [ -n "$(find "$WORK/src/$1" -name '*.go' -print -quit)" ]; }

main() {
  log "gotrain GPU run $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname); dry run: $DRYRUN; tags: $TAGS; budget ${BUDGET}s"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  [ -f "$BUNDLE/manifest" ] && sed 's/^/bundle: /' "$BUNDLE/manifest"

  step toolchain 60 unpack_go || return
  export GOROOT=$WORK/go PATH=$WORK/go/bin:$PATH GOTOOLCHAIN=local GOFLAGS=-mod=vendor GOPROXY=off
  export GOCACHE=${GOTRAIN_GPU_GOCACHE:-$WORK/gocache} GOTMPDIR=$WORK
  command -v g++ >/dev/null || log "warning: no g++ on PATH; cgo cannot compile cgotorch"

  step libtorch 60 torch_info || return
  LIBTORCH=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["libtorch"])' "$WORK/torch.json")
  export LIBTORCH
  step source 60 copy_source || return
  cd "$WORK/src" || return
  cgo_env

  local rc
  # shellcheck disable=SC2086
  step build 300 go build -tags "$TAGS" $PKGS
  rc=$?
  # A build that ran out of time would run out again; one that failed may be gloo's.
  if [ $rc != 0 ] && [ $rc != 124 ] && [ $rc != 137 ] && [[ $TAGS != *nodist* ]]; then
    log "the build with distributed support failed; the rest runs with -tags nodist"
    TAGS="$TAGS nodist"
    export TAGS
    # shellcheck disable=SC2086
    step build-nodist 300 go build -tags "$TAGS" $PKGS
    rc=$?
  fi
  if [ $rc != 0 ]; then
    log "no build: the remaining steps are skipped"
    return 1
  fi

  if has_go_files cmd/gpucheck; then
    # shellcheck disable=SC2086
    step gpucheck 120 gpucheck $GPUCHECK_ARGS
    if [ "$DRYRUN" = 1 ]; then
      skip gpucheck-tf32 "dry run: no GPU (TF32 is a CUDA matmul mode)"
    elif [ -x "$WORK/gpucheck" ]; then
      # shellcheck disable=SC2086
      step gpucheck-tf32 60 gpucheck_tf32 $GPUCHECK_ARGS
    else
      skip gpucheck-tf32 "gpucheck did not build"
    fi
  else
    skip gpucheck "cmd/gpucheck does not exist yet"
  fi
  step matmul-python 60 matmul_python

  # The figures the GPU run is for come first; the suite gets what is left.
  step sdpa 90 sdpa_check
  local m p
  for m in gpt vit; do
    for p in bf16 fp32; do
      step "train-$m-$p" 90 train_one "$m" "$p"
    done
  done
  for m in gpt vit; do
    step "hostsync-$m" 60 hostsync_one "$m"
  done
  if [ "$DRYRUN" = 1 ]; then
    skip gpubench "dry run: no GPU"
  else
    step gpubench 120 gpubench
  fi

  local left=$((BUDGET - SECONDS - 10))
  [ "$left" -gt 30 ] || left=30
  # shellcheck disable=SC2086
  step test "$left" gotest "$RESULTS/tests.json" -tags "$TAGS" -count=1 -timeout "$((left - 15))s" $PKGS
}

# results.json from the step table (with the output tail of each failed step), torch.json,
# tests.json, the benchmarks' JSON and gpucheck's reports.
summarize() {
  "$PY" - "$WORK" "$RESULTS" "$DRYRUN" "$TAGS" "$SECONDS" <<'EOF'
import json, os, re, subprocess, sys
work, results, dryrun, tags, seconds = sys.argv[1:]
def read(p):
    try:
        with open(p) as f:
            return f.read()
    except OSError:
        return ""
steps = []
for line in read(os.path.join(work, "steps.tsv")).splitlines():
    name, status, secs, note = line.split("\t")
    st = {"name": name, "status": status, "seconds": int(secs), "note": note}
    if status not in ("passed", "skipped"):
        st["output_tail"] = read(os.path.join(work, "logs", name + ".log"))[-6000:]
    steps.append(st)
def load(name):
    """The JSON object a benchmark wrote to RESULTS/name, or None."""
    try:
        return json.loads(read(os.path.join(results, name)) or "null")
    except ValueError:
        return None
tests = {"passed": 0, "failed": 0, "skipped": 0, "failed_tests": [], "failed_packages": []}
for line in read(os.path.join(results, "tests.json")).splitlines():
    try:
        ev = json.loads(line)
    except ValueError:
        continue
    action, test, pkg = ev.get("Action"), ev.get("Test"), ev.get("Package", ev.get("ImportPath", ""))
    if test and action in ("pass", "fail", "skip"):
        tests[{"pass": "passed", "fail": "failed", "skip": "skipped"}[action]] += 1
        if action == "fail":
            tests["failed_tests"].append(pkg + "." + test)
    elif not test and action in ("fail", "build-fail"):
        tests["failed_packages"].append(pkg)
tests["failed_packages"] = sorted(set(tests["failed_packages"]))
# gpubench-W-IMPL.json: the last line of each is the loop's JSON result.
bench = {}
for name in sorted(os.listdir(results)):
    m = re.match(r"gpubench-(.+)-(go|python)\.json$", name)
    lines = read(os.path.join(results, name)).strip().splitlines()
    if not m or not lines:
        continue
    try:
        r = json.loads(lines[-1])
    except ValueError:
        continue
    bench.setdefault(m.group(1), {})[m.group(2)] = r
# gpucheck --json: its report, with matmul TFLOP/s per dtype; else its text lines. The
# TF32 process adds its float32 figure under "tf32".
def gpucheck_report(name):
    text = read(os.path.join(work, name))
    try:
        rep = json.loads(text)
        return rep, {m["dtype"]: m["tflops"] for m in rep.get("matmul") or []}
    except ValueError:
        return text.splitlines(), {}
gpucheck, tflops = gpucheck_report("gpucheck.out")
gpucheck_tf32, tf32 = gpucheck_report("gpucheck-tf32.out")
if "tf32" in tf32:
    tflops["tf32"] = tf32["tf32"]
tflops = tflops or None
checks = []  # (name, ok): what the run asserts beyond each step's exit status
py_matmul = {m["dtype"]: m["tflops"] for m in (load("matmul-python.json") or {}).get("matmul", [])}
matmul = {"gotrain": tflops, "python": py_matmul or None, "ratio": {}}
for dt, v in (tflops or {}).items():
    if py_matmul.get(dt):
        matmul["ratio"][dt] = v / py_matmul[dt]
# SDPA: gotrain's cases with Python's choice for the same inputs beside them.
sdpa_go, sdpa_py = load("sdpa-go.json"), load("sdpa-python.json")
sdpa = None
if sdpa_go:
    py_choice = {(c["model"], c["dtype"]): c["backend"] for c in (sdpa_py or {}).get("cases", [])}
    sdpa = sdpa_go["cases"]
    for c in sdpa:
        c["python_backend"] = py_choice.get((c["model"], c["dtype"]))
        c["same_backend"] = c["python_backend"] == c["backend"]
        checks.append(("sdpa %s %s: same backend as Python" % (c["model"], c["dtype"]), c["same_backend"]))
# Training steps: both sides, and gotrain/Python ratios of throughput and peak memory.
train = {}
for name in sorted(os.listdir(results)):
    m = re.match(r"train-(.+)-go\.json$", name)
    if not m:
        continue
    g, p = load(name), load("train-%s-python.json" % m.group(1))
    t = {"gotrain": g, "python": p}
    if g and p:
        t["unit"] = g["unit"]
        t["throughput_ratio"] = g["items_per_s"] / p["items_per_s"]
        t["peak_memory_ratio"] = g["peak_memory_mib"] / p["peak_memory_mib"] if p["peak_memory_mib"] else None
        # Same weights and batches: the first losses agree to the precision's rounding.
        tol = 1e-3 if g["precision"] == "fp32" else 2e-2
        t["first_loss_match"] = abs(g["first_loss"] - p["first_loss"]) <= tol * abs(p["first_loss"])
        checks.append(("train %s: first loss as Python's" % m.group(1), t["first_loss_match"]))
    train[m.group(1)] = t
hostsync = {}
for name in sorted(os.listdir(results)):
    m = re.match(r"hostsync-(.+)\.json$", name)
    if m and load(name):
        hostsync[m.group(1)] = load(name)
# Issue 16's targets: gotrain's bf16 step at least Python's, bf16 matmul at least 0.95x.
targets = {"train_%s_ratio_ge_1" % k: v["throughput_ratio"] >= 1 for k, v in train.items()
           if k.endswith("bf16") and "throughput_ratio" in v}
for w, b in bench.items():
    if w.endswith("bf16") and "go" in b and "python" in b:
        try:
            timed = lambda r: median(r["epoch_s"][r.get("warmup", 0):])
            targets["gpubench_%s_ratio_ge_1" % w] = timed(b["python"]) >= timed(b["go"])
        except (KeyError, TypeError, ValueError):
            pass
if "bfloat16" in matmul["ratio"]:
    targets["matmul_bf16_ratio_ge_0.95"] = matmul["ratio"]["bfloat16"] >= 0.95
def median(xs):
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2
def cmd(*a):
    try:
        return subprocess.run(a, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
out = {
    "dry_run": dryrun == "1",
    "tags": tags,
    "ok": all(s["status"] in ("passed", "skipped") for s in steps) and all(ok for _, ok in checks),
    "seconds": int(seconds),
    "go": cmd("go", "version"),
    "bundle": read(os.path.join(os.environ.get("BUNDLE", ""), "manifest")).strip().splitlines(),
    "nvidia_smi": cmd("nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"),
    "torch": json.loads(read(os.path.join(work, "torch.json")) or "null"),
    "steps": steps,
    "matmul_tflops": tflops,
    "matmul": matmul,
    "gpucheck": gpucheck,
    "gpucheck_tf32": gpucheck_tf32 or None,
    "sdpa": sdpa,
    "train": train,
    "hostsync": hostsync,
    "checks": [{"check": n, "ok": ok} for n, ok in checks],
    "targets": targets,
    "tests": tests,
    "bench": bench,
}
with open(os.path.join(results, "results.json"), "w") as f:
    json.dump(out, f, indent=2)
print("run.sh: results.json: ok=%s steps=%s tests %d passed, %d failed, %d skipped; matmul %s TFLOP/s" % (
    out["ok"], " ".join("%s:%s" % (s["name"], s["status"]) for s in steps),
    tests["passed"], tests["failed"], tests["skipped"], out["matmul_tflops"]))
for c in sdpa or []:
    print("run.sh: sdpa %s %s %s: gotrain %s, Python %s, max error %.3g (tolerance %.3g)" % (
        c["model"], c["dtype"], "x".join(map(str, c["shape"])), c["backend"], c["python_backend"],
        max(c["errors"].values() or [float("nan")]), c["tolerance"]))
for k, t in train.items():
    if "throughput_ratio" in t:
        print("run.sh: train %s: %.0f vs %.0f %s (gotrain/Python %.2fx), peak memory %.0f vs %.0f MiB, first loss %.5f vs %.5f" % (
            k, t["gotrain"]["items_per_s"], t["python"]["items_per_s"], t["unit"], t["throughput_ratio"],
            t["gotrain"]["peak_memory_mib"], t["python"]["peak_memory_mib"], t["gotrain"]["first_loss"], t["python"]["first_loss"]))
for k, h in hostsync.items():
    print("run.sh: hostsync %s: %d host reads in %d optimizer steps between logging points, %d at %d logging points" % (
        k, h["between_reads"], h["between_steps"], h["log_reads"], h["log_points"]))
for n, ok in checks:
    if not ok:
        print("run.sh: CHECK FAILED: " + n)
sys.exit(0 if out["ok"] else 1)
EOF
}

{
  main
  summarize
} 2>&1 | tee "$RESULTS/run.log"
exit "${PIPESTATUS[0]}"
