# gotrain: the two commands are `make train` and `make test`; both set up what is missing.
#
# libtorch.mk finds libtorch when make starts, so on a fresh machine the targets that
# need it first run scripts/setup.sh (which creates .venv with the pinned torch) and then
# run themselves again in a new make that sees it.
GO ?= go
GOTEST_FLAGS ?= -count=1 -timeout 30m

NEEDS_SETUP := all build vet env test test-cpu test-cuda-link test-race train bench fuzz print-env gpu-dryrun
.PHONY: $(NEEDS_SETUP) setup test-libtorch2.6 clean libtorch-check

# test-libtorch2.6 runs `go vet -tags cpu` and `go test -tags cpu` against the oldest
# supported libtorch: Debian 13's libtorch-dev and python3-torch 2.6, in a trixie chroot
# that scripts/chroot/trixie.sh builds once and caches (GOTRAIN_CHROOT, default
# ~/.cache/gotrain/trixie). Needs root. Tests whose Python module trixie lacks
# (tensorboard) skip there; see scripts/chroot/trixie.sh.
TRIXIE_CHROOT := scripts/chroot/trixie.sh
test-libtorch2.6:
	$(TRIXIE_CHROOT) run make --no-print-directory -f scripts/chroot/test.mk test GOTEST_FLAGS="$(GOTEST_FLAGS)"

clean:
	rm -rf build

ifndef GOTRAIN_SET_UP
$(NEEDS_SETUP):
	@scripts/setup.sh
	@$(MAKE) --no-print-directory GOTRAIN_SET_UP=1 $@

setup:
	@scripts/setup.sh
else
include libtorch.mk
export GOTRAIN_PYTHON := $(PYTHON)

all: build

# env prints the libtorch found, its version, CUDA or CPU build, BLAS and the cgo flags.
env: libtorch-check
	@echo "LIBTORCH      $(LIBTORCH)"
	@echo "version       $(TORCH_VERSION)"
	@echo "build         $(if $(filter 1,$(TORCH_HAS_CUDA)),CUDA (libtorch_cuda present),CPU only)"
	@echo "go tags       $(or $(GOTRAIN_TAGS),(none: links libtorch_cuda))"
	@echo "NCCL          $(if $(filter 1,$(TORCH_HAS_NCCL)),yes (headers in CUDA_INCDIRS),no$(if $(filter 1,$(TORCH_HAS_CUDA)), (missing: $(filter-out $(NCCL_FOUND),$(NCCL_HEADERS)))))"
	@echo "CGO_CXXFLAGS  $(CGO_CXXFLAGS)"
	@echo "CGO_LDFLAGS   $(CGO_LDFLAGS)"
	@$(GO) run $(GOTAGS_FLAG) ./cmd/gpucheck --libtorch-only

build: libtorch-check
	$(GO) build $(GOTAGS_FLAG) ./...

vet: libtorch-check
	$(GO) vet -tags cpu ./...
	$(GO) vet ./...
	$(GO) vet -tags cpu,nolibjpeg ./torch/data/...

# test runs every test: the suite with the cpu tag, then again linking libtorch_cuda
# (PyTorch's wheel is a CUDA build; without a GPU CUDA reports unavailable), then the
# race detector over the packages whose goroutines share state.
test: libtorch-check vet test-cpu test-cuda-link test-race

test-cpu:
	$(GO) test -tags cpu $(GOTEST_FLAGS) ./...

test-cuda-link:
ifeq ($(TORCH_HAS_CUDA),1)
	$(GO) test $(GOTEST_FLAGS) ./...
else
	@echo "test-cuda-link: $(LIBTORCH) is a CPU build; nothing to link"
endif

# test-race: the packages that run goroutines (the loader's workers, the TensorBoard
# writer's flush timer, the checkpoint writer, the serving engine) under the race detector.
RACE_PKGS := ./checkpoint/... ./tensorboard/... ./internal/... ./torch/data/... ./serve/...
test-race:
	$(GO) test -race -tags cpu $(GOTEST_FLAGS) $(RACE_PKGS)

# fuzz runs the checkpoint reader's fuzz target for FUZZTIME (CI: 250000 inputs, about a
# minute on 2 cores): no panic, every read within its memory/work/time budget, and
# read -> write -> read the same value. The budget is a count, not a duration: Go 1.26's
# coordinator can report its own -fuzztime deadline as a failure with no crashing input
# (golang/go#75804, fixed in Go 1.27). Minimizing each new interesting input is capped so
# that the run is spent fuzzing.
FUZZTIME ?= 250000x
fuzz:
	$(GO) test -run '^$$' -fuzz='^FuzzRead$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=5s ./checkpoint

train: libtorch-check
	$(GO) run $(GOTAGS_FLAG) ./cmd/train $(TRAIN_ARGS)


# bench: gotrain's Trainer against the seed's Python loop and libtorch C++ loops running the
# same Adam kernels, and the per-op cost in Go, C++ and Python, all on $(LIBTORCH) (see
# bench/README.md); prints the tables, writes bench/results/ and, on a full run, docs/performance.md's
# table block. BENCH_QUICK=1 is a smoke run (3 to 5 minutes).
BENCH_QUICK ?=
BENCH_ARGS ?=
BENCH_BIN := build/bench
BENCH_CXX ?= g++
$(BENCH_BIN)/loop $(BENCH_BIN)/ops $(BENCH_BIN)/gpt: $(BENCH_BIN)/%: bench/cpp/%.cpp $(TORCH_VERSION_H)
	@mkdir -p $(BENCH_BIN)
	$(BENCH_CXX) -std=c++20 -O2 $(CGO_CXXFLAGS) $< -o $@ $(CGO_LDFLAGS) -ltorch -ltorch_cpu -lc10

# gpu-dryrun: scripts/gpu/run.sh's dry run here, on the CPU: the GPU run's steps at tiny
# shapes (PyTorch eager, torch.compile and reduce-overhead included), the bench/gpu tests,
# the summary; run.log and results.tar.gz in build/gpu-dryrun. The first dry run compiles
# cgotorch into its own build cache (up to 15 minutes on a busy 2-core machine); later
# ones take about 5 minutes, most of it torch.compile.
gpu-dryrun:
	scripts/gpu/pack.sh
	scripts/gpu/run.sh --dry-run build/gpu-dryrun

# libcpumem.so: cgotorch's counting CPU allocator alone, for bench/gpu's Python side (gpu mem).
$(BENCH_BIN)/libcpumem.so: cgotorch/cpumem.cc cgotorch/cpumem.h $(TORCH_VERSION_H)
	@mkdir -p $(BENCH_BIN)
	$(BENCH_CXX) -std=c++20 -O2 -fPIC -shared $(CGO_CXXFLAGS) $< -o $@ $(CGO_LDFLAGS) -lc10

bench: libtorch-check $(BENCH_BIN)/loop $(BENCH_BIN)/ops $(BENCH_BIN)/gpt $(BENCH_BIN)/libcpumem.so
	CGO_CXXFLAGS="$(CGO_CXXFLAGS)" CGO_LDFLAGS="$(CGO_LDFLAGS)" $(GO) build -tags cpu -o $(BENCH_BIN)/goloop ./bench/cmd/goloop
	CGO_CXXFLAGS="$(CGO_CXXFLAGS)" CGO_LDFLAGS="$(CGO_LDFLAGS)" $(GO) build -tags cpu -o $(BENCH_BIN)/opbench ./bench/cmd/opbench
	$(GO) build -o $(BENCH_BIN)/checkpointbench ./bench/checkpoint
	CGO_CXXFLAGS="$(CGO_CXXFLAGS)" CGO_LDFLAGS="$(CGO_LDFLAGS)" $(GO) build -tags cpu -o $(BENCH_BIN)/databench ./bench/data
	$(GO) run ./bench/cmd/bench -python $(PYTHON) -bin $(BENCH_BIN) $(if $(BENCH_QUICK),-quick,-readme docs/performance.md) $(BENCH_ARGS)
	@echo "=== the GPT training step and generation against transformers and C++ (bench/gpt)"
	CGO_CXXFLAGS="$(CGO_CXXFLAGS)" CGO_LDFLAGS="$(CGO_LDFLAGS)" $(GO) run -tags cpu ./bench/gpt -threads 1 -python $(PYTHON)
	@echo "=== a small Llama: training, LoRA, generation and the tokenizer against transformers, peft and tokenizers (bench/llm)"
	CGO_CXXFLAGS="$(CGO_CXXFLAGS)" CGO_LDFLAGS="$(CGO_LDFLAGS)" $(GO) run -tags cpu ./bench/llm -python $(PYTHON) -cpumem $(BENCH_BIN)/libcpumem.so -results bench/results
	@echo "=== serving: concurrent streaming completions, gotrain's server against transformers serve --continuous-batching when its extras are installed (bench/serve)"
	CGO_CXXFLAGS="$(CGO_CXXFLAGS)" CGO_LDFLAGS="$(CGO_LDFLAGS)" $(GO) run -tags cpu ./bench/serve -python $(PYTHON)
	@echo "=== the Loader on an ImageFolder of JPEGs against torch's DataLoader over torchvision's ImageFolder (bench/data)"
	CGO_CXXFLAGS="$(CGO_CXXFLAGS)" CGO_LDFLAGS="$(CGO_LDFLAGS)" $(GO) run -tags cpu ./bench/data -imagefolder -python $(PYTHON)
	@echo "=== peak memory of a training step, gotrain against PyTorch, counted by the same allocator (bench/gpu mem)"
	CGO_CXXFLAGS="$(CGO_CXXFLAGS)" CGO_LDFLAGS="$(CGO_LDFLAGS)" $(GO) run -tags cpu ./bench/gpu mem -device cpu -cpumem $(BENCH_BIN)/libcpumem.so -python $(PYTHON)

endif
