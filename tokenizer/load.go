package tokenizer

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/gotrain/gotrain/internal/jsonpos"

	"github.com/gotrain/gotrain/internal/fsutil"
)

// MaxFileSize is the largest tokenizer.json Load reads (256 MiB). The largest real ones
// are a few tens of MiB; a bigger file is a mistake or hostile, and reading it would
// only exhaust memory.
const MaxFileSize = 256 << 20

// maxConfigSize bounds tokenizer_config.json, which holds a chat template and a few
// hundred added tokens at most.
const maxConfigSize = 16 << 20

// ErrUnsupported is wrapped by the errors for parts of a tokenizer.json this package
// does not implement (a model type, pre-tokenizer, normalizer, decoder, post-processor
// or Split pattern).
var ErrUnsupported = errors.New("not supported")

// Load reads a tokenizer.json file.
func Load(path string) (*Tokenizer, error) {
	data, err := readRegular(path, MaxFileSize)
	if err != nil {
		return nil, err
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// LoadDir reads dir/tokenizer.json and, when present, dir/tokenizer_config.json, whose
// bos_token, eos_token and pad_token (as transformers writes them: a string, or an
// object with "content") name the tokens BOS, EOS and PAD return; null there means
// none.
func LoadDir(dir string) (*Tokenizer, error) {
	path, err := inDir(dir, "tokenizer.json")
	if err != nil {
		return nil, err
	}
	t, err := Load(path)
	if err != nil {
		return nil, err
	}
	cfgPath, err := inDir(dir, "tokenizer_config.json")
	if err != nil {
		return nil, err
	}
	data, err := readRegular(cfgPath, maxConfigSize)
	if errors.Is(err, os.ErrNotExist) {
		return t, nil
	}
	if err != nil {
		return nil, err
	}
	if err := t.applyConfig(data); err != nil {
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	return t, nil
}

// readRegular reads a regular file (opened by fsutil.Open, which refuses a FIFO or a
// device without blocking) of at most limit bytes.
func readRegular(path string, limit int64) ([]byte, error) {
	data, err := fsutil.ReadFile(path, limit)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return data, nil
}

// inDir is the path of name in the model directory dir, where a symlink may lead only
// inside dir or into the Hugging Face cache's blobs (fsutil.InDir).
func inDir(dir, name string) (string, error) {
	p, err := fsutil.InDir(dir, name)
	if err != nil {
		return "", fmt.Errorf("tokenizer: %w", err)
	}
	return p, nil
}

// jsonError turns encoding/json's errors into ones that say where in the file
// (line and column) and which field.
func jsonError(data []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		// Offset is just past the offending byte.
		line, col := jsonpos.LineCol(data, se.Offset-1)
		return fmt.Errorf("tokenizer: malformed JSON at line %d, column %d: %v", line, col, err)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		line, col := jsonpos.LineCol(data, te.Offset)
		field := te.Field
		if field == "" {
			field = "(top level)"
		}
		return fmt.Errorf("tokenizer: field %s at line %d, column %d: JSON %s where %s was expected", field, line, col, te.Value, te.Type)
	}
	return fmt.Errorf("tokenizer: %w", err)
}

// tokenizerConfig is the part of transformers' tokenizer_config.json read here.
type tokenizerConfig struct {
	BOS json.RawMessage `json:"bos_token"`
	EOS json.RawMessage `json:"eos_token"`
	PAD json.RawMessage `json:"pad_token"`
	// AddedTokensDecoder is what transformers' save_pretrained writes of the added
	// tokens, by id.
	AddedTokensDecoder map[string]struct {
		Content string `json:"content"`
	} `json:"added_tokens_decoder"`
}

func (t *Tokenizer) applyConfig(data []byte) error {
	var cfg tokenizerConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return jsonError(data, err)
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		dst  *int64
	}{{"bos_token", cfg.BOS, &t.bos}, {"eos_token", cfg.EOS, &t.eos}, {"pad_token", cfg.PAD, &t.pad}} {
		if f.raw == nil {
			continue // absent: keep what tokenizer.json suggests
		}
		content, ok, err := tokenContent(f.raw)
		if err != nil {
			return fmt.Errorf("tokenizer: %s: %w", f.name, err)
		}
		if !ok {
			*f.dst = -1 // null: the model has none (Qwen2 has no BOS)
			continue
		}
		id, found := t.TokenToID(content)
		if !found {
			return fmt.Errorf("tokenizer: %s %q is not in the vocabulary", f.name, content)
		}
		*f.dst = id
	}
	// transformers adds every token of added_tokens_decoder that tokenizer.json does not
	// hold as an added token with that id: a new token at the end of the vocabulary, or an
	// added token over a vocabulary entry, matched before the model. Either changes the
	// ids, so such a directory is refused rather than encoded otherwise.
	type listed struct {
		id      int64
		content string
	}
	decoder := make([]listed, 0, len(cfg.AddedTokensDecoder))
	for k, v := range cfg.AddedTokensDecoder {
		id, err := strconv.ParseInt(k, 10, 64)
		if err != nil {
			return fmt.Errorf("tokenizer: added_tokens_decoder: key %q is not a token id", k)
		}
		decoder = append(decoder, listed{id, v.Content})
	}
	slices.SortFunc(decoder, func(a, b listed) int { return cmp.Compare(a.id, b.id) })
	for _, d := range decoder {
		if a, ok := t.added.tokens[d.id]; !ok || a.Content != d.content {
			return fmt.Errorf("tokenizer: added_tokens_decoder[%d] %q is not an added token of tokenizer.json with that id; transformers would add it and encode differently: %w",
				d.id, d.content, ErrUnsupported)
		}
	}
	return nil
}

// tokenContent reads a token as tokenizer_config.json writes it: null, a string, or
// an AddedToken object with a "content" field.
func tokenContent(raw json.RawMessage) (string, bool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	var s string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", false, err
		}
		return s, true, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", false, fmt.Errorf("expected a string or an object with \"content\", got %.80s", raw)
	}
	return *obj.Content, true, nil
}
