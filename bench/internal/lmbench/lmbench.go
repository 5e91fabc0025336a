// Package lmbench holds what the language-model benchmark programs, bench/gpt,
// bench/llm and bench/fsdp, share: the flags that shape a run (its training batches and
// steps, the tokens it generates and libtorch's thread count) and a Llama's size.
package lmbench

import (
	"flag"

	"github.com/gotrain/gotrain/torch/nn/models"
)

// Shape is a Llama-shaped decoder's size, as bench/llm's spec.json and bench.py name it.
type Shape struct {
	Vocab        int `json:"vocab"`
	Hidden       int `json:"hidden"`
	Intermediate int `json:"intermediate"`
	Layers       int `json:"layers"`
	Heads        int `json:"heads"`
	KVHeads      int `json:"kv_heads"`
}

// Flags registers s's fields on fs as -vocab, -hidden, -intermediate, -layers, -heads
// and -kv-heads, with s's values as their defaults.
func (s *Shape) Flags(fs *flag.FlagSet) {
	fs.IntVar(&s.Vocab, "vocab", s.Vocab, "vocab_size")
	fs.IntVar(&s.Hidden, "hidden", s.Hidden, "hidden_size")
	fs.IntVar(&s.Intermediate, "intermediate", s.Intermediate, "intermediate_size")
	fs.IntVar(&s.Layers, "layers", s.Layers, "num_hidden_layers")
	fs.IntVar(&s.Heads, "heads", s.Heads, "num_attention_heads")
	fs.IntVar(&s.KVHeads, "kv-heads", s.KVHeads, "num_key_value_heads")
}

// Llama returns transformers' LlamaConfig defaults with s's sizes and maxPositions
// positions.
func (s Shape) Llama(maxPositions int) models.LlamaConfig {
	c := models.DefaultLlamaConfig()
	c.VocabSize, c.HiddenSize, c.IntermediateSize = int64(s.Vocab), int64(s.Hidden), int64(s.Intermediate)
	c.NumHiddenLayers, c.NumAttentionHeads, c.NumKeyValueHeads = int64(s.Layers), int64(s.Heads), int64(s.KVHeads)
	c.MaxPositionEmbeddings = int64(maxPositions)
	return c
}

// Run is the shape of a language-model benchmark run.
type Run struct {
	Batch     int // sequences per training step
	Seq       int // tokens per sequence
	Warmup    int // untimed training steps first
	Steps     int // timed training steps
	NewTokens int // tokens to generate
	Threads   int // libtorch intra-op threads
}

// Flags registers r's fields on fs as -batch, -seq, -warmup, -steps, -new and -threads,
// with r's values as their defaults.
func (r *Run) Flags(fs *flag.FlagSet) {
	fs.IntVar(&r.Batch, "batch", r.Batch, "sequences per training step")
	fs.IntVar(&r.Seq, "seq", r.Seq, "tokens per sequence")
	fs.IntVar(&r.Warmup, "warmup", r.Warmup, "untimed training steps first")
	fs.IntVar(&r.Steps, "steps", r.Steps, "timed training steps")
	fs.IntVar(&r.NewTokens, "new", r.NewTokens, "tokens to generate")
	fs.IntVar(&r.Threads, "threads", r.Threads, "libtorch intra-op threads")
}
