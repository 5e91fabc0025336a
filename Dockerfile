# gotrain on a CUDA machine: PyTorch's own CUDA build of libtorch plus Go.
#   docker build -t gotrain . && docker run --gpus all gotrain
# Not built in this project's CI (no access to container registries there); it assumes:
#  - PYTORCH_IMAGE is PyTorch's official *-devel image: Ubuntu, the CUDA toolkit in
#    /usr/local/cuda, and a `python` whose torch package carries libtorch (include/,
#    lib/libtorch_cuda.so) and finds its CUDA runtime by itself; keep its torch version
#    at or near the pin in scripts/requirements.txt (gotrain needs 2.6 or newer);
#  - GO_IMAGE's /usr/local/go (a self-contained toolchain) runs on that image;
#  - the host has the NVIDIA container toolkit (--gpus);
#  - Ubuntu has libgloo-dev (the gloo headers torch/distributed compiles against; build
#    with -tags nodist where it is missing) and libjpeg-dev (libjpeg-turbo, torch/data's
#    JPEG decoder; -tags nolibjpeg uses Go's decoder instead);
#  - .dockerignore keeps .venv/, .cache/, build/ and runs/ out of the build context.
ARG PYTORCH_IMAGE=pytorch/pytorch:2.14.1-cuda13.0-cudnn9-devel
ARG GO_IMAGE=golang:1.26
FROM ${GO_IMAGE} AS go

FROM ${PYTORCH_IMAGE}
COPY --from=go /usr/local/go /usr/local/go
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends g++ make libgloo-dev libjpeg-dev \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "$(python -c 'import os, torch; print(os.path.dirname(torch.__file__))')" /opt/libtorch
# What libtorch.mk derives for LIBTORCH=/opt/libtorch (`make -s -f libtorch.mk print-env`),
# fixed here so that plain go commands build; no cpu tag, so libtorch_cuda is linked.
ENV PATH=/usr/local/go/bin:$PATH GOTOOLCHAIN=local CGO_ENABLED=1 LIBTORCH=/opt/libtorch \
    CGO_CXXFLAGS="-isystem /opt/libtorch/include -isystem /opt/libtorch/include/torch/csrc/api/include" \
    CGO_LDFLAGS="-L/opt/libtorch/lib -Wl,-rpath,/opt/libtorch/lib"
WORKDIR /src/gotrain
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Compiles cgotorch and the trainer once, so `go run` at start only links.
RUN go build -o /dev/null ./cmd/train
CMD ["go", "run", "./cmd/train"]
