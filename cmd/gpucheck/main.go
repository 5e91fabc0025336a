// Command gpucheck checks a machine's GPU environment the way the seed's trainer did,
// and says what to fix:
//
//  1. driver: nvidia-smi present, driver version, the newest CUDA it supports;
//  2. libtorch: CUDA or CPU build, CUDA available, devices (name, capability, memory),
//     CUDA_VISIBLE_DEVICES;
//  3. speed: an N×N matmul in float32 and bfloat16, synchronised, in TFLOP/s.
//
// On a machine without a GPU it says so and exits 0; with --require-cuda it exits 1.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gotrain/gotrain/torch"
)

// Report is what gpucheck found; --json prints it.
type Report struct {
	Driver struct {
		NvidiaSMI  bool   `json:"nvidia_smi"`
		Version    string `json:"version,omitempty"`
		MaxCUDA    string `json:"max_cuda,omitempty"`
		Error      string `json:"error,omitempty"`
		GPUsListed int    `json:"gpus_listed"`
	} `json:"driver"`
	Libtorch struct {
		Version        string   `json:"version"`
		CUDABuild      bool     `json:"cuda_build"`
		CUDAAvailable  bool     `json:"cuda_available"`
		CUDARuntime    int      `json:"cuda_runtime"`
		CuDNN          int      `json:"cudnn"`
		DeviceCount    int      `json:"device_count"`
		Devices        []Device `json:"devices"`
		VisibleDevices string   `json:"cuda_visible_devices"`
		BLAS           string   `json:"blas"`
		Threads        int      `json:"threads"`
	} `json:"libtorch"`
	Matmul    []Matmul `json:"matmul,omitempty"`
	Diagnosis []string `json:"diagnosis"`
	OK        bool     `json:"cuda_ok"`
}

// Device describes one visible CUDA device.
type Device struct {
	Index      int     `json:"index"`
	Name       string  `json:"name"`
	Capability string  `json:"capability"`
	MemoryGiB  float64 `json:"memory_gib"`
}

// Matmul is one timed matrix product.
type Matmul struct {
	DType   string  `json:"dtype"`
	N       int64   `json:"n"`
	Seconds float64 `json:"seconds"`
	TFLOPS  float64 `json:"tflops"`
}

func main() {
	requireCUDA := flag.Bool("require-cuda", false, "exit 1 unless CUDA is usable")
	libtorchOnly := flag.Bool("libtorch-only", false, "report libtorch only (no driver check, no matmul)")
	size := flag.Int64("size", 10000, "matmul size N")
	asJSON := flag.Bool("json", false, "print the report as JSON")
	flag.Parse()

	var r Report
	if !*libtorchOnly {
		checkDriver(&r)
	}
	checkLibtorch(&r)
	if !*libtorchOnly && r.OK {
		if err := runMatmuls(&r, *size); err != nil {
			r.Diagnosis = append(r.Diagnosis, "matmul failed: "+err.Error())
			r.OK = false
		}
	}
	diagnose(&r, *libtorchOnly)
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(r)
	} else {
		printReport(&r, *libtorchOnly)
	}
	if *requireCUDA && !r.OK {
		os.Exit(1)
	}
}

var cudaVersionRE = regexp.MustCompile(`CUDA Version:\s*([0-9.]+)`)

func checkDriver(r *Report) {
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return
	}
	r.Driver.NvidiaSMI = true
	out, err := exec.Command(path).CombinedOutput()
	if err != nil {
		r.Driver.Error = strings.TrimSpace(string(out))
		if r.Driver.Error == "" {
			r.Driver.Error = err.Error()
		}
		return
	}
	if m := cudaVersionRE.FindSubmatch(out); m != nil {
		r.Driver.MaxCUDA = string(m[1])
	}
	q, err := exec.Command(path, "--query-gpu=driver_version", "--format=csv,noheader").Output()
	if err == nil {
		lines := strings.Fields(strings.TrimSpace(string(q)))
		r.Driver.GPUsListed = len(lines)
		if len(lines) > 0 {
			r.Driver.Version = lines[0]
		}
	}
}

func checkLibtorch(r *Report) {
	l := &r.Libtorch
	l.Version = torch.Version()
	l.CUDABuild = torch.CUDABuild
	l.CUDAAvailable = torch.CUDAIsAvailable()
	l.CUDARuntime = torch.CUDARuntimeVersion()
	l.CuDNN = torch.CuDNNVersion()
	l.DeviceCount = torch.CUDADeviceCount()
	l.VisibleDevices = os.Getenv("CUDA_VISIBLE_DEVICES")
	l.BLAS = torch.BLAS()
	l.Threads = torch.NumThreads()
	for i := 0; i < l.DeviceCount; i++ {
		d := Device{Index: i}
		d.Name, _ = torch.CUDADeviceName(i)
		if maj, min, err := torch.CUDACapability(i); err == nil {
			d.Capability = fmt.Sprintf("%d.%d", maj, min)
		}
		if b, err := torch.CUDATotalMemory(i); err == nil {
			d.MemoryGiB = float64(b) / (1 << 30)
		}
		l.Devices = append(l.Devices, d)
	}
	r.OK = l.CUDABuild && l.CUDAAvailable && l.DeviceCount > 0
}

func runMatmuls(r *Report, n int64) (err error) {
	defer torch.Recover(&err, "matmul")
	dev := torch.CUDA(0)
	for _, dt := range []torch.DType{torch.Float32, torch.BFloat16} {
		torch.WithScope(func() {
			a := torch.Randn([]int64{n, n}, dt, dev)
			b := torch.Randn([]int64{n, n}, dt, dev)
			a.Matmul(b) // warm-up: cuBLAS handles and kernels
			must(torch.CUDASynchronize(0))
			const reps = 5
			start := time.Now()
			for i := 0; i < reps; i++ {
				torch.WithScope(func() { a.Matmul(b) })
			}
			must(torch.CUDASynchronize(0))
			sec := time.Since(start).Seconds() / reps
			r.Matmul = append(r.Matmul, Matmul{DType: matmulLabel(dt), N: n, Seconds: sec, TFLOPS: 2 * float64(n) * float64(n) * float64(n) / sec / 1e12})
		})
	}
	return nil
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func majorMinor(v string) (int, int) {
	p := strings.SplitN(v, ".", 3)
	maj, _ := strconv.Atoi(p[0])
	min := 0
	if len(p) > 1 {
		min, _ = strconv.Atoi(p[1])
	}
	return maj, min
}

func diagnose(r *Report, libtorchOnly bool) {
	l := r.Libtorch
	add := func(s string) { r.Diagnosis = append(r.Diagnosis, s) }
	switch {
	case r.OK:
		add(fmt.Sprintf("CUDA works: %d device(s) usable by libtorch %s.", l.DeviceCount, l.Version))
	case !l.CUDABuild:
		add("This binary is a CPU-only build (built with -tags cpu, or against a CPU-only libtorch): it trains on the CPU. " +
			"For GPUs, build without -tags cpu against a CUDA libtorch (PyTorch's wheel: `pip install torch`, as scripts/setup.sh does).")
	case !libtorchOnly && !r.Driver.NvidiaSMI:
		add("No GPU driver found (nvidia-smi is not on PATH): this machine has no usable NVIDIA GPU, so gotrain trains on the CPU. " +
			"On a GPU machine, install the NVIDIA driver; in a container, run with --gpus all (nvidia-container-toolkit).")
	case r.Driver.Error != "":
		add("nvidia-smi is present but failed (" + r.Driver.Error + "): the driver is not loaded or does not match the kernel module; reinstall the driver or reboot.")
	case l.DeviceCount == 0 && l.VisibleDevices != "" && l.VisibleDevices != "all":
		add(fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q hides every GPU from this process; unset it or list valid indices.", l.VisibleDevices))
	case !l.CUDAAvailable:
		msg := "libtorch is a CUDA build but CUDA is not available."
		if r.Driver.MaxCUDA != "" && l.CUDARuntime > 0 {
			dmaj, dmin := majorMinor(r.Driver.MaxCUDA)
			rmaj, rmin := l.CUDARuntime/1000, (l.CUDARuntime%1000)/10
			if dmaj*100+dmin < rmaj*100+rmin {
				msg += fmt.Sprintf(" The driver supports CUDA up to %s but libtorch needs %d.%d: the driver is too old; upgrade it (or install a torch built for an older CUDA).", r.Driver.MaxCUDA, rmaj, rmin)
			}
		}
		add(msg)
	default:
		add("CUDA is not usable on this machine; gotrain trains on the CPU.")
	}
}

func printReport(r *Report, libtorchOnly bool) {
	l := r.Libtorch
	if !libtorchOnly {
		fmt.Println("== driver")
		if !r.Driver.NvidiaSMI {
			fmt.Println("nvidia-smi       not found")
		} else {
			fmt.Printf("nvidia-smi       found\ndriver version   %s\nmax CUDA         %s\n", r.Driver.Version, r.Driver.MaxCUDA)
		}
		fmt.Println("== libtorch")
	}
	build := "CPU only"
	if l.CUDABuild {
		build = "CUDA"
	}
	fmt.Printf("libtorch         %s (%s build)\n", l.Version, build)
	fmt.Printf("BLAS             %s, %d threads\n", l.BLAS, l.Threads)
	fmt.Printf("CUDA available   %v\n", l.CUDAAvailable)
	if l.CUDABuild {
		fmt.Printf("CUDA runtime     %d.%d, cuDNN %d\n", l.CUDARuntime/1000, (l.CUDARuntime%1000)/10, l.CuDNN)
		fmt.Printf("devices          %d (CUDA_VISIBLE_DEVICES=%q)\n", l.DeviceCount, l.VisibleDevices)
	}
	for _, d := range l.Devices {
		fmt.Printf("  cuda:%d         %s, capability %s, %.1f GiB\n", d.Index, d.Name, d.Capability, d.MemoryGiB)
	}
	if len(r.Matmul) > 0 {
		fmt.Println("== matmul")
		for _, m := range r.Matmul {
			fmt.Printf("%-9s %dx%d  %.2f ms  %.1f TFLOP/s\n", m.DType, m.N, m.N, m.Seconds*1e3, m.TFLOPS)
		}
	}
	if !libtorchOnly {
		fmt.Println("== diagnosis")
	}
	for _, d := range r.Diagnosis {
		fmt.Println(d)
	}
}
