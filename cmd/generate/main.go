// Command generate continues a prompt with a decoder language model from a Hugging Face
// directory (config.json, model.safetensors or its shards, tokenizer.json), as
// transformers' AutoModelForCausalLM and AutoTokenizer with generate() would.
//
// Usage:
//
//	generate --model DIR (--prompt TEXT | --prompt-file FILE) [--max-new-tokens N]
//	         [--greedy | --temperature T --top-k K --top-p P --seed S]
//	         [--repetition-penalty R] [--stop STR]... [--device cpu|cuda|cuda:N]
//	         [--dtype float32|bfloat16|float16] [--adapter DIR] [--json]
//	generate --model DIR --chat [--system TEXT] [--prompt TEXT] [flags as above]
//	generate --model DIR --messages FILE.json [flags as above]
//
//	go run ./cmd/generate --model ./Qwen2.5-0.5B --prompt "The capital of France is"
//	go run ./cmd/generate --model ./gpt2 --prompt "Once" --temperature 0.8 --top-p 0.95 --seed 1
//	go run ./cmd/generate --model ./gpt2 --prompt "Once" --greedy --json
//
// Decoding is greedy unless a sampling flag (--temperature, --top-k or --top-p) is
// given; sampling then uses transformers' defaults for the flags not given (temperature
// 1, top-k 50, top-p 1), and --seed makes it repeatable: the same seed draws the tokens
// transformers draws after torch.manual_seed(seed). The sampling parameters come from
// the flags only, not from generation_config.json. Generation stops after
// --max-new-tokens (default 64) or at the model's end-of-sequence token:
// generation_config.json's eos_token_id, else config.json's, else the tokenizer's EOS
// (tokenizer_config.json's eos_token), as transformers' generate() chooses it. --stop
// ends it as soon as the continuation's text (special tokens included) contains the
// string (repeatable). The stopping token is part of the output.
//
// The text mode writes the prompt, then the continuation as its tokens arrive, with
// special tokens left out. --json writes one JSON object instead:
//
//	{"prompt_ids": [...], "new_ids": [...], "text": "..."}
//
// where prompt_ids is the prompt as the model's tokenizer encodes it, special tokens
// included (the BOS a Llama tokenizer adds), new_ids the generated tokens and text
// their decoding without special tokens.
//
// # Chat
//
// --chat talks to an instruct model through its chat template (tokenizer_config.json's
// chat_template or chat_template.jinja), as transformers' apply_chat_template(...,
// add_generation_prompt=True) renders it: the conversation so far, then the header of
// the assistant's turn. With --prompt TEXT it is one user turn (after --system TEXT,
// when given) and one reply; --messages FILE.json renders a given conversation (a JSON
// list of messages or {"messages": [...], "tools": [...]}, as cmd/tokenize reads it) and
// generates the next assistant turn. Without either it reads user turns from stdin, one
// a line, and answers each with the conversation so far (the replies' text appended as
// assistant turns), until end of input; in a terminal it prompts with "> " on stderr.
// The prompt ids are the rendered text encoded without adding special tokens (the
// template writes its own BOS), as apply_chat_template(..., tokenize=True).
//
// A reply ends at the model's end-of-sequence tokens (as above) or at the template's
// end-of-turn token: the special token the template writes right after an assistant
// message (<|im_end|>, <|eot_id|>, <end_of_turn>, <|end|>, ...), which instruct models
// emit when their turn is done and which generation_config.json does not always list.
// Text mode writes the reply alone; --json writes the object above for each reply, with
// prompt_ids the rendered conversation's ids and text the reply. --chat-date
// (YYYY-MM-DD, default today) is the date the template's strftime_now sees, and
// --template-kwarg KEY=JSON passes a template variable (enable_thinking=false).
//
// --prompt-file FILE takes the prompt from a file, whole (newlines included), for
// prompts longer than a command line takes (Linux limits one argument to 128 KiB); the
// prompt and --max-new-tokens must fit the model's context, checked before anything is
// generated. --merge-to writes to a new directory: one that is --model or --adapter, or
// inside one, is refused, and a file of it that is a symlink is replaced, not written
// through.
//
// The exit status is 2 for a usage error (a bad or conflicting flag) and 1 when the
// model, its tokenizer or the generation fails.
package main

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gotrain/gotrain/internal/chatcli"
	"github.com/gotrain/gotrain/internal/fsutil"
	"github.com/gotrain/gotrain/internal/lmdir"
	"github.com/gotrain/gotrain/tokenizer"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/lora"
	"github.com/gotrain/gotrain/torch/nn/models"
)

func main() {
	os.Exit(runIO(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// usageLine is the synopsis printed with -h and after a usage error.
const usageLine = `usage: generate --model DIR (--prompt TEXT | --prompt-file FILE) [--max-new-tokens N]
                [--greedy | --temperature T --top-k K --top-p P --seed S]
                [--repetition-penalty R] [--stop STR]... [--device cpu|cuda|cuda:N]
                [--dtype float32|bfloat16|float16] [--adapter DIR] [--json]
                [--chat [--system TEXT] | --messages FILE.json]
                [--chat-date YYYY-MM-DD] [--template-kwarg KEY=JSON]...`

// Exit statuses.
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

// config is what the command line sets; the flags are bound to its fields.
type config struct {
	Model        string // the Hugging Face model directory
	Adapter      string // a LoRA adapter directory (PEFT's files)
	MergeTo      string // where to write the base with the adapter merged in
	Prompt       string
	PromptFile   string // --prompt-file: the prompt's text is read from it
	MaxNewTokens int

	Greedy            bool
	Temperature       float64
	TopK              int
	TopP              float64
	Seed              int64
	RepetitionPenalty float64
	Stop              stopStrings

	Device string
	DType  string
	JSON   bool

	Chat     bool   // talk through the chat template
	System   string // the system turn before --prompt or stdin's turns
	Messages string // a conversation file whose next assistant turn to generate
	ChatDate string
	Kwargs   chatcli.Kwargs

	// Derived by validate from which flags were given.
	chat bool      // --chat or --messages
	now  time.Time // --chat-date, for strftime_now

	genEOS  models.TokenIDs // generation_config.json's eos_token_id, read before the model loads
	sample  bool
	seeded  bool
	device  torch.Device
	dtype   torch.DType
	flagSet map[string]bool
}

// stopStrings is the repeatable --stop flag.
type stopStrings []string

func (s *stopStrings) String() string { return strings.Join(*s, ", ") }

func (s *stopStrings) Set(v string) error {
	if v == "" {
		return errors.New("a stop string may not be empty")
	}
	*s = append(*s, v)
	return nil
}

// usageError is a bad command line (exit status 2), as opposed to a failure of the model
// or its files (1).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error {
	return &usageError{msg: fmt.Sprintf(format, a...)}
}

// run is the command with the process's stdin (read by --chat without --prompt).
func run(args []string, stdout, stderr io.Writer) int {
	return runIO(args, os.Stdin, stdout, stderr)
}

// runIO is the command: it parses args, reads a chat's user turns from stdin, writes
// the output to stdout and messages to stderr, and returns the exit status.
func runIO(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cfg, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err == nil {
		err = generate(cfg, stdin, stdout, stderr)
	}
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "generate:", err)
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintln(stderr, usageLine)
		fmt.Fprintln(stderr, "run generate -h for the flags")
		return exitUsage
	}
	return exitRuntime
}

// parseArgs reads the command line into a checked config.
func parseArgs(args []string, stderr io.Writer) (*config, error) {
	cfg := &config{}
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	// The flag package's own messages are left out: run prints each error once, with
	// the synopsis; -h prints the synopsis and the flags.
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.Model, "model", "", "Hugging Face model `DIR`: config.json, model.safetensors (or shards), tokenizer.json (required)")
	fs.StringVar(&cfg.Adapter, "adapter", "", "LoRA adapter `DIR` (adapter_config.json, adapter_model.safetensors, as PEFT or cmd/train writes it) to apply to the model")
	fs.StringVar(&cfg.MergeTo, "merge-to", "", "merge --adapter into the model and write the result to `DIR` as a Hugging Face model directory (then generate from it if --prompt is given)")
	fs.StringVar(&cfg.Prompt, "prompt", "", "the `TEXT` to continue (required, or --prompt-file)")
	fs.StringVar(&cfg.PromptFile, "prompt-file", "", "read the prompt from `FILE` (UTF-8 text, taken whole; for prompts longer than a command line takes)")
	fs.IntVar(&cfg.MaxNewTokens, "max-new-tokens", 64, "generate at most `N` tokens")
	fs.BoolVar(&cfg.Greedy, "greedy", false, "take the most likely token at each step (the default without sampling flags)")
	fs.Float64Var(&cfg.Temperature, "temperature", 1, "sample, dividing the logits by `T` (> 0; 1: the model's distribution)")
	fs.IntVar(&cfg.TopK, "top-k", 50, "when sampling, draw from the `K` most likely tokens only (0: all; 50 as transformers' default)")
	fs.Float64Var(&cfg.TopP, "top-p", 1, "sample from the smallest set of tokens whose probability reaches `P` (0 < P <= 1; 1: all)")
	fs.Int64Var(&cfg.Seed, "seed", 0, "`SEED` of the sampling, for repeatable draws (default: a random one)")
	fs.Float64Var(&cfg.RepetitionPenalty, "repetition-penalty", 1, "divide the scores of the tokens already in the sequence by `R` (> 1 makes them less likely), as transformers' repetition_penalty")
	fs.Var(&cfg.Stop, "stop", "stop when the continuation contains `STR` (repeatable)")
	fs.StringVar(&cfg.Device, "device", "cpu", "`DEVICE`: cpu, cuda or cuda:N")
	fs.StringVar(&cfg.DType, "dtype", "float32", "`DTYPE` of the weights: float32 (fp32), bfloat16 (bf16) or float16 (fp16)")
	fs.BoolVar(&cfg.JSON, "json", false, `print one JSON object {"prompt_ids", "new_ids", "text"} instead of streaming text (one a reply with --chat)`)
	fs.BoolVar(&cfg.Chat, "chat", false, "talk through the model's chat template: --prompt is one user turn; without it, user turns are read from stdin, one a line")
	fs.StringVar(&cfg.System, "system", "", "with --chat: the system turn's `TEXT`")
	fs.StringVar(&cfg.Messages, "messages", "", "render the conversation in `FILE.json` (a list of messages or {\"messages\", \"tools\"}) with the chat template and generate the next assistant turn")
	fs.StringVar(&cfg.ChatDate, "chat-date", "", "with --chat or --messages: the `YYYY-MM-DD` the template's strftime_now sees (default today)")
	fs.Var(&cfg.Kwargs, "template-kwarg", "with --chat or --messages: a template variable `KEY=JSON`, such as enable_thinking=false (repeatable)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fmt.Fprintln(stderr, usageLine)
			fmt.Fprintln(stderr)
			fs.PrintDefaults()
			return nil, err
		}
		return nil, usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected arguments %q (the prompt goes in --prompt)", fs.Args())
	}
	cfg.flagSet = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { cfg.flagSet[f.Name] = true })
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// validate checks the flags' values and combinations and fills the derived fields.
func (c *config) validate() error {
	set := c.flagSet
	c.chat = c.Chat || c.Messages != ""
	switch {
	case c.Model == "":
		return usagef("--model is required: a Hugging Face model directory")
	case set["prompt"] && set["prompt-file"]:
		return usagef("--prompt conflicts with --prompt-file: give the prompt one way")
	case set["prompt-file"] && c.Messages != "":
		return usagef("--messages conflicts with --prompt-file: the conversation's last turn is the prompt")
	case !set["prompt"] && !set["prompt-file"] && c.MergeTo == "" && !c.chat:
		return usagef("--prompt is required (or --prompt-file, or --chat to read user turns from stdin)")
	case c.Messages != "" && set["prompt"]:
		return usagef("--messages conflicts with --prompt: the conversation's last turn is the prompt")
	case c.Messages != "" && set["system"]:
		return usagef("--messages conflicts with --system: the system turn goes in the file")
	case set["system"] && !c.chat:
		return usagef("--system applies to --chat only")
	case (set["chat-date"] || set["template-kwarg"]) && !c.chat:
		return usagef("--chat-date and --template-kwarg apply to --chat and --messages only")

	case c.MergeTo != "" && c.Adapter == "":
		return usagef("--merge-to needs --adapter: the adapter to merge")
	case c.MaxNewTokens < 1:
		return usagef("--max-new-tokens must be at least 1, got %d", c.MaxNewTokens)
	}
	var sampling []string
	for _, name := range []string{"temperature", "top-k", "top-p"} {
		if set[name] {
			sampling = append(sampling, "--"+name)
		}
	}
	c.sample, c.seeded = len(sampling) > 0, set["seed"]
	switch {
	case c.Greedy && c.sample:
		return usagef("--greedy conflicts with %s: greedy decoding takes the most likely token, sampling draws one", strings.Join(sampling, ", "))
	case c.seeded && !c.sample:
		return usagef("--seed applies to sampling only; give --temperature, --top-k or --top-p too (--temperature 1 samples from the model's distribution as it is)")
	case set["temperature"] && !(c.Temperature > 0 && !math.IsInf(c.Temperature, 1)):
		return usagef("--temperature must be > 0, got %v", c.Temperature)
	case set["temperature"] && c.Temperature < minTemperature:
		return usagef("--temperature %v is below %v: logits divided by it overflow float32 and sampling has no distribution left; --greedy is its limit", c.Temperature, minTemperature)
	case c.TopK < 0:
		return usagef("--top-k must be >= 0 (0: no top-k), got %d", c.TopK)
	case set["top-p"] && !(c.TopP > 0 && c.TopP <= 1):
		return usagef("--top-p must be in (0, 1], got %v", c.TopP)
	case !(c.RepetitionPenalty > 0 && !math.IsInf(c.RepetitionPenalty, 1)):
		return usagef("--repetition-penalty must be > 0 (1: none), got %v", c.RepetitionPenalty)
	}
	dev, err := torch.ParseDevice(c.Device)
	if err != nil {
		return usagef("--device: %v", err)
	}
	c.device = dev
	dt, err := lmdir.ParseDType(c.DType)
	if err != nil {
		return usagef("--dtype: %v", err)
	}
	c.dtype = dt
	if c.now, err = chatcli.Date(c.ChatDate); err != nil {
		return usagef("--chat-date: %v", err)
	}
	if c.MergeTo != "" {
		if err := checkMergeTo(c.MergeTo, map[string]string{"--model": c.Model, "--adapter": c.Adapter}); err != nil {
			return err
		}
	}
	if c.PromptFile != "" {
		b, err := fsutil.ReadFile(c.PromptFile, maxPromptFileBytes)
		if err != nil {
			return fmt.Errorf("--prompt-file: %w", err)
		}
		c.Prompt = string(b)
		set["prompt"] = true
	}
	return nil
}

// minTemperature is the smallest --temperature sampled with: below it, logits of a few
// hundred divided by it leave float32's range (10^38) and no distribution is left.
const minTemperature = 1e-6

// maxPromptFileBytes bounds --prompt-file: far more text than any model's context
// holds (a token is a few bytes), read before the tokenizer says how many tokens it is.
const maxPromptFileBytes = 64 << 20

// checkMergeTo refuses an output directory that is one of the inputs or lies inside
// one: saving there would replace the base's files while they are the model (in a
// Hugging Face cache, the snapshot's links point into its blobs).
func checkMergeTo(out string, inputs map[string]string) error {
	o, err := resolvedAbs(out)
	if err != nil {
		return usagef("--merge-to: %v", err)
	}
	for flagName, in := range inputs {
		if in == "" {
			continue
		}
		i, err := resolvedAbs(in)
		if err != nil {
			return usagef("%s: %v", flagName, err)
		}
		if o == i || fsutil.Within(o, i) {
			return usagef("--merge-to %s is %s %s or inside it: write the merged model to a new directory", out, flagName, in)
		}
	}
	return nil
}

// resolvedAbs is path made absolute with the symlinks of its longest existing prefix
// resolved, so that two names of one directory compare equal.
func resolvedAbs(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	rest := ""
	for p := abs; ; p = filepath.Dir(p) {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest), nil
		}
		if p == filepath.Dir(p) {
			return abs, nil
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}

// output is what --json prints.
type output struct {
	PromptIDs []int64 `json:"prompt_ids"`
	NewIDs    []int64 `json:"new_ids"`
	Text      string  `json:"text"`
}

// generate loads the model and tokenizer of cfg.Model and continues the prompt, or
// with --chat answers the conversation.
func generate(cfg *config, stdin io.Reader, stdout, stderr io.Writer) (err error) {
	// Ops panic with *torch.Error on libtorch failures (out of memory on the device);
	// they end the command with a message, not a trace.
	defer torch.Recover(&err, "generate")
	if err := lmdir.CheckDevice(cfg.device); err != nil {
		return err
	}
	tok, err := tokenizer.LoadDir(cfg.Model)
	if err != nil {
		return err
	}
	var ids []int64
	var conv *conversation
	if cfg.chat {
		// The template and a given conversation are checked before the model loads.
		if conv, err = newConversation(cfg, tok); err != nil {
			return err
		}
	} else {
		if ids, err = tok.TryEncode(cfg.Prompt, true); err != nil {
			return fmt.Errorf("encoding the prompt: %w", err)
		}
		if len(ids) == 0 && cfg.Prompt != "" {
			return fmt.Errorf("the prompt %q encodes to no tokens (the tokenizer adds no BOS), so there is nothing to continue", cfg.Prompt)
		}
	}
	// The small files are checked before the model loads, so that a mistake in them is
	// reported at once, not after minutes of loading.
	if cfg.genEOS, err = lmdir.GenerationEOS(cfg.Model); err != nil {
		return err
	}
	if cfg.Adapter != "" {
		if _, err := lora.ReadConfig(cfg.Adapter); err != nil {
			return fmt.Errorf("--adapter: %w", err)
		}
	}
	m, err := loadModel(cfg, stderr)
	if err != nil {
		return err
	}
	defer nn.Free(m)
	if cfg.MergeTo != "" && !cfg.flagSet["prompt"] && !cfg.chat {
		return nil // merged and written; nothing to continue
	}
	g, err := newGenerator(cfg, m, tok, stdout)
	if err != nil {
		return err
	}
	if !cfg.chat {
		if len(ids) == 0 {
			return fmt.Errorf("the prompt %q encodes to no tokens (the tokenizer adds no BOS), so there is nothing to continue", cfg.Prompt)
		}
		_, err := g.complete(ids, cfg.Prompt)
		return err
	}
	end := lmdir.TurnEnd(conv.tmpl, conv.tok, conv.opts)
	if end >= 0 && !slices.Contains(g.opts.StopTokens, end) {
		g.opts.StopTokens = append(slices.Clone(g.opts.StopTokens), end)
	}
	if cfg.flagSet["prompt"] || cfg.Messages != "" {
		if cfg.flagSet["prompt"] {
			conv.add("user", cfg.Prompt)
		}
		_, err := conv.reply(g)
		return err
	}
	return chatLoop(conv, g, stdin, stderr)
}

// generator continues prompts with one model and one set of options.
type generator struct {
	cfg  *config
	m    models.CausalLM
	tok  *tokenizer.Tokenizer
	dc   models.DecoderConfig
	opts models.GenerateOptions
	out  io.Writer
}

// newGenerator reads the model's stop tokens and turns the flags into options.
func newGenerator(cfg *config, m models.CausalLM, tok *tokenizer.Tokenizer, out io.Writer) (*generator, error) {
	dc := m.DecoderConfig()
	stops := lmdir.EOSTokens(cfg.genEOS, dc, tok)
	opts := models.GenerateOptions{
		MaxNewTokens:      cfg.MaxNewTokens,
		StopTokens:        stops,
		RepetitionPenalty: cfg.RepetitionPenalty,
	}
	if pad, ok := tok.PAD(); ok && pad < dc.VocabSize {
		opts.PadTokenID = pad
	}
	if cfg.sample {
		opts.Sample, opts.Temperature, opts.TopK, opts.TopP = true, cfg.Temperature, cfg.TopK, cfg.TopP
		seed := cfg.Seed
		if !cfg.seeded {
			seed = randomSeed()
		}
		opts.Seed = &seed
	}
	if len(cfg.Stop) > 0 {
		// Stop strings are looked for in the text with special tokens, so that one can
		// name an end-of-turn token that is not the EOS.
		opts.StopStrings = cfg.Stop
		opts.Decode = func(ids []int64) string { return tok.Decode(ids, false) }
	}
	return &generator{cfg: cfg, m: m, tok: tok, dc: dc, opts: opts, out: out}, nil
}

// complete generates the continuation of ids and prints it: in text mode promptText
// and then the continuation's text as it arrives, with --json one object. It returns
// the new ids.
func (g *generator) complete(ids []int64, promptText string) ([]int64, error) {
	if err := fitsContext(len(ids), g.cfg.MaxNewTokens, g.dc.MaxPositions); err != nil {
		return nil, err
	}
	for _, id := range ids {
		if id >= g.dc.VocabSize {
			return nil, fmt.Errorf("the tokenizer gives the prompt token id %d, outside the model's vocabulary of %d (config.json vocab_size): %s/tokenizer.json does not belong to this model",
				id, g.dc.VocabSize, g.cfg.Model)
		}
	}
	opts := g.opts
	var stream *textStream
	if !g.cfg.JSON {
		stream = newTextStream(g.out, g.tok, promptText, ids)
		opts.Stream = func(_ int, id int64) { stream.step(id) }
	}
	out, err := models.Generate(g.m, [][]int64{ids}, opts)
	if err != nil {
		return nil, err
	}
	newIDs := out[0]
	if stream != nil {
		return newIDs, stream.finish()
	}
	enc := json.NewEncoder(g.out)
	enc.SetEscapeHTML(false) // "<|endoftext|>" stays readable
	return newIDs, enc.Encode(output{PromptIDs: ids, NewIDs: newIDs, Text: g.tok.Decode(newIDs, true)})
}

// loadModel opens the model directory in the asked dtype on the asked device; what the
// loader says of it (a part left out) goes to stderr.
func loadModel(cfg *config, stderr io.Writer) (models.CausalLM, error) {
	notice := func(msg string) { fmt.Fprintln(stderr, "generate:", msg) }
	m, err := models.LoadPretrained(cfg.Model, models.LoadOptions{DType: cfg.dtype, Device: cfg.device, Notice: notice})
	if err != nil {
		return nil, err
	}
	if cfg.Adapter == "" {
		return m, nil
	}
	a, err := lora.Load(m, cfg.Adapter, lora.LoadOptions{})
	if err != nil {
		nn.Free(m)
		return nil, fmt.Errorf("--adapter: %w", err)
	}
	if cfg.MergeTo == "" {
		return m, nil
	}
	if err := a.Merge(); err != nil {
		nn.Free(m)
		return nil, fmt.Errorf("--merge-to: %w", err)
	}
	if err := writeMerged(cfg, m); err != nil {
		nn.Free(m)
		return nil, err
	}
	return m, nil
}

// writeMerged saves the merged model to cfg.MergeTo with the base directory's tokenizer
// and generation files, so the result is a complete Hugging Face directory.
//
// A file of the output directory that is a symlink is replaced by the new file, not
// written through (the link may point into another model's files): SavePretrained and
// fsutil.WriteFileInDir write by the output directory's rule.
func writeMerged(cfg *config, m models.CausalLM) error {
	if err := models.SavePretrained(cfg.MergeTo, m, models.SaveOptions{MaxShardSize: 5 << 30}); err != nil {
		return fmt.Errorf("--merge-to: %w", err)
	}
	for _, name := range mergedExtras {
		b, err := fsutil.ReadFile(filepath.Join(cfg.Model, name), maxExtraBytes)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err == nil {
			err = fsutil.WriteFileInDir(cfg.MergeTo, name, b)
		}
		if err != nil {
			return fmt.Errorf("--merge-to: %w", err)
		}
	}
	return nil
}

// mergedExtras are the base directory's files besides config.json and the weights that
// a merged directory gets a copy of; maxExtraBytes bounds each (a tokenizer.json of a
// 256k vocabulary is about 35 MB).
var mergedExtras = []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja", "generation_config.json"}

const maxExtraBytes = 256 << 20

// fitsContext checks that the prompt and the tokens to generate fit the model's context
// before any is generated (transformers would fail in the middle, at the position
// embedding past the last one).
func fitsContext(promptLen, maxNew int, context int64) error {
	if context <= 0 {
		return nil
	}
	if int64(promptLen) >= context {
		return fmt.Errorf("the prompt is %d tokens, which leaves no room in the model's context of %d positions (config.json); shorten it to at most %d tokens",
			promptLen, context, context-1)
	}
	if int64(maxNew) > context-int64(promptLen) { // never promptLen+maxNew: it can overflow
		return fmt.Errorf("the prompt's %d tokens plus --max-new-tokens %d exceed the model's context of %d positions (config.json); give --max-new-tokens %d or less",
			promptLen, maxNew, context, context-int64(promptLen))
	}
	return nil
}

// randomSeed returns a seed for sampling without --seed, so that runs differ as they do
// in Python (libtorch's own default seed is a constant).
func randomSeed() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return int64(binary.LittleEndian.Uint64(b[:]) >> 1)
}

// textStream writes the prompt and then the continuation's text as its tokens arrive.
// Like tokenizers' DecodeStream it decodes a window of ids, the last piece printed as
// context and then the ids not printed yet, and prints what the window's text adds to
// the context's: a character whose bytes span several tokens comes out whole, and a
// decoder that strips the first space of a text (Llama 2's, Mistral's) keeps the space
// at the seam with the prompt. It adds one rule: text is held back while the window ends
// in a byte-fallback token (<0xNN>), because a run of byte tokens that is valid UTF-8
// turns into U+FFFD replacements when an invalid byte follows; DecodeStream (here and in
// tokenizers) fails at that point, having printed the valid text already.
type textStream struct {
	w       io.Writer
	tok     *tokenizer.Tokenizer
	window  []int64
	printed int    // window[:printed] is printed
	prefix  string // the text of window[:printed]
	err     error  // the first write error; later steps do nothing
}

// newTextStream writes the prompt; its ids are the first context.
func newTextStream(w io.Writer, tok *tokenizer.Tokenizer, prompt string, ids []int64) *textStream {
	s := &textStream{w: w, tok: tok, window: slices.Clone(ids), printed: len(ids)}
	s.prefix = tok.Decode(s.window, true)
	_, s.err = io.WriteString(w, prompt)
	return s
}

func (s *textStream) step(id int64) {
	if s.err != nil {
		return
	}
	s.window = append(s.window, id)
	if s.isByteToken(id) {
		return
	}
	text := s.tok.Decode(s.window, true)
	if strings.HasSuffix(text, "\uFFFD") { // a character whose last bytes are to come
		return
	}
	s.err = s.write(text)
	s.window = s.window[s.printed:]
	s.printed = len(s.window)
	s.prefix = s.tok.Decode(s.window, true)
}

// write prints what text adds to the printed context. Should a decoder change text it
// printed already (none supported does), the part that differs is printed again rather
// than lost.
func (s *textStream) write(text string) error {
	out, ok := strings.CutPrefix(text, s.prefix)
	if !ok {
		n := 0
		for n < len(text) && n < len(s.prefix) && text[n] == s.prefix[n] {
			n++
		}
		for n > 0 && !utf8.RuneStart(text[n]) {
			n--
		}
		out = text[n:]
	}
	if out == "" {
		return nil
	}
	_, err := io.WriteString(s.w, out)
	return err
}

// isByteToken reports whether id is a byte-fallback token, "<0xNN>".
func (s *textStream) isByteToken(id int64) bool {
	t, ok := s.tok.IDToToken(id)
	if !ok || len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return false
	}
	_, err := strconv.ParseUint(t[3:5], 16, 8)
	return err == nil
}

// finish writes what was held back (bytes that never completed a character, as U+FFFD)
// and a newline.
func (s *textStream) finish() error {
	if s.err != nil {
		return s.err
	}
	if err := s.write(s.tok.Decode(s.window, true)); err != nil {
		return err
	}
	_, err := io.WriteString(s.w, "\n")
	return err
}
