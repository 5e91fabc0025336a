package main

// --chat and --messages: a conversation rendered with the model's chat template.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gotrain/gotrain/internal/chatcli"
	"github.com/gotrain/gotrain/tokenizer"
	"github.com/gotrain/gotrain/tokenizer/chat"
)

// conversation is the chat so far and how it is rendered.
type conversation struct {
	tmpl *chat.Template
	tok  *tokenizer.Tokenizer
	msgs []chat.Message
	opts chat.Options
	src  string // what the messages came from, for errors: the file or "the conversation"
}

// newConversation loads the directory's chat template and the conversation the flags
// give: --messages FILE.json, or --system's turn.
func newConversation(cfg *config, tok *tokenizer.Tokenizer) (*conversation, error) {
	tmpl, err := chat.LoadDir(cfg.Model)
	if err != nil {
		return nil, fmt.Errorf("--chat: %w", err)
	}
	c := &conversation{tmpl: tmpl, tok: tok, src: "the conversation",
		opts: chat.Options{AddGenerationPrompt: true, Now: cfg.now, Vars: cfg.Kwargs}}
	if cfg.Messages != "" {
		msgs, tools, err := chatcli.ReadMessages(cfg.Messages)
		if err != nil {
			return nil, fmt.Errorf("--messages: %w", err)
		}
		c.msgs, c.opts.Tools, c.src = msgs, tools, cfg.Messages
		// A conversation the template refuses fails before the model is loaded.
		if _, err := c.render(); err != nil {
			return nil, err
		}
	}
	if cfg.flagSet["system"] {
		c.add("system", cfg.System)
	}
	return c, nil
}

// add appends a turn.
func (c *conversation) add(role, content string) {
	c.msgs = append(c.msgs, chat.Message{"role": role, "content": content})
}

// render returns the ids of the conversation rendered with the generation prompt,
// encoded without adding special tokens, as apply_chat_template(...,
// add_generation_prompt=True, tokenize=True).
func (c *conversation) render() ([]int64, error) {
	ids, _, _, err := chat.Encode(c.tok, c.tmpl, c.msgs, c.opts)
	if err != nil {
		return nil, fmt.Errorf("%s: the chat template refuses the conversation: %w", c.src, err)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%s: the chat template renders the conversation as no tokens", c.src)
	}
	return ids, nil
}

// reply generates the assistant's next turn, prints it and appends its text (special
// tokens left out, as a chat pipeline keeps it) to the conversation.
func (c *conversation) reply(g *generator) (string, error) {
	ids, err := c.render()
	if err != nil {
		return "", err
	}
	newIDs, err := g.complete(ids, "")
	if err != nil {
		return "", err
	}
	text := c.tok.Decode(newIDs, true)
	c.add("assistant", text)
	return text, nil
}

// turnEnd returns the template's end-of-turn token: the special token the template
// writes right after an assistant message's content (ChatML's <|im_end|>, Llama 3's
// <|eot_id|>, Gemma's <end_of_turn>, Phi-3's <|end|>; an EOS for templates that end a
// turn with it), found by rendering a probe conversation. It is -1 when the template
// writes no special token there or refuses the probe.
func (c *conversation) turnEnd() (int64, error) {
	// The marker is text no template changes and no tokenizer merges with what follows.
	const marker = "gotrain end-of-turn probe"
	probe := []chat.Message{{"role": "user", "content": "Hi"}, {"role": "assistant", "content": marker}}
	opts := c.opts
	opts.AddGenerationPrompt = false
	r, err := c.tmpl.Render(probe, opts)
	if err != nil {
		return -1, nil // a template that wants, say, a system turn first: the EOS stops
	}
	i := strings.LastIndex(r.Text, marker)
	if i < 0 {
		return -1, nil
	}
	rest := strings.TrimLeft(r.Text[i+len(marker):], " \t\r\n")
	ids, err := c.tok.TryEncode(rest, false)
	if err != nil {
		return -1, err
	}
	if len(ids) == 0 || !c.tok.IsSpecial(ids[0]) {
		return -1, nil
	}
	return ids[0], nil
}

// chatLoop reads user turns from stdin, one a line, and answers each with the
// conversation so far, until end of input. In a terminal it prompts on stderr.
func chatLoop(c *conversation, g *generator, stdin io.Reader, stderr io.Writer) error {
	term := isTerminal(stdin)
	if term {
		fmt.Fprintln(stderr, "one message a line; an empty line is skipped; Ctrl-D ends the conversation")
	}
	in := bufio.NewScanner(stdin)
	in.Buffer(make([]byte, 64<<10), chatcli.MaxMessagesBytes)
	turns := 0
	for {
		if term {
			fmt.Fprint(stderr, "> ")
		}
		if !in.Scan() {
			break
		}
		line := strings.TrimSuffix(in.Text(), "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		c.add("user", line)
		turns++
		if _, err := c.reply(g); err != nil {
			return err
		}
	}
	if term {
		fmt.Fprintln(stderr)
	}
	if err := in.Err(); err != nil {
		return fmt.Errorf("reading the conversation from stdin: %w", err)
	}
	if turns == 0 && !term {
		return errNoTurns
	}
	return nil
}

// isTerminal reports whether r is a terminal (a character device), where the chat
// prompts for each turn.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// errNoTurns is returned when stdin held no user turn.
var errNoTurns = errors.New("--chat: stdin held no user turn (give --prompt, or type or pipe one message a line)")
