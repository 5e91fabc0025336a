package trainer_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testsupport"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/torch/distributed/disttest"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// lossModel is a model that computes its own training loss from token ids (a mixture of
// experts adds the routers' load-balancing loss to it).
type lossModel interface {
	nn.Module
	Loss(ids *torch.Tensor) *torch.Tensor
}

// fsdpFamily is a model family whose layers sharded training frees between steps.
type fsdpFamily struct {
	Name      string
	Recompute bool
	build     func() (lossModel, error)
}

var fsdpFamilies = []fsdpFamily{
	{Name: "mixtral-aux", build: fsdpMixtral},
	{Name: "mixtral-aux-recompute", Recompute: true, build: fsdpMixtral},
	{Name: "gpt2", build: func() (lossModel, error) {
		c := models.DefaultGPT2Config()
		c.VocabSize, c.NPositions, c.NEmbd, c.NLayer, c.NHead = 97, 16, 32, 2, 4
		c.ResidPdrop, c.EmbdPdrop, c.AttnPdrop, c.InitializerRange = 0, 0, 0, 0.1
		return models.NewGPT2LMHeadModel(c)
	}},
	{Name: "own", build: func() (lossModel, error) { return newBlockNet(97, 32, 2), nil }},
}

// blockNet is a model of one's own that sharded training reshards: residual MLP blocks
// over token embeddings, each block a unit that FSDPUnits names and Loss runs the hooks
// around.
type blockNet struct {
	nn.Base
	Embed  *nn.Embedding
	Blocks []*block
	Head   *nn.Linear
	hooks  nn.UnitHooks
}

type block struct {
	nn.Base
	Up, Down *nn.Linear
}

func newBlockNet(vocab, width int64, blocks int) *blockNet {
	m := &blockNet{}
	m.Embed = nn.Register(&m.Base, "embed", nn.NewEmbedding(vocab, width))
	list := nn.Register(&m.Base, "blocks", nn.NewModuleList())
	for range blocks {
		b := &block{}
		b.Up = nn.Register(&b.Base, "up", nn.NewLinear(width, 2*width))
		b.Down = nn.Register(&b.Base, "down", nn.NewLinear(2*width, width))
		list.Append(b)
		m.Blocks = append(m.Blocks, b)
	}
	m.Head = nn.Register(&m.Base, "head", nn.NewLinear(width, vocab))
	return m
}

// FSDPUnits names the units of sharded training (trainer.UnitChooser): each block.
func (m *blockNet) FSDPUnits() []string {
	var out []string
	for i := range m.Blocks {
		out = append(out, fmt.Sprintf("blocks.%d", i))
	}
	return out
}

// SetUnitHooks keeps the hooks that Loss runs around each block (nn.UnitHooker) and
// returns the blocks' paths, unit i's at i.
func (m *blockNet) SetUnitHooks(h nn.UnitHooks) []string {
	m.hooks = h
	return m.FSDPUnits()
}

// Loss is the next-token cross-entropy of ids.
func (m *blockNet) Loss(ids *torch.Tensor) *torch.Tensor {
	x := m.Embed.Forward(ids)
	for i, b := range m.Blocks {
		if m.hooks != nil {
			m.hooks.BeforeUnit(i) // gathers the block's parameters
		}
		x = x.Add(b.Down.Forward(b.Up.Forward(x).ReLU()))
		if m.hooks != nil {
			x = m.hooks.AfterUnit(i, x) // frees them, and gathers them again in backward
		}
	}
	return models.CausalLMLoss(m.Head.Forward(x), ids)
}

// fsdpMixtral is a tiny Mixtral whose loss adds the load-balancing loss of its router
// logits, which leave each layer beside its output.
func fsdpMixtral() (lossModel, error) {
	c := models.DefaultMixtralConfig()
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 97, 32, 48, 2
	c.NumAttentionHeads, c.NumKeyValueHeads, c.MaxPositionEmbeddings = 4, 2, 64
	c.NumLocalExperts, c.NumExpertsPerTok, c.InitializerRange = 4, 2, 0.1
	c.OutputRouterLogits, c.RouterAuxLossCoef = true, 0.5
	return models.NewMixtralForCausalLM(c)
}

// fsdpFamilyResult is what one rank reports of a family's run.
type fsdpFamilyResult struct {
	Weights              []float32
	TrainLoss, ValLoss   []float64
	LayerParams, Freed   int
	Counts               trainer.FSDPCounts
	HookedUnits, Layered bool
}

// fsdpFamilyRun trains f for 2 epochs on one rank of pg: sharded with its layers freed
// between steps, or under DDP (the reference: the same per-rank losses, gradients
// averaged by all-reduce, no unit hooks).
func fsdpFamilyRun(pg *distributed.ProcessGroup, f fsdpFamily, sharded bool) (res fsdpFamilyResult, err error) {
	ds, err := fsdpData()
	if err != nil {
		return res, err
	}
	tr, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: fsdpBatch / 2, Rank: pg.Rank(), WorldSize: 2})
	if err != nil {
		return res, err
	}
	va, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: 8})
	if err != nil {
		return res, err
	}
	torch.ManualSeed(seed)
	m, err := f.build()
	if err != nil {
		return res, err
	}
	defer nn.Free(m)
	if f.Recompute {
		if err := models.SetGradientCheckpointing(m.(models.CausalLM), true); err != nil {
			return res, err
		}
	}
	opt, err := optim.NewAdamW(nn.TrainableParameters(m), optim.AdamOptions{LR: 0.01, Betas: [2]float64{0.9, 0.999}, Eps: 1e-8})
	if err != nil {
		return res, err
	}
	step := func(m lossModel, b data.Batch) (*torch.Tensor, trainer.Metrics) {
		return m.Loss(b.Get(data.Input).ToDType(torch.Int64)), nil
	}
	probe := trainer.On(func(_ trainer.Event, t *trainer.Trainer) error {
		if t.GlobalStep != 1 || res.LayerParams > 0 {
			return nil
		}
		for _, p := range nn.NamedParameters(m) {
			if strings.Contains(p.Name, ".layers.") || strings.Contains(p.Name, ".h.") || strings.HasPrefix(p.Name, "blocks.") {
				res.LayerParams++
				if torch.StorageBytes(p.Tensor) == 0 {
					res.Freed++
				}
			}
		}
		return nil
	}, trainer.BatchEnd)
	opts := []trainer.Option{trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard), trainer.WithEpochs(2),
		trainer.WithSeed(seed), trainer.WithTrainStep(step), trainer.WithMonitor("val_loss", trainer.Min),
		trainer.WithCallbacks(probe)}
	var fs *trainer.FullyShardedDataParallel
	if sharded {
		fs = &trainer.FullyShardedDataParallel{Group: pg, ReshardAfterForward: true}
		// At each epoch's end, the layers freed: the Hugging Face files written a unit at
		// a time in SavePretrained's layout, and by SavePretrained from the whole model.
		dir := filepath.Join(os.Getenv("GOTRAIN_TEST_OUT"), f.Name)
		opts = append(opts, trainer.WithStrategy(fs))
		if lm, ok := m.(models.CausalLM); ok {
			export := trainer.On(func(trainer.Event, *trainer.Trainer) error {
				if err := fs.WriteSafetensorsDir(filepath.Join(dir, "stream"), "", m, models.HubLayout(m), nil, 16<<10); err != nil {
					return err
				}
				return fs.Unsharded(func() error {
					if !pg.IsMain() {
						return nil
					}
					return models.SavePretrained(filepath.Join(dir, "whole"), lm, models.SaveOptions{MaxShardSize: 16 << 10})
				})
			}, trainer.EpochEnd)
			opts = append(opts, trainer.WithCallbacks(export))
		}
	} else {
		opts = append(opts, trainer.WithDistributed(pg))
	}
	tt, err := trainer.New(m, tr, va, nil, opt, opts...)
	if err != nil {
		return res, err
	}
	if err := tt.Run(context.Background()); err != nil {
		return res, err
	}
	if fs != nil {
		res.Counts, res.HookedUnits = fs.Counts(), fs.Hooked()
	}
	res.Weights, res.TrainLoss, res.ValLoss = outcome(m, tt)
	return res, nil
}

// fsdpFamiliesChild runs every family sharded and under DDP as one rank, and writes the
// results.
func fsdpFamiliesChild() error {
	pg, err := disttest.Join(20 * time.Second)
	if err != nil {
		return err
	}
	defer pg.Close()
	out := map[string]fsdpFamilyResult{}
	for _, f := range fsdpFamilies {
		for _, sharded := range []bool{false, true} {
			r, err := fsdpFamilyRun(pg, f, sharded)
			if err != nil {
				return fmt.Errorf("%s (sharded %v): %w", f.Name, sharded, err)
			}
			out[fmt.Sprintf("%s/%v", f.Name, sharded)] = r
		}
	}
	return writeRankResult(pg, "families", out)
}

// TestFSDPReshardFamilies: a mixture of experts (Mixtral, its loss adding the routers'
// load-balancing loss, whose logits leave each layer beside its output; with and without
// gradient checkpointing), GPT-2 and a model of one's own (blockNet) train on two Gloo ranks with their layers freed
// between steps (ReshardAfterForward) to the losses and weights of the same ranks under
// DDP; each layer's gradients are reduce-scattered inside the backward pass, and the
// streamed export (models.HubLayout: Mixtral's experts one expert at a time) writes the
// files of models.SavePretrained, byte for byte.
func TestFSDPReshardFamilies(t *testing.T) {
	out, ranks := spawnRanks[map[string]fsdpFamilyResult](t, "fsdp-families", "families", 2)
	for _, f := range fsdpFamilies {
		t.Run(f.Name, func(t *testing.T) {
			ddp, got := ranks[0][f.Name+"/false"], ranks[0][f.Name+"/true"]
			assert.True(t, got.HookedUnits, "the model runs no unit hooks")
			require.Positive(t, got.LayerParams)
			assert.Equal(t, got.LayerParams, got.Freed, "the layers' parameters are not freed between steps")
			// 2 epochs of 4 steps; each step reduce-scatters layer 1 in layer 0's
			// pre-backward.
			assert.Equal(t, int64(8), got.Counts.InBackward)
			require.Len(t, got.Weights, len(ddp.Weights))
			for i := range ddp.Weights {
				require.InDelta(t, ddp.Weights[i], got.Weights[i], 1e-5, "weight %d", i)
			}
			assert.Equal(t, got.Weights, ranks[1][f.Name+"/true"].Weights, "the ranks' weights differ")
			if f.Name == "own" {
				return // no Hugging Face files
			}
			// The streamed export writes SavePretrained's files, byte for byte.
			whole, stream := testsupport.DirFiles(t, filepath.Join(out, f.Name, "whole")), testsupport.DirFiles(t, filepath.Join(out, f.Name, "stream"))
			delete(whole, models.ConfigFile)
			require.Contains(t, whole, "model.safetensors.index.json")
			require.Equal(t, slices.Sorted(mapKeys(whole)), slices.Sorted(mapKeys(stream)))
			for name, b := range whole {
				require.Equal(t, b, stream[name], name)
			}
			if strings.HasPrefix(f.Name, "mixtral") {
				assert.Contains(t, string(whole["model.safetensors.index.json"]), "model.layers.1.block_sparse_moe.experts.3.w2.weight")
			}
			require.Len(t, got.TrainLoss, 2)
			for e := range ddp.TrainLoss {
				assert.InDelta(t, ddp.TrainLoss[e], got.TrainLoss[e], 1e-5, "train loss of epoch %d", e+1)
				assert.InDelta(t, ddp.ValLoss[e], got.ValLoss[e], 1e-5, "val loss of epoch %d", e+1)
			}
		})
	}
}
