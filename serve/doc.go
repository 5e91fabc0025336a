// Package serve serves a gotrain model with OpenAI's API: an Engine that runs many
// requests at once with continuous batching over a preallocated, block-paged KV pool,
// with LoRA adapters on one base model applied per row of the batch, and a Handler (an
// http.Handler a Go service mounts) for /v1/chat/completions, /v1/completions,
// /v1/models, /health and /metrics. cmd/serve runs it; docs/serving.md describes it.
//
// Greedy results: a request alone gets the tokens models.Generate (and transformers)
// gets; in a batch it gets the same tokens except where a step is a near-tie, because
// float32 kernels over a batch round differently from those over one row (they are not
// batch-invariant).
package serve
