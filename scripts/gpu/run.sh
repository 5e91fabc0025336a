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
#   test       go test -tags cuda ./...                 (the suite plus cuda-tagged tests)
#   gpubench   gotrain's Trainer vs the seed's Python loop on the GPU: the default CNN,
#              float32 and bf16 autocast (bench/cmd/goloop, bench/python/seed_loop.py)
# RESULTS_DIR receives results.json (versions, GPU, each step's status and time, test
# counts and failures, samples/s of both loops, matmul TFLOP/s), run.log (everything
# printed), tests.json (go test -json) and gpubench-*.json. Exits non-zero if any step failed. The
# whole run stays under GOTRAIN_GPU_BUDGET seconds (default 460): each step is run
# under `timeout` with what is left.
#
# vendor/ holds only the packages imported when pack.sh ran: run pack.sh right before
# sending the tree ("import lookup disabled by -mod=vendor" means it is stale).
#
# GOTRAIN_GPU_DRYRUN=1 runs the CPU-safe part here instead: the .venv's torch (a CUDA
# build, linked with -tags cpu), gpucheck --libtorch-only, and the cpu-tag suite.
# Other knobs: GOTRAIN_PYTHON (default python3, or .venv/bin/python for a dry run),
# GOTRAIN_GPU_BUNDLE, GOTRAIN_GPU_GOCACHE (default: fresh), GOTRAIN_GPU_PKGS (what to
# build and test, default ./...), GOTRAIN_GPUCHECK_ARGS.
#
# With the device tool: run `scripts/gpu/pack.sh` here, then
#   command: scripts/gpu/run.sh $OUT/results    carry: [".cache/gpu-bundle"]   timeout_s: 540
set -uo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
[ $# = 1 ] || { echo "usage: $0 RESULTS_DIR" >&2; exit 2; }
mkdir -p "$1" || exit 2
RESULTS=$(cd "$1" && pwd)
BUNDLE=${GOTRAIN_GPU_BUNDLE:-$REPO/.cache/gpu-bundle}
BUDGET=${GOTRAIN_GPU_BUDGET:-460}
PKGS=${GOTRAIN_GPU_PKGS:-./...}
DRYRUN=${GOTRAIN_GPU_DRYRUN:-0}
if [ "$DRYRUN" = 1 ]; then
  PY=${GOTRAIN_PYTHON:-$REPO/.venv/bin/python}
  TAGS=cpu
  GPUCHECK_ARGS=${GOTRAIN_GPUCHECK_ARGS:---libtorch-only --json}
else
  PY=${GOTRAIN_PYTHON:-python3}
  # torch/distributed needs gloo's headers, which pack.sh brings in include/.
  if [ -d "$BUNDLE/include/gloo" ]; then TAGS=cuda; else TAGS="cuda nodist"; fi
  GPUCHECK_ARGS=${GOTRAIN_GPUCHECK_ARGS:---require-cuda --json}
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gotrain-gpu.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
STEPS=$WORK/steps.tsv
: >"$STEPS"

log() { echo "run.sh: $*"; }

# record NAME STATUS SECONDS NOTE
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$STEPS"; }
skip() { log "SKIP $1: $2"; record "$1" skipped 0 "$2"; }

# step NAME CAP CMD...: run CMD (a command or one of the exported functions below) under
# timeout, for CAP seconds or what is left of the budget.
step() {
  local name=$1 cap=$2 left t0 rc status
  shift 2
  left=$((BUDGET - SECONDS - 5))
  if [ "$left" -lt 10 ]; then
    log "FAIL $name: no time left in the ${BUDGET}s budget"
    record "$name" timeout 0 "no time left"
    return 1
  fi
  [ "$cap" -le "$left" ] || cap=$left
  log "=== $name (timeout ${cap}s)"
  t0=$SECONDS
  timeout -k 10 "$cap" bash -o pipefail -c '"$@"' "$name" "$@"
  rc=$?
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

export -f unpack_go torch_info copy_source gotest gpucheck gpubench
export REPO WORK PY BUNDLE TAGS

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

  # shellcheck disable=SC2086
  if ! step build 300 go build -tags "$TAGS" $PKGS && [[ $TAGS != *nodist* ]]; then
    log "the build with distributed support failed; the rest runs with -tags nodist"
    TAGS="$TAGS nodist"
    export TAGS
    # shellcheck disable=SC2086
    step build-nodist 300 go build -tags "$TAGS" $PKGS
  fi

  if has_go_files cmd/gpucheck; then
    # shellcheck disable=SC2086
    step gpucheck 300 gpucheck $GPUCHECK_ARGS
  else
    skip gpucheck "cmd/gpucheck does not exist yet"
  fi

  local left=$((BUDGET - SECONDS - 200)) # leaves the GPU benchmark its time
  [ "$left" -gt 30 ] || left=30
  # shellcheck disable=SC2086
  step test "$left" gotest "$RESULTS/tests.json" -tags "$TAGS" -count=1 -timeout "$((left - 15))s" $PKGS

  if [ "$DRYRUN" = 1 ]; then
    skip gpubench "dry run: no GPU"
  else
    step gpubench 180 gpubench
  fi
}

# results.json from the step table, torch.json, tests.json, gpubench-*.json and gpucheck's report.
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
    steps.append({"name": name, "status": status, "seconds": int(secs), "note": note})
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
# gpucheck --json: its report, with matmul TFLOP/s per dtype; else its text lines.
gpucheck = read(os.path.join(work, "gpucheck.out"))
try:
    gpucheck = json.loads(gpucheck)
    tflops = {m["dtype"]: m["tflops"] for m in gpucheck.get("matmul") or []} or None
except ValueError:
    gpucheck = gpucheck.splitlines()
    tflops = [float(v) for v in re.findall(r"([\d.]+)\s*TFLOP/s", "\n".join(gpucheck))] or None
def cmd(*a):
    try:
        return subprocess.run(a, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
out = {
    "dry_run": dryrun == "1",
    "tags": tags,
    "ok": all(s["status"] in ("passed", "skipped") for s in steps),
    "seconds": int(seconds),
    "go": cmd("go", "version"),
    "bundle": read(os.path.join(os.environ.get("BUNDLE", ""), "manifest")).strip().splitlines(),
    "nvidia_smi": cmd("nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"),
    "torch": json.loads(read(os.path.join(work, "torch.json")) or "null"),
    "steps": steps,
    "matmul_tflops": tflops,
    "gpucheck": gpucheck,
    "tests": tests,
    "bench": bench,
}
with open(os.path.join(results, "results.json"), "w") as f:
    json.dump(out, f, indent=2)
print("run.sh: results.json: ok=%s steps=%s tests %d passed, %d failed, %d skipped; matmul %s TFLOP/s" % (
    out["ok"], " ".join("%s:%s" % (s["name"], s["status"]) for s in steps),
    tests["passed"], tests["failed"], tests["skipped"], out["matmul_tflops"]))
sys.exit(0 if out["ok"] else 1)
EOF
}

{
  main
  summarize
} 2>&1 | tee "$RESULTS/run.log"
exit "${PIPESTATUS[0]}"
