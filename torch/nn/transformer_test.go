package nn_test

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// The Python side of the attention and transformer parity: each case is a torch.nn
// module and a call of it. Masks: kpm5/kpm6 key padding (true: ignore), amask a bool
// attention mask (true: forbidden), fmask an additive float mask, causal the causal
// bool mask. Modules run in training mode with dropout 0, so no fast path hides the math.
const xformerPy = `
import sys, collections, torch, torch.nn as nn
out_path = sys.argv[1]
torch.manual_seed(0)
ins = {
    "x_sf": torch.randn(5, 3, 8), "kv_sf": torch.randn(6, 3, 8),
    "x_bf": torch.randn(3, 5, 8), "mem_bf": torch.randn(3, 6, 8),
    "kpm5": torch.arange(15).reshape(3, 5) % 4 == 3,
    "kpm6": torch.arange(18).reshape(3, 6) % 5 == 4,
    "amask": torch.arange(30).reshape(5, 6) % 3 == 0,
    "fmask": torch.randn(5, 5),
    "causal": torch.ones(5, 5, dtype=torch.bool).triu(1),
}
globals().update(ins)
cases = {
    "mha_sf": (lambda: nn.MultiheadAttention(8, 2),
               lambda m: m(x_sf, kv_sf, kv_sf, key_padding_mask=kpm6, attn_mask=amask)[0]),
    "mha_weights": (lambda: nn.MultiheadAttention(8, 2, batch_first=True),
                    lambda m: torch.cat([t.flatten() for t in m(x_bf, x_bf, x_bf, attn_mask=fmask)])),
    "mha_causal_kpm": (lambda: nn.MultiheadAttention(8, 2, batch_first=True),
                       lambda m: m(x_bf, x_bf, x_bf, key_padding_mask=kpm5, attn_mask=causal, need_weights=False, is_causal=True)[0]),
    "mha_nobias_float_kpm": (lambda: nn.MultiheadAttention(8, 2, bias=False, batch_first=True),
                             lambda m: m(x_bf, mem_bf, mem_bf, key_padding_mask=kpm6.float() * -2)[0]),
    "enc_post_relu": (lambda: nn.TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=True),
                      lambda m: m(x_bf, src_key_padding_mask=kpm5)),
    "enc_pre_gelu": (lambda: nn.TransformerEncoderLayer(8, 2, 16, 0.0, activation="gelu", norm_first=True),
                     lambda m: m(x_sf, src_mask=fmask)),
    "dec_post": (lambda: nn.TransformerDecoderLayer(8, 2, 16, 0.0, batch_first=True),
                 lambda m: m(x_bf, mem_bf, tgt_mask=causal, memory_key_padding_mask=kpm6, tgt_is_causal=True)),
    "dec_pre_gelu": (lambda: nn.TransformerDecoderLayer(8, 2, 16, 0.0, activation="gelu", norm_first=True),
                     lambda m: m(x_sf, kv_sf, tgt_mask=fmask)),
    "decoder": (lambda: nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16, 0.0), 2, norm=nn.LayerNorm(8)),
                lambda m: m(x_sf, kv_sf, tgt_mask=fmask, memory_key_padding_mask=kpm6)),
    "transformer": (lambda: nn.Transformer(8, 2, 2, 1, 16, 0.0, batch_first=True),
                    lambda m: m(x_bf, mem_bf, src_key_padding_mask=kpm5, tgt_mask=torch.ones(6, 6, dtype=torch.bool).triu(1),
                                tgt_key_padding_mask=kpm6, memory_key_padding_mask=kpm5)),
    "encoder": (lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=True), 2,
                                              norm=nn.LayerNorm(8), enable_nested_tensor=False),
                lambda m: m(x_bf, mask=causal, is_causal=True)),
}
res = {"inputs": ins}
if sys.argv[2] == "make":
    for name, (make, call) in cases.items():
        m = make()
        m.train()
        state = collections.OrderedDict((k, v.clone()) for k, v in m.state_dict().items())
        out = call(m)
        out.sin().sum().backward()
        r = {"state": state, "out": out.detach(),
             "grads": collections.OrderedDict((n, p.grad) for n, p in m.named_parameters())}
        if name.startswith("enc"):
            m.eval()
            with torch.no_grad():
                r["eval_out"] = call(m)
        res[name] = r
    torch.save(res, out_path)
else:
    got = torch.load(sys.argv[3])
    for name, (make, call) in cases.items():
        m = make()
        m.load_state_dict(got[name]["state"], strict=True)
        torch.testing.assert_close(call(m), got[name]["out"], rtol=0, atol=1e-5)
    print("ok")
`

type xformerCase struct {
	make func() nn.Module
	call func(m nn.Module, in map[string]*torch.Tensor) *torch.Tensor
}

func xformerCases() map[string]xformerCase {
	mha := func(bf, noBias bool) func() nn.Module {
		return func() nn.Module {
			return nn.NewMultiheadAttention(8, 2, nn.MultiheadAttentionConfig{BatchFirst: bf, NoBias: noBias})
		}
	}
	layer := func(c nn.TransformerLayerConfig) nn.TransformerLayerConfig { c.DimFeedforward = 16; return c }
	return map[string]xformerCase{
		"mha_sf": {mha(false, false), func(m nn.Module, i map[string]*torch.Tensor) *torch.Tensor {
			return m.(*nn.MultiheadAttention).Attend(i["x_sf"], i["kv_sf"], i["kv_sf"], nn.AttentionMasks{KeyPaddingMask: i["kpm6"], AttnMask: i["amask"]})
		}},
		"mha_weights": {mha(true, false), func(m nn.Module, i map[string]*torch.Tensor) *torch.Tensor {
			o, w := m.(*nn.MultiheadAttention).AttendWithWeights(i["x_bf"], i["x_bf"], i["x_bf"], nn.AttentionMasks{AttnMask: i["fmask"]})
			return torch.Cat([]*torch.Tensor{o.Flatten(0, -1), w.Flatten(0, -1)}, 0)
		}},
		"mha_causal_kpm": {mha(true, false), func(m nn.Module, i map[string]*torch.Tensor) *torch.Tensor {
			return m.(*nn.MultiheadAttention).Attend(i["x_bf"], i["x_bf"], i["x_bf"], nn.AttentionMasks{KeyPaddingMask: i["kpm5"], Causal: true})
		}},
		"mha_nobias_float_kpm": {mha(true, true), func(m nn.Module, i map[string]*torch.Tensor) *torch.Tensor {
			kpm := i["kpm6"].ToDType(torch.Float32).MulScalar(-2)
			return m.(*nn.MultiheadAttention).Attend(i["x_bf"], i["mem_bf"], i["mem_bf"], nn.AttentionMasks{KeyPaddingMask: kpm})
		}},
		"enc_post_relu": {func() nn.Module {
			return nn.NewTransformerEncoderLayer(8, 2, layer(nn.TransformerLayerConfig{BatchFirst: true}))
		}, func(m nn.Module, i map[string]*torch.Tensor) *torch.Tensor {
			return m.(*nn.TransformerEncoderLayer).ForwardMasked(i["x_bf"], nn.AttentionMasks{KeyPaddingMask: i["kpm5"]})
		}},
		"enc_pre_gelu": {func() nn.Module {
			return nn.NewTransformerEncoderLayer(8, 2, layer(nn.TransformerLayerConfig{Activation: "gelu", NormFirst: true}))
		}, func(m nn.Module, i map[string]*torch.Tensor) *torch.Tensor {
			return m.(*nn.TransformerEncoderLayer).ForwardMasked(i["x_sf"], nn.AttentionMasks{AttnMask: i["fmask"]})
		}},
		"dec_post": {func() nn.Module {
			return nn.NewTransformerDecoderLayer(8, 2, layer(nn.TransformerLayerConfig{BatchFirst: true}))
		}, func(m nn.Module, i map[string]*torch.Tensor) *torch.Tensor {
			return m.(*nn.TransformerDecoderLayer).Decode(i["x_bf"], i["mem_bf"], nn.AttentionMasks{Causal: true}, nn.AttentionMasks{KeyPaddingMask: i["kpm6"]})
		}},
		"dec_pre_gelu": {func() nn.Module {
			return nn.NewTransformerDecoderLayer(8, 2, layer(nn.TransformerLayerConfig{Activation: "gelu", NormFirst: true}))
		}, func(m nn.Module, i map[string]*torch.Tensor) *torch.Tensor {
			return m.(*nn.TransformerDecoderLayer).Decode(i["x_sf"], i["kv_sf"], nn.AttentionMasks{AttnMask: i["fmask"]}, nn.AttentionMasks{})
		}},
		"decoder": {func() nn.Module {
			return nn.NewTransformerDecoder(2, func() *nn.TransformerDecoderLayer {
				return nn.NewTransformerDecoderLayer(8, 2, layer(nn.TransformerLayerConfig{}))
			}, nn.NewLayerNorm([]int64{8}))
		}, func(m nn.Module, i map[string]*torch.Tensor) *torch.Tensor {
			return m.(*nn.TransformerDecoder).Decode(i["x_sf"], i["kv_sf"], nn.AttentionMasks{AttnMask: i["fmask"]}, nn.AttentionMasks{KeyPaddingMask: i["kpm6"]})
		}},
		"transformer": {func() nn.Module {
			return nn.NewTransformer(8, 2, 2, 1, nn.TransformerLayerConfig{DimFeedforward: 16, BatchFirst: true})
		}, func(m nn.Module, i map[string]*torch.Tensor) *torch.Tensor {
			return m.(*nn.Transformer).Transduce(i["x_bf"], i["mem_bf"], nn.AttentionMasks{KeyPaddingMask: i["kpm5"]},
				nn.AttentionMasks{KeyPaddingMask: i["kpm6"], Causal: true}, nn.AttentionMasks{KeyPaddingMask: i["kpm5"]})
		}},
		"encoder": {func() nn.Module {
			return nn.NewTransformerEncoder(2, func() *nn.TransformerEncoderLayer {
				return nn.NewTransformerEncoderLayer(8, 2, layer(nn.TransformerLayerConfig{BatchFirst: true}))
			}, nn.NewLayerNorm([]int64{8}))
		}, func(m nn.Module, i map[string]*torch.Tensor) *torch.Tensor {
			return m.(*nn.TransformerEncoder).ForwardMasked(i["x_bf"], nn.AttentionMasks{AttnMask: i["causal"]})
		}},
	}
}

// TestTransformerLayersMatchTorchNN is issue 14, acceptance 1 for torch.nn's layers:
// MultiheadAttention, TransformerEncoderLayer, TransformerDecoderLayer,
// TransformerEncoder, TransformerDecoder and Transformer, with and without masks, load PyTorch's state dicts strictly and
// give its outputs and gradients (within 1e-5), and PyTorch loads theirs strictly and
// gives theirs.
func TestTransformerLayersMatchTorchNN(t *testing.T) {
	dir := t.TempDir()
	refPath := filepath.Join(dir, "ref.pt")
	testpy.Run(t, xformerPy, []string{"torch"}, refPath, "make")
	ref, err := checkpoint.Read(refPath)
	require.NoError(t, err)

	mine := checkpoint.NewDict()
	var models []nn.Module
	defer func() {
		for _, m := range models {
			nn.Free(m)
		}
	}()
	torch.WithScope(func() {
		insD, err := checkpoint.GetDict(ref, "inputs")
		require.NoError(t, err)
		insV, err := torch.FromCheckpoint(insD, torch.CPU)
		require.NoError(t, err)
		in := map[string]*torch.Tensor{}
		for k, v := range insV.(*checkpoint.Dict).All() {
			in[k.(string)] = v.(*torch.Tensor)
		}
		for name, c := range xformerCases() {
			// Python's weights into Go: same outputs, same gradients.
			m := c.make()
			models = append(models, m)
			state, err := checkpoint.GetDict(ref, name, "state")
			require.NoError(t, err)
			require.NoError(t, nn.LoadStateDict(m, state, true), name)
			assert.Equal(t, keys(state), keys(nn.StateDict(m)), name+": same keys in the same order")
			out := c.call(m, in)
			out.Sin().Sum().Backward()
			assertClose(t, name+" out", getTensor(t, ref, name, "out"), out, 1e-5)
			grads, err := checkpoint.GetDict(ref, name, "grads")
			require.NoError(t, err)
			require.Equal(t, grads.Len(), len(nn.NamedParameters(m)), name)
			for _, p := range nn.NamedParameters(m) {
				assertClose(t, name+" grad "+p.Name, getTensor(t, grads, p.Name), p.Tensor.Grad(), 1e-5)
			}
			if strings.HasPrefix(name, "enc") {
				nn.SetTraining(m, false)
				torch.NoGrad(func() {
					assertClose(t, name+" eval (PyTorch's fast path)", getTensor(t, ref, name, "eval_out"), c.call(m, in), 1e-5)
				})
			}

			// Go's own weights into Python.
			g := c.make()
			models = append(models, g)
			sd, err := nn.CheckpointStateDict(g)
			require.NoError(t, err)
			var gout *torch.Tensor
			torch.NoGrad(func() { gout = c.call(g, in) })
			gct, err := torch.TensorToCheckpoint(gout)
			require.NoError(t, err)
			r := checkpoint.NewDict()
			r.Set("state", sd)
			r.Set("out", gct)
			mine.Set(name, r)
		}
		require.NoError(t, checkpoint.Write(filepath.Join(dir, "go.pt"), mine))
	})
	got := testpy.Run(t, xformerPy, []string{"torch"}, refPath, "check", filepath.Join(dir, "go.pt"))
	assert.Equal(t, "ok", strings.TrimSpace(string(got)))
}

func TestPositionEncodings(t *testing.T) {
	torch.WithScope(func() {
		s := nn.NewSinusoidalPositionEncoding(10, 6)
		defer nn.Free(s)
		assert.Empty(t, keys(nn.StateDict(s)), "the sinusoidal table is not saved")
		x := torch.Zeros([]int64{2, 4, 6}, torch.Float32, torch.CPU)
		pe := s.Forward(x).Select(0, 1).Float64s()
		// Position 3, pair 1: sin and cos of 3 / 10000^(2/6).
		a := 3 / math.Pow(10000, 2.0/6)
		assert.InDelta(t, math.Sin(a), pe[3*6+2], 1e-6)
		assert.InDelta(t, math.Cos(a), pe[3*6+3], 1e-6)

		l := nn.NewLearnedPositionEmbedding(10, 6, 0.02)
		defer nn.Free(l)
		assert.Equal(t, []string{"weight"}, keys(nn.StateDict(l)))
		y := l.Forward(x)
		assert.Equal(t, l.Weight.Narrow(0, 0, 4).Float64s(), y.Select(0, 0).Float64s())
	})
}

// tiedModel shares one tensor between an embedding and an output projection, as GPT-2's
// wte and lm_head.
type tiedModel struct {
	nn.Base
	emb  *nn.Embedding
	head *nn.Linear
}

func newTied() *tiedModel {
	m := &tiedModel{}
	m.emb = nn.Register(&m.Base, "emb", nn.NewEmbedding(7, 4))
	m.head = &nn.Linear{Weight: m.emb.Weight}
	m.head.RegisterParameter("weight", m.emb.Weight)
	nn.Register(&m.Base, "head", m.head)
	return m
}

func (m *tiedModel) Forward(x *torch.Tensor) *torch.Tensor { return m.head.Forward(m.emb.Forward(x)) }

// TestTiedWeightsSavedOnce is weight tying as PyTorch has it: one parameter, two
// state-dict keys, one storage in the file, and torch.load gives one shared tensor.
func TestTiedWeightsSavedOnce(t *testing.T) {
	m := newTied()
	defer nn.Free(m)
	assert.Len(t, nn.NamedParameters(m), 1, "a shared parameter is listed once")
	sd, err := nn.CheckpointStateDict(m)
	require.NoError(t, err)
	assert.Equal(t, []string{"emb.weight", "head.weight"}, keys(sd))
	path := filepath.Join(t.TempDir(), "tied.pt")
	require.NoError(t, checkpoint.Write(path, sd))
	got := testpy.Run(t, `
import sys, torch
sd = torch.load(sys.argv[1])
a, b = sd["emb.weight"], sd["head.weight"]
print(a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr(), a.untyped_storage().nbytes())
`, []string{"torch"}, path)
	assert.Equal(t, "True 112", strings.TrimSpace(string(got)), "one 7×4 float32 storage")
	torch.WithScope(func() {
		x := torch.FromSlice([]int64{1, 5})
		m.Forward(x).Sum().Backward()
		assert.NotNil(t, m.emb.Weight.Grad(), "both uses reach the one tensor's gradient")
	})
}
