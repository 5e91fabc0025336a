package lora_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/lora"
	"github.com/gotrain/gotrain/torch/nn/models"
)

// runMoePython runs testdata/peft_moe.py with args, as runPython.
func runMoePython(t *testing.T, args ...string) []byte {
	t.Helper()
	return runScript(t, "peft_moe.py", args...)
}

// adapterConfig reads the keys of dir's adapter_config.json that say what is adapted.
func adapterConfig(t *testing.T, dir string) (modules, params []string, ranks, alphas map[string]float64) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, lora.ConfigFile))
	require.NoError(t, err)
	var c struct {
		TargetModules    []string           `json:"target_modules"`
		TargetParameters []string           `json:"target_parameters"`
		RankPattern      map[string]float64 `json:"rank_pattern"`
		AlphaPattern     map[string]float64 `json:"alpha_pattern"`
	}
	require.NoError(t, json.Unmarshal(raw, &c))
	slices.Sort(c.TargetModules)
	slices.Sort(c.TargetParameters)
	return c.TargetModules, c.TargetParameters, c.RankPattern, c.AlphaPattern
}

// TestPEFTMoeAdapters is issue 41's item 5: on tiny Mixtral and Qwen3-MoE models, PEFT
// adapters on the attention projections, the router "gate" (which PEFT turns into an
// adapter on gate.weight) and the fused experts through target_parameters (ParamWrapper:
// per-expert A and B in PEFT's layout, nested on one module) load into gotrain with
// PEFT's live names, logits, training loss and adapter gradients, and merged logits;
// an adapter gotrain makes and saves loads in PEFT with the same logits; all-linear
// selects what PEFT's selects on these models (the attention projections, the router
// and the experts, gate_up_proj with twice the rank and alpha), and PEFT's all-linear
// adapter loads with its logits; an adapter written on transformers 4 (LoRA per expert
// and projection, under block_sparse_moe for Mixtral) loads converted, as PEFT
// converts it, with PEFT's logits.
func TestPEFTMoeAdapters(t *testing.T) {
	defer threadScope()()
	dir := t.TempDir()
	archs := strings.Fields(string(runMoePython(t, "build", dir)))
	require.Equal(t, []string{"mixtral", "qwen3_moe"}, archs)
	out := checkpoint.NewDict()
	for _, arch := range archs {
		t.Run(arch, func(t *testing.T) {
			defer torch.NewScope().Close()
			d := filepath.Join(dir, arch)
			ref, err := checkpoint.Read(filepath.Join(d, "ref.pt"))
			require.NoError(t, err)
			ids := refTensor(t, ref, "ids")
			base := filepath.Join(d, "base")

			// PEFT's adapter in gotrain, for inference.
			m := loadBase(t, base)
			plain := logits(m, ids)
			a, err := lora.Load(m, filepath.Join(d, "peft"), lora.LoadOptions{})
			require.NoError(t, err)
			// Per sparse layer (Qwen3-MoE's second is dense), the router's weight and the
			// experts' two parameters.
			assert.Len(t, a.Params(), map[string]int{"mixtral": 6, "qwen3_moe": 3}[arch])
			keys, err := checkpoint.GetList(ref, "keys")
			require.NoError(t, err)
			var live []any
			for _, e := range nn.StateTensors(m) {
				live = append(live, e.Name)
			}
			assert.Equal(t, keys, live, "the state-dict keys of the model inside PEFT's PeftModel")
			got := logits(m, ids)
			requireClose(t, "logits", refTensor(t, ref, "logits"), got, 1e-5)
			assert.Greater(t, got.Sub(plain).Abs().Max().Item(), 1e-3, "the adapter changes the logits")
			require.NoError(t, a.Merge())
			requireClose(t, "merged logits", refTensor(t, ref, "merged"), logits(m, ids), 1e-5)

			// One training step's loss and adapter gradients.
			m = loadBase(t, base)
			a, err = lora.Load(m, filepath.Join(d, "peft"), lora.LoadOptions{Trainable: true})
			require.NoError(t, err)
			nn.SetTraining(m, true)
			loss := models.LMLoss(m, models.DecoderInput{InputIDs: ids}, ids, models.LossFull)
			requireClose(t, "loss", refTensor(t, ref, "loss"), loss, 1e-5)
			loss.Backward()
			grads, err := checkpoint.GetDict(ref, "grads")
			require.NoError(t, err)
			require.Equal(t, grads.Len(), len(a.NamedParameters()))
			for _, p := range a.NamedParameters() {
				ct, err := checkpoint.GetTensor(grads, p.Name)
				require.NoError(t, err, p.Name)
				want, err := torch.TensorFromCheckpoint(ct, torch.CPU)
				require.NoError(t, err)
				require.NotNil(t, p.Tensor.Grad(), p.Name)
				requireClose(t, "grad "+p.Name, want, p.Tensor.Grad(), 1e-5)
			}

			// gotrain's adapter in PEFT (checked by the script's second run).
			m = loadBase(t, base)
			torch.ManualSeed(9)
			a, err = lora.Inject(m, lora.Config{R: 3, Alpha: 5, TargetModules: lora.Modules("k_proj", "gate"),
				TargetParameters: []string{"experts.down_proj", "experts.gate_up_proj"}, Init: lora.InitNone})
			require.NoError(t, err)
			require.NoError(t, a.Save(filepath.Join(d, "go")))
			set := func(k string, v *torch.Tensor) {
				ct, err := torch.TensorToCheckpoint(v.Detach().Clone().Escape())
				require.NoError(t, err)
				out.Set(k, ct)
			}
			set("ids", ids)
			set("logits", logits(m, ids))
			require.NoError(t, checkpoint.Write(filepath.Join(d, "go.pt"), out))
			back := loadBase(t, base)
			b, err := lora.Load(back, filepath.Join(d, "go"), lora.LoadOptions{})
			require.NoError(t, err, "gotrain reads its own adapter back")
			requireClose(t, "reloaded logits", logits(m, ids), logits(back, ids), 0)
			_ = b

			// all-linear.
			m = loadBase(t, base)
			a, err = lora.Inject(m, lora.Config{R: 2, Alpha: 3, TargetModules: lora.Targets{Pattern: lora.AllLinear}})
			require.NoError(t, err)
			require.NoError(t, a.Save(filepath.Join(d, "go_all")))
			wantM, wantP, wantR, wantA := adapterConfig(t, filepath.Join(d, "all_linear"))
			gotM, gotP, gotR, gotA := adapterConfig(t, filepath.Join(d, "go_all"))
			assert.Equal(t, wantM, gotM, "target_modules")
			assert.Equal(t, wantP, gotP, "target_parameters")
			assert.Equal(t, wantR, gotR, "rank_pattern")
			assert.Equal(t, wantA, gotA, "alpha_pattern")
			m = loadBase(t, base)
			_, err = lora.Load(m, filepath.Join(d, "all_linear"), lora.LoadOptions{})
			require.NoError(t, err)
			requireClose(t, "all-linear logits", refTensor(t, ref, "all_logits"), logits(m, ids), 1e-5)

			// An adapter trained on transformers 4's per-expert modules.
			m = loadBase(t, base)
			a, err = lora.Load(m, filepath.Join(d, "v4"), lora.LoadOptions{})
			require.NoError(t, err)
			assert.NotEmpty(t, a.Params())
			requireClose(t, "v4 adapter logits", refTensor(t, ref, "v4_logits"), logits(m, ids), 1e-5)
		})
	}
	assert.Equal(t, "ok", strings.TrimSpace(string(runMoePython(t, "check", dir))))
}
