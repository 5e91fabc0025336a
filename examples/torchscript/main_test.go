package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testpy"
)

func TestTorchScriptExampleRuns(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "mlp.pt")
	testpy.Run(t, `
import sys, torch
torch.manual_seed(0)
m = torch.jit.script(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10)))
m.save(sys.argv[1])
`, []string{"torch"}, model)
	require.NoError(t, run(model, true, 512, 2, filepath.Join(dir, "run")))
	testpy.Run(t, `
import sys, torch
m = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
ck = torch.load(sys.argv[1])
m.load_state_dict(ck["model_state_dict"], strict=True)
`, []string{"torch"}, filepath.Join(dir, "run", "checkpoints", "last.pt"))
}
