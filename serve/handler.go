package serve

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gotrain/gotrain/internal/lmdir"
	"github.com/gotrain/gotrain/tokenizer/chat"
)

// HandlerOptions configure NewHandler.
type HandlerOptions struct {
	// APIKey, when set, is the bearer token every /v1/ request must carry.
	APIKey string
	// MaxBodyBytes bounds a request's body (default 4 MiB).
	MaxBodyBytes int64
}

// Handler serves OpenAI's API over an Engine: POST /v1/chat/completions, POST
// /v1/completions, GET /v1/models, GET /health and GET /metrics.
type Handler struct {
	e       *Engine
	o       HandlerOptions
	mux     *http.ServeMux
	turnEnd int64
	special []string // the special tokens' texts
}

// NewHandler returns the handler of e's API.
func NewHandler(e *Engine, o HandlerOptions) *Handler {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 4 << 20
	}
	h := &Handler{e: e, o: o, mux: http.NewServeMux(), turnEnd: -1}
	for _, t := range e.tok.AddedTokens() {
		if t.Special && t.Content != "" {
			h.special = append(h.special, t.Content)
		}
	}
	if e.tmpl != nil {
		h.turnEnd = lmdir.TurnEnd(e.tmpl, e.tok, chat.Options{})
	}
	h.mux.HandleFunc("POST /v1/chat/completions", h.api(h.chatCompletions))
	h.mux.HandleFunc("POST /v1/completions", h.api(h.completions))
	h.mux.HandleFunc("GET /v1/models", h.api(h.models))
	h.mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if e.Stats().Draining {
			writeError(w, errShuttingDown())
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	h.mux.Handle("GET /metrics", e.metrics)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, newError(http.StatusNotFound, "invalid_request_error", "unknown_url", "", "no endpoint %s %s on this server", r.Method, r.URL.Path))
	})
	return h
}

// ServeHTTP routes r.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// apiError is OpenAI's error object with its HTTP status.
type apiError struct {
	status     int
	Message    string  `json:"message"`
	Type       string  `json:"type"`
	Param      *string `json:"param"`
	Code       *string `json:"code"`
	retryAfter int
}

func (e *apiError) Error() string { return e.Message }

func newError(status int, typ, code, param, format string, a ...any) *apiError {
	e := &apiError{status: status, Message: fmt.Sprintf(format, a...), Type: typ}
	if code != "" {
		e.Code = &code
	}
	if param != "" {
		e.Param = &param
	}
	return e
}

func badRequest(param, format string, a ...any) *apiError {
	return newError(http.StatusBadRequest, "invalid_request_error", "", param, format, a...)
}

func errShuttingDown() *apiError {
	return newError(http.StatusServiceUnavailable, "server_error", "service_unavailable", "", "the server is shutting down")
}

// engineError turns Submit's error into OpenAI's.
func engineError(err error) *apiError {
	switch {
	case errors.Is(err, ErrContextLength):
		return newError(http.StatusBadRequest, "invalid_request_error", "context_length_exceeded", "messages", "%v", err)
	case errors.Is(err, ErrUnknownModel):
		return newError(http.StatusNotFound, "invalid_request_error", "model_not_found", "model", "%v", err)
	case errors.Is(err, ErrQueueFull):
		e := newError(http.StatusTooManyRequests, "requests", "rate_limit_exceeded", "", "%v; retry later", err)
		e.retryAfter = 1
		return e
	case errors.Is(err, ErrShuttingDown):
		return errShuttingDown()
	case errors.Is(err, ErrBadRequest):
		return badRequest("", "%v", err)
	case errors.Is(err, context.Canceled):
		// Nobody reads it; the status (nginx's) keeps the metrics apart from failures.
		return newError(499, "invalid_request_error", "client_closed_request", "", "the client closed the request")
	}
	return newError(http.StatusInternalServerError, "server_error", "", "", "%v", err)
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	writeJSON(w, e.status, map[string]any{"error": e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// statusWriter records the status a handler wrote, for the metrics.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// api wraps an endpoint: the API key, the body limit, the error object, the metrics.
func (h *Handler) api(f func(w http.ResponseWriter, r *http.Request) *apiError) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		defer func() { h.e.metrics.request(max(sw.status, 200)) }()
		if h.o.APIKey != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(h.o.APIKey)) != 1 {
				writeError(sw, newError(http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "", "incorrect or missing API key (Authorization: Bearer KEY)"))
				return
			}
		}
		r.Body = http.MaxBytesReader(sw, r.Body, h.o.MaxBodyBytes)
		if err := f(sw, r); err != nil {
			writeError(sw, err)
		}
	}
}

// decodeBody reads r's JSON body into v.
func decodeBody(r *http.Request, v any) *apiError {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return newError(http.StatusRequestEntityTooLarge, "invalid_request_error", "", "", "the request body is over %d bytes", tooBig.Limit)
		}
		return badRequest("", "the request body is not valid JSON for this endpoint: %v", err)
	}
	return nil
}

func (h *Handler) models(w http.ResponseWriter, _ *http.Request) *apiError {
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
		Parent  string `json:"parent,omitempty"`
	}
	list := []model{}
	for i, n := range h.e.Names() {
		m := model{ID: n, Object: "model", OwnedBy: "gotrain"}
		if i > 0 {
			m.Parent = h.e.Names()[0]
		}
		list = append(list, m)
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": list})
	return nil
}

// stops is OpenAI's stop: a string or a list of up to 4.
type stops []string

func (s *stops) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("stop must be a string or a list of strings")
	}
	*s = many
	return nil
}

// common are the request fields chat and completions share.
type common struct {
	Model         string   `json:"model"`
	MaxTokens     *int     `json:"max_tokens"`
	Temperature   *float64 `json:"temperature"`
	TopP          *float64 `json:"top_p"`
	Seed          *int64   `json:"seed"`
	Stop          stops    `json:"stop"`
	Stream        bool     `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	N                *int            `json:"n"`
	Logprobs         json.RawMessage `json:"logprobs"`
	TopLogprobs      json.RawMessage `json:"top_logprobs"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	LogitBias        json.RawMessage `json:"logit_bias"`
	// IgnoreEOS is vLLM's extension: generate max_tokens whatever the EOS.
	IgnoreEOS bool `json:"ignore_eos"`
}

// request refuses the parameters the server does not implement, naming them, and
// makes the engine's request.
func (c *common) request(prompt []int64) (Request, *apiError) {
	var unimpl []string
	if c.N != nil && *c.N != 1 {
		unimpl = append(unimpl, "n (other than 1)")
	}
	if len(c.Logprobs) > 0 && string(c.Logprobs) != "null" && string(c.Logprobs) != "false" {
		unimpl = append(unimpl, "logprobs")
	}
	if len(c.TopLogprobs) > 0 && string(c.TopLogprobs) != "null" {
		unimpl = append(unimpl, "top_logprobs")
	}
	if c.PresencePenalty != nil && *c.PresencePenalty != 0 {
		unimpl = append(unimpl, "presence_penalty")
	}
	if c.FrequencyPenalty != nil && *c.FrequencyPenalty != 0 {
		unimpl = append(unimpl, "frequency_penalty")
	}
	if len(c.LogitBias) > 0 && string(c.LogitBias) != "null" && string(c.LogitBias) != "{}" {
		unimpl = append(unimpl, "logit_bias")
	}
	if len(unimpl) > 0 {
		return Request{}, badRequest(strings.Fields(unimpl[0])[0], "not implemented by this server: %s", strings.Join(unimpl, ", "))
	}
	if len(c.Stop) > 4 {
		return Request{}, badRequest("stop", "stop holds %d strings; at most 4", len(c.Stop))
	}
	r := Request{Model: c.Model, Prompt: prompt, Temperature: 1, Seed: c.Seed, Stop: c.Stop, IgnoreEOS: c.IgnoreEOS}
	if c.MaxTokens != nil {
		if *c.MaxTokens < 1 {
			return Request{}, badRequest("max_tokens", "max_tokens must be at least 1")
		}
		r.MaxTokens = *c.MaxTokens
	}
	if c.Temperature != nil {
		r.Temperature = *c.Temperature
	}
	if c.TopP != nil {
		r.TopP = *c.TopP
	}
	return r, nil
}

type chatRequest struct {
	common
	Messages            json.RawMessage `json:"messages"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	ChatTemplateKwargs  map[string]any  `json:"chat_template_kwargs"`
	Tools               json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ResponseFormat      json.RawMessage `json:"response_format"`
}

func (h *Handler) chatCompletions(w http.ResponseWriter, r *http.Request) *apiError {
	var req chatRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	switch {
	case isSet(req.Tools):
		return badRequest("tools", "not implemented by this server: tools")
	case isSet(req.ToolChoice) && string(req.ToolChoice) != `"none"`:
		return badRequest("tool_choice", "not implemented by this server: tool_choice")
	case isSet(req.ResponseFormat) && !strings.Contains(string(req.ResponseFormat), `"text"`):
		return badRequest("response_format", "not implemented by this server: response_format (other than text)")
	case h.e.tmpl == nil:
		return badRequest("messages", "the model directory has no chat template; use /v1/completions")
	case !isSet(req.Messages):
		return badRequest("messages", "messages is required")
	}
	msgs, err := chat.DecodeMessages(req.Messages)
	if err != nil {
		return badRequest("messages", "%v", err)
	}
	if len(msgs) == 0 {
		return badRequest("messages", "messages is empty")
	}
	for i, m := range msgs {
		if _, ok := m["role"].(string); !ok {
			return badRequest("messages", "messages[%d] has no role", i)
		}
		if err := flattenContent(m); err != nil {
			return badRequest("messages", "messages[%d]: %v", i, err)
		}
	}
	if req.MaxCompletionTokens != nil {
		req.MaxTokens = req.MaxCompletionTokens
	}
	ids, err := h.encodeChat(msgs, chat.Options{AddGenerationPrompt: true, Vars: req.ChatTemplateKwargs})
	if err != nil {
		return badRequest("messages", "the chat template refuses the conversation: %v", err)
	}
	er, aerr := req.request(ids)
	if aerr != nil {
		return aerr
	}
	if h.turnEnd >= 0 {
		er.StopTokens = []int64{h.turnEnd}
	}
	return h.run(w, r, er, req.common, true)
}

// flattenContent turns a message's content parts ([{"type": "text", "text": ...}]) into
// the string chat templates expect, the texts joined by newlines as vLLM joins them;
// other parts (images, audio) are not implemented.
func flattenContent(m chat.Message) error {
	parts, ok := m["content"].([]any)
	if !ok {
		return nil
	}
	var texts []string
	for _, p := range parts {
		o, ok := p.(chat.Object)
		if !ok {
			return errors.New("a content part is not an object")
		}
		typ, _ := o.Values["type"].(string)
		text, isText := o.Values["text"].(string)
		if typ != "text" || !isText {
			return fmt.Errorf("not implemented by this server: content parts of type %q (text only)", typ)
		}
		texts = append(texts, text)
	}
	m["content"] = strings.Join(texts, "\n")
	return nil
}

// encodeChat renders msgs with the chat template and encodes the text as chat.Encode
// (transformers' apply_chat_template) does, except that a special token spelled in a
// message's content is text, not the token: such a content is rendered as a
// placeholder, and encoded in its place with tokenizer.EncodeLiteral. (transformers
// 5.23 encodes "<|im_end|>" in a user's content as the control token itself, which lets
// a user end a turn and write the assistant's.)
func (h *Handler) encodeChat(msgs []chat.Message, o chat.Options) ([]int64, error) {
	var literal []string
	nonce := newID("")[:12]
	for _, m := range msgs {
		c, ok := m["content"].(string)
		if !ok || !slices.ContainsFunc(h.special, func(sp string) bool { return strings.Contains(c, sp) }) {
			continue
		}
		m["content"] = fmt.Sprintf("\uE000%s%d\uE001", nonce, len(literal))
		literal = append(literal, c)
	}
	if len(literal) == 0 {
		ids, _, _, err := chat.Encode(h.e.tok, h.e.tmpl, msgs, o)
		return ids, err
	}
	r, err := h.e.tmpl.Render(msgs, o)
	if err != nil {
		return nil, err
	}
	placeholder := regexp.MustCompile("\uE000" + nonce + `(\d+)\x{E001}`)
	var ids []int64
	last := 0
	for _, loc := range placeholder.FindAllStringSubmatchIndex(r.Text, -1) {
		part, err := h.e.tok.TryEncode(r.Text[last:loc[0]], false)
		if err != nil {
			return nil, err
		}
		k, _ := strconv.Atoi(r.Text[loc[2]:loc[3]])
		lit, err := h.e.tok.EncodeLiteral(literal[k])
		if err != nil {
			return nil, err
		}
		ids = append(append(ids, part...), lit...)
		last = loc[1]
	}
	rest, err := h.e.tok.TryEncode(r.Text[last:], false)
	if err != nil {
		return nil, err
	}
	return append(ids, rest...), nil
}

func isSet(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

type completionRequest struct {
	common
	Prompt json.RawMessage `json:"prompt"`
	Echo   bool            `json:"echo"`
	Suffix *string         `json:"suffix"`
	BestOf *int            `json:"best_of"`
}

func (h *Handler) completions(w http.ResponseWriter, r *http.Request) *apiError {
	var req completionRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	switch {
	case req.Echo:
		return badRequest("echo", "not implemented by this server: echo")
	case req.Suffix != nil:
		return badRequest("suffix", "not implemented by this server: suffix")
	case req.BestOf != nil && *req.BestOf != 1:
		return badRequest("best_of", "not implemented by this server: best_of")
	}
	var ids []int64
	var text string
	var texts []string
	var err error
	switch {
	case json.Unmarshal(req.Prompt, &text) == nil:
		ids, err = h.e.tok.TryEncode(text, true)
	case json.Unmarshal(req.Prompt, &ids) == nil:
	case json.Unmarshal(req.Prompt, &texts) == nil && len(texts) == 1:
		ids, err = h.e.tok.TryEncode(texts[0], true)
	case json.Unmarshal(req.Prompt, &texts) == nil:
		return badRequest("prompt", "not implemented by this server: a list of %d prompts (send one per request)", len(texts))
	default:
		return badRequest("prompt", "prompt must be a string or a list of token ids")
	}
	if err != nil {
		return badRequest("prompt", "%v", err)
	}
	if req.MaxTokens == nil {
		n := 16 // OpenAI's default for completions
		req.MaxTokens = &n
	}
	er, aerr := req.request(ids)
	if aerr != nil {
		return aerr
	}
	return h.run(w, r, er, req.common, false)
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// run submits er and answers: one object, or server-sent events.
func (h *Handler) run(w http.ResponseWriter, r *http.Request, er Request, c common, isChat bool) *apiError {
	events, err := h.e.Submit(r.Context(), er)
	if err != nil {
		return engineError(err)
	}
	model := c.Model
	if model == "" {
		model = h.e.Names()[0]
	}
	id, created := newID("cmpl-"), time.Now().Unix()
	object := "text_completion"
	if isChat {
		id, object = newID("chatcmpl-"), "chat.completion"
	}
	if !c.Stream {
		var text strings.Builder
		var last Event
		for ev := range events {
			text.WriteString(ev.Text)
			last = ev
		}
		if last.Err != nil {
			return engineError(last.Err)
		}
		choice := map[string]any{"index": 0, "finish_reason": last.Finish, "logprobs": nil}
		if isChat {
			choice["message"] = map[string]any{"role": "assistant", "content": text.String()}
		} else {
			choice["text"] = text.String()
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": object, "created": created, "model": model,
			"choices": []any{choice}, "usage": usage{last.PromptTokens, last.Tokens, last.PromptTokens + last.Tokens}})
		return nil
	}
	object += ".chunk"
	if !isChat {
		object = "text_completion"
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	send := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	chunk := func(delta map[string]any, text string, finish any) map[string]any {
		choice := map[string]any{"index": 0, "finish_reason": finish, "logprobs": nil}
		if isChat {
			choice["delta"] = delta
		} else {
			choice["text"] = text
		}
		return map[string]any{"id": id, "object": object, "created": created, "model": model, "choices": []any{choice}}
	}
	if isChat {
		send(chunk(map[string]any{"role": "assistant", "content": ""}, "", nil))
	}
	var last Event
	for ev := range events {
		last = ev
		if ev.Err != nil {
			break
		}
		if ev.Text != "" {
			send(chunk(map[string]any{"content": ev.Text}, ev.Text, nil))
		}
	}
	if last.Err != nil {
		// The status is sent already: the error goes in the stream, as OpenAI's does.
		send(map[string]any{"error": engineError(last.Err)})
		return nil
	}
	send(chunk(map[string]any{}, "", last.Finish))
	if c.StreamOptions != nil && c.StreamOptions.IncludeUsage {
		send(map[string]any{"id": id, "object": object, "created": created, "model": model, "choices": []any{},
			"usage": usage{last.PromptTokens, last.Tokens, last.PromptTokens + last.Tokens}})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
	return nil
}
