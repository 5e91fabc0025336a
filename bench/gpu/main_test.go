package main

import (
	"context"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

func TestMedian(t *testing.T) {
	assert.Equal(t, 2.0, median([]float64{3, 1, 2}))
	assert.Equal(t, 2.5, median([]float64{4, 1, 3, 2}))
	assert.Equal(t, 0.0, median(nil))
}

// The reference the SDPA check trusts is the kernel's own result in float32: a wrong mask
// or scale would make every case fail (or pass) for the wrong reason.
func TestPlainAttentionIsSDPA(t *testing.T) {
	torch.WithScope(func() {
		q := torch.Randn([]int64{2, 3, 7, 8}, torch.Float32, torch.CPU)
		k := torch.Randn([]int64{2, 3, 7, 8}, torch.Float32, torch.CPU)
		v := torch.Randn([]int64{2, 3, 7, 8}, torch.Float32, torch.CPU)
		for _, causal := range []bool{false, true} {
			want := torch.ScaledDotProductAttention(q, k, v, nil, 0, causal, 0.3)
			assert.Less(t, relErr(plainAttention(q, k, v, 0.3, causal), want), 1e-5, "causal %v", causal)
		}
		// and the error measure sees a difference: the causal and full results differ.
		assert.Greater(t, relErr(plainAttention(q, k, v, 0.3, true), plainAttention(q, k, v, 0.3, false)), 0.1)
	})
}

func TestSDPASmokeCasesPass(t *testing.T) {
	res, ok, err := runSDPA(options{device: torch.CPU, smoke: true})
	require.NoError(t, err)
	assert.True(t, ok)
	for _, c := range res.(sdpaResult).Cases {
		assert.NotEqual(t, torch.SDPError.String(), c.Backend)
		assert.Len(t, c.Errors, 4)
		assert.Positive(t, c.Errors["dq"], "a low-precision kernel is never exact")
	}
}

// countReads must see a read made inside the step: here the step reads its loss, as a
// step written against the Trainer's rules must not.
func TestCountReadsSeesAReadInTheStep(t *testing.T) {
	for _, read := range []bool{false, true} {
		res := &hostSyncResult{}
		m := models.MLP(4, 8, 2)
		ds := randomSamples{n: 12, fill: func(r *rand.Rand, s *data.Sample) {
			for j, x := 0, data.SetValues[float32](s, data.Input, 4); j < len(x); j++ {
				x[j] = float32(r.NormFloat64())
			}
			data.SetScalar(s, data.Label, r.Int64N(2))
		}}
		loader, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: 2, Inline: true})
		require.NoError(t, err)
		opt, err := optim.NewAdamW(nn.Parameters(m), optim.AdamOptions{})
		require.NoError(t, err)
		ce := &nn.CrossEntropyLoss{}
		step := func(model nn.Layer, b data.Batch) (*torch.Tensor, trainer.Metrics) {
			loss := ce.Forward(model.Forward(b.Get(data.Input)), b.Get(data.Label))
			if read && math.IsNaN(loss.Item()) {
				t.Fatal("NaN loss")
			}
			return loss, nil
		}
		tr, err := trainer.New(m, loader, nil, nil, opt, trainer.WithTrainStep(step), trainer.WithOutput(io.Discard),
			trainer.WithDevice("cpu"), trainer.WithEpochs(1), trainer.WithLogEvery(3), trainer.WithCallbacks(countReads(res)))
		require.NoError(t, err)
		require.NoError(t, tr.Run(context.Background()))
		nn.Free(m)
		// 6 batches: the first is start-up, 3 and 6 are logging points.
		assert.Equal(t, 3, res.BetweenSteps)
		assert.Equal(t, 2, res.LogPoints)
		if read {
			assert.Equal(t, int64(3), res.BetweenReads)
		} else {
			assert.Zero(t, res.BetweenReads)
		}
	}
}

// The classes issue 35 reads a profile by: CUDA kernel names of cuBLAS, cuDNN, FlashAttention,
// ATen and Triton (torch.compile), and ATen op names on a CPU.
func TestClassOf(t *testing.T) {
	for name, want := range map[string]string{
		"aten::addmm": "matmul",
		"aten::mm":    "matmul",
		"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64":                             "matmul",
		"nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN":                                               "matmul",
		"triton_tem_fused_mm_3":                                                                   "matmul",
		"void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>":      "norm",
		"triton_red_fused_native_layer_norm_2":                                                    "norm",
		"void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>":                  "attention",
		"aten::_scaled_dot_product_flash_attention_for_cpu":                                       "attention",
		"aten::_fused_adamw_":                                                                     "optimizer",
		"void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>": "optimizer",
		"aten::_log_softmax":                                                                      "loss",
		"aten::nll_loss_forward":                                                                  "loss",
		"triton_per_fused__log_softmax_nll_loss_4":                                                "loss",
		"aten::cudnn_convolution":                                                                 "conv",
		"void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>":       "elementwise",
		"triton_poi_fused_add_gelu_0":                                                             "elementwise",
		"aten::copy_":                                                                             "copy",
		"aten::empty_strided":                                                                     "other",
	} {
		assert.Equal(t, want, classOf(name), name)
	}
}

// selfTimes takes each host op's children's time out of its own, thread by thread.
func TestSelfTimes(t *testing.T) {
	op := func(name string, thread uint64, start, dur int) torch.ProfileEvent {
		return torch.ProfileEvent{Name: name, Kind: torch.ProfiledOp, Thread: thread,
			Start: time.Duration(start), Duration: time.Duration(dur)}
	}
	evs := []torch.ProfileEvent{
		op("aten::linear", 1, 0, 100),
		op("aten::addmm", 1, 10, 50), // inside linear
		op("aten::empty", 1, 12, 5),  // inside addmm
		op("aten::add", 1, 70, 10),   // inside linear, after addmm
		op("aten::mul", 1, 200, 7),   // on its own
		op("aten::relu", 2, 20, 30),  // another thread, overlapping in time
		{Name: "kernel", Kind: torch.ProfiledKernel, Start: 15, Duration: 40},
	}
	got := map[string]time.Duration{}
	for _, x := range selfTimes(evs) {
		got[x.name] = x.dur
	}
	assert.Equal(t, map[string]time.Duration{"aten::linear": 40, "aten::addmm": 45, "aten::empty": 5, "aten::add": 10,
		"aten::mul": 7, "aten::relu": 30}, got)
	// With kernels recorded, the kernels are what is counted.
	s := summarize(evs, 1)
	assert.Equal(t, "kernels", s.Counted)
	assert.Equal(t, 1.0, s.PerStep)
	assert.Equal(t, 6.0, s.HostOps)
}

// train and profile set a model up the same way (prepare, newSession): the same
// spec.json for the same flags, and steps that train; both refuse a precision that is
// not fp32 or bf16.
func TestTrainAndProfileShareTheirSetUp(t *testing.T) {
	for _, precision := range []string{"fp32", "bf16"} {
		o := options{device: torch.CPU, smoke: true, model: "cnn", precision: precision, warmup: 1, steps: 2}
		o.dir = filepath.Join(t.TempDir(), "train")
		res, ok, err := runTrain(o)
		require.NoError(t, err)
		assert.True(t, ok)
		tr := res.(*trainResult)
		assert.Len(t, tr.StepS, 2)
		assert.False(t, math.IsNaN(tr.FirstLoss) || math.IsInf(tr.FirstLoss, 0), "first loss %v", tr.FirstLoss)
		trainSpec, err := os.ReadFile(filepath.Join(o.dir, "spec.json"))
		require.NoError(t, err)

		o.dir = filepath.Join(t.TempDir(), "profile")
		res, ok, err = runProfile(o, memOptions{}, "")
		require.NoError(t, err)
		assert.True(t, ok)
		prof := res.([]profileSummary)
		require.Len(t, prof, 1)
		assert.Equal(t, 2, prof[0].Steps)
		assert.Positive(t, prof[0].PerStep, precision)
		profileSpec, err := os.ReadFile(filepath.Join(o.dir, "spec.json"))
		require.NoError(t, err)
		assert.JSONEq(t, string(trainSpec), string(profileSpec), precision)
	}
	o := options{device: torch.CPU, smoke: true, model: "cnn", precision: "fp16", dir: t.TempDir()}
	_, _, err := runTrain(o)
	assert.ErrorContains(t, err, `-precision "fp16"`)
	_, _, err = runProfile(o, memOptions{}, "")
	assert.ErrorContains(t, err, `-precision "fp16"`)
}
