package lora_test

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/lora"
	"github.com/gotrain/gotrain/torch/nn/models"
)

var pyModules = []string{"torch", "transformers", "peft", "safetensors"}

// runPython runs testdata/peft_ref.py with args and returns its standard output. The
// modules are looked up with importlib's find_spec, which imports nothing: testpy.Run's
// check imports them, a second start of torch and transformers as slow as the script.
// As testpy's, a missing module skips the test, or fails it under CI=true.
func runPython(t *testing.T, args ...string) []byte {
	t.Helper()
	return runScript(t, "peft_ref.py", args...)
}

// runScript runs testdata/script with args as runPython does.
func runScript(t *testing.T, script string, args ...string) []byte {
	t.Helper()
	py := testpy.Python(t)
	missing, err := exec.Command(py, append([]string{"-c",
		"import importlib.util as u, sys; print(' '.join(m for m in sys.argv[1:] if u.find_spec(m) is None))"},
		pyModules...)...).Output()
	if why := strings.TrimSpace(string(missing)); err != nil || why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Python lacks %q (%v); run scripts/setup.sh", why, err)
		}
		t.Skipf("Python lacks %q (%v); run scripts/setup.sh", why, err)
	}
	cmd := exec.Command(py, append([]string{filepath.Join("testdata", script)}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s %v:\n%s", script, args, stderr.String())
	return out
}

func refTensor(t *testing.T, ref any, key string) *torch.Tensor {
	t.Helper()
	ct, err := checkpoint.GetTensor(ref, key)
	require.NoError(t, err, key)
	x, err := torch.TensorFromCheckpoint(ct, torch.CPU)
	require.NoError(t, err)
	return x
}

func requireClose(t *testing.T, name string, want, got *torch.Tensor, tol float64) {
	t.Helper()
	require.Equal(t, want.Shape(), got.Shape(), name)
	require.InDeltaSlice(t, want.Float64s(), got.Float64s(), tol, name)
}

// threadScope locks the test's goroutine to its OS thread and opens a tensor scope;
// the function it returns closes the scope, then unlocks the thread. A test starts
// with `defer threadScope()()`.
func threadScope() func() {
	runtime.LockOSThread()
	s := torch.NewScope()
	return func() {
		defer runtime.UnlockOSThread()
		s.Close()
	}
}

func loadBase(t *testing.T, dir string) models.CausalLM {
	t.Helper()
	m, err := models.LoadPretrained(dir, models.LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { nn.Free(m) })
	return m
}

func logits(m models.CausalLM, ids *torch.Tensor) *torch.Tensor {
	var out *torch.Tensor
	torch.NoGrad(func() { out = m.Forward(models.DecoderInput{InputIDs: ids}) })
	return out
}

// TestPEFTAdapters loads adapters PEFT wrote onto a tiny random Llama: the logits are
// PEFT's, the merged weights and logits are merge_and_unload's, and one training
// forward gives PEFT's loss and adapter gradients — with activation checkpointing too,
// where the decoder has it.
func TestPEFTAdapters(t *testing.T) {
	defer threadScope()()
	dir := t.TempDir()
	runPython(t, "build", dir)
	ref, err := checkpoint.Read(filepath.Join(dir, "ref.pt"))
	require.NoError(t, err)
	ids := refTensor(t, ref, "ids")
	base := filepath.Join(dir, "base")

	for _, c := range []string{"qv", "all_rs"} {
		m := loadBase(t, base)
		plain := logits(m, ids)
		a, err := lora.Load(m, filepath.Join(dir, c), lora.LoadOptions{})
		require.NoError(t, err, c)
		assert.Empty(t, nn.TrainableParameters(m), "%s: loaded for inference, nothing trains", c)
		keys, err := checkpoint.GetList(ref, c+".keys")
		require.NoError(t, err)
		var live []any
		for _, e := range nn.StateTensors(m) {
			live = append(live, e.Name)
		}
		assert.Equal(t, keys, live, "%s: the model's state-dict keys are those of the model inside PEFT's PeftModel", c)
		got := logits(m, ids)
		requireClose(t, c+" logits", refTensor(t, ref, c+".logits"), got, 1e-5)
		assert.Greater(t, got.Sub(plain).Abs().Max().Item(), 1e-3, "%s: the adapter changes the logits", c)
		if c == "all_rs" {
			// all-linear: every projection of both layers, not lm_head.
			assert.Len(t, a.Layers(), 14)
			assert.InDelta(t, 5/math.Sqrt(2), a.Layers()[0].Scaling, 1e-12, "use_rslora: alpha/√r")
		}

		require.NoError(t, a.Merge(), c)
		for _, e := range nn.StateTensors(m) {
			requireClose(t, c+" merged "+e.Name, refTensor(t, ref, c+".merged."+e.Name), e.Tensor, 1e-7)
		}
		requireClose(t, c+" merged logits", refTensor(t, ref, c+".merged_logits"), logits(m, ids), 1e-5)
		assert.ErrorContains(t, a.Save(t.TempDir()), "merged or unloaded")
	}

	// On a bfloat16 base the adapter stays float32, as PEFT keeps it, and trains.
	bf16, err := models.LoadPretrained(base, models.LoadOptions{DType: torch.BFloat16})
	require.NoError(t, err)
	defer nn.Free(bf16)
	a, err := lora.Load(bf16, filepath.Join(dir, "qv"), lora.LoadOptions{Trainable: true})
	require.NoError(t, err)
	assert.Equal(t, torch.Float32, a.Parameters()[0].DType())
	want := refTensor(t, ref, "qv.bf16_logits")
	got := logits(bf16, ids)
	assert.Equal(t, torch.BFloat16, got.DType())
	requireClose(t, "bfloat16 logits", want, got.ToDType(torch.Float32), 2*want.Abs().Max().Item()/128)
	models.CausalLMLoss(bf16.Forward(models.DecoderInput{InputIDs: ids}), ids).Backward()
	for _, p := range a.Parameters() {
		require.NotNil(t, p.Grad())
		assert.Equal(t, torch.Float32, p.Grad().DType())
	}

	grads := func(t *testing.T, checkpointing bool) (float64, map[string]*torch.Tensor) {
		m := loadBase(t, base)
		if checkpointing {
			if err := models.SetGradientCheckpointing(m, true); err != nil {
				t.Skipf("checkpointed gradients: %v", err)
			}
		}
		a, err := lora.Load(m, filepath.Join(dir, "qv"), lora.LoadOptions{Trainable: true})
		require.NoError(t, err)
		assert.Equal(t, a.Parameters(), nn.TrainableParameters(m), "only the adapters train")
		nn.SetTraining(m, true)
		loss := models.CausalLMLoss(m.Forward(models.DecoderInput{InputIDs: ids}), ids)
		loss.Backward()
		out := map[string]*torch.Tensor{}
		for _, p := range a.NamedParameters() {
			out[p.Name] = p.Tensor.Grad()
		}
		for _, p := range nn.NamedParameters(m) {
			if !p.Tensor.RequiresGrad() {
				assert.Nil(t, p.Tensor.Grad(), "the frozen %s has no gradient", p.Name)
			}
		}
		return loss.Item(), out
	}
	loss, plain := grads(t, false)
	assert.InDelta(t, refTensor(t, ref, "qv.loss").Item(), loss, 1e-5)
	assert.Len(t, plain, 8)
	for name, g := range plain {
		require.NotNil(t, g, name)
		requireClose(t, "gradient of "+name, refTensor(t, ref, "qv.grad."+name), g, 1e-5)
	}
	t.Run("checkpointed", func(t *testing.T) {
		defer torch.NewScope().Close()
		ckLoss, ck := grads(t, true)
		assert.Equal(t, loss, ckLoss)
		for name, g := range plain {
			assert.Equal(t, g.Float32s(), ck[name].Float32s(), "gradient of %s with checkpointing", name)
		}
	})
}

// tinyLlama returns a random tiny Llama built in Go.
func tinyLlama(t *testing.T) *models.LlamaForCausalLM {
	t.Helper()
	c := models.DefaultLlamaConfig()
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 97, 32, 48, 2
	c.NumAttentionHeads, c.NumKeyValueHeads, c.MaxPositionEmbeddings = 4, 2, 64
	c.EOSTokenID = models.TokenIDs{96}
	c.InitializerRange = 0.1
	m, err := models.NewLlamaForCausalLM(c)
	require.NoError(t, err)
	t.Cleanup(func() { nn.Free(m) })
	return m
}

// TestAdapterLoadsInPEFT saves an adapter made in gotrain (all-linear, dropout, A and B
// both random) and the model merged with it: PEFT loads the adapter onto the same base
// to gotrain's logits, transformers loads the merged directory to gotrain's merged
// logits, and PEFT's own merge agrees.
func TestAdapterLoadsInPEFT(t *testing.T) {
	defer threadScope()()
	dir := t.TempDir()
	torch.ManualSeed(3)
	m := tinyLlama(t)
	require.NoError(t, models.SavePretrained(filepath.Join(dir, "base"), m, models.SaveOptions{}))
	ids := torch.FromSlice([]int64{1, 5, 17, 42, 8, 93, 60, 2, 33, 1, 70, 4, 4, 81, 12, 9, 55, 20}, 2, 9)
	a, err := lora.Inject(m, lora.Config{R: 4, Alpha: 16, Dropout: 0.05, TargetModules: lora.Targets{Pattern: lora.AllLinear},
		Init: lora.InitNone, BaseModelNameOrPath: "tiny-llama"})
	require.NoError(t, err)
	nn.SetTraining(m, false)
	adapted := logits(m, ids)
	require.NoError(t, a.Save(filepath.Join(dir, "go_adapter")))
	require.NoError(t, a.Merge())
	merged := logits(m, ids)
	require.NoError(t, models.SavePretrained(filepath.Join(dir, "go_merged"), m, models.SaveOptions{}))
	out := checkpoint.NewDict()
	for name, x := range map[string]*torch.Tensor{"adapter": adapted, "merged": merged} {
		ct, err := torch.TensorToCheckpoint(x)
		require.NoError(t, err)
		out.Set(name, ct)
	}
	require.NoError(t, checkpoint.WriteSafetensors(filepath.Join(dir, "go_logits.safetensors"), out, nil))

	var res struct {
		AdapterDiff   float64  `json:"adapter_diff"`
		MergedDiff    float64  `json:"merged_diff"`
		PEFTMergeDiff float64  `json:"peft_merge_diff"`
		R             int      `json:"r"`
		Alpha         float64  `json:"lora_alpha"`
		RSLoRA        bool     `json:"use_rslora"`
		Targets       []string `json:"target_modules"`
		TaskType      string   `json:"task_type"`
		Trainable     int      `json:"trainable"`
	}
	require.NoError(t, json.Unmarshal(runPython(t, "check", dir), &res))
	assert.LessOrEqual(t, res.AdapterDiff, 1e-5)
	assert.LessOrEqual(t, res.MergedDiff, 1e-5)
	assert.LessOrEqual(t, res.PEFTMergeDiff, 1e-5)
	assert.Equal(t, 4, res.R)
	assert.Equal(t, 16.0, res.Alpha)
	assert.False(t, res.RSLoRA)
	assert.Len(t, res.Targets, 14)
	assert.Contains(t, res.Targets, "model.layers.1.mlp.down_proj")
	assert.Equal(t, "CAUSAL_LM", res.TaskType)
	assert.Zero(t, res.Trainable)
	entries, err := os.ReadDir(filepath.Join(dir, "go_adapter"))
	require.NoError(t, err)
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	assert.Equal(t, []string{"adapter_config.json", "adapter_model.safetensors"}, files, "no temporary file is left")
}

// Inject wraps the targeted layers with PEFT's names, changes nothing until B moves,
// freezes the rest; Unload gives the model back as it was.
func TestInject(t *testing.T) {
	defer threadScope()()
	m := tinyLlama(t)
	ids := torch.FromSlice([]int64{1, 5, 17, 42, 8}, 1, 5)
	before := logits(m, ids).Float32s()
	var names []string
	for _, p := range nn.NamedParameters(m) {
		names = append(names, p.Name)
	}
	a, err := lora.Inject(m, lora.Config{R: 8, Alpha: 16, TargetModules: lora.Modules("q_proj", "v_proj"), Dropout: 0.1})
	require.NoError(t, err)
	assert.Equal(t, before, logits(m, ids).Float32s(), "B starts at zero")
	assert.Equal(t, a.Parameters(), nn.TrainableParameters(m))
	var got []string
	for _, p := range nn.NamedParameters(m) {
		if strings.HasPrefix(p.Name, "model.layers.0.self_attn.") {
			got = append(got, p.Name)
		}
	}
	assert.Equal(t, []string{
		"model.layers.0.self_attn.q_proj.base_layer.weight",
		"model.layers.0.self_attn.q_proj.lora_A.default.weight",
		"model.layers.0.self_attn.q_proj.lora_B.default.weight",
		"model.layers.0.self_attn.k_proj.weight",
		"model.layers.0.self_attn.v_proj.base_layer.weight",
		"model.layers.0.self_attn.v_proj.lora_A.default.weight",
		"model.layers.0.self_attn.v_proj.lora_B.default.weight",
		"model.layers.0.self_attn.o_proj.weight",
	}, got)
	l := a.Layers()[0]
	assert.Equal(t, []int64{8, 32}, l.A.Weight.Shape())
	assert.Equal(t, []int64{32, 8}, l.B.Weight.Shape())
	assert.Equal(t, 2.0, l.Scaling)
	// A is Kaiming-uniform with a = √5: within ±1/√in.
	assert.LessOrEqual(t, l.A.Weight.Abs().Max().Item(), 1/math.Sqrt(32))
	assert.Greater(t, l.A.Weight.Abs().Max().Item(), 0.0)

	_, err = lora.Inject(m, lora.Config{R: 2, Alpha: 2, TargetModules: lora.Modules("k_proj")})
	assert.ErrorContains(t, err, "already has a LoRA adapter")
	require.NoError(t, a.Unload())
	var after []string
	for _, p := range nn.NamedParameters(m) {
		after = append(after, p.Name)
		assert.True(t, p.Tensor.RequiresGrad(), p.Name)
	}
	assert.Equal(t, names, after)
	assert.Equal(t, before, logits(m, ids).Float32s())
}

func TestInjectErrors(t *testing.T) {
	m := tinyLlama(t)
	for _, c := range []struct {
		cfg  lora.Config
		want string
	}{
		{lora.Config{R: 0, Alpha: 1, TargetModules: lora.Modules("q_proj")}, "r 0"},
		{lora.Config{R: 2, Alpha: 1, TargetModules: lora.Modules("nothing")}, `target_modules ["nothing"] matched no module`},
		{lora.Config{R: 2, Alpha: 1, TargetModules: lora.Modules("mlp")}, "model.layers.0.mlp is a *models.GatedMLP"},
		{lora.Config{R: 2, Alpha: 1}, "target_modules is empty"},
		{lora.Config{R: 2, Alpha: 1, Dropout: 1.5, TargetModules: lora.Modules("q_proj")}, "lora_dropout"},
		{lora.Config{R: 2, Alpha: 1, TargetModules: lora.Targets{Pattern: "(?<=x)q"}}, "not a regular expression"},
		{lora.Config{R: 2, Alpha: 1, TargetModules: lora.Modules("q_proj"), Init: "pissa"}, "not implemented"},
	} {
		_, err := lora.Inject(m, c.cfg)
		assert.ErrorContains(t, err, c.want)
	}
	assert.Len(t, nn.TrainableParameters(m), len(nn.NamedParameters(m)), "a failed Inject freezes nothing")

	// A regular expression over the whole name, and exclude_modules.
	a, err := lora.Inject(m, lora.Config{R: 2, Alpha: 1, TargetModules: lora.Targets{Pattern: `.*\.(q|k)_proj`},
		ExcludeModules: lora.Modules("model.layers.1.self_attn.k_proj")})
	require.NoError(t, err)
	var paths []string
	for _, l := range a.Layers() {
		paths = append(paths, l.Path)
	}
	assert.Equal(t, []string{"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj", "model.layers.1.self_attn.q_proj"}, paths)
	require.NoError(t, a.Unload())
	assert.ErrorContains(t, a.Unload(), "merged or unloaded")
}

// adapter_config.json: PEFT's file parses, unknown keys survive a round trip, and what
// gotrain does not implement is refused by name.
func TestParseConfig(t *testing.T) {
	raw := `{"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 16, "lora_alpha": 32, "lora_dropout": 0.05,
	  "target_modules": ["v_proj", "q_proj"], "use_rslora": true, "bias": "none", "use_dora": false,
	  "fan_in_fan_out": false, "init_lora_weights": "gaussian", "modules_to_save": null, "rank_pattern": {},
	  "alpha_pattern": {}, "peft_version": "0.21.2", "megatron_core": "megatron.core", "base_model_name_or_path": "org/model"}`
	c, err := lora.ParseConfig([]byte(raw))
	require.NoError(t, err)
	assert.Equal(t, 16, c.R)
	assert.Equal(t, 32.0, c.Alpha)
	assert.Equal(t, 0.05, c.Dropout)
	assert.Equal(t, lora.Modules("v_proj", "q_proj"), c.TargetModules)
	assert.True(t, c.UseRSLoRA)
	assert.Equal(t, lora.InitGaussian, c.Init)
	assert.Equal(t, "org/model", c.BaseModelNameOrPath)
	assert.Equal(t, 32/4.0, c.Scaling())
	assert.Contains(t, c.Extra, "peft_version")

	for key, val := range map[string]string{
		"use_dora": "true", "modules_to_save": `["lm_head"]`,
		"bias": `"all"`, "lora_bias": "true", "layers_to_transform": "[0]", "peft_type": `"IA3"`,
	} {
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(raw), &m))
		m[key] = json.RawMessage(val)
		b, _ := json.Marshal(m)
		_, err := lora.ParseConfig(b)
		assert.ErrorContains(t, err, key, key)
	}
	_, err = lora.ParseConfig([]byte(`{"peft_type": "LORA"}`))
	assert.ErrorContains(t, err, "target_modules is missing")

	// Per-module ranks and alphas, and adapters on parameters alone.
	c, err = lora.ParseConfig([]byte(`{"peft_type": "LORA", "r": 2, "target_modules": null,
	  "target_parameters": ["experts.down_proj"], "rank_pattern": {"q_proj": 4}, "alpha_pattern": {".*\\.gate_up_proj": 6}}`))
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"q_proj": 4}, c.RankPattern)
	assert.Equal(t, map[string]float64{`.*\.gate_up_proj`: 6}, c.AlphaPattern)
	assert.Equal(t, []string{"experts.down_proj"}, c.TargetParameters)
}

// TestRankPattern: rank_pattern and alpha_pattern give the modules whose names match
// (PEFT's get_pattern_key: the name ends with the pattern after a dot) their rank and
// scaling; adapters on parameters refuse dropout, as PEFT's ParamWrapper.
func TestRankPattern(t *testing.T) {
	defer threadScope()()
	m := tinyLlama(t)
	a, err := lora.Inject(m, lora.Config{R: 2, Alpha: 4, TargetModules: lora.Modules("q_proj", "v_proj"),
		RankPattern: map[string]int{"q_proj": 4}, AlphaPattern: map[string]float64{`layers\.1\..*v_proj`: 1}})
	require.NoError(t, err)
	for _, l := range a.Layers() {
		switch {
		case strings.HasSuffix(l.Path, "q_proj"):
			assert.Equal(t, int64(4), l.A.Weight.Size(0), l.Path)
			assert.Equal(t, 1.0, l.Scaling, l.Path)
		case strings.HasSuffix(l.Path, "layers.1.self_attn.v_proj"):
			assert.Equal(t, int64(2), l.A.Weight.Size(0), l.Path)
			assert.Equal(t, 0.5, l.Scaling, l.Path)
		default:
			assert.Equal(t, 2.0, l.Scaling, l.Path)
		}
	}
	require.NoError(t, a.Unload())
	_, err = lora.Inject(m, lora.Config{R: 2, Alpha: 4, TargetModules: lora.Modules("q_proj"), RankPattern: map[string]int{"(": 3}})
	assert.ErrorContains(t, err, "rank_pattern")
	_, err = lora.Inject(m, lora.Config{R: 2, Alpha: 4, Dropout: 0.1, TargetParameters: []string{"experts.down_proj"}})
	assert.ErrorContains(t, err, "lora_dropout")
	_, err = lora.Inject(m, lora.Config{R: 2, Alpha: 4, TargetParameters: []string{"experts.down_proj"}})
	assert.ErrorContains(t, err, "matched no parameter")
}

// Save writes PEFT's two files; a second save replaces them; Load reads them back to
// the same weights, and refuses a file whose tensors do not fit the model.
func TestSaveLoadRoundTrip(t *testing.T) {
	defer threadScope()()
	m := tinyLlama(t)
	a, err := lora.Inject(m, lora.Config{R: 2, Alpha: 4, TargetModules: lora.Modules("o_proj"), Init: lora.InitNone})
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "adapter")
	require.NoError(t, a.Save(dir))
	require.NoError(t, a.Save(dir))
	sd, meta, err := checkpoint.ReadSafetensorsDir(dir, checkpoint.AdapterWeights)
	require.NoError(t, err)
	assert.Equal(t, "pt", meta["format"])
	var keys []string
	for k := range sd.All() {
		keys = append(keys, k.(string))
	}
	assert.ElementsMatch(t, []string{
		"base_model.model.model.layers.0.self_attn.o_proj.lora_A.weight", "base_model.model.model.layers.0.self_attn.o_proj.lora_B.weight",
		"base_model.model.model.layers.1.self_attn.o_proj.lora_A.weight", "base_model.model.model.layers.1.self_attn.o_proj.lora_B.weight",
	}, keys)
	want := a.Parameters()[3].Float32s()
	require.NoError(t, a.Unload())

	b, err := lora.Load(m, dir, lora.LoadOptions{Trainable: true})
	require.NoError(t, err)
	assert.Equal(t, want, b.Parameters()[3].Float32s())
	assert.Equal(t, b.Parameters(), nn.TrainableParameters(m))
	require.NoError(t, b.Unload())

	// A model whose o_proj has other sizes cannot take the adapter; the model is untouched.
	other := models.DefaultLlamaConfig()
	other.VocabSize, other.HiddenSize, other.IntermediateSize, other.NumHiddenLayers = 97, 16, 24, 2
	other.NumAttentionHeads, other.MaxPositionEmbeddings = 2, 64
	om, err := models.NewLlamaForCausalLM(other)
	require.NoError(t, err)
	defer nn.Free(om)
	_, err = lora.Load(om, dir, lora.LoadOptions{})
	var serr *nn.StateDictError
	require.ErrorAs(t, err, &serr)
	assert.Len(t, serr.Mismatched, 4)
	assert.Len(t, nn.TrainableParameters(om), len(nn.NamedParameters(om)))
	for _, p := range nn.NamedParameters(om) {
		assert.NotContains(t, p.Name, "lora_")
	}
}

// A save that fails while writing the weights leaves the previous adapter's files and
// no temporary file.
func TestFailedSaveLeavesPrevious(t *testing.T) {
	defer threadScope()()
	m := tinyLlama(t)
	a, err := lora.Inject(m, lora.Config{R: 2, Alpha: 4, TargetModules: lora.Modules("q_proj")})
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, a.Save(dir))
	prev, err := os.ReadFile(filepath.Join(dir, lora.ConfigFile))
	require.NoError(t, err)
	// The weights cannot be renamed into place over a non-empty directory.
	weights := filepath.Join(dir, "adapter_model.safetensors")
	require.NoError(t, os.Remove(weights))
	require.NoError(t, os.MkdirAll(filepath.Join(weights, "x"), 0o755))
	a.Config.Alpha = 8
	assert.ErrorContains(t, a.Save(dir), "adapter_model.safetensors")
	now, err := os.ReadFile(filepath.Join(dir, lora.ConfigFile))
	require.NoError(t, err)
	assert.Equal(t, string(prev), string(now), "the config is not replaced when the weights fail")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{"adapter_config.json", "adapter_model.safetensors"}, names)
}

// TestSaveReplacesLinks: a save into a directory whose adapter_config.json and
// adapter_model.safetensors are symlinks to a file elsewhere leaves that file as it was
// and writes regular files of the adapter's contents, which load back.
func TestSaveReplacesLinks(t *testing.T) {
	defer threadScope()()
	m := tinyLlama(t)
	a, err := lora.Inject(m, lora.Config{R: 2, Alpha: 4, TargetModules: lora.Modules("q_proj")})
	require.NoError(t, err)
	ref := t.TempDir()
	require.NoError(t, a.Save(ref))
	outside := filepath.Join(t.TempDir(), "outside")
	require.NoError(t, os.WriteFile(outside, []byte("not to be overwritten"), 0o644))
	dir := t.TempDir()
	names := []string{lora.ConfigFile, "adapter_model.safetensors"}
	for _, name := range names {
		require.NoError(t, os.Symlink(outside, filepath.Join(dir, name)))
	}
	require.NoError(t, a.Save(dir))
	kept, err := os.ReadFile(outside)
	require.NoError(t, err)
	assert.Equal(t, "not to be overwritten", string(kept), "a link in the adapter directory was written through")
	for _, name := range names {
		fi, err := os.Lstat(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.True(t, fi.Mode().IsRegular(), name)
		want, err := os.ReadFile(filepath.Join(ref, name))
		require.NoError(t, err)
		have, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, want, have, name)
	}
	require.NoError(t, a.Unload())
	b, err := lora.Load(m, dir, lora.LoadOptions{})
	require.NoError(t, err)
	require.NoError(t, b.Unload())
}

// TestSaveValues: SaveValues with the parameters' values given (StateDict's copies,
// taken before the parameters change) writes Save's files byte for byte; a value missing or of another shape is an error naming the tensor, and
// writes nothing.
func TestSaveValues(t *testing.T) {
	defer threadScope()()
	m := tinyLlama(t)
	a, err := lora.Inject(m, lora.Config{R: 2, Alpha: 4, TargetModules: lora.Modules("q_proj", "v_proj")})
	require.NoError(t, err)
	ref, dir := t.TempDir(), t.TempDir()
	require.NoError(t, a.Save(ref))
	sd, err := a.StateDict()
	require.NoError(t, err)
	values := map[*torch.Tensor]*checkpoint.Tensor{}
	params := a.Parameters()
	i := 0
	for _, v := range sd.All() { // Parameters' order is the state dict's: A, then B, per layer
		values[params[i]] = v.(*checkpoint.Tensor)
		i++
	}
	require.Len(t, values, len(params))
	// StateDict's tensors are copies: a later change of the parameters leaves them.
	torch.NoGrad(func() { params[0].Detach().CopyFrom(params[0].ZerosLike(), false) })
	require.NoError(t, a.SaveValues(dir, values))
	for _, name := range []string{lora.ConfigFile, "adapter_model.safetensors"} {
		want, err := os.ReadFile(filepath.Join(ref, name))
		require.NoError(t, err)
		have, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, want, have, name)
	}
	empty := t.TempDir()
	delete(values, params[1])
	err = a.SaveValues(empty, values)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "lora_B.weight is missing")
	values[params[1]] = values[params[0]] // A's shape for B
	err = a.SaveValues(empty, values)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not of shape")
	entries, err := os.ReadDir(empty)
	require.NoError(t, err)
	assert.Empty(t, entries)
}

// Activation checkpointing lowers the peak memory of a LoRA training step on a
// Llama-shaped model (the gradients are the same: TestPEFTAdapters/checkpointed).
func TestCheckpointingLowersPeakMemory(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	torch.CountCPUMemory()
	c := models.DefaultLlamaConfig()
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 512, 128, 344, 6
	c.NumAttentionHeads, c.NumKeyValueHeads, c.MaxPositionEmbeddings = 4, 2, 256
	peak := func(checkpointing bool) int64 {
		var p int64
		torch.WithScope(func() {
			torch.ManualSeed(1)
			m, err := models.NewLlamaForCausalLM(c)
			require.NoError(t, err)
			defer nn.Free(m)
			_, err = lora.Inject(m, lora.Config{R: 8, Alpha: 16, TargetModules: lora.Targets{Pattern: lora.AllLinear}})
			require.NoError(t, err)
			require.NoError(t, models.SetGradientCheckpointing(m, checkpointing))
			ids := torch.Randint(0, 512, []int64{4, 128}, torch.Int64, torch.CPU)
			torch.ResetCPUPeakMemory()
			base := torch.CPUMemoryStats().Allocated
			m.Loss(ids).Backward()
			p = torch.CPUMemoryStats().PeakAllocated - base
		})
		return p
	}
	plain, ckpt := peak(false), peak(true)
	t.Logf("LoRA step peak above the model: %.1f MiB plain, %.1f MiB with activation checkpointing",
		float64(plain)/(1<<20), float64(ckpt)/(1<<20))
	assert.Less(t, ckpt, plain*2/3)
}
