// Package lmbench holds what the language-model benchmark programs, bench/gpt and
// bench/llm, share: the flags that shape a run (its training batches and steps, the
// tokens it generates and libtorch's thread count).
package lmbench

import "flag"

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
