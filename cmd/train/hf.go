package main

// Fine-tuning a Hugging Face decoder directory (--model DIR): the model by its
// config.json's model_type, its own tokenizer.json, text or JSONL data, LoRA adapters,
// activation checkpointing, and the run directory's Hugging Face copies of the result.

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/fsutil"
	"github.com/gotrain/gotrain/tokenizer"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/lora"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/trainer"
)

// defaultLMBlock is --block-size for a Hugging Face model when none is given, and
// defaultLMValSplit its validation fraction.
const (
	defaultLMBlock    = 512
	defaultLMValSplit = 0.1
)

// maxLMLineBytes is the longest line of --data the text and JSONL readers take (0: the
// data package's 64 MiB). Only the tests change it, to hold a long line to its memory
// bound at a scale they can write (TestFineTuneScaledInputs).
var maxLMLineBytes int

// isHFDir reports whether --model names a Hugging Face model directory.
func isHFDir(model string) bool {
	fi, err := os.Stat(filepath.Join(model, models.ConfigFile))
	return err == nil && fi.Mode().IsRegular()
}

// hfRun is what buildHF made besides the Trainer: for the callbacks and the tests.
type hfRun struct {
	model models.CausalLM
	tok   *tokenizer.Tokenizer
	eos   int64
}

// buildHF builds the Trainer that fine-tunes the decoder in directory c.Model on the
// text or JSONL file c.DataDir.
func buildHF(c Config, runDir string, pg *distributed.ProcessGroup) (_ *trainer.Trainer, err error) {
	if err := checkDataSizes(c); err != nil {
		return nil, err
	}
	if c.DataDir == "" {
		return nil, fmt.Errorf("--model %s needs --data: a .txt file (one document a line) or a .jsonl file of {\"text\"}, {\"prompt\", \"completion\"} or {\"messages\"} lines", c.Model)
	}
	tok, err := tokenizer.LoadDir(c.Model)
	if err != nil {
		return nil, fmt.Errorf("--model %s: %w", c.Model, err)
	}
	dev, err := trainer.ResolveDevice(rankDevice(c.Device, pg))
	if err != nil {
		return nil, err
	}
	dtype := torch.Float32
	if c.DType != "" {
		if dtype, err = torch.ParseDType(c.DType); err != nil {
			return nil, fmt.Errorf("--dtype: %w", err)
		}
	}
	torch.ManualSeed(c.Seed) // LoRA's initial weights depend on the seed only
	notice := func(msg string) {
		if pg == nil || pg.Rank() == 0 {
			fmt.Fprintln(os.Stderr, "train:", msg)
		}
	}
	m, err := models.LoadPretrained(c.Model, models.LoadOptions{DType: dtype, Device: dev, Notice: notice})
	if err != nil {
		return nil, err
	}
	defer func() { // every later error, buildHFOn's too, frees the model
		if err != nil {
			nn.Free(m)
		}
	}()
	cfg := m.DecoderConfig()
	eos, ok := tok.EOS()
	eosFrom := filepath.Join(c.Model, "tokenizer_config.json") + " eos_token"
	if len(cfg.EOS) > 0 {
		eos, ok, eosFrom = cfg.EOS[0], true, filepath.Join(c.Model, models.ConfigFile)+" eos_token_id"
	}
	if !ok {
		return nil, fmt.Errorf("--model %s: neither config.json nor the tokenizer names an end-of-sequence token", c.Model)
	}
	if eos < 0 || eos >= cfg.VocabSize {
		return nil, fmt.Errorf("%s is token %d, outside the model's vocabulary of %d (vocab_size)", eosFrom, eos, cfg.VocabSize)
	}
	block := c.BlockSize
	if block == 0 {
		block = defaultLMBlock
		if cfg.MaxPositions > 0 {
			block = min(block, int(cfg.MaxPositions))
		}
	}
	if cfg.MaxPositions > 0 && int64(block) > cfg.MaxPositions {
		return nil, fmt.Errorf("--block-size %d is longer than the model's context of %d positions", block, cfg.MaxPositions)
	}
	convs, err := isChatData(c.DataDir)
	if err != nil {
		return nil, err
	}
	var ds data.Dataset
	if convs {
		out := io.Writer(os.Stdout)
		if pg != nil && !pg.IsMain() {
			out = io.Discard
		}
		// c records the chat date chatDataset pins, for --resume.
		if ds, err = chatDataset(&c, tok, block, out); err != nil {
			return nil, err
		}
	} else if ds, err = data.NewLMDataset(c.DataDir, tok, data.LMOptions{BlockSize: block, EOS: eos, SeparateDocuments: c.Packing, VocabSize: cfg.VocabSize,
		MaxLineBytes: maxLMLineBytes}); err != nil {
		return nil, err
	}
	if c.Limit > 0 && c.Limit < ds.Len() {
		sub := &data.Subset{Dataset: ds, Indices: seq(0, c.Limit)}
		return buildHFOn(c, runDir, pg, m, tok, eos, sub, dev)
	}
	return buildHFOn(c, runDir, pg, m, tok, eos, ds, dev)
}

func buildHFOn(c Config, runDir string, pg *distributed.ProcessGroup, m models.CausalLM, tok *tokenizer.Tokenizer, eos int64,
	ds data.Dataset, dev torch.Device) (*trainer.Trainer, error) {
	if c.ValSplit == 0 {
		c.ValSplit = defaultLMValSplit
	}
	train, val, err := split(ds, c)
	if err != nil {
		return nil, err
	}
	pad := eos
	if p, ok := tok.PAD(); ok {
		pad = p
	}
	lo := data.LoaderOptions{BatchSize: c.BatchSize, Shuffle: true, Workers: c.Workers, Seed: c.Seed, Device: dev,
		Pad: data.LMPad(pad), Rank: pg.Rank(), WorldSize: pg.WorldSize()}
	trainLoader, err := data.NewLoader(train, lo)
	if err != nil {
		return nil, err
	}
	lo.Shuffle, lo.Rank, lo.WorldSize = false, 0, 0
	valLoader, err := data.NewLoader(val, lo)
	if err != nil {
		return nil, err
	}
	adapter, err := applyLoRA(m, c)
	if err != nil {
		return nil, err
	}
	if c.GradientCheckpointing {
		if err := models.SetGradientCheckpointing(m, true); err != nil {
			return nil, err
		}
	}
	nn.SetTraining(m, true)
	opt, sched, err := optimization(&c, nn.TrainableParameters(m), trainLoader.Len())
	if err != nil {
		return nil, err
	}
	if c.Monitor == defaultConfig().Monitor {
		c.Monitor, c.MonitorMode = "val_loss", trainer.Min
	}
	out := io.Writer(os.Stdout)
	if pg != nil && !pg.IsMain() {
		out = io.Discard
	}
	prompt, stop := heldOutPrompt(val, tok)
	stops := []int64{eos}
	if stop >= 0 && stop != eos {
		stops = append(stops, stop)
	}
	cb := &hfCallback{run: hfRun{model: m, tok: tok, eos: eos}, adapter: adapter, dir: filepath.Join(runDir, "hf"),
		source: c.Model, prompt: prompt, stops: stops, tokens: 32, out: out, main: pg == nil || pg.IsMain(), saveEvery: c.SaveEvery}
	opts := append(trainerOptions(c.Config), trainer.WithScheduler(sched, c.SchedulerInterval), trainer.WithRunDir(runDir),
		trainer.WithModelConfig(modelType(c.Model)), trainer.WithRunConfig(c), trainer.WithTrainStep(maskedLMStep),
		trainer.WithCallbacks(cb))
	if pg != nil {
		opts = append(opts, parallelism(c, pg))
	}
	return trainer.New(m, trainLoader, valLoader, nil, opt, opts...)
}

// modelType is the model_type of the directory's config.json, for the run's record.
func modelType(dir string) string {
	if _, t, err := models.ReadConfig(dir); err == nil {
		return t
	}
	return filepath.Base(dir)
}

// maskedLMStep is the fine-tuning step: the next-token cross-entropy of the logits for
// the batch's input_ids against its labels, summed over the label tokens, with their
// count (trainer.NumItems) (IgnoreIndex on prompts and padding), with the
// padding masked out of attention. Logits are upcast to float32 for the loss, and from
// models.ChunkedLossMinVocab tokens of vocabulary the loss is computed a chunk of
// positions at a time, never holding the whole [B, T, vocab] logits (models.LossAuto).
// Packed windows that carry position_ids (data.LMOptions.SeparateDocuments) attend
// within each document only.
func maskedLMStep(m models.CausalLM, b data.Batch) (*torch.Tensor, trainer.Metrics) {
	in := models.DecoderInput{InputIDs: b.Get(data.LMInputIDs)}
	if mask := data.MaskName(data.LMInputIDs); b.Has(mask) {
		in.AttentionMask = b.Get(mask)
	}
	if b.Has(data.LMPositionIDs) {
		in.PositionIDs = b.Get(data.LMPositionIDs)
	}
	// The sum over the label tokens and their number: the Trainer weights by tokens,
	// across micro-batches and processes, as transformers' num_items_in_batch does.
	sum, n := models.LMLossSum(m, in, b.Get(data.LMLabels), models.LossAuto)
	return sum, trainer.Metrics{trainer.NumItems: n}
}

// hfCallback, at each evaluation, records the validation perplexity, prints a greedy
// continuation of a held-out prompt (heldOutPrompt) apart from the prompt, and writes
// the adapter (or, without LoRA, the whole model) in Hugging Face's layout, with the
// source directory's tokenizer files and chat template, to dir/last and, when the
// evaluation is the best so far, to dir/best; with saveEvery, dir/last also every
// saveEvery optimizer steps.
type hfCallback struct {
	run     hfRun
	adapter adapterSaver // nil without LoRA
	dir     string
	source  string  // the model directory, whose tokenizer files the saves copy
	prompt  []int64 // from the validation set
	stops   []int64 // the EOS and a chat template's end-of-turn token
	tokens  int
	out     io.Writer
	main    bool // only the main process writes
	// saveEvery > 0 writes dir/last every saveEvery optimizer steps (--save-every).
	saveEvery int
}

// adapterSaver writes a model's LoRA adapter as PEFT's files, from its parameters or
// from their values gathered elsewhere (sharded training).
type adapterSaver interface {
	Save(dir string) error
	SaveValues(dir string, values map[*torch.Tensor]*checkpoint.Tensor) error
	Parameters() []*torch.Tensor
}

// Events says which events hfCallback acts at.
func (h *hfCallback) Events() trainer.EventSet {
	if h.saveEvery > 0 {
		return trainer.Events(trainer.Resumed, trainer.Evaluated, trainer.AfterOptimizerStep)
	}
	return trainer.Events(trainer.Resumed, trainer.Evaluated)
}

// OnEvent acts at each evaluation and, with saveEvery, at the steps it names.
func (h *hfCallback) OnEvent(e trainer.Event, t *trainer.Trainer) error {
	switch e {
	case trainer.Resumed:
		// hf/last must be the state the checkpoint resumed from. A kill
		// between the two writes (hf/last is written at the evaluation, the checkpoint
		// after it) or an interruption mid-epoch leaves hf/last at another step.
		if h.main && hfStep(filepath.Join(h.dir, "last")) != t.GlobalStep {
			return h.save(filepath.Join(h.dir, "last"), t)
		}
		return nil
	case trainer.AfterOptimizerStep:
		// An evaluation at the same step saves again with its record; this save is
		// the step's own.
		if h.main && t.GlobalStep%int64(h.saveEvery) == 0 {
			return h.save(filepath.Join(h.dir, "last"), t)
		}
		return nil
	}
	rec := perplexityRecord(e, t)
	if rec == nil {
		return nil
	}
	if f := streamedExport(t); f != nil {
		// Sharded training that freed the layers (or keeps fp32 weights in the shards
		// only): every rank runs the sample's forwards with the unit hooks on, each
		// gathering one unit at a time, and takes part in the export's gathers, where
		// rank 0 writes each unit and lets it go (a LoRA adapter's tensors only), so that
		// neither holds the whole model.
		if err := h.report(rec, true); err != nil {
			return err
		}
		return h.saveEvaluated(t, func(dir string) error { return h.saveStreamed(dir, t, f) })
	}
	// Rank 0 generates and saves alone: under sharded training every rank gathers the
	// whole model first.
	return unsharded(t, func() error {
		if !h.main {
			return nil
		}
		if err := h.report(rec, false); err != nil {
			return err
		}
		return h.saveEvaluated(t, func(dir string) error { return h.save(dir, t) })
	})
}

// streamedExport returns the strategy of sharded training whose units
// ReshardAfterForward frees between steps, or whose mixed-precision policy keeps the
// fp32 master weights in the shards only, nil under any other: then the whole model is
// written a unit at a time (FullyShardedDataParallel.WriteSafetensorsDir, from the fp32
// shards under the policy), in SavePretrained's layout (models.HubLayout: a mixture of
// experts' fused experts one expert at a time), so the streamed files are
// SavePretrained's.
func streamedExport(t *trainer.Trainer) *trainer.FullyShardedDataParallel {
	if f, ok := t.Strategy().(*trainer.FullyShardedDataParallel); ok && f.Hooked() && (f.Resharded() || f.MixedPrecision.ParamDType != 0) {
		return f
	}
	return nil
}

// saveEvaluated saves hf/last and, when the evaluation is the best so far, hf/best.
func (h *hfCallback) saveEvaluated(t *trainer.Trainer, save func(dir string) error) error {
	if err := save(filepath.Join(h.dir, "last")); err != nil {
		return err
	}
	if v, ok := t.Metrics[t.Config().Monitor]; ok && v == t.BestMetric {
		return save(filepath.Join(h.dir, "best"))
	}
	return nil
}

// report prints the evaluation and generates the sample.
func (h *hfCallback) report(rec *trainer.Record, everyRank bool) error {
	training := h.run.model.ModuleBase().Training()
	nn.SetTraining(h.run.model, false)
	defer nn.SetTraining(h.run.model, training)
	if h.main {
		fmt.Fprintf(h.out, "epoch %d, step %d: val loss %.4f, perplexity %.2f\n", rec.Epoch, rec.Step, rec.ValLoss, rec.Metrics["val_perplexity"])
	}
	if len(h.prompt) == 0 {
		return nil
	}
	o := models.GenerateOptions{MaxNewTokens: h.tokens, StopTokens: h.stops}
	if everyRank {
		// The ranks' forwards are collectives: each makes all h.tokens of them, and
		// rank 0 cuts its greedy tokens at the first stop, which gives the same tokens.
		o.StopTokens, o.IgnoreEOS = nil, true
	}
	gen, err := models.Generate(h.run.model, [][]int64{h.prompt}, o)
	if err != nil || !h.main {
		return err
	}
	toks := gen[0]
	if i := slices.IndexFunc(toks, func(id int64) bool { return slices.Contains(h.stops, id) }); i >= 0 {
		toks = toks[:i+1]
	}
	// The prompt keeps its special tokens (a chat template's markup shows where the
	// turn starts); the continuation is the text a user would read.
	fmt.Fprintf(h.out, "  sample prompt (held out): %q\n  continuation: %q\n",
		h.run.tok.Decode(h.prompt, false), h.run.tok.Decode(toks, true))
	return nil
}

// hfStateFile records, in a saved directory, the optimizer step and epoch of the state
// it holds, as transformers' Trainer writes trainer_state.json beside its checkpoints.
const hfStateFile = "trainer_state.json"

// hfState is what hfStateFile holds.
type hfState struct {
	GlobalStep int64 `json:"global_step"`
	Epoch      int   `json:"epoch"`
}

// hfStep is the optimizer step dir's hfStateFile names; -1 when it has none.
func hfStep(dir string) int64 {
	b, err := fsutil.ReadFileInDir(dir, hfStateFile, 1<<16)
	if err != nil {
		return -1
	}
	var st hfState
	if json.Unmarshal(b, &st) != nil {
		return -1
	}
	return st.GlobalStep
}

// save writes the adapter, or the whole model, to dir in Hugging Face's layout, with
// the tokenizer's files and, last, hfStateFile naming t's step.
func (h *hfCallback) save(dir string, t *trainer.Trainer) error {
	var err error
	if h.adapter != nil {
		err = h.adapter.Save(dir)
	} else {
		err = models.SavePretrained(dir, h.run.model, models.SaveOptions{MaxShardSize: hfMaxShardSize})
	}
	if err != nil {
		return err
	}
	return h.saveRest(dir, t)
}

// saveStreamed writes the whole model to dir as save does, gathering it a unit at a time
// (FullyShardedDataParallel.WriteSafetensorsDir: the same weights files as
// SavePretrained's, which the rest of the directory then joins on rank 0). Every rank
// calls it.
func (h *hfCallback) saveStreamed(dir string, t *trainer.Trainer, f *trainer.FullyShardedDataParallel) error {
	if beforeStreamedExport != nil {
		beforeStreamedExport(f.Group.Rank())
	}
	if h.adapter != nil {
		return h.saveAdapterStreamed(dir, t, f)
	}
	if err := f.WriteSafetensorsDir(dir, checkpoint.ModelWeights, h.run.model, models.HubLayout(h.run.model), map[string]string{"format": "pt"}, hfMaxShardSize); err != nil || !h.main {
		return err
	}
	raw, err := models.ConfigJSON(h.run.model)
	if err != nil {
		return fmt.Errorf("%s: %w", models.ConfigFile, err)
	}
	if err := fsutil.WriteFileInDir(dir, models.ConfigFile, raw); err != nil {
		return err
	}
	return h.saveRest(dir, t)
}

// saveAdapterStreamed writes the LoRA adapter to dir as save does, its tensors copied to
// host memory on rank 0 as the model is gathered a unit at a time
// (FullyShardedDataParallel.GatherState). Every rank calls it.
func (h *hfCallback) saveAdapterStreamed(dir string, t *trainer.Trainer, f *trainer.FullyShardedDataParallel) error {
	mine := map[*torch.Tensor]bool{}
	for _, p := range h.adapter.Parameters() {
		mine[p] = true
	}
	values := map[*torch.Tensor]*checkpoint.Tensor{}
	err := f.GatherState(h.run.model, func(name string, x *torch.Tensor) (err error) {
		if !h.main || !mine[x] {
			return nil
		}
		torch.WithScope(func() {
			defer torch.Recover(&err, "copying "+name+" to host memory")
			// A copy: on the CPU a checkpoint tensor would share the storage that the
			// unit's reshard frees.
			var ct *checkpoint.Tensor
			if ct, err = torch.TensorCopyToCheckpoint(x.Detach().Contiguous()); err == nil {
				ct.RequiresGrad = false
				values[x] = ct
			}
		})
		return err
	})
	if err != nil || !h.main {
		return err
	}
	if err := h.adapter.SaveValues(dir, values); err != nil {
		return err
	}
	return h.saveRest(dir, t)
}

// beforeStreamedExport, set only by the tests (fsdp_kill_test.go), runs on every rank
// before the gathers of saveStreamed: a test stops a rank there and kills it while the
// others wait in the export's first all-gather.
var beforeStreamedExport func(rank int)

// hfMaxShardSize is the size of the weights files the saves split the model into.
const hfMaxShardSize = 5 << 30

// saveRest writes, beside the weights, the tokenizer's files and, last, hfStateFile
// naming t's step.
func (h *hfCallback) saveRest(dir string, t *trainer.Trainer) error {
	// As PEFT's and transformers' Trainer save the tokenizer beside the weights, so that
	// the directory is enough for generate --chat and AutoTokenizer.
	if err := copyTokenizerFiles(h.source, dir); err != nil {
		return err
	}
	st, err := json.Marshal(hfState{GlobalStep: t.GlobalStep, Epoch: t.Epoch})
	if err != nil {
		return err
	}
	return fsutil.WriteFileInDir(dir, hfStateFile, append(st, '\n'))
}

// parseTargets splits --lora-targets: "q_proj,v_proj" or "all-linear".
func parseTargets(s string) []string {
	var out []string
	for _, t := range strings.Split(s, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// applyLoRA puts LoRA adapters on m's target modules when --lora-r is set, freezing
// the rest; it returns the adapter, which saves itself as PEFT's files, or nil without
// LoRA.
func applyLoRA(m models.CausalLM, c Config) (adapterSaver, error) {
	if c.LoraR == 0 {
		return nil, nil
	}
	targets := lora.Modules(parseTargets(c.LoraTargets)...)
	if strings.TrimSpace(c.LoraTargets) == lora.AllLinear {
		targets = lora.Targets{Pattern: lora.AllLinear}
	}
	base := c.Model
	if abs, err := filepath.Abs(c.Model); err == nil {
		base = abs
	}
	a, err := lora.Inject(m, lora.Config{R: c.LoraR, Alpha: c.LoraAlpha, Dropout: c.LoraDropout, TargetModules: targets,
		BaseModelNameOrPath: base})
	if err != nil {
		return nil, fmt.Errorf("--lora-targets %s: %w", c.LoraTargets, err)
	}
	return a, nil
}
