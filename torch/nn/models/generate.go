package models

import (
	"errors"
	"math"

	"github.com/gotrain/gotrain/torch"
)

// GenerateOptions control GPT2LMHeadModel.Generate, with the meanings of transformers'
// generate(). The zero value (besides MaxNewTokens) is greedy decoding with the KV
// cache and no end-of-sequence token.
type GenerateOptions struct {
	MaxNewTokens int // how many tokens to add at most (required)
	// Sample draws each token from the distribution instead of taking the most likely
	// (do_sample=True), after Temperature, TopK and TopP are applied in that order.
	Sample      bool
	Temperature float64 // divides the logits; 0 means 1
	TopK        int     // keep the k most likely tokens; 0 keeps all
	TopP        float64 // keep the smallest set whose probability reaches p; 0 or 1 keeps all
	// EOS stops generation after this token is produced; nil never stops early.
	EOS *int64
	// NoCache recomputes every position at every step instead of using the KV cache (for
	// checking the cache; same tokens, more work).
	NoCache bool
	// Seed, when non-nil, seeds torch's generator before the first draw, so the same
	// options give the same tokens.
	Seed *int64
}

// Generate continues prompt (token ids, at least one) and returns the new tokens: up to
// MaxNewTokens, ending early with EOS (included) when it is set. Positions past the
// model's n_positions are an error. The model should be in evaluation mode; gradients are
// not recorded.
func (m *GPT2LMHeadModel) Generate(prompt []int64, o GenerateOptions) (out []int64, err error) {
	defer torch.Recover(&err, "generate")
	if len(prompt) == 0 {
		return nil, errors.New("models: Generate: empty prompt")
	}
	if int64(len(prompt)+o.MaxNewTokens) > m.Config.NPositions {
		return nil, errors.New("models: Generate: prompt plus new tokens exceed n_positions")
	}
	if o.Seed != nil {
		torch.ManualSeed(*o.Seed)
	}
	dev := m.Transformer.Wte.Weight.Device()
	torch.NoGrad(func() {
		cache := &KVCache{}
		defer cache.Free()
		seq := append([]int64{}, prompt...)
		next := prompt
		for len(out) < o.MaxNewTokens {
			var tok int64
			torch.WithScope(func() {
				onDev := func(ids []int64) *torch.Tensor {
					t := torch.FromSlice(ids, 1, int64(len(ids)))
					if dev != torch.CPU {
						t = t.To(dev, false)
					}
					return t
				}
				var logits *torch.Tensor
				if o.NoCache {
					logits = m.Forward(onDev(seq))
				} else {
					// The cache outlives the step; this step's other tensors, and the
					// cache it replaces, do not.
					old := cache.Tensors()
					logits = m.ForwardCached(onDev(next), cache)
					for _, t := range cache.Tensors() {
						t.Escape()
					}
					for _, t := range old {
						t.Free()
					}
				}
				last := logits.Select(1, logits.Size(1)-1)
				tok = pickToken(last, o)
			})
			out = append(out, tok)
			seq = append(seq, tok)
			next = []int64{tok}
			if o.EOS != nil && tok == *o.EOS {
				break
			}
		}
	})
	return out, nil
}

// pickToken chooses the next token from logits [1, V].
func pickToken(logits *torch.Tensor, o GenerateOptions) int64 {
	if !o.Sample {
		return logits.Argmax(-1, false).Int64s()[0]
	}
	return SampleLogits(logits, o.Temperature, o.TopK, o.TopP).Int64s()[0]
}

// SampleLogits draws one token per row of logits [B, V] with torch's generator after
// temperature scaling, top-k and top-p (nucleus) filtering, as transformers'
// TemperatureLogitsWarper, TopKLogitsWarper and TopPLogitsWarper do; it returns [B].
func SampleLogits(logits *torch.Tensor, temperature float64, topK int, topP float64) *torch.Tensor {
	x := logits.ToDType(torch.Float32)
	if temperature > 0 && temperature != 1 {
		x = x.DivScalar(temperature)
	}
	if v := x.Size(-1); topK > 0 && int64(topK) < v {
		kth, _ := x.TopK(int64(topK), -1, true, true)
		x = x.MaskedFill(x.Lt(kth.Narrow(-1, int64(topK)-1, 1)), math.Inf(-1))
	}
	if topP > 0 && topP < 1 {
		sorted, idx := x.Sort(-1, false, true)
		cum := sorted.Softmax(-1).Cumsum(-1)
		// Ascending order: drop the tokens whose cumulative mass stays within 1-p, always
		// keeping the most likely one.
		drop := cum.LeScalar(1 - topP)
		last := drop.Size(-1) - 1
		drop = torch.Cat([]*torch.Tensor{drop.Narrow(-1, 0, last), torch.Zeros([]int64{drop.Size(0), 1}, torch.Bool, drop.Device())}, -1)
		x = x.MaskedFill(drop.Scatter(-1, idx, drop), math.Inf(-1))
	}
	return x.Softmax(-1).Multinomial(1, false).SqueezeDim(-1)
}
