# libtorch.mk: find libtorch and export the cgo flags that build gotrain against it.
# Includable from other Makefiles. Resolution order:
#   1. LIBTORCH=dir       an unpacked libtorch, a torch package dir, or /usr (Debian's libtorch-dev)
#   2. the project virtualenv's torch package ($(VENV), made by scripts/setup.sh)
# GOTRAIN_TAGS=cpu links only the CPU libraries; the default links libtorch_cuda too.

VENV ?= $(CURDIR)/.venv
PYTHON ?= $(VENV)/bin/python

ifeq ($(strip $(LIBTORCH)),)
LIBTORCH := $(firstword $(wildcard $(VENV)/lib/python3*/site-packages/torch))
endif

ifeq ($(LIBTORCH),/usr)
TORCH_INCDIR := /usr/include
TORCH_LIBDIR := $(firstword $(wildcard /usr/lib/$(shell gcc -print-multiarch 2>/dev/null)) /usr/lib)
# /usr/include is searched already; naming it with -isystem breaks libstdc++'s #include_next.
TORCH_INCFLAGS := -isystem $(TORCH_INCDIR)/torch/csrc/api/include
else
TORCH_INCDIR := $(LIBTORCH)/include
TORCH_LIBDIR := $(LIBTORCH)/lib
TORCH_INCFLAGS := -isystem $(TORCH_INCDIR) -isystem $(TORCH_INCDIR)/torch/csrc/api/include
endif

# The version comes from the headers, so it is the version actually compiled against
# (2.6 keeps it in torch/csrc/api/include/torch/version.h, newer releases in torch/headeronly/).
TORCH_VERSION_H := $(firstword $(wildcard $(TORCH_INCDIR)/torch/headeronly/version.h $(TORCH_INCDIR)/torch/csrc/api/include/torch/version.h))
TORCH_VERSION := $(if $(TORCH_VERSION_H),$(shell awk '/^\#define TORCH_VERSION_(MAJOR|MINOR|PATCH) /{v=v (v==""?"":".") $$3} END{print v}' $(TORCH_VERSION_H)))
TORCH_HAS_CUDA := $(if $(wildcard $(TORCH_LIBDIR)/libtorch_cuda.so),1,0)

ifeq ($(origin GOTRAIN_TAGS),undefined)
GOTRAIN_TAGS := $(if $(filter 1,$(TORCH_HAS_CUDA)),,cpu)
endif

# NCCL for torch/distributed (cgotorch/dist_nccl.cc) in CUDA builds: ProcessGroupNCCL.hpp
# includes NCCL's and the CUDA runtime's headers. PyTorch's wheel has them in the
# nvidia-* packages beside torch (scripts/requirements.txt adds the crt and cccl header
# packages the runtime's headers include); CUDA_INCDIRS overrides the search (a CUDA
# toolkit's include dir, say). GOTRAIN_NCCL is defined only when every header is found;
# otherwise the build has no NCCL and says so when asked for it.
ifeq ($(TORCH_HAS_CUDA),1)
ifeq ($(origin CUDA_INCDIRS),undefined)
CUDA_INCDIRS := $(if $(filter /usr,$(LIBTORCH)),,$(wildcard $(LIBTORCH)/../nvidia/*/include)) $(wildcard /usr/local/cuda/include)
endif
NCCL_HEADERS := nccl.h cuda_runtime_api.h crt/host_config.h nv/target
NCCL_FOUND := $(foreach h,$(NCCL_HEADERS),$(if $(firstword $(wildcard $(addsuffix /$(h),$(CUDA_INCDIRS)))),$(h)))
TORCH_HAS_NCCL := $(if $(filter $(words $(NCCL_HEADERS)),$(words $(NCCL_FOUND))),1,0)
endif
TORCH_HAS_NCCL ?= 0

CGO_CXXFLAGS := $(TORCH_INCFLAGS)$(if $(filter 1,$(TORCH_HAS_NCCL)), -DGOTRAIN_NCCL=1 $(addprefix -isystem ,$(abspath $(CUDA_INCDIRS))))
CGO_LDFLAGS := -L$(TORCH_LIBDIR) -Wl,-rpath,$(TORCH_LIBDIR)
export CGO_CXXFLAGS CGO_LDFLAGS
export CGO_ENABLED := 1

GOTAGS_FLAG := $(if $(GOTRAIN_TAGS),-tags $(GOTRAIN_TAGS))

# libtorch-check fails with a message saying what to install when no usable libtorch is found.
.PHONY: libtorch-check
libtorch-check:
	@if [ -z "$(LIBTORCH)" ] || [ -z "$(TORCH_VERSION)" ]; then \
	  echo "gotrain: no libtorch found. Run scripts/setup.sh (pip-installs torch into .venv), or set LIBTORCH=dir to an unpacked libtorch or torch package (Debian 13: apt-get install libtorch-dev, LIBTORCH=/usr)." >&2; exit 1; fi
	@case "$(TORCH_VERSION)" in \
	  0.*|1.*|2.[0-5]|2.[0-5].*) echo "gotrain: libtorch $(TORCH_VERSION) in $(LIBTORCH) is too old; gotrain needs libtorch 2.6 or newer (pip install 'torch>=2.6', or Debian 13's libtorch-dev)." >&2; exit 1;; \
	esac

# print-env prints the exports that let plain `go build`/`go test` find libtorch:
#   eval "$(make -s print-env)"
.PHONY: print-env
print-env:
	@echo "export CGO_CXXFLAGS='$(CGO_CXXFLAGS)' CGO_LDFLAGS='$(CGO_LDFLAGS)' GOTRAIN_PYTHON='$(PYTHON)'"
