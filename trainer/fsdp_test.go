package trainer_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/amp"
	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/torch/distributed/disttest"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/lora"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// Sharded training (FullyShardedDataParallel) is tested on a tiny Llama whose vocabulary
// (97 rows) and widths do not all divide by the world size, so that shards are padded:
// 16 sequences of 8 tokens, a global batch of 4 (2 per rank), 2 epochs.
const fsdpSeqs, fsdpLen, fsdpBatch = 16, 8, 4

// fsdpVariant is one configuration both the sharded ranks and the single process run.
type fsdpVariant struct {
	Name   string
	Accum  int
	Clip   float64
	NoSync bool
	LoRA   bool
	Weigh  bool // the token-weighted loss (sum and trainer.NumItems) instead of the mean
	// Recompute is gradient checkpointing of the decoder layers.
	Recompute bool
	// Reshard is ReshardAfterForward (ZeRO-3).
	Reshard bool
	// BF16 trains under the trainer's bf16 autocast (trainer.WithAMP(amp.BF16)).
	BF16 bool
	// MP is the sharded run's mixed-precision policy (bf16 parameters, fp32 reduce); the
	// single process trains in fp32 without it. Base names the variant without MP.
	MP   bool
	Base string
}

var fsdpVariants = []fsdpVariant{
	{Name: "plain", Accum: 1},
	{Name: "accum-clip", Accum: 2, Clip: 0.05, Weigh: true},
	{Name: "nosync-clip-recompute", Accum: 2, Clip: 0.05, NoSync: true, Recompute: true},
	{Name: "lora-accum-clip", Accum: 2, Clip: 0.05, LoRA: true},
	{Name: "reshard", Accum: 1, Reshard: true},
	{Name: "reshard-accum-clip", Accum: 2, Clip: 0.05, Weigh: true, Reshard: true},
	{Name: "reshard-nosync-clip-recompute", Accum: 2, Clip: 0.05, NoSync: true, Recompute: true, Reshard: true},
	{Name: "reshard-lora-accum-clip", Accum: 2, Clip: 0.05, LoRA: true, Reshard: true},
	{Name: "bf16-reshard-accum-clip", Accum: 2, Clip: 0.05, Weigh: true, Reshard: true, BF16: true},
	{Name: "mp-accum-clip", Accum: 2, Clip: 0.05, Weigh: true, MP: true, Base: "accum-clip"},
	{Name: "mp-reshard-accum-clip", Accum: 2, Clip: 0.05, Weigh: true, Reshard: true, MP: true, Base: "reshard-accum-clip"},
}

// fsdpResult is what one run of a variant reports.
type fsdpResult struct {
	Weights   []float32
	TrainLoss []float64
	ValLoss   []float64
	// OptNumel is the number of elements of the optimizer's parameters (the shards under
	// sharding), TrainNumel that of the model's trainable parameters.
	OptNumel, TrainNumel int64
	Units                []string
	// CheckpointErr is SaveCheckpoint's error after the run, CheckpointFiles the files of
	// the sharded checkpoint it wrote.
	CheckpointErr   string
	CheckpointFiles []string
	// LayerParams counts the decoder layers' parameters (a LoRA base's too), Freed those
	// whose storage is freed between two steps.
	LayerParams, Freed int
	// Counts are the sharded run's collectives.
	Counts trainer.FSDPCounts
	// ParamDTypes are the model's parameters' dtypes during the first step, OptDTypes
	// those of the optimizer's parameters (the shards) and state after the run,
	// MasterDTypes those of the parameters GatherState exports after it.
	ParamDTypes, OptDTypes, MasterDTypes map[string]bool
	// MasterErr says where the exported master weights differ from the model's
	// parameters by more than the rounding to the parameters' dtype.
	MasterErr string
}

func fsdpData() (*data.TensorDataset, error) {
	ids := make([]float32, fsdpSeqs*fsdpLen)
	for i := range ids {
		ids[i] = float32((i*37 + i/fsdpLen*11) % 97)
	}
	return data.NewTensorDataset(ids, []int64{fsdpLen}, nil, ids, []int64{fsdpLen})
}

// fsdpLlama is the tiny Llama of the sharded tests: 2 layers, a vocabulary of 97.
func fsdpLlama() (*models.LlamaForCausalLM, error) {
	c := models.DefaultLlamaConfig()
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 97, 32, 48, 2
	c.NumAttentionHeads, c.NumKeyValueHeads, c.MaxPositionEmbeddings = 4, 2, 64
	c.InitializerRange = 0.1
	return models.NewLlamaForCausalLM(c)
}

// fsdpRun trains the variant: one rank of pg's, or one process with the global batch
// when pg is nil.
func fsdpRun(pg *distributed.ProcessGroup, v fsdpVariant) (res fsdpResult, err error) {
	ds, err := fsdpData()
	if err != nil {
		return res, err
	}
	lo := data.LoaderOptions{BatchSize: fsdpBatch}
	if pg != nil {
		lo.BatchSize, lo.Rank, lo.WorldSize = fsdpBatch/pg.WorldSize(), pg.Rank(), pg.WorldSize()
		// Rank 1 starts from different weights: New's broadcast must fix that.
		torch.ManualSeed(int64(seed + pg.Rank()))
	} else {
		torch.ManualSeed(seed)
	}
	tr, err := data.NewLoader(ds, lo)
	if err != nil {
		return res, err
	}
	va, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: 8})
	if err != nil {
		return res, err
	}
	m, err := fsdpLlama()
	if err != nil {
		return res, err
	}
	defer nn.Free(m)
	if v.Recompute {
		if err := models.SetGradientCheckpointing(m, true); err != nil {
			return res, err
		}
	}
	if v.LoRA {
		if _, err := lora.Inject(m, lora.Config{R: 4, Alpha: 8, TargetModules: lora.Targets{Pattern: lora.AllLinear}, Init: lora.InitNone}); err != nil {
			return res, err
		}
	}
	trainable := nn.TrainableParameters(m)
	for _, p := range trainable {
		res.TrainNumel += p.Numel()
	}
	opt, err := optim.NewAdamW(trainable, optim.AdamOptions{LR: 0.01, Betas: [2]float64{0.9, 0.999}, Eps: 1e-8, WeightDecay: 0.1})
	if err != nil {
		return res, err
	}
	step := func(m *models.LlamaForCausalLM, b data.Batch) (*torch.Tensor, trainer.Metrics) {
		ids := b.Get(data.Input).ToDType(torch.Int64)
		logits := m.Forward(models.DecoderInput{InputIDs: ids})
		if !v.Weigh {
			return models.CausalLMLoss(logits, ids), nil
		}
		sum, n := models.CausalLMLossSum(logits, ids)
		return sum, trainer.Metrics{trainer.NumItems: n}
	}
	probe := trainer.On(func(_ trainer.Event, t *trainer.Trainer) error {
		if t.GlobalStep != 1 || res.LayerParams > 0 {
			return nil
		}
		res.ParamDTypes = map[string]bool{}
		for _, p := range nn.NamedParameters(m) {
			res.ParamDTypes[p.Tensor.DType().String()] = true
			if strings.Contains(p.Name, ".layers.") {
				res.LayerParams++
				if torch.StorageBytes(p.Tensor) == 0 {
					res.Freed++
				}
			}
		}
		return nil
	}, trainer.BatchEnd)
	opts := []trainer.Option{trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard), trainer.WithEpochs(2),
		trainer.WithSeed(seed), trainer.WithAccumulation(v.Accum), trainer.WithGradClip(v.Clip),
		trainer.WithTrainStep(step), trainer.WithMonitor("val_loss", trainer.Min), trainer.WithCallbacks(probe)}
	if v.BF16 {
		opts = append(opts, trainer.WithAMP(amp.BF16))
	}
	var fs *trainer.FullyShardedDataParallel
	if pg != nil {
		fs = &trainer.FullyShardedDataParallel{Group: pg, NoSync: v.NoSync, ReshardAfterForward: v.Reshard}
		if v.MP {
			fs.MixedPrecision = trainer.FSDPMixedPrecision{ParamDType: torch.BFloat16}
		}
		opts = append(opts, trainer.WithStrategy(fs))
	}
	tt, err := trainer.New(m, tr, va, nil, opt, opts...)
	if err != nil {
		return res, err
	}
	if fs != nil {
		res.Units, _ = fs.UnitNames()
	}
	for _, p := range opt.Params() {
		res.OptNumel += p.Numel()
	}
	if err := tt.Run(context.Background()); err != nil {
		return res, err
	}
	if fs != nil {
		res.Counts = fs.Counts()
	}
	if fs != nil && pg.Rank() == 0 {
		// Outside Run the model is an ordinary one: a forward and backward on this rank
		// alone runs no collective (one would wait for rank 1 until the timeout).
		torch.WithScope(func() {
			ids := torch.FromSlice([]int64{1, 2, 3, 4}, 1, 4)
			models.CausalLMLoss(m.Forward(models.DecoderInput{InputIDs: ids}), ids).Backward()
		})
		if fs.Counts() != res.Counts {
			return res, fmt.Errorf("a forward and backward outside Run ran collectives: %+v, then %+v", res.Counts, fs.Counts())
		}
	}
	res.OptDTypes = map[string]bool{}
	for i, p := range opt.Params() {
		res.OptDTypes[p.DType().String()] = true
		for _, st := range opt.State(i) {
			if st.Numel() > 1 { // Adam's moments, not its step count
				res.OptDTypes[st.DType().String()] = true
			}
		}
	}
	if fs != nil {
		// A collective: the export's view of the weights, the master weights (the
		// shards gathered) under the policy.
		params := map[string]*torch.Tensor{}
		for _, p := range nn.NamedParameters(m) {
			params[p.Name] = p.Tensor
		}
		res.MasterDTypes = map[string]bool{}
		master := func(from, name string, x *torch.Tensor) {
			p, ok := params[name]
			if !ok {
				return
			}
			res.MasterDTypes[x.DType().String()] = true
			torch.WithScope(func() {
				// The model's parameter is the master weight rounded to its dtype.
				d := x.ToDType(torch.Float32).Sub(p.ToDType(torch.Float32)).Abs()
				bound := x.ToDType(torch.Float32).Abs().MulScalar(1.0 / 256).AddScalar(1e-30)
				if n := d.Sub(bound).Max().Float32s()[0]; n > 0 && res.MasterErr == "" {
					res.MasterErr = fmt.Sprintf("%s: %s: the model's %s parameter differs from the exported master weight beyond rounding", from, name, p.DType())
				}
			})
		}
		if err := fs.GatherState(m, func(name string, x *torch.Tensor) error {
			master("GatherState", name, x)
			return nil
		}); err != nil {
			return res, err
		}
		if v.MP { // and the files of the streamed export
			dir := filepath.Join(os.Getenv("GOTRAIN_TEST_OUT"), v.Name+"-hf")
			if err := fs.WriteSafetensorsDir(dir, "", m, nil, nil, 0); err != nil {
				return res, err
			}
			if pg.Rank() == 0 {
				d, _, err := checkpoint.ReadSafetensorsDir(dir, "")
				if err != nil {
					return res, err
				}
				n := 0
				for k, x := range d.All() {
					ct, ok := x.(*checkpoint.Tensor)
					if !ok {
						continue
					}
					if _, ok := params[k.(string)]; ok {
						n++
					}
					xt, err := torch.TensorFromCheckpoint(ct, torch.CPU)
					if err != nil {
						return res, err
					}
					name, _ := k.(string)
					master("WriteSafetensorsDir", name, xt)
					xt.Free()
				}
				if n != len(params) && res.MasterErr == "" {
					res.MasterErr = fmt.Sprintf("WriteSafetensorsDir wrote %d of the %d parameters", n, len(params))
				}
			}
		}
	}
	if fs != nil {
		res.Counts = fs.Counts()
		// A collective: every rank writes its shards into the same directory.
		path := filepath.Join(os.Getenv("GOTRAIN_TEST_OUT"), v.Name+".pt")
		if err := tt.SaveCheckpoint(path); err != nil {
			res.CheckpointErr = err.Error()
		} else if v.MP {
			if err := fsdpReload(tt, fs, m, path); err != nil {
				res.CheckpointErr = "under the mixed-precision policy: " + err.Error()
			}
		}
		entries, _ := os.ReadDir(path)
		for _, e := range entries {
			res.CheckpointFiles = append(res.CheckpointFiles, e.Name())
		}
	}
	res.Weights, res.TrainLoss, res.ValLoss = outcome(m, tt)
	return res, nil
}

// fsdpReload zeroes the shards (the fp32 master weights) after tt saved the sharded
// checkpoint path, loads it back (a collective) and checks that the shards and the
// model's parameters come back bitwise: the checkpoint holds the fp32 shards, not the
// bf16 parameters, and the load gathers them into the parameters.
func fsdpReload(tt *trainer.Trainer, fs *trainer.FullyShardedDataParallel, m nn.Module, path string) (err error) {
	defer torch.Recover(&err, "reloading")
	shards, before := map[string][]float32{}, map[string][]float32{}
	torch.WithScope(func() {
		for n, s := range fs.Shards() {
			if s.DType() != torch.Float32 {
				err = fmt.Errorf("shard %s is %s", n, s.DType())
			}
			shards[n] = s.Float32s()
			torch.NoGrad(func() { s.Detach().CopyFrom(torch.Zeros(s.Shape(), s.DType(), s.Device()), false) })
		}
		for _, p := range nn.NamedParameters(m) {
			before[p.Name] = p.Tensor.Float32s()
		}
	})
	if err != nil {
		return err
	}
	if err := tt.LoadCheckpoint(path); err != nil {
		return err
	}
	torch.WithScope(func() {
		for n, s := range fs.Shards() {
			if !slices.Equal(shards[n], s.Float32s()) && err == nil {
				err = fmt.Errorf("shard %s differs after the reload", n)
			}
		}
		for _, p := range nn.NamedParameters(m) {
			if !slices.Equal(before[p.Name], p.Tensor.Float32s()) && err == nil {
				err = fmt.Errorf("parameter %s differs after the reload", p.Name)
			}
		}
	})
	return err
}

// fsdpChild runs every variant as one rank and writes the results.
func fsdpChild() error {
	pg, err := disttest.Join(20 * time.Second)
	if err != nil {
		return err
	}
	defer pg.Close()
	out := map[string]fsdpResult{}
	for _, v := range fsdpVariants {
		r, err := fsdpRun(pg, v)
		if err != nil {
			return fmt.Errorf("%s: %w", v.Name, err)
		}
		out[v.Name] = r
	}
	return writeRankResult(pg, "rank", out)
}

// TestFSDPEqualsSingleProcess: two Gloo ranks of sharded training (one launch, every
// variant) end with the losses and weights of one process training on the global batch,
// with and without accumulation (reduce-scattered every micro-batch, or once under
// NoSync), clipping by the global norm, the token-weighted loss and LoRA; the ranks
// agree, and each rank's optimizer holds only its shards.
func TestFSDPEqualsSingleProcess(t *testing.T) {
	_, ranks := spawnRanks[map[string]fsdpResult](t, "fsdp", "rank", 2)
	for _, v := range fsdpVariants {
		t.Run(v.Name, func(t *testing.T) {
			sv := v
			sv.MP = false // the single process trains in fp32
			single, err := fsdpRun(nil, sv)
			require.NoError(t, err)
			got := ranks[0][v.Name]
			assert.Empty(t, got.MasterErr)
			// The optimizer steps on fp32 shards, with fp32 state, and the export
			// gathers them in fp32; the policy's model holds bf16 parameters.
			assert.Equal(t, map[string]bool{"float32": true}, got.OptDTypes)
			assert.Equal(t, map[string]bool{"float32": true}, got.MasterDTypes)
			if v.MP {
				assert.Equal(t, map[string]bool{"bfloat16": true}, got.ParamDTypes)
				// The all-gathers send bf16: half the bytes of the same run without
				// the policy, in as many collectives.
				base := ranks[0][v.Base].Counts
				assert.Equal(t, base.AllGathers, got.Counts.AllGathers)
				assert.Equal(t, base.AllGatherBytes, 2*got.Counts.AllGatherBytes)
				assert.Positive(t, got.Counts.AllGatherBytes)
			} else {
				assert.Equal(t, map[string]bool{"float32": true}, got.ParamDTypes)
			}
			units := []string{"model.embed_tokens", "model.layers.0", "model.layers.1", ""}
			if v.LoRA { // all-linear leaves out the head: only the layers have adapters
				units = []string{"model.layers.0", "model.layers.1"}
			}
			assert.Equal(t, units, got.Units)
			assert.Empty(t, got.CheckpointErr)
			assert.ElementsMatch(t, []string{"metadata.pt", "rank-0-of-2.pt", "rank-1-of-2.pt"}, got.CheckpointFiles)
			// Under ReshardAfterForward the layers' parameters, frozen ones included, are
			// not allocated between steps; otherwise they are.
			require.Positive(t, got.LayerParams)
			if v.Reshard {
				assert.Equal(t, got.LayerParams, got.Freed)
			} else {
				assert.Zero(t, got.Freed)
			}
			// Every micro-batch's backward reduce-scatters layer 1 as soon as it is done
			// (in layer 0's pre-backward), unless NoSync defers all to the window's end.
			micro := int64(2 * fsdpSeqs / fsdpBatch)
			if v.NoSync {
				assert.Zero(t, got.Counts.InBackward)
			} else {
				assert.Equal(t, micro, got.Counts.InBackward)
			}
			assert.Positive(t, got.Counts.AllGathers)
			// Each rank's optimizer holds about half of the trainable elements (the
			// shards, padded to whole rows).
			assert.Less(t, got.OptNumel, single.TrainNumel*6/10)
			assert.GreaterOrEqual(t, 2*got.OptNumel, single.TrainNumel)
			assert.Equal(t, single.TrainNumel, single.OptNumel)
			require.Len(t, got.Weights, len(single.Weights))
			// In fp32 the sharded run is the single process's up to the order of the
			// sums: 1e-5. In bf16 (autocast, or the policy's bf16 parameters against
			// the single process's fp32) the gradients are rounded to 8 bits of
			// mantissa, 0.4%, at different places (per rank's half batch, per layer):
			// the losses then agree within 1e-2 (0.4% of ~4; 3.5e-3 measured), the
			// weights on average within 2e-3 (6e-4 measured, against AdamW's steps of
			// lr 0.01 that a wrong gradient would change), and each weight within 0.1,
			// the most that 4 AdamW steps of lr 0.01 with their gradient's sign flipped
			// (a gradient near 0) can move it apart (0.037 measured).
			wtol, ltol, mtol := 1e-5, 1e-5, 1e-5
			if v.BF16 || v.MP {
				wtol, ltol, mtol = 0.1, 1e-2, 2e-3
			}
			sumd := 0.0
			for i := range single.Weights {
				sumd += math.Abs(float64(single.Weights[i] - got.Weights[i]))
			}
			assert.Less(t, sumd/float64(len(single.Weights)), mtol, "mean weight difference")
			for i := range single.Weights {
				require.InDelta(t, single.Weights[i], got.Weights[i], wtol, "weight %d", i)
			}
			assert.Equal(t, got.Weights, ranks[1][v.Name].Weights, "the ranks' weights differ")
			require.Len(t, got.TrainLoss, 2)
			for e := range single.TrainLoss {
				assert.InDelta(t, single.TrainLoss[e], got.TrainLoss[e], ltol, "train loss of epoch %d", e+1)
				assert.InDelta(t, single.ValLoss[e], got.ValLoss[e], ltol, "val loss of epoch %d", e+1)
			}
		})
	}
}

// oneRank is an in-process Gloo group of one rank, closed when t ends, and a loader of
// fsdpData.
func oneRank(t *testing.T) (*distributed.ProcessGroup, *data.Loader) {
	pg, err := distributed.Init(distributed.Options{WorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: disttest.FreePort(t),
		Timeout: time.Minute, Backend: distributed.Gloo})
	require.NoError(t, err)
	t.Cleanup(func() { pg.Close() })
	ds, err := fsdpData()
	require.NoError(t, err)
	tr, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: fsdpBatch})
	require.NoError(t, err)
	return pg, tr
}

// llamaLMStep is the FSDP tests' training step: fsdpLlama's causal-LM loss on the batch.
func llamaLMStep(m *models.LlamaForCausalLM, b data.Batch) (*torch.Tensor, trainer.Metrics) {
	ids := b.Get(data.Input).ToDType(torch.Int64)
	return models.CausalLMLoss(m.Forward(models.DecoderInput{InputIDs: ids}), ids), nil
}

// TestFSDPRefusals: on one Gloo rank in this process, what sharded training cannot do is
// refused by New with an error that names it, and Units overrides the model's units;
// then its sharded checkpoints survive crashes (shardedCheckpointCrashes).
func TestFSDPRefusals(t *testing.T) {
	pg, tr := oneRank(t)
	build := func(strategy trainer.Option, params func(m nn.Module) []*torch.Tensor, more ...trainer.Option) (*trainer.Trainer, error) {
		m, err := fsdpLlama()
		require.NoError(t, err)
		t.Cleanup(func() { nn.Free(m) })
		opt, err := optim.NewSGD(params(m), optim.SGDOptions{LR: 0.1})
		require.NoError(t, err)
		opts := append([]trainer.Option{trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard), trainer.WithTrainStep(llamaLMStep),
			trainer.WithMonitor("train_loss", trainer.Min), strategy}, more...)
		return trainer.New(m, tr, nil, nil, opt, opts...)
	}
	all := nn.TrainableParameters

	_, err := build(trainer.WithFSDP(nil), all)
	require.ErrorContains(t, err, "nil process group")

	_, err = build(trainer.WithFSDP(pg), all, trainer.WithRunDir(t.TempDir()), trainer.WithTopK(2))
	require.ErrorContains(t, err, "top_k 2: sharded checkpoints (FullyShardedDataParallel) keep last.pt and best_model.pth only")

	mc, err := trainer.NewModelCheckpoint(t.TempDir(), "train_loss", trainer.Min, 3)
	require.NoError(t, err)
	_, err = build(trainer.WithFSDP(pg), all, trainer.WithCallbacks(mc))
	require.ErrorContains(t, err, "ModelCheckpoint with TopK 3: sharded checkpoints (FullyShardedDataParallel) keep last.pt and best_model.pth only")

	_, err = build(trainer.WithFSDP(pg), all, trainer.WithAMP(amp.FP16))
	require.ErrorContains(t, err, "needs a loss scaler, which sharded training does not support yet")

	_, err = build(trainer.WithStrategy(&trainer.FullyShardedDataParallel{Group: pg,
		MixedPrecision: trainer.FSDPMixedPrecision{ParamDType: torch.Int64}}), all)
	require.ErrorContains(t, err, "MixedPrecision.ParamDType int64 is not a floating-point dtype")
	_, err = build(trainer.WithStrategy(&trainer.FullyShardedDataParallel{Group: pg,
		MixedPrecision: trainer.FSDPMixedPrecision{ParamDType: torch.Float16}}), all)
	require.ErrorContains(t, err, "float16 gradients, which need a loss scaler")
	_, err = build(trainer.WithStrategy(&trainer.FullyShardedDataParallel{Group: pg,
		MixedPrecision: trainer.FSDPMixedPrecision{ParamDType: torch.BFloat16}}), func(m nn.Module) []*torch.Tensor {
		ps := all(m)
		ps[0].SetRequiresGrad(false) // as a LoRA base
		return ps[1:]
	})
	require.ErrorContains(t, err, "MixedPrecision with frozen parameter model.embed_tokens.weight (a LoRA base) is not supported")

	_, err = build(trainer.WithFSDP(pg), func(m nn.Module) []*torch.Tensor { return all(m)[1:] })
	require.ErrorContains(t, err, "trainable parameter model.embed_tokens.weight is not in the optimizer")

	fs := &trainer.FullyShardedDataParallel{Group: pg, Units: []string{"model.layers"}}
	tt, err := build(trainer.WithStrategy(fs), all)
	require.NoError(t, err)
	units, params := fs.UnitNames()
	assert.Equal(t, []string{"model.layers", ""}, units)
	assert.Contains(t, params[0], "model.layers.1.mlp.down_proj.weight")
	assert.Contains(t, params[1], "model.embed_tokens.weight")
	assert.Contains(t, params[1], "lm_head.weight")
	require.NoError(t, tt.Run(context.Background()))
	shardedCheckpointCrashes(t, tt)
}

// shardedCheckpointCrashes: a sharded checkpoint (on tt's one rank) is published whole:
// a staging directory a crash left is replaced, never loaded; when a crash between the
// publication's two renames left only the previous checkpoint, it loads; a single-file
// checkpoint is refused under sharding.
func shardedCheckpointCrashes(t *testing.T, tt *trainer.Trainer) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.pt")
	staging, previous := filepath.Join(dir, ".x.pt.sharded-staging"), filepath.Join(dir, ".x.pt.sharded-previous")
	// A crashed save's partial staging directory does not load, and the next save
	// replaces it.
	require.NoError(t, os.MkdirAll(staging, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(staging, "rank-0-of-1.pt"), []byte("partial"), 0o644))
	require.Error(t, tt.LoadCheckpoint(path))
	require.NoError(t, tt.SaveCheckpoint(path))
	assert.NoDirExists(t, staging)
	assert.FileExists(t, filepath.Join(path, "metadata.pt"))
	assert.FileExists(t, filepath.Join(path, "rank-0-of-1.pt"))
	step := tt.GlobalStep
	require.Positive(t, step)
	// A crash after the previous checkpoint was moved aside: it loads.
	require.NoError(t, os.Rename(path, previous))
	tt.GlobalStep = 0
	require.NoError(t, tt.LoadCheckpoint(path))
	assert.Equal(t, step, tt.GlobalStep)
	// The next save publishes, and the previous one goes.
	require.NoError(t, tt.SaveCheckpoint(path))
	assert.NoDirExists(t, previous)
	require.NoError(t, tt.SaveCheckpoint(path)) // over a complete one
	assert.NoDirExists(t, previous)
	require.NoError(t, tt.LoadCheckpoint(path))
	// A directory that is no checkpoint, and a single file, are refused.
	require.ErrorContains(t, tt.LoadCheckpoint(dir), "without metadata.pt")
	file := filepath.Join(dir, "single.pt")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	require.ErrorContains(t, tt.LoadCheckpoint(file), "not a single file")
}

// TestFSDPFreedParameterIsAnError: under ReshardAfterForward a callback that reads a
// parameter the last forward freed gets an error that says to call Unshard, where the
// kernel read a null pointer and the process died of SIGSEGV; through Unsharded the same
// reads work, and the run goes on.
func TestFSDPFreedParameterIsAnError(t *testing.T) {
	pg, tr := oneRank(t)
	m, err := fsdpLlama()
	require.NoError(t, err)
	defer nn.Free(m)
	opt, err := optim.NewSGD(nn.TrainableParameters(m), optim.SGDOptions{LR: 0.1})
	require.NoError(t, err)
	w := m.Model.Layers[0].MLP.DownProj.Weight
	try := func(fn func()) (err error) {
		defer torch.Recover(&err, "reading")
		fn()
		return nil
	}
	var freed []error
	var whole float64
	fs := &trainer.FullyShardedDataParallel{Group: pg, ReshardAfterForward: true}
	cb := trainer.CallbackFunc(func(e trainer.Event, tt *trainer.Trainer) error {
		if e != trainer.BatchEnd || tt.GlobalStep != 1 {
			return nil
		}
		freed = append(freed, try(func() { w.Sum().Item() }), try(func() { w.Float32s() }),
			func() error { _, err := torch.TensorToCheckpoint(w); return err }())
		return fs.Unsharded(func() error {
			whole = w.Abs().Sum().Item()
			return nil
		})
	})
	tt, err := trainer.New(m, tr, nil, nil, opt, trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard),
		trainer.WithTrainStep(llamaLMStep), trainer.WithStrategy(fs), trainer.WithCallbacks(cb))
	require.NoError(t, err)
	require.NoError(t, tt.Run(context.Background()))
	require.Len(t, freed, 3)
	for _, err := range freed {
		require.Error(t, err)
		assert.Contains(t, err.Error(), "whose memory sharded training freed")
		assert.Contains(t, err.Error(), "call Unshard")
	}
	assert.Greater(t, whole, 0.0)
	assert.Greater(t, w.Abs().Sum().Item(), 0.0, "Run leaves the model whole")
}
