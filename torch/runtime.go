package torch

import (
	"strings"

	"github.com/gotrain/gotrain/cgotorch"
)

// Version returns the libtorch version gotrain was compiled against, e.g. "2.14.1".
func Version() string { return cgotorch.TorchVersion() }

// CUDABuild reports whether this binary links libtorch's CUDA libraries.
const CUDABuild = cgotorch.CUDABuild

// ManualSeed seeds the CPU generator and every CUDA generator, as torch.manual_seed.
func ManualSeed(seed int64) { check("manual_seed", cgotorch.ManualSeed(uint64(seed))) }

// SetDeterministic turns deterministic algorithms and cuDNN determinism on or off, and
// cuDNN benchmark off (torch.use_deterministic_algorithms plus the cudnn flags).
func SetDeterministic(on bool) { check("set_deterministic", cgotorch.SetDeterministic(on)) }

// RNGState returns the state of dev's default generator (torch.get_rng_state() for the
// CPU, torch.cuda.get_rng_state(n) for a CUDA device) as a uint8 tensor.
func RNGState(dev Device) *Tensor {
	return adopt("get_rng_state", cgotorch.RNGState(int(dev.Type), dev.ordinal()))
}

// SetRNGState restores dev's default generator from a state RNGState returned.
func SetRNGState(dev Device, state *Tensor) {
	check("set_rng_state", cgotorch.SetRNGState(int(dev.Type), dev.ordinal(), state.handle()))
}

// SetNumThreads sets the number of threads libtorch uses within an op, on every OS
// thread: libtorch's own setting reaches only the calling thread and threads that have
// not yet run a parallel op, but a goroutine may run on another thread later, and
// reductions differ in their last bits with the thread count. Each thread picks the
// new count up on its next op.
func SetNumThreads(n int) { check("set_num_threads", cgotorch.SetNumThreads(n)) }

// NumThreads returns the number of threads libtorch uses within an op on the calling
// thread (the last SetNumThreads, or libtorch's default).
func NumThreads() int { return cgotorch.NumThreads() }

// Config returns libtorch's build configuration (torch.__config__.show()).
func Config() string {
	s, err := cgotorch.ShowConfig()
	check("show_config", err)
	return s
}

// BLAS returns the BLAS libtorch was built with, from its build configuration.
func BLAS() string {
	if _, v, ok := strings.Cut(Config(), "BLAS_INFO="); ok {
		if j := strings.IndexAny(v, ", \n"); j >= 0 {
			v = v[:j]
		}
		return v
	}
	return "unknown"
}

// CheckCUDARegistration returns an error when this is a CUDA build whose CUDA kernels did
// not register: the symptom of libtorch_cuda dropped by the linker.
func CheckCUDARegistration() error {
	if CUDABuild && !cgotorch.CUDAKernelsRegistered() {
		return &Error{Op: "startup", Msg: "this binary was built for CUDA but libtorch_cuda's kernels are not registered: the linker dropped libtorch_cuda (link it with -Wl,--no-as-needed -ltorch_cuda, as cgotorch does; check `ldd` for libtorch_cuda.so), or libtorch is a CPU-only build (build with -tags cpu)"}
	}
	return nil
}

func init() {
	if err := CheckCUDARegistration(); err != nil {
		panic(err)
	}
}
