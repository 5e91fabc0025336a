package chat

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// assistantFields are the fields of an assistant message whose rendering is the
// assistant's output (what the loss covers).
var assistantFields = set("content", "reasoning_content", "thinking", "reasoning", "tool_calls")

// reasoningFields are the names transformers reads a message's reasoning under; it
// copies the first non-null one to "thinking" and "reasoning_content".
var reasoningFields = []string{"reasoning_content", "thinking", "reasoning"}

// turnEnds are the end-of-turn tokens of the common template families, besides the
// tokenizer's eos_token.
var turnEnds = []string{"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "<|end|>",
	"<｜end▁of▁sentence｜>", "</s>", "<|endoftext|>", "<|end_of_text|>", "<turn|>"}

// maxTurnEndGap bounds the template text between an assistant turn's last byte and its
// end-of-turn token (Qwen2.5's "}\n</tool_call>" is 14 bytes, DeepSeek's
// "<｜tool▁call▁end｜><｜tool▁calls▁end｜>" 46).
const maxTurnEndGap = 64

func (t *Template) render(msgs []Message, o Options) (Rendered, error) {
	text, runs, gens, err := t.renderRaw(msgs, o, true)
	if err != nil {
		return Rendered{}, err
	}
	out := Rendered{Text: text}
	if t.generation {
		for _, g := range gens {
			if g[1] > g[0] {
				out.Assistant = append(out.Assistant, g)
			}
		}
		return out, nil
	}
	out.Assistant = t.provenanceSpans(text, runs, msgs, o)
	return out, nil
}

// renderRaw renders and returns the text, its provenance runs and the generation blocks.
func (t *Template) renderRaw(msgs []Message, o Options, tag bool) (_ string, _ []run, _ [][2]int, err error) {
	defer func() {
		if p := recover(); p != nil {
			rp, ok := p.(renderPanic)
			if !ok {
				panic(p)
			}
			err = rp.err
		}
	}()
	sc := newScope(nil)
	for k, v := range t.special {
		sc.set(k, newStr(v))
	}
	for _, k := range sortedKeysAny(o.Vars) {
		v, err := toValue(o.Vars[k], 0)
		if err != nil {
			return "", nil, nil, fmt.Errorf("chat: variable %q: %w", k, err)
		}
		sc.set(k, v)
	}
	ms := &list{}
	for i, m := range msgs {
		v, err := messageValue(m, i, tag)
		if err != nil {
			return "", nil, nil, fmt.Errorf("chat: message %d: %w", i, err)
		}
		ms.items = append(ms.items, v)
	}
	sc.set("messages", ms)
	for name, x := range map[string][]any{"tools": o.Tools, "documents": o.Documents} {
		if x == nil {
			sc.set(name, nil)
			continue
		}
		v, err := toValue(x, 0)
		if err != nil {
			return "", nil, nil, fmt.Errorf("chat: %s: %w", name, err)
		}
		sc.set(name, v)
	}
	sc.set("add_generation_prompt", o.AddGenerationPrompt)
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	var top strBuf
	r := &renderer{now: now, top: &top}
	if err := r.exec(*t.root, newScope(sc), &top); err != nil {
		return "", nil, nil, err
	}
	return top.b.String(), top.runs, r.gens, nil
}

func sortedKeysAny(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// messageValue converts a message as transformers prepares it: keys whose value is nil
// are dropped, and the reasoning is aliased under "thinking" and "reasoning_content".
// Every string of an assistant's output fields is tagged with the message (tag i+1),
// the other messages' fields with -(i+1), so that the mask can tell them apart.
func messageValue(m Message, i int, tag bool) (value, error) {
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if v != nil {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var reasoning any
	for _, f := range reasoningFields {
		if v := m[f]; v != nil {
			reasoning = v
			break
		}
	}
	if reasoning != nil {
		ordered := []string{"thinking"}
		for _, k := range keys {
			if k != "thinking" && k != "reasoning_content" {
				ordered = append(ordered, k)
			}
		}
		keys = append(ordered, "reasoning_content")
	}
	role, _ := m["role"].(string)
	d := newDict()
	for _, k := range keys {
		x := m[k]
		if reasoning != nil && (k == "thinking" || k == "reasoning_content") {
			x = reasoning
		}
		t := 0
		if tag && k != "role" && k != "name" {
			if role == "assistant" && assistantFields[k] {
				t = i + 1
			} else if role != "assistant" {
				t = -(i + 1)
			}
		}
		v, err := toValue(x, t)
		if err != nil {
			return nil, fmt.Errorf("field %q: %w", k, err)
		}
		d.set(k, v)
	}
	return d, nil
}

// provenanceSpans finds each assistant turn in the text from the provenance runs: from
// its first to its last tagged byte, widened back to the end of the assistant header
// (the text add_generation_prompt appends) when that header directly precedes it, and
// forward over the end-of-turn token that follows it.
func (t *Template) provenanceSpans(text string, runs []run, msgs []Message, o Options) [][2]int {
	type span struct{ start, end int }
	byMsg := map[int]*span{}
	var order []int
	for _, r := range runs {
		if r.tag <= 0 {
			continue
		}
		s, ok := byMsg[r.tag]
		if !ok {
			byMsg[r.tag] = &span{r.start, r.end}
			order = append(order, r.tag)
			continue
		}
		s.start, s.end = min(s.start, r.start), max(s.end, r.end)
	}
	if len(order) == 0 {
		return nil
	}
	openers := t.turnOpeners(o)
	// tagged reports whether any byte of [a,b) came from a message.
	tagged := func(a, b int) bool {
		for _, r := range runs {
			if r.start < b && r.end > a {
				return true
			}
		}
		return false
	}
	ends := append([]string{}, turnEnds...)
	if eos := t.special["eos_token"]; eos != "" {
		ends = append([]string{eos}, ends...)
	}
	var out [][2]int
	for _, tg := range order {
		s := byMsg[tg]
		start, end := s.start, s.end
		if k := openerEnd(text, runs, start, openers); k >= 0 && !tagged(k, start) {
			start = k
		}
		best := -1
		limit := min(len(text), end+maxTurnEndGap)
		for _, e := range ends {
			k := strings.Index(text[end:min(len(text), limit+len(e))], e)
			if k >= 0 && k <= maxTurnEndGap && !tagged(end, end+k) && (best < 0 || end+k+len(e) < best) {
				best = end + k + len(e)
			}
		}
		if best >= 0 {
			end = best
		}
		out = append(out, [2]int{start, end})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	merged := out[:1]
	for _, s := range out[1:] {
		last := &merged[len(merged)-1]
		if s[0] <= last[1] {
			last[1] = max(last[1], s[1])
			continue
		}
		merged = append(merged, s)
	}
	return merged
}

// turnOpeners returns the texts that may open an assistant turn, most specific first:
// the header that add_generation_prompt appends after a one-user-turn conversation
// ("<|im_start|>assistant\n"), then its prefixes that end at a '>' or a newline (a
// history turn lacks the "<think>\n" that DeepSeek-R1's prompt adds), and, for a
// template without such a header (Mistral), the text the template writes after a user
// message's content ("[/INST]").
func (t *Template) turnOpeners(o Options) []string {
	// The openers depend on the variables and on whether tools and documents are given,
	// not on the conversation: one probe per set of options (a dataset renders with one).
	key, err := json.Marshal([]any{o.Vars, o.Tools, o.Documents, o.Now.Format("2006-01-02")})
	if err == nil {
		if v, ok := t.openers.Load(string(key)); ok {
			return v.([]string)
		}
	}
	out := t.probeOpeners(o)
	if err == nil {
		t.openers.Store(string(key), out)
	}
	return out
}

func (t *Template) probeOpeners(o Options) []string {
	const probe = "gotrain-probe-content"
	msgs := []Message{{"role": "user", "content": probe}}
	o.AddGenerationPrompt = false
	without, _, _, err := t.renderRaw(msgs, o, false)
	if err != nil {
		return nil
	}
	o.AddGenerationPrompt = true
	with, _, _, err := t.renderRaw(msgs, o, false)
	if err != nil || !strings.HasPrefix(with, without) {
		return nil
	}
	var out []string
	if h := with[len(without):]; strings.TrimSpace(h) != "" {
		out = append(out, h)
		for i := len(h) - 1; i > 1; i-- {
			if (h[i-1] == '>' || h[i-1] == '\n') && strings.TrimSpace(h[:i]) != "" {
				out = append(out, h[:i])
			}
		}
		return out
	}
	if k := strings.LastIndex(without, probe); k >= 0 {
		if u := without[k+len(probe):]; strings.TrimSpace(u) != "" {
			out = append(out, u)
		}
	}
	return out
}

// openerEnd returns the end of the last opener found between the previous tagged byte
// and start, trying the openers in order, or -1.
func openerEnd(text string, runs []run, start int, openers []string) int {
	lo := 0
	for _, r := range runs {
		if r.end <= start && r.end > lo {
			lo = r.end
		}
	}
	for _, op := range openers {
		if k := strings.LastIndex(text[lo:start], op); k >= 0 {
			return lo + k + len(op)
		}
	}
	return -1
}
