package serve

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"sync"
)

// Metrics are the server's counters in Prometheus' text format (version 0.0.4), as
// /metrics serves them. Written here rather than with client_golang: its v1.25 needs
// Go 1.26 and a newer golang.org/x/text, which the module would have to move to.
type Metrics struct {
	mu         sync.Mutex
	requests   map[string]float64 // by HTTP status
	prompt     float64
	generated  float64
	ttft, tpot histogram
	// gauges read from the engine at each scrape
	engine *Engine
}

func newMetrics() *Metrics {
	return &Metrics{
		requests: map[string]float64{},
		ttft:     newHistogram([]float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
		tpot:     newHistogram([]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}),
	}
}

type histogram struct {
	bounds []float64
	counts []float64 // per bound, not cumulative; the last is +Inf
	sum    float64
}

func newHistogram(bounds []float64) histogram {
	return histogram{bounds: bounds, counts: make([]float64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	h.counts[sort.SearchFloat64s(h.bounds, v)]++
	h.sum += v
}

func (h *histogram) write(w io.Writer, name string) {
	var cum float64
	for i, b := range h.bounds {
		cum += h.counts[i]
		fmt.Fprintf(w, "%s_bucket{le=\"%s\"} %s\n", name, num(b), num(cum))
	}
	cum += h.counts[len(h.bounds)]
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %s\n%s_sum %s\n%s_count %s\n", name, num(cum), name, num(h.sum), name, num(cum))
}

func num(v float64) string {
	if math.IsInf(v, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// request counts a finished HTTP request by its status.
func (m *Metrics) request(status int) {
	m.mu.Lock()
	m.requests[strconv.Itoa(status)]++
	m.mu.Unlock()
}

// tokens counts a finished generation's tokens.
func (m *Metrics) tokens(prompt, generated int) {
	m.mu.Lock()
	m.prompt += float64(prompt)
	m.generated += float64(generated)
	m.mu.Unlock()
}

func (m *Metrics) firstToken(seconds float64) {
	m.mu.Lock()
	m.ttft.observe(seconds)
	m.mu.Unlock()
}

func (m *Metrics) nextToken(seconds float64) {
	m.mu.Lock()
	m.tpot.observe(seconds)
	m.mu.Unlock()
}

// ServeHTTP writes the metrics.
func (m *Metrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	m.Write(w)
}

// Write writes the metrics in Prometheus' text format.
func (m *Metrics) Write(w io.Writer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fmt.Fprintln(w, "# HELP gotrain_serve_requests_total HTTP requests answered, by status code.")
	fmt.Fprintln(w, "# TYPE gotrain_serve_requests_total counter")
	codes := make([]string, 0, len(m.requests))
	for c := range m.requests {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	for _, c := range codes {
		fmt.Fprintf(w, "gotrain_serve_requests_total{code=%q} %s\n", c, num(m.requests[c]))
	}
	fmt.Fprintf(w, "# HELP gotrain_serve_prompt_tokens_total Prompt tokens of finished requests.\n# TYPE gotrain_serve_prompt_tokens_total counter\ngotrain_serve_prompt_tokens_total %s\n", num(m.prompt))
	fmt.Fprintf(w, "# HELP gotrain_serve_generated_tokens_total Tokens generated.\n# TYPE gotrain_serve_generated_tokens_total counter\ngotrain_serve_generated_tokens_total %s\n", num(m.generated))
	if e := m.engine; e != nil {
		s := e.Stats()
		gauge := func(name, help string, v float64) {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %s\n", name, help, name, name, num(v))
		}
		gauge("gotrain_serve_queue_depth", "Requests waiting to start.", float64(s.Waiting))
		gauge("gotrain_serve_running", "Sequences in the running batch.", float64(s.Running))
		gauge("gotrain_serve_kv_blocks_used", "KV pool blocks held by sequences.", float64(s.KVBlocksUsed))
		gauge("gotrain_serve_kv_blocks_total", "KV pool blocks.", float64(s.KVBlocks))
		gauge("gotrain_serve_kv_bytes", "Bytes of the KV pool's tensors.", float64(s.KVBytes))
		fmt.Fprintf(w, "# HELP gotrain_serve_steps_total Engine steps (one decode step of the batch each).\n# TYPE gotrain_serve_steps_total counter\ngotrain_serve_steps_total %d\n", s.Steps)
	}
	fmt.Fprintln(w, "# HELP gotrain_serve_time_to_first_token_seconds From a request's arrival to its first token.")
	fmt.Fprintln(w, "# TYPE gotrain_serve_time_to_first_token_seconds histogram")
	m.ttft.write(w, "gotrain_serve_time_to_first_token_seconds")
	fmt.Fprintln(w, "# HELP gotrain_serve_time_per_output_token_seconds Between a sequence's tokens.")
	fmt.Fprintln(w, "# TYPE gotrain_serve_time_per_output_token_seconds histogram")
	m.tpot.write(w, "gotrain_serve_time_per_output_token_seconds")
}
