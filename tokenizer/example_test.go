package tokenizer_test

import (
	"fmt"
	"log"

	"github.com/gotrain/gotrain/tokenizer"
)

// tinyLlama is a tokenizer.json laid out as Llama 2's (SentencePiece-style BPE with byte
// fallback), with a vocabulary of 24 tokens. A real one comes from a model directory.
const tinyLlama = `{
  "version": "1.0",
  "added_tokens": [
    {"id": 0, "content": "<unk>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false},
    {"id": 1, "content": "<s>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false},
    {"id": 2, "content": "</s>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false}
  ],
  "normalizer": {"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": "▁"},
    {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
  "pre_tokenizer": null,
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
  "decoder": {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
    {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
  "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
    "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0xE2>": 3, "<0x82>": 4, "<0xAC>": 5, "▁": 6,
      "h": 7, "e": 8, "l": 9, "o": 10, "w": 11, "r": 12, "d": 13, "he": 14, "ll": 15, "hell": 16,
      "hello": 17, "▁hello": 18, "▁w": 19, "or": 20, "▁wor": 21, "ld": 22, "▁world": 23},
    "merges": [["h", "e"], ["l", "l"], ["he", "ll"], ["hell", "o"], ["▁", "hello"], ["▁", "w"],
      ["o", "r"], ["▁w", "or"], ["l", "d"], ["▁wor", "ld"]]}
}`

func Example() {
	// tokenizer.Load("path/to/tokenizer.json"), or LoadDir(dir) to read
	// tokenizer_config.json's bos_token and eos_token too.
	tok, err := tokenizer.Parse([]byte(tinyLlama))
	if err != nil {
		log.Fatal(err)
	}
	ids := tok.Encode("hello world €", true) // true: add the BOS, as Llama does
	fmt.Println(ids)
	fmt.Printf("%q\n", tok.Decode(ids, true))

	// A generator's ids, one at a time: "€" is three byte tokens and comes out whole.
	stream := tok.NewDecodeStream(true)
	for _, id := range ids {
		text, err := stream.Step(id)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d -> %q\n", id, text)
	}
	// Output:
	// [1 18 23 6 3 4 5]
	// "hello world €"
	// 1 -> ""
	// 18 -> "hello"
	// 23 -> " world"
	// 6 -> " "
	// 3 -> ""
	// 4 -> ""
	// 5 -> "€"
}
