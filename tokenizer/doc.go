// Package tokenizer reads Hugging Face tokenizer.json files and encodes text to token
// ids, and ids back to text, exactly as Hugging Face's tokenizers library does for the
// same file. It is pure Go: no cgo, no libtorch, no Rust.
//
// It covers the tokenizers of today's open decoder models, and BERT's and RoBERTa's:
//
//   - byte-level BPE as GPT-2, Llama 3 and Qwen2 use it: the ByteLevel pre-tokenizer and
//     decoder, and the Split pre-tokenizer with the exact regular expressions of GPT-2,
//     Llama 3 and Qwen2 (written by hand here, see splitter.go);
//   - SentencePiece-style BPE as Llama 2 and Mistral use it: byte fallback (<0xNN>
//     tokens), the Metaspace pre-tokenizer and decoder, and the Prepend, Replace, NFC,
//     NFD, NFKC, NFKD and Strip normalizers, and the Replace, ByteFallback, Fuse and
//     Strip decoders;
//   - any other Split or Replace regex (DeepSeek-V3's, o200k's) through regexp2 with a
//     time budget (ErrBudget, TryEncode); the Whitespace, WhitespaceSplit, Digits,
//     Punctuation and BertPreTokenizer pre-tokenizers; Lowercase;
//   - Unigram models (T5, SentencePiece conversions) with the Precompiled normalizer;
//   - BERT's WordPiece: the WordPiece model (longest match first, continuing_subword_prefix,
//     max_input_chars_per_word), the BertNormalizer (clean_text, handle_chinese_chars,
//     strip_accents, lowercase) and the WordPiece decoder;
//   - added tokens (special or not) with lstrip, rstrip, single_word and normalized,
//     matched before the model and never split;
//   - the TemplateProcessing post-processor (the BOS token Llama adds), BertProcessing
//     ([CLS] and [SEP]), RobertaProcessing (<s> and </s>, trim_offsets) and ByteLevel's
//     (nothing to do for ids), for one sequence: Encode takes no pairs and makes no type
//     ids.
//
// Anything else in a file (another model type, pre-tokenizer, normalizer, decoder or
// post-processor, a regex with syntax regexp2 lacks) is refused when the file is
// loaded, with an error that names the file (Load, LoadDir), the JSON field
// (model.type, normalizer.normalizers[1], ...) and the supported types, and wraps
// ErrUnsupported: a tokenizer that loads encodes as tokenizers does, or it does not load.
//
// A Tokenizer is immutable once loaded and safe for concurrent use: the data loader's
// worker goroutines share one.
//
// Encoding costs time and memory linear in the text, whatever the file (the added-token
// matcher is an automaton; pre-tokenizers stream their pieces to the model), and the
// normalizers may grow a text to at most 32 times its length plus 4 KiB, checked before
// the text is made: past that, or past a regex's time budget, TryEncode returns an
// error wrapping ErrBudget (Encode panics with it). docs/tokenizer.md states the cost
// per input byte of each step.
//
// docs/tokenizer.md says why this is a Go implementation rather than a binding to
// Hugging Face's Rust code, and how its parity with tokenizers is tested.
package tokenizer
