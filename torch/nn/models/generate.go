package models

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// GenerateOptions control Generate, with the meanings of transformers' generate(). The
// zero value (besides MaxNewTokens) is greedy decoding with the KV cache that stops at
// the model's end-of-sequence tokens.
type GenerateOptions struct {
	MaxNewTokens int // how many tokens to add at most (required)
	// Sample draws each token from the distribution instead of taking the most likely
	// (do_sample=True), after Temperature, TopK and TopP are applied in that order.
	Sample      bool
	Temperature float64 // divides the logits; 0 means 1
	TopK        int     // keep the k most likely tokens; 0 keeps all
	TopP        float64 // keep the smallest set whose probability reaches p; 0 or 1 keeps all
	// RepetitionPenalty (> 1) makes the tokens a sequence already holds less likely, as
	// transformers' repetition_penalty: their logits are divided by it when positive and
	// multiplied when negative. 0 or 1: none.
	RepetitionPenalty float64
	// StopTokens end a sequence after one of them is produced (it is included). nil: the
	// model's EOS tokens (DecoderConfig); IgnoreEOS with nil StopTokens never stops early.
	StopTokens []int64
	IgnoreEOS  bool
	// StopStrings end a sequence as soon as its generated text contains one of them
	// (the token that completes it is included); they need Decode, which maps token ids
	// to text (the model's tokenizer).
	StopStrings []string
	Decode      func(ids []int64) string
	// PadTokenID fills the left padding of shorter prompts in a batch and the tail of
	// sequences that have stopped; the attention mask hides the padding, so its value
	// does not change the result. Default 0.
	PadTokenID int64
	// Stream, when set, is called with each new token of each sequence as soon as it is
	// chosen (row is the prompt's index).
	Stream func(row int, token int64)
	// NoCache recomputes every position at every step instead of using the KV cache (for
	// checking the cache; same tokens, more work).
	NoCache bool
	// Seed, when non-nil, seeds torch's generator before the first draw, so the same
	// options give the same tokens.
	Seed *int64
}

// Generate continues each prompt (token ids, at least one each) with m and returns the
// new tokens of each: up to MaxNewTokens, ending early at a stop token or stop string
// (included). Prompts of different lengths are left-padded and masked, as transformers
// does for a batch, so each row gets the tokens it would get alone. The KV cache is
// allocated once for the longest prompt plus MaxNewTokens; a model that is a
// CacheInvalidator (Phi-3) has it emptied and every position recomputed where it says. Sequences longer than the
// model's context are an error. The model should be in evaluation mode; gradients are
// not recorded.
func Generate(m CausalLM, prompts [][]int64, o GenerateOptions) (out [][]int64, err error) {
	defer torch.Recover(&err, "generate")
	cfg := m.DecoderConfig()
	if len(prompts) == 0 {
		return nil, errors.New("models: Generate: no prompt")
	}
	longest := 0
	for i, p := range prompts {
		if len(p) == 0 {
			return nil, fmt.Errorf("models: Generate: prompt %d is empty", i)
		}
		for _, id := range p {
			if id < 0 || id >= cfg.VocabSize {
				return nil, fmt.Errorf("models: Generate: prompt %d has token id %d outside the vocabulary of %d", i, id, cfg.VocabSize)
			}
		}
		longest = max(longest, len(p))
	}
	if o.MaxNewTokens < 0 {
		return nil, fmt.Errorf("models: Generate: MaxNewTokens %d is negative", o.MaxNewTokens)
	}
	if cfg.MaxPositions > 0 && int64(longest)+int64(o.MaxNewTokens) > cfg.MaxPositions {
		return nil, fmt.Errorf("models: Generate: a prompt of %d tokens plus %d new tokens exceeds the model's context of %d positions",
			longest, o.MaxNewTokens, cfg.MaxPositions)
	}
	if len(o.StopStrings) > 0 && o.Decode == nil {
		return nil, errors.New("models: Generate: StopStrings need Decode (the tokenizer's)")
	}
	stops := o.StopTokens
	if stops == nil && !o.IgnoreEOS {
		stops = cfg.EOS
	}
	if o.Seed != nil {
		torch.ManualSeed(*o.Seed)
	}
	g := newGeneration(prompts, longest, o.PadTokenID)
	dev := torch.CPU
	if ps := nn.Parameters(m); len(ps) > 0 {
		dev = ps[0].Device()
	}
	out = make([][]int64, len(prompts))
	done := make([]bool, len(prompts))
	torch.NoGrad(func() {
		var cache *KVCache
		if !o.NoCache {
			cache = NewKVCache(int64(longest + o.MaxNewTokens))
			defer cache.Free()
		}
		for step := 0; step < o.MaxNewTokens && slices.Contains(done, false); step++ {
			var toks []int64
			torch.WithScope(func() {
				from := 0
				if cache != nil && step > 0 {
					from = g.len() - 1
					if inv, ok := m.(CacheInvalidator); ok && inv.InvalidatesCache(cache.Len(), int64(g.len())) {
						cache.reset()
						from = 0
					}
				}
				last := lastLogits(m, g.input(from, cache, dev))
				if last.IsNaN().Any().Item() != 0 {
					// Argmax and sampling would pick a token from garbage without a word.
					err = fmt.Errorf("models: Generate: the model's logits are NaN at new token %d (NaN or infinite weights, or an activation that overflowed its dtype)", step+1)
					return
				}
				if o.RepetitionPenalty > 0 && o.RepetitionPenalty != 1 {
					last = g.penalize(last, o.RepetitionPenalty)
				}
				toks = pickTokens(last, o)
			})
			if err != nil {
				return
			}
			for i, tok := range toks {
				if done[i] {
					toks[i] = o.PadTokenID
					continue
				}
				out[i] = append(out[i], tok)
				g.real[i] = append(g.real[i], tok)
				if o.Stream != nil {
					o.Stream(i, tok)
				}
				done[i] = slices.Contains(stops, tok) || stopString(out[i], o)
			}
			g.append(toks)
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// CacheInvalidator is a CausalLM whose cached keys and values stop being valid at some
// point of a generation, so that Generate must drop the cache and recompute every
// position once, as transformers' prepare_inputs_for_generation does for Phi-3 when a
// sequence passes LongRoPE's original context (Phi3ForCausalLM).
type CacheInvalidator interface {
	// InvalidatesCache reports whether the next forward, over a sequence of length
	// tokens (padding included) of which the cache holds cached, must start afresh.
	InvalidatesCache(cached, length int64) bool
}

// lastLogits returns the logits [B, vocab] of in's last position. A model that gives
// its hidden states and its output head (every decoder of this package) applies the
// head to the last position only: a prompt of T tokens then costs one row of logits,
// not T (a full 8k-token context of a 49k vocabulary would be 1.6 GB in float32).
func lastLogits(m CausalLM, in DecoderInput) *torch.Tensor {
	if hm, ok := m.(headed); ok {
		h := hm.HiddenStates(in)
		return hm.OutputHead().Logits(h.Select(1, h.Size(1)-1))
	}
	logits := m.Forward(in)
	return logits.Select(1, logits.Size(1)-1)
}

// stopString reports whether the text of ids ends a sequence.
func stopString(ids []int64, o GenerateOptions) bool {
	if len(o.StopStrings) == 0 {
		return false
	}
	text := o.Decode(ids)
	for _, s := range o.StopStrings {
		if s != "" && strings.Contains(text, s) {
			return true
		}
	}
	return false
}

// generation holds the batch's token rows, left-padded to one length, and their mask.
type generation struct {
	ids, mask [][]int64
	padded    bool
	real      [][]int64 // each row's own tokens, for the repetition penalty
}

func newGeneration(prompts [][]int64, longest int, pad int64) *generation {
	g := &generation{}
	for _, p := range prompts {
		n := longest - len(p)
		ids := append(slices.Repeat([]int64{pad}, n), p...)
		mask := append(make([]int64, n), slices.Repeat([]int64{1}, len(p))...)
		g.ids, g.mask = append(g.ids, ids), append(g.mask, mask)
		g.real = append(g.real, slices.Clone(p))
		g.padded = g.padded || n > 0
	}
	return g
}

func (g *generation) len() int { return len(g.ids[0]) }

// append adds one token to every row; a stopped row's token is padding that stays
// visible to that row alone, as in transformers.
func (g *generation) append(toks []int64) {
	for i, tok := range toks {
		g.ids[i] = append(g.ids[i], tok)
		g.mask[i] = append(g.mask[i], 1)
	}
}

// input returns the forward's input for positions from..len of every row: with left
// padding, the mask of every position so far and positions that count real tokens only
// (transformers' cumsum(mask) - 1).
func (g *generation) input(from int, cache *KVCache, dev torch.Device) DecoderInput {
	b, n := int64(len(g.ids)), int64(g.len())
	flat := func(rows [][]int64, from int) *torch.Tensor {
		v := make([]int64, 0, int(b)*(len(rows[0])-from))
		for _, r := range rows {
			v = append(v, r[from:]...)
		}
		t := torch.FromSlice(v, b, int64(len(rows[0])-from))
		if dev != torch.CPU {
			t = t.To(dev, false)
		}
		return t
	}
	in := DecoderInput{InputIDs: flat(g.ids, from), Cache: cache}
	if !g.padded {
		return in
	}
	in.AttentionMask = flat(g.mask, 0)
	pos := make([][]int64, b)
	for i, m := range g.mask {
		pos[i] = make([]int64, n)
		var c int64
		for j, v := range m {
			c += v
			pos[i][j] = max(c-1, 0)
			if v == 0 {
				pos[i][j] = 1
			}
		}
	}
	in.PositionIDs = flat(pos, from)
	return in
}

// penalize applies the repetition penalty to logits [B, V] at each row's tokens.
func (g *generation) penalize(logits *torch.Tensor, penalty float64) *torch.Tensor {
	b := int64(len(g.real))
	longest := 0
	for _, r := range g.real {
		longest = max(longest, len(r))
	}
	idx := make([]int64, 0, int(b)*longest)
	for _, r := range g.real {
		// Repeating a row's first token fills it out; scatter writes the same value twice.
		idx = append(idx, r...)
		idx = append(idx, slices.Repeat(r[:1], longest-len(r))...)
	}
	at := torch.FromSlice(idx, b, int64(longest))
	if logits.Device() != torch.CPU {
		at = at.To(logits.Device(), false)
	}
	x := logits.ToDType(torch.Float32)
	score := x.Gather(1, at)
	score = torch.Where(score.LtScalar(0), score.MulScalar(penalty), score.DivScalar(penalty))
	return x.Scatter(1, at, score)
}

// pickTokens chooses the next token of each row from logits [B, V].
func pickTokens(logits *torch.Tensor, o GenerateOptions) []int64 {
	if !o.Sample {
		return logits.Argmax(-1, false).Int64s()
	}
	return SampleLogits(logits, o.Temperature, o.TopK, o.TopP).Int64s()
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
