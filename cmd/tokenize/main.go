// Command tokenize prints what a model's tokenizer and chat template make of a text or
// a conversation, so that a rendering can be checked against Python's.
//
// Usage:
//
//	tokenize --model DIR (--text STR | --messages FILE.json [--add-generation-prompt])
//	         [--chat-date YYYY-MM-DD] [--template-kwarg KEY=JSON]... [--json]
//
//	go run ./cmd/tokenize --model ./Qwen2.5-0.5B-Instruct --text "Hello, world"
//	go run ./cmd/tokenize --model ./Qwen3-0.6B --messages chat.json --template-kwarg enable_thinking=false --json
//
// DIR needs only the tokenizer files: tokenizer.json, and for --messages the chat
// template (tokenizer_config.json's chat_template, or chat_template.jinja).
//
// --text encodes STR as transformers' tokenizer(STR) does: with the post-processor's
// special tokens (a Llama BOS). --messages reads a conversation, a JSON list of messages
// or an object {"messages": [...], "tools": [...]} (one line of a training file),
// renders it with the template as transformers' apply_chat_template does and encodes the
// text without adding special tokens (the template writes its own BOS), as
// apply_chat_template(..., tokenize=True). --add-generation-prompt appends the header
// of the assistant's next turn. --chat-date is the date the template's strftime_now
// sees (default today); --template-kwarg passes a template variable, its value in JSON
// (enable_thinking=false, or a string as reasoning_effort="high"), and may be repeated.
//
// --json prints one object:
//
//	{"text": "...", "ids": [...], "assistant_mask": [...]}
//
// where text is the text encoded (the rendering, for --messages), ids its token ids and,
// for --messages only, assistant_mask 1 for each token the training loss covers (the
// assistant turns, as chat.Encode marks them) and 0 elsewhere. Without --json the same
// is listed one token a line, learned tokens marked with "*".
//
// The exit status is 2 for a usage error and 1 when the files or the rendering fail.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/gotrain/gotrain/internal/chatcli"
	"github.com/gotrain/gotrain/tokenizer"
	"github.com/gotrain/gotrain/tokenizer/chat"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// usageLine is the synopsis printed with -h and after a usage error.
const usageLine = `usage: tokenize --model DIR (--text STR | --messages FILE.json [--add-generation-prompt])
                [--chat-date YYYY-MM-DD] [--template-kwarg KEY=JSON]... [--json]`

// Exit statuses.
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

// config is what the command line sets.
type config struct {
	Model               string
	Text                string
	Messages            string
	AddGenerationPrompt bool
	ChatDate            string
	Kwargs              chatcli.Kwargs
	JSON                bool

	text bool      // --text was given (an empty text is a text)
	now  time.Time // from --chat-date
}

// usageError is a bad command line (exit status 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error {
	return &usageError{msg: fmt.Sprintf(format, a...)}
}

// run is the command: it parses args, writes the output to stdout and messages to
// stderr, and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err == nil {
		err = tokenize(cfg, stdout)
	}
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "tokenize:", err)
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintln(stderr, usageLine)
		fmt.Fprintln(stderr, "run tokenize -h for the flags")
		return exitUsage
	}
	return exitRuntime
}

// parseArgs reads the command line into a checked config.
func parseArgs(args []string, stderr io.Writer) (*config, error) {
	cfg := &config{}
	fs := flag.NewFlagSet("tokenize", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.Model, "model", "", "`DIR` with tokenizer.json (and the chat template for --messages) (required)")
	fs.StringVar(&cfg.Text, "text", "", "encode `STR`, with the tokenizer's special tokens")
	fs.StringVar(&cfg.Messages, "messages", "", "render and encode the conversation in `FILE.json`: a list of messages or {\"messages\": [...], \"tools\": [...]}")
	fs.BoolVar(&cfg.AddGenerationPrompt, "add-generation-prompt", false, "with --messages: end with the header of the assistant's next turn")
	fs.StringVar(&cfg.ChatDate, "chat-date", "", "the `YYYY-MM-DD` the template's strftime_now sees (default today)")
	fs.Var(&cfg.Kwargs, "template-kwarg", "a template variable `KEY=JSON`, such as enable_thinking=false (repeatable)")
	fs.BoolVar(&cfg.JSON, "json", false, `print one JSON object {"text", "ids", "assistant_mask"}`)
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
		return nil, usagef("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	cfg.text = set["text"]
	switch {
	case cfg.Model == "":
		return nil, usagef("--model is required: a directory with tokenizer.json")
	case cfg.text == (cfg.Messages != ""):
		return nil, usagef("give one of --text and --messages")
	case cfg.text && cfg.AddGenerationPrompt:
		return nil, usagef("--add-generation-prompt applies to --messages only")
	case cfg.text && (set["chat-date"] || set["template-kwarg"]):
		return nil, usagef("--chat-date and --template-kwarg apply to --messages only")
	}
	var err error
	if cfg.now, err = chatcli.Date(cfg.ChatDate); err != nil {
		return nil, usagef("--chat-date: %v", err)
	}
	return cfg, nil
}

// output is what --json prints.
type output struct {
	Text          string  `json:"text"`
	IDs           []int64 `json:"ids"`
	AssistantMask []int   `json:"assistant_mask,omitempty"`
}

// tokenize loads the files and prints the encoding.
func tokenize(cfg *config, stdout io.Writer) error {
	tok, err := tokenizer.LoadDir(cfg.Model)
	if err != nil {
		return err
	}
	var out output
	if cfg.text {
		ids, err := tok.TryEncode(cfg.Text, true)
		if err != nil {
			return fmt.Errorf("--text: %w", err)
		}
		out = output{Text: cfg.Text, IDs: ids}
	} else {
		msgs, tools, err := chatcli.ReadMessages(cfg.Messages)
		if err != nil {
			return fmt.Errorf("--messages: %w", err)
		}
		tmpl, err := chat.LoadDir(cfg.Model)
		if err != nil {
			return err
		}
		opts := chat.Options{AddGenerationPrompt: cfg.AddGenerationPrompt, Tools: tools, Now: cfg.now, Vars: cfg.Kwargs}
		ids, mask, text, err := chat.Encode(tok, tmpl, msgs, opts)
		if err != nil {
			return fmt.Errorf("%s: the chat template refuses the conversation: %w", cfg.Messages, err)
		}
		out = output{Text: text, IDs: ids, AssistantMask: make([]int, len(mask))}
		for i, m := range mask {
			out.AssistantMask[i] = int(m)
		}
	}
	if out.IDs == nil {
		out.IDs = []int64{}
	}
	if cfg.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		return enc.Encode(out)
	}
	return list(stdout, tok, out, !cfg.text)
}

// list writes the readable form: the text, then one token a line (position, id, the
// token's string, * when the loss covers it).
func list(w io.Writer, tok *tokenizer.Tokenizer, out output, chatMode bool) error {
	var b strings.Builder
	fmt.Fprintf(&b, "text: %q\n", out.Text)
	learned := 0
	for _, m := range out.AssistantMask {
		learned += m
	}
	if chatMode {
		fmt.Fprintf(&b, "%d tokens, %d learned (*)\n", len(out.IDs), learned)
	} else {
		fmt.Fprintf(&b, "%d tokens\n", len(out.IDs))
	}
	for i, id := range out.IDs {
		mark := " "
		if chatMode && out.AssistantMask[i] == 1 {
			mark = "*"
		}
		s, _ := tok.IDToToken(id)
		fmt.Fprintf(&b, "%6d %s %8d  %q\n", i, mark, id, s)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
