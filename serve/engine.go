package serve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gotrain/gotrain/internal/lmdir"
	"github.com/gotrain/gotrain/tokenizer"
	"github.com/gotrain/gotrain/tokenizer/chat"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/lora"
	"github.com/gotrain/gotrain/torch/nn/models"
)

// The errors Submit returns (wrapped, with details); the handler turns them into
// OpenAI's status codes.
var (
	// ErrBadRequest: a value the engine cannot take (400).
	ErrBadRequest = errors.New("bad request")
	// ErrContextLength: the prompt, or the prompt plus max_tokens, is longer than the
	// model's context or than the KV pool can ever hold (400 context_length_exceeded).
	ErrContextLength = errors.New("context length exceeded")
	// ErrUnknownModel: the request names no model or adapter the engine serves (404).
	ErrUnknownModel = errors.New("unknown model")
	// ErrQueueFull: MaxQueue requests wait already (429).
	ErrQueueFull = errors.New("the queue is full")
	// ErrShuttingDown: the engine takes no new requests (503).
	ErrShuttingDown = errors.New("the server is shutting down")
)

// Adapter names a LoRA adapter directory (PEFT's files) to serve as model Name.
type Adapter struct{ Name, Dir string }

// Config is what NewEngine loads and how it schedules.
type Config struct {
	// Model is a Hugging Face model directory (config.json, safetensors,
	// tokenizer.json, the chat template); Name is the model id clients ask for (default:
	// the directory's base name).
	Model, Name string
	Adapters    []Adapter
	DType       torch.DType // 0: float32
	Device      torch.Device
	// MaxBatch is the most sequences decoded together (default 32); MaxQueue the most
	// requests waiting to start (default 256); MaxTokens the most new tokens a request
	// may ask for and the default when it asks none (default: the model's context).
	MaxBatch, MaxQueue, MaxTokens int
	// KVBlocks is the KV pool's size in blocks of BlockSize positions (default:
	// MaxBatch full contexts, at most 65536 blocks); KVMemory sizes it in bytes instead
	// (keys and values of every layer).
	KVBlocks, KVMemory int64
	// PrefillTokens bounds the prompt tokens prefilled between two decode steps
	// (default 512): a longer prompt is prefilled in chunks over several steps, so that
	// new requests do not stall the running ones and running ones do not starve new
	// ones.
	PrefillTokens int
}

// Request is one generation.
type Request struct {
	// Model is the served model id or an adapter's name; "" is the base.
	Model  string
	Prompt []int64
	// MaxTokens bounds the new tokens; 0 is the engine's MaxTokens (cut to the
	// context left).
	MaxTokens int
	// Temperature 0 is greedy decoding; otherwise tokens are drawn after dividing the
	// logits by it and keeping the top-p mass (TopP 0 or 1: all).
	Temperature, TopP float64
	// Seed makes sampling repeatable, whatever else runs in the batch (each sequence
	// draws from its own generator).
	Seed *int64
	// Stop strings end the text before them; StopTokens end the generation besides the
	// model's EOS tokens (a chat template's end of turn).
	Stop       []string
	StopTokens []int64
	// IgnoreEOS generates max_tokens whatever the model's EOS tokens (vLLM's
	// ignore_eos; StopTokens and Stop still end it), for benchmarks and tests.
	IgnoreEOS bool
}

// Event is a step of a generation: the text it adds (held back while it could be the
// start of a stop string), and with the last event the reason it ended or the error.
type Event struct {
	Text string
	// Token is the token this step generated (a stop token included); -1 in an event
	// that ends a generation with Err.
	Token        int64
	Tokens       int    // the tokens generated so far
	Finish       string // "stop", "length", or "" before the last event
	PromptTokens int
	Err          error
}

// Stats are the engine's current numbers.
type Stats struct {
	Waiting, Running       int
	KVBlocks, KVBlocksUsed int64
	KVBytes                int64
	// MaxKVBlocksUsed is the most blocks held at once since the start.
	MaxKVBlocksUsed int64
	// Draining: Shutdown was called.
	Draining bool
	// Steps counts the engine's iterations (each one decode step of the batch).
	Steps int64
}

// Engine runs one model (and its adapters) for many requests at once with continuous
// batching: one goroutine decodes the running sequences together, step by step;
// between steps the requests that arrived are prefilled and join, and the finished or
// cancelled ones leave, their KV blocks back in the pool.
type Engine struct {
	cfg       Config
	m         models.CausalLM
	tok       *tokenizer.Tokenizer
	tmpl      *chat.Template // nil when the directory has none
	eos       []int64
	context   int64
	dev       torch.Device
	adapters  map[string]int // name → index; the base is -1
	loaded    []*lora.Adapter
	names     []string // served ids: the base, then the adapters
	r         *router
	pool      *pool
	metrics   *Metrics
	maxTokens int

	mu      sync.Mutex
	wake    *sync.Cond
	waiting []*sequence
	// prefilling are admitted sequences whose prompts are not all cached yet, running
	// those that decode; the loop's alone. nRunning counts both: admit adds a
	// sequence, end takes it out.
	prefilling, running []*sequence
	nRunning            int
	steps               int64
	maxUsed             int64
	used                int64
	draining            bool
	stopped             bool
	done                chan struct{}

	closeOnce sync.Once
}

// sequence is a request in the engine.
type sequence struct {
	req     Request
	ctx     context.Context
	out     *outbox
	adapter int
	max     int
	stops   []int64
	blocks  []int32
	n       int64   // positions cached
	next    int64   // the last token chosen, not yet fed
	gen     []int64 // tokens generated (a stop token left out)
	count   int
	sent    int // bytes of the text sent
	rng     *rand.Rand
	arrived time.Time
	last    time.Time
}

// NewEngine loads cfg.Model (and its adapters) and starts the engine's loop.
func NewEngine(cfg Config) (e *Engine, err error) {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 32
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = 256
	}
	if cfg.PrefillTokens <= 0 {
		cfg.PrefillTokens = 512
	}
	if cfg.Name == "" {
		cfg.Name = baseName(cfg.Model)
	}
	if err := lmdir.CheckDevice(cfg.Device); err != nil {
		return nil, err
	}
	tok, err := tokenizer.LoadDir(cfg.Model)
	if err != nil {
		return nil, err
	}
	tmpl, err := chat.LoadDir(cfg.Model)
	if err != nil {
		tmpl = nil // completions only; chat requests are refused with the reason
	}
	m, err := models.LoadPretrained(cfg.Model, models.LoadOptions{DType: cfg.DType, Device: cfg.Device})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			nn.Free(m)
		}
	}()
	nn.SetTraining(m, false)
	dc := m.DecoderConfig()
	gen, err := lmdir.GenerationEOS(cfg.Model)
	if err != nil {
		return nil, err
	}
	eos := lmdir.EOSTokens(gen, dc, tok)
	e = &Engine{cfg: cfg, m: m, tok: tok, tmpl: tmpl, eos: eos, context: dc.MaxPositions, dev: cfg.Device,
		adapters: map[string]int{}, names: []string{cfg.Name}, r: &router{}, metrics: newMetrics(), done: make(chan struct{})}
	e.metrics.engine = e
	e.wake = sync.NewCond(&e.mu)
	if e.context <= 0 {
		e.context = 1 << 20
	}
	e.maxTokens = cfg.MaxTokens
	if e.maxTokens <= 0 || int64(e.maxTokens) > e.context {
		e.maxTokens = int(e.context)
	}
	dirs := make([]string, len(cfg.Adapters))
	for i, a := range cfg.Adapters {
		if a.Name == "" || a.Name == cfg.Name || slices.Contains(e.names, a.Name) {
			return nil, fmt.Errorf("serve: adapter name %q is empty or taken", a.Name)
		}
		e.adapters[a.Name] = i
		e.names = append(e.names, a.Name)
		dirs[i] = a.Dir
	}
	if len(dirs) > 0 {
		if e.loaded, err = loadAdapters(m, dirs, e.r); err != nil {
			return nil, err
		}
	}
	blocks := cfg.KVBlocks
	if blocks <= 0 {
		blocks = min(int64(cfg.MaxBatch)*blocksFor(int(min(e.context, 1<<20))), 65536)
	}
	if cfg.KVMemory > 0 {
		// A one-block pool measures a block's bytes over all layers.
		e.pool = newPool(1)
		err := e.warmUp()
		perBlock := e.pool.bytes
		e.pool.close()
		if err != nil {
			return nil, err
		}
		if blocks = cfg.KVMemory / perBlock; blocks < 1 {
			return nil, fmt.Errorf("serve: a KV cache of %d bytes holds no block of %d positions (%d bytes)", cfg.KVMemory, BlockSize, perBlock)
		}
	}
	e.pool = newPool(blocks)
	// One position through the model allocates the pool's tensors now, so that its
	// memory is taken at the start, not under load.
	if err := e.warmUp(); err != nil {
		e.pool.close()
		return nil, err
	}
	go e.loop()
	return e, nil
}

func baseName(dir string) string {
	dir = strings.TrimRight(dir, "/")
	if i := strings.LastIndex(dir, "/"); i >= 0 {
		return dir[i+1:]
	}
	return dir
}

func (e *Engine) warmUp() (err error) {
	defer torch.Recover(&err, "serve: allocating the KV pool")
	s := &sequence{adapter: -1, ctx: context.Background()}
	s.blocks, _ = e.pool.take(1)
	defer e.pool.give(s.blocks)
	torch.NoGrad(func() {
		torch.WithScope(func() { e.prefill(s, []int64{0}) })
	})
	return nil
}

// Names returns the model ids the engine serves: the base model's, then each
// adapter's.
func (e *Engine) Names() []string { return slices.Clone(e.names) }

// Tokenizer returns the model's tokenizer.
func (e *Engine) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// Template returns the model's chat template (nil when its directory has none).
func (e *Engine) Template() *chat.Template { return e.tmpl }

// Context returns the model's context length in positions.
func (e *Engine) Context() int64 { return e.context }

// Metrics returns the engine's metrics (the handler adds its requests to them).
func (e *Engine) Metrics() *Metrics { return e.metrics }

// Stats returns the queue, batch and pool numbers now.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Stats{Waiting: len(e.waiting), Running: e.nRunning, KVBlocks: e.pool.blocks,
		KVBlocksUsed: e.used, KVBytes: e.pool.bytes, MaxKVBlocksUsed: e.maxUsed, Draining: e.draining, Steps: e.steps}
}

// Submit queues r and returns the channel of its events, which ends with an event
// that has Finish or Err set; read it to its end (cancelling ctx brings the end within
// a step). Cancelling ctx (a client gone) ends the generation at the
// next step and frees its memory. A request that can never run (too long, unknown
// model) or cannot wait (queue full, shutting down) is refused at once.
func (e *Engine) Submit(ctx context.Context, r Request) (<-chan Event, error) {
	adapter := -1
	if r.Model != "" && r.Model != e.cfg.Name {
		i, ok := e.adapters[r.Model]
		if !ok {
			return nil, fmt.Errorf("%w: the model %q does not exist (served: %s)", ErrUnknownModel, r.Model, strings.Join(e.names, ", "))
		}
		adapter = i
	}
	p := int64(len(r.Prompt))
	switch {
	case p == 0:
		return nil, fmt.Errorf("%w: the prompt is empty", ErrBadRequest)
	case r.MaxTokens < 0:
		return nil, fmt.Errorf("%w: max_tokens %d is negative", ErrBadRequest, r.MaxTokens)
	case r.MaxTokens > e.maxTokens:
		return nil, fmt.Errorf("%w: max_tokens %d is more than this server's limit of %d", ErrBadRequest, r.MaxTokens, e.maxTokens)
	case math.IsNaN(r.Temperature) || r.Temperature < 0 || r.Temperature > 2:
		return nil, fmt.Errorf("%w: temperature %v is not between 0 and 2", ErrBadRequest, r.Temperature)
	case math.IsNaN(r.TopP) || r.TopP < 0 || r.TopP > 1:
		return nil, fmt.Errorf("%w: top_p %v is not between 0 and 1", ErrBadRequest, r.TopP)
	}
	vocab := e.m.DecoderConfig().VocabSize
	for _, id := range r.Prompt {
		if id < 0 || id >= vocab {
			return nil, fmt.Errorf("%w: token id %d is outside the vocabulary of %d", ErrBadRequest, id, vocab)
		}
	}
	if p >= e.context {
		return nil, fmt.Errorf("%w: this model's maximum context length is %d tokens; the prompt has %d", ErrContextLength, e.context, p)
	}
	max := r.MaxTokens
	if max == 0 {
		// What the context and the KV pool leave, within the server's limit.
		max = int(min(int64(e.maxTokens), e.context-p, e.pool.blocks*BlockSize-p))
		if max < 1 {
			max = 1 // refused below, with the sizes
		}
	}
	if p+int64(max) > e.context {
		return nil, fmt.Errorf("%w: this model's maximum context length is %d tokens; %d were asked (%d in the prompt, %d for the completion)",
			ErrContextLength, e.context, p+int64(max), p, max)
	}
	if blocksFor(int(p)+max) > e.pool.blocks {
		return nil, fmt.Errorf("%w: the prompt and max_tokens need %d positions; this server's KV cache holds %d",
			ErrContextLength, p+int64(max), e.pool.blocks*BlockSize)
	}
	seed := rand.Uint64()
	if r.Seed != nil {
		seed = uint64(*r.Seed)
	}
	s := &sequence{req: r, ctx: ctx, adapter: adapter, max: max, out: newOutbox(),
		stops: slices.Concat(e.eos, r.StopTokens), rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), arrived: time.Now()}
	if r.IgnoreEOS {
		s.stops = slices.Clone(r.StopTokens)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.draining:
		return nil, ErrShuttingDown
	case len(e.waiting) >= e.cfg.MaxQueue:
		return nil, fmt.Errorf("%w: %d requests wait already", ErrQueueFull, len(e.waiting))
	}
	e.waiting = append(e.waiting, s)
	e.wake.Signal()
	events := make(chan Event)
	go s.out.forward(events)
	return events, nil
}

// Shutdown stops taking requests and lets the ones taken (running or waiting) finish
// until ctx is done; then it ends those that remain, with ErrShuttingDown, and stops
// the loop. It returns ctx's error if it had to. The model stays loaded until Close.
func (e *Engine) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	e.draining = true
	e.wake.Broadcast()
	e.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		e.mu.Lock()
		e.stopped = true
		e.wake.Broadcast()
		e.mu.Unlock()
	})
	defer stop()
	<-e.done
	if stop() {
		return nil
	}
	return ctx.Err()
}

// Close shuts the engine down at once (ending running requests) and frees the model,
// its adapters and the KV pool.
func (e *Engine) Close() {
	e.closeOnce.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = e.Shutdown(ctx)
		e.pool.close()
		for _, a := range e.loaded {
			freeAdapter(a)
		}
		nn.Free(e.m)
	})
}

// loop is the engine's goroutine: admit, prefill, decode, until Shutdown.
func (e *Engine) loop() {
	defer close(e.done)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		e.mu.Lock()
		idle := func() bool { return len(e.waiting) == 0 && len(e.running) == 0 && len(e.prefilling) == 0 }
		for idle() && !e.draining && !e.stopped {
			e.wake.Wait()
		}
		if e.stopped || (e.draining && idle()) {
			waiting := e.waiting
			e.waiting = nil
			e.mu.Unlock()
			for _, s := range slices.Concat(waiting, e.prefilling, e.running) {
				e.finish(s, ErrShuttingDown)
			}
			e.prefilling, e.running = nil, nil
			return
		}
		e.prefilling = append(e.prefilling, e.admit()...)
		e.mu.Unlock()
		if err := e.step(); err != nil {
			// A failed forward (out of memory) ends the batch it ran, not the server.
			for _, s := range slices.Concat(e.prefilling, e.running) {
				e.finish(s, err)
			}
			e.prefilling, e.running = nil, nil
		}
		e.mu.Lock()
		e.steps++
		e.mu.Unlock()
	}
}

// step prefills up to PrefillTokens prompt tokens of the admitted sequences, in
// order (a sequence whose prompt is all cached joins the batch with its first token),
// and runs one decode step of the batch.
func (e *Engine) step() (err error) {
	defer torch.Recover(&err, "serve")
	torch.NoGrad(func() {
		e.prefilling = e.dropCancelled(e.prefilling)
		budget := int64(e.cfg.PrefillTokens)
		for len(e.prefilling) > 0 && budget > 0 {
			s := e.prefilling[0]
			n := min(int64(len(s.req.Prompt))-s.n, budget)
			budget -= n
			torch.WithScope(func() {
				logits := e.prefill(s, s.req.Prompt[s.n:s.n+n])
				if s.n == int64(len(s.req.Prompt)) {
					e.prefilling = e.prefilling[1:]
					e.running = append(e.running, s)
					e.push(s, e.choose([]*sequence{s}, logits)[0])
				}
			})
		}
		e.running = e.dropCancelled(e.running)
		if len(e.running) > 0 {
			torch.WithScope(e.decode)
		}
	})
	return nil
}

// admit takes waiting requests, in order, while the batch has room, the pool has their
// blocks and the prefill budget of the next step lasts. e.mu is held.
func (e *Engine) admit() []*sequence {
	// Requests whose clients left while they waited leave the queue.
	e.waiting = slices.DeleteFunc(e.waiting, func(s *sequence) bool {
		if err := s.ctx.Err(); err != nil {
			s.out.put(Event{Err: err, Token: -1, PromptTokens: len(s.req.Prompt)})
			s.out.close()
			return true
		}
		return false
	})
	var out []*sequence
	budget := e.cfg.PrefillTokens
	for _, s := range e.prefilling {
		budget -= len(s.req.Prompt) - int(s.n)
	}
	for len(e.waiting) > 0 && len(e.prefilling)+len(e.running)+len(out) < e.cfg.MaxBatch {
		s := e.waiting[0]
		if len(e.prefilling)+len(out) > 0 && len(s.req.Prompt) > budget {
			break
		}
		bs, ok := e.pool.take(blocksFor(len(s.req.Prompt) + s.max))
		if !ok {
			break
		}
		s.blocks = bs
		e.nRunning++ // until end
		e.used = e.pool.used()
		e.maxUsed = max(e.maxUsed, e.used)
		budget -= len(s.req.Prompt)
		e.waiting = e.waiting[1:]
		out = append(out, s)
	}
	return out
}

// prefill runs ids, the next chunk of s's prompt, after its s.n cached positions and
// returns the logits of its last position, [1, V].
func (e *Engine) prefill(s *sequence, ids []int64) *torch.Tensor {
	past, t := s.n, int64(len(ids))
	write := make([]int64, t)
	for i := range write {
		write[i] = slot(s.blocks, past+int64(i))
	}
	st := &poolStep{seqs: []*sequence{s}, write: [][]int64{write}}
	if past > 0 {
		gather := make([]int64, past+t)
		for p := range gather {
			gather[p] = slot(s.blocks, int64(p))
		}
		st.gather, st.l = e.onDevice(torch.FromSlice(gather, past+t)), past+t
	}
	e.pool.step = st
	e.r.groups = []rowGroup{{s.adapter, 1}}
	in := models.DecoderInput{InputIDs: e.onDevice(torch.FromSlice(ids, 1, t)), Cache: models.NewKVCacheOver(e.pool, past)}
	logits := e.m.Forward(in)
	s.n = past + t
	return logits.Select(1, t-1)
}

func (e *Engine) onDevice(t *torch.Tensor) *torch.Tensor {
	if e.dev != torch.CPU {
		return t.To(e.dev, false)
	}
	return t
}

// dropCancelled ends the sequences of seqs whose clients are gone, and returns the
// others.
func (e *Engine) dropCancelled(seqs []*sequence) []*sequence {
	return slices.DeleteFunc(seqs, func(s *sequence) bool {
		if s.out.closed() {
			return true
		}
		if err := s.ctx.Err(); err != nil {
			e.finish(s, err)
			return true
		}
		return false
	})
}

// decode feeds every running sequence its last token in one forward and pushes the
// next. Rows are sorted by adapter (the LoRA layers take each adapter's rows as one
// run) and right-aligned: row i's positions end at column L-1, as a left-padded batch,
// with its padding masked.
func (e *Engine) decode() {
	rows := e.running
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].adapter < rows[j].adapter })
	b := int64(len(rows))
	var l int64
	same := true
	for _, s := range rows {
		l = max(l, s.n+1)
		same = same && s.n == rows[0].n
	}
	ids, pos := make([]int64, b), make([]int64, b)
	write := make([][]int64, b)
	gather := make([]int64, 0, b*l)
	var mask []int64
	if !same {
		mask = make([]int64, 0, b*l)
	}
	e.r.groups = e.r.groups[:0]
	for i, s := range rows {
		ids[i], pos[i] = s.next, s.n
		write[i] = []int64{slot(s.blocks, s.n)}
		pad := l - 1 - s.n
		for range pad {
			gather = append(gather, 0)
		}
		for p := range s.n + 1 {
			gather = append(gather, slot(s.blocks, p))
		}
		if mask != nil {
			for c := range l {
				mask = append(mask, boolInt(c >= pad))
			}
		}
		if g := len(e.r.groups); g > 0 && e.r.groups[g-1].adapter == s.adapter {
			e.r.groups[g-1].n++
		} else {
			e.r.groups = append(e.r.groups, rowGroup{s.adapter, 1})
		}
	}
	e.pool.step = &poolStep{seqs: rows, write: write, gather: e.onDevice(torch.FromSlice(gather, b*l)), l: l}
	in := models.DecoderInput{InputIDs: e.onDevice(torch.FromSlice(ids, b, 1)), Cache: models.NewKVCacheOver(e.pool, l-1)}
	if mask != nil {
		in.AttentionMask = e.onDevice(torch.FromSlice(mask, b, l))
		in.PositionIDs = e.onDevice(torch.FromSlice(pos, b, 1))
	}
	logits := e.m.Forward(in).Select(1, 0)
	toks := e.choose(rows, logits)
	for i, s := range rows {
		s.n++
		e.push(s, toks[i])
	}
	e.running = slices.DeleteFunc(e.running, func(s *sequence) bool { return s.out.closed() })
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// choose picks each row's next token from logits [B, V]: the most likely for greedy
// rows (one argmax over the batch), a draw from its own generator for the others.
func (e *Engine) choose(rows []*sequence, logits *torch.Tensor) []int64 {
	greedy := logits.Argmax(-1, false).Int64s()
	for i, s := range rows {
		if s.req.Temperature > 0 {
			greedy[i] = sample(logits.Narrow(0, int64(i), 1).ToDType(torch.Float32).To(torch.CPU, false).Float32s(), s)
		}
	}
	return greedy
}

// sample draws a token from logits after temperature and top-p, as transformers'
// TemperatureLogitsWarper and TopPLogitsWarper (no top-k: OpenAI's API has none), with
// the sequence's own generator.
func sample(logits []float32, s *sequence) int64 {
	type cand struct {
		id int
		p  float64
	}
	c := make([]cand, len(logits))
	hi := math.Inf(-1)
	for i, v := range logits {
		x := float64(v) / s.req.Temperature
		c[i] = cand{i, x}
		hi = math.Max(hi, x)
	}
	var sum float64
	for i := range c {
		c[i].p = math.Exp(c[i].p - hi)
		sum += c[i].p
	}
	sort.Slice(c, func(i, j int) bool { return c[i].p > c[j].p })
	keep := len(c)
	if p := s.req.TopP; p > 0 && p < 1 {
		var cum float64
		for i := range c {
			cum += c[i].p / sum
			if cum >= p {
				keep = i + 1
				break
			}
		}
	}
	var total float64
	for _, x := range c[:keep] {
		total += x.p
	}
	u := s.rng.Float64() * total
	for _, x := range c[:keep] {
		if u -= x.p; u < 0 {
			return int64(x.id)
		}
	}
	return int64(c[keep-1].id)
}

// push adds token tok to s and sends its event: the text it makes (up to a stop
// string; held back while it could be the start of one), and the reason s ends, at a
// stop token, a stop string or max_tokens.
func (e *Engine) push(s *sequence, tok int64) {
	now := time.Now()
	if s.count == 0 {
		e.metrics.firstToken(now.Sub(s.arrived).Seconds())
	} else {
		e.metrics.nextToken(now.Sub(s.last).Seconds())
	}
	s.last = now
	s.count++
	s.next = tok
	ev := Event{Token: tok, Tokens: s.count, PromptTokens: len(s.req.Prompt)}
	var text string
	if slices.Contains(s.stops, tok) {
		text, ev.Finish = e.tok.Decode(s.gen, true), "stop"
	} else {
		s.gen = append(s.gen, tok)
		text = e.tok.Decode(s.gen, true)
		if at, ok := findStop(text, s.sent, s.req.Stop); ok {
			text, ev.Finish = text[:at], "stop"
		} else if s.count >= s.max {
			ev.Finish = "length"
		}
	}
	end := len(text)
	if ev.Finish == "" {
		end -= heldBack(text, s.req.Stop)
	}
	if end > s.sent {
		ev.Text = text[s.sent:end]
		s.sent = end
	}
	if ev.Finish != "" {
		e.end(s, ev)
		return
	}
	s.out.put(ev)
}

// findStop returns where the first stop string begins in text, looking at the
// occurrences that end after the text sent.
func findStop(text string, sent int, stops []string) (int, bool) {
	best := -1
	for _, st := range stops {
		if st == "" {
			continue
		}
		from := max(0, sent-len(st)+1)
		if i := strings.Index(text[from:], st); i >= 0 && (best < 0 || from+i < best) {
			best = from + i
		}
	}
	return best, best >= 0
}

// heldBack returns how many bytes at the end of text must wait: the longest end that
// is a proper prefix of a stop string, or an incomplete character (U+FFFD, the
// decoder's stand-in for bytes still to come).
func heldBack(text string, stops []string) int {
	n := 0
	if strings.HasSuffix(text, "\uFFFD") {
		n = len(strings.TrimRight(text, "\uFFFD"))
		n = len(text) - n
	}
	for _, st := range stops {
		for k := min(len(st)-1, len(text)); k > n; k-- {
			if strings.HasSuffix(text, st[:k]) {
				n = k
				break
			}
		}
	}
	return n
}

// finish ends s with err.
func (e *Engine) finish(s *sequence, err error) {
	e.end(s, Event{Err: err, Token: -1, Tokens: s.count, PromptTokens: len(s.req.Prompt)})
}

// end gives s's blocks back to the pool and takes it out of the running count, and
// then sends its last event, so that a client that has its whole answer finds the
// engine's Stats and metrics without it.
func (e *Engine) end(s *sequence, ev Event) {
	if s.out.closed() {
		return
	}
	e.mu.Lock()
	if s.blocks != nil { // admitted: counted in nRunning
		e.nRunning--
	}
	e.pool.give(s.blocks)
	e.used = e.pool.used()
	e.mu.Unlock()
	s.blocks = nil
	e.metrics.tokens(len(s.req.Prompt), s.count)
	s.out.put(ev)
	s.out.close()
}

// outbox holds a sequence's events until its reader takes them, so that the engine
// never waits for a slow client; what it holds is bounded by the sequence's max_tokens
// and allocated only as it waits.
type outbox struct {
	mu     sync.Mutex
	events []Event
	done   bool
	ready  chan struct{}
}

func newOutbox() *outbox { return &outbox{ready: make(chan struct{}, 1)} }

func (o *outbox) put(ev Event) {
	o.mu.Lock()
	o.events = append(o.events, ev)
	o.mu.Unlock()
	o.notify()
}

// close marks the last event put; the engine's goroutine alone calls put and close.
func (o *outbox) close() {
	o.mu.Lock()
	o.done = true
	o.mu.Unlock()
	o.notify()
}

func (o *outbox) closed() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.done
}

func (o *outbox) notify() {
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

// forward sends the events to out, in order, and closes it after the last.
func (o *outbox) forward(out chan<- Event) {
	defer close(out)
	for range o.ready {
		o.mu.Lock()
		evs, done := o.events, o.done
		o.events = nil
		o.mu.Unlock()
		for _, ev := range evs {
			out <- ev
		}
		if done {
			return
		}
	}
}
