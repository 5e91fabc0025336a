package models

import (
	"fmt"
	"math"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// DecoderInput is what a decoder's forward takes, with the names and meanings of
// transformers' forward(input_ids, attention_mask, position_ids, past_key_values).
type DecoderInput struct {
	// InputIDs are the token ids, int64 [B, T].
	InputIDs *torch.Tensor
	// AttentionMask marks the real tokens (1) and the padding (0) of every position the
	// queries may see, cached ones included: [B, past+T]. nil: no padding.
	AttentionMask *torch.Tensor
	// PositionIDs are the tokens' positions, int64 [B, T]. nil: past, past+1, ...,
	// the same for every row (right padding or none). Without a cache, a row whose
	// positions do not go up by one holds packed sequences: a new one starts wherever
	// they do not (position 0 of the next document), and attention stays within each
	// (Documents), as transformers detects packed sequences from position_ids — which it
	// does only without an attention mask; here a padding mask applies as well.
	PositionIDs *torch.Tensor
	// Cache holds the keys and values of earlier positions and receives these ones.
	// nil: no cache (training).
	Cache *KVCache
}

// DecoderConfig is what the code around a decoder (Generate, the KV cache, the loss)
// needs to know of it.
type DecoderConfig struct {
	VocabSize int64
	// MaxPositions is the longest sequence the model takes (GPT-2's n_positions,
	// max_position_embeddings); 0: no limit.
	MaxPositions int64
	// EOS are the token ids that end a generated sequence (config.json's
	// eos_token_id, one id or a list); BOS is bos_token_id, -1 when there is none.
	EOS []int64
	BOS int64
}

// CausalLM is a decoder-only language model — transformers' *ForCausalLM — over which
// Generate, the language-model steps and the Hugging Face loaders work, whatever its
// architecture.
type CausalLM interface {
	nn.Module
	// Forward returns the logits [B, T, vocab] of in's tokens: the logits at t score
	// the token at t+1. With in.Cache it attends to the cached positions too and
	// appends this call's keys and values to the cache.
	Forward(in DecoderInput) *torch.Tensor
	// DecoderConfig returns the model's sizes and special tokens.
	DecoderConfig() DecoderConfig
}

// KVCache holds, per layer, the keys and values of the positions a decoder has seen,
// so that each new token costs one position of work. Its buffers are allocated once, at
// the first Update of each layer, for MaxLen positions ([B, heads, MaxLen, head_dim]),
// and every later position is written into them in place: generating a token copies
// that token's keys and values, not the whole cache. Free releases the buffers.
type KVCache struct {
	// MaxLen is the number of positions the buffers hold.
	MaxLen       int64
	keys, values []*torch.Tensor
	n            int64 // the positions every layer has been given
	pending      int64 // the positions of the current forward, until Advance
	store        KVStore
}

// NewKVCache returns an empty cache for at most maxLen positions.
func NewKVCache(maxLen int64) *KVCache { return &KVCache{MaxLen: maxLen} }

// KVStore keeps keys and values outside a KVCache's own buffers: a serving engine's
// pool, shared by many sequences of different lengths, where each row of a batch is
// one of them (package serve).
type KVStore interface {
	// Update stores layer's keys and values k, v [B, H, T, D] of this forward and
	// returns the keys and values the queries attend to, [B, H, past+T, D] (past as
	// NewKVCacheOver was given it; the DecoderInput's AttentionMask hides what a row
	// does not have).
	Update(layer int, k, v *torch.Tensor) (keys, values *torch.Tensor)
}

// NewKVCacheOver returns a cache for one forward whose keys and values are store's:
// Len is past, and Update is store's.
func NewKVCacheOver(store KVStore, past int64) *KVCache {
	return &KVCache{MaxLen: math.MaxInt64, n: past, store: store}
}

// Len returns the number of cached positions (0 for a nil cache).
func (c *KVCache) Len() int64 {
	if c == nil {
		return 0
	}
	return c.n
}

// Update writes layer's keys and values k, v [B, H, T, D] after the cached positions
// and returns views of all of them, [B, H, Len()+T, D]. A model calls it once per layer
// in each forward and then Advance(T) once.
func (c *KVCache) Update(layer int, k, v *torch.Tensor) (keys, values *torch.Tensor) {
	t := k.Size(2)
	if c.store != nil {
		c.pending = t
		return c.store.Update(layer, k, v)
	}
	if c.n+t > c.MaxLen {
		panic(&torch.Error{Op: "KVCache.Update", Msg: fmt.Sprintf("the cache holds %d positions; %d asked", c.MaxLen, c.n+t)})
	}
	for len(c.keys) <= layer {
		c.keys, c.values = append(c.keys, nil), append(c.values, nil)
	}
	if c.keys[layer] == nil {
		shape := k.Shape()
		shape[2] = c.MaxLen
		c.keys[layer] = torch.Zeros(shape, k.DType(), k.Device()).Escape()
		c.values[layer] = torch.Zeros(shape, v.DType(), v.Device()).Escape()
	}
	torch.NoGrad(func() {
		c.keys[layer].Narrow(2, c.n, t).CopyFrom(k, false)
		c.values[layer].Narrow(2, c.n, t).CopyFrom(v, false)
	})
	c.pending = t
	return c.keys[layer].Narrow(2, 0, c.n+t), c.values[layer].Narrow(2, 0, c.n+t)
}

// Advance records that the current forward's t positions are cached in every layer.
func (c *KVCache) Advance(t int64) {
	if c != nil {
		c.n += t
		c.pending = 0
	}
}

// reset empties the cache, keeping its buffers.
func (c *KVCache) reset() { c.n, c.pending = 0, 0 }

// Free releases the cache's buffers and empties it.
func (c *KVCache) Free() {
	for i := range c.keys {
		if c.keys[i] != nil {
			c.keys[i].Free()
			c.values[i].Free()
		}
	}
	c.keys, c.values, c.n, c.pending = nil, nil, 0, 0
}

// Positions returns in's position ids, [B, T] or [1, T]: in.PositionIDs when given,
// otherwise past, past+1, ... for every row.
func (in DecoderInput) Positions() *torch.Tensor {
	if in.PositionIDs != nil {
		return in.PositionIDs
	}
	t := in.InputIDs.Size(1)
	past := in.Cache.Len()
	return torch.Arange(float64(past), float64(past+t), 1, torch.Int64, in.InputIDs.Device()).Unsqueeze(0)
}

// SDPAMask returns the boolean mask [B, 1, T, past+T] that
// torch.ScaledDotProductAttention takes for in (true: attend), and whether attention is
// plainly causal instead (mask nil, causal true) or unmasked (mask nil, causal false: a
// single new token after the cache). Queries see the cached positions and the new ones
// up to their own, except padding; a padding query sees itself, so that its row is never
// empty and no NaN reaches the real tokens through it (transformers unmasks such rows for
// the same reason). Packed sequences (Documents) see only their own sequence: the mask is
// block-diagonal.
func (in DecoderInput) SDPAMask() (mask *torch.Tensor, causal bool) {
	t := in.InputIDs.Size(1)
	past := in.Cache.Len()
	docs := in.Documents()
	if docs == nil && in.AttentionMask == nil {
		switch {
		case past == 0:
			return nil, true
		case t == 1:
			return nil, false
		}
	}
	return in.restrictMask(torch.Ones([]int64{t, past + t}, torch.Bool, in.InputIDs.Device()).Tril(past), docs), false
}

// Documents returns, for a forward without a cache and with PositionIDs, the index of
// each token's sequence in its row, int64 [B, T]: a new sequence starts wherever the
// position is not the previous one plus one, as transformers'
// find_packed_sequence_indices computes it. It returns nil otherwise, and the masks are
// then those of one sequence per row.
func (in DecoderInput) Documents() *torch.Tensor {
	if in.PositionIDs == nil || in.Cache != nil {
		return nil
	}
	pos := in.PositionIDs
	if b := in.InputIDs.Size(0); pos.Size(0) != b {
		pos = pos.Expand(b, pos.Size(1))
	}
	t := pos.Size(1)
	prev := torch.Cat([]*torch.Tensor{pos.Narrow(1, 0, 1).SubScalar(1), pos.Narrow(1, 0, t-1)}, 1)
	return pos.Sub(prev).NeScalar(1).Cumsum(1)
}

// restrictMask returns allowed [T, S] (S = past+T; causal, or a sliding window's band)
// restricted to the keys of each query's own sequence (docs, from Documents; nil: one
// sequence per row) and, with an AttentionMask, to real tokens, a query always seeing
// itself (SDPAMask): [B, 1, T, S], or allowed itself without packing or padding.
func (in DecoderInput) restrictMask(allowed, docs *torch.Tensor) *torch.Tensor {
	if docs != nil {
		allowed = docs.Unsqueeze(2).Eq(docs.Unsqueeze(1)).LogicalAnd(allowed).Unsqueeze(1) // [B, 1, T, T]
	}
	if in.AttentionMask == nil {
		return allowed
	}
	t, s := in.InputIDs.Size(1), allowed.Size(-1)
	keep := in.AttentionMask.ToDType(torch.Bool).Unsqueeze(1).Unsqueeze(1)   // [B, 1, 1, S]
	self := torch.Eye(s, torch.Bool, in.InputIDs.Device()).Narrow(0, s-t, t) // [T, S]
	return allowed.LogicalAnd(keep).LogicalOr(self)
}

// GradientCheckpointer is a module whose layers can recompute their activations in
// the backward pass instead of keeping them (transformers'
// gradient_checkpointing_enable), trading time for memory; gradients are unchanged.
// The decoder bodies (DecoderModel, GPT2Model) are.
type GradientCheckpointer interface {
	SetGradientCheckpointing(on bool)
}

// SetGradientCheckpointing switches activation checkpointing on or off in every
// submodule of m that has it, or says that m's architecture has none.
func SetGradientCheckpointing(m CausalLM, on bool) error {
	found := false
	for _, nm := range nn.NamedModules(m) {
		if g, ok := nm.Module.(GradientCheckpointer); ok {
			g.SetGradientCheckpointing(on)
			found = true
		}
	}
	if !found {
		return fmt.Errorf("models: %T has no gradient checkpointing", m)
	}
	return nil
}
