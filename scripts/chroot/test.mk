# test.mk: the libtorch 2.6 test run, executed inside the trixie chroot by
# `make test-libtorch2.6` (scripts/chroot/trixie.sh run make -f scripts/chroot/test.mk).
# It builds through libtorch.mk with Debian's layout (LIBTORCH=/usr), so the flags and
# the version check are the ones the host build uses.
.DEFAULT_GOAL := test
LIBTORCH := /usr
include libtorch.mk

GO ?= go
GOTEST_FLAGS ?= -count=1 -timeout 30m
# What the chroot must provide; tests needing other Python modules skip here (CI is unset).
PY_REQUIRED := torch, torchvision, numpy, yaml
# The data set the chroot must provide (dataset-fashion-mnist, see trixie.sh): without it
# torch/data's parity test would skip, since CI is unset here.
DATA_REQUIRED := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz

.PHONY: test
test: libtorch-check
	@echo "test-libtorch2.6: libtorch $(TORCH_VERSION) ($(LIBTORCH)), $$(go version)"
	@$(GOTRAIN_PYTHON) -c 'import sys, $(PY_REQUIRED); v = torch.__version__; print("test-libtorch2.6: python torch", v); sys.exit(0 if v.startswith("2.6") else "python3-torch is not 2.6")'
	@test -f $(DATA_REQUIRED) || { echo "test-libtorch2.6: $(DATA_REQUIRED) is missing (dataset-fashion-mnist)"; exit 1; }
	$(GO) vet -tags cpu ./...
	$(GO) test -tags cpu $(GOTEST_FLAGS) ./...
