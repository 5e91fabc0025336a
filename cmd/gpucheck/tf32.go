package main

import (
	"os"

	"github.com/gotrain/gotrain/torch"
)

// tf32Env is libtorch's switch for TF32 float32 matmuls: set to 1 in the environment of
// the process, it makes at::Context start with float32 matmul precision "high"
// (torch.set_float32_matmul_precision("high")). It is read once, when libtorch loads, so
// gpucheck measures TF32 in a process of its own: `TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1
// gpucheck`, as scripts/gpu/run.sh does.
const tf32Env = "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"

// matmulLabel names what a matmul of dt measures in this process: "tf32" for float32
// when tf32Env is on, else the dtype's name.
func matmulLabel(dt torch.DType) string {
	if dt == torch.Float32 && os.Getenv(tf32Env) == "1" {
		return "tf32"
	}
	return dt.String()
}
