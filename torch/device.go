package torch

import (
	"fmt"
	"strconv"
	"strings"
)

// DeviceType is the kind of device a tensor lives on.
type DeviceType int

// Device types.
const (
	DeviceCPU  DeviceType = 0
	DeviceCUDA DeviceType = 1
)

// Device is a CPU or a CUDA device. Index -1 means the current CUDA device.
type Device struct {
	Type  DeviceType
	Index int
}

// CPU is the host.
var CPU = Device{Type: DeviceCPU, Index: -1}

// CUDA returns CUDA device n.
func CUDA(n int) Device { return Device{Type: DeviceCUDA, Index: n} }

// ordinal is the device index a generator or query needs: the current CUDA device (-1)
// counts as device 0.
func (d Device) ordinal() int {
	if d.IsCUDA() && d.Index < 0 {
		return 0
	}
	return d.Index
}

// IsCUDA reports whether d is a CUDA device.
func (d Device) IsCUDA() bool { return d.Type == DeviceCUDA }

// String returns PyTorch's spelling: "cpu", "cuda" or "cuda:N".
func (d Device) String() string {
	if d.Type == DeviceCPU {
		return "cpu"
	}
	if d.Index < 0 {
		return "cuda"
	}
	return "cuda:" + strconv.Itoa(d.Index)
}

// ParseDevice parses "cpu", "cuda" or "cuda:N" (as torch.device does).
func ParseDevice(s string) (Device, error) {
	t := strings.TrimSpace(strings.ToLower(s))
	switch {
	case t == "cpu":
		return CPU, nil
	case t == "cuda":
		return Device{Type: DeviceCUDA, Index: -1}, nil
	case strings.HasPrefix(t, "cuda:"):
		n, err := strconv.Atoi(t[5:])
		if err == nil && n >= 0 {
			return CUDA(n), nil
		}
	}
	return Device{}, fmt.Errorf("torch: unknown device %q: valid forms are \"cpu\", \"cuda\" and \"cuda:N\" with N >= 0", s)
}

// DefaultDevice returns cuda:0 when CUDA is available and the CPU otherwise.
func DefaultDevice() Device {
	if CUDAIsAvailable() {
		return CUDA(0)
	}
	return CPU
}
