package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
)

func TestMain(m *testing.M) {
	if os.Getenv("GPUCHECK_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func run(t *testing.T, args ...string) (string, int) {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "GPUCHECK_RUN_MAIN=1")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	require.NoError(t, err)
	return string(out), 0
}

func TestCPUMachineDiagnosis(t *testing.T) {
	if torch.CUDAIsAvailable() {
		t.Skip("this machine has a usable GPU; the CUDA path is checked by scripts/gpu/run.sh")
	}
	out, code := run(t)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "libtorch         "+torch.Version())
	assert.Contains(t, out, "CUDA available   false")
	if torch.CUDABuild {
		assert.True(t, strings.Contains(out, "No GPU driver found") || strings.Contains(out, "CUDA is not available"), out)
	} else {
		assert.Contains(t, out, "CPU-only build")
	}
	_, code = run(t, "--require-cuda")
	assert.Equal(t, 1, code, "--require-cuda fails without CUDA")
}

func TestDriverTooOldDiagnosis(t *testing.T) {
	var r Report
	r.Driver.NvidiaSMI = true
	r.Driver.MaxCUDA = "12.2"
	r.Libtorch.CUDABuild = true
	r.Libtorch.CUDARuntime = 13000
	diagnose(&r, false)
	require.Len(t, r.Diagnosis, 1)
	assert.Contains(t, r.Diagnosis[0], "driver is too old")
}
