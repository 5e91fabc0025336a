package tokenizer

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/text/unicode/norm"

	"github.com/gotrain/gotrain/internal/testpy"
)

// The parity tests train small tokenizers of each supported kind with Hugging Face's
// tokenizers, save their tokenizer.json files, and compare this package's ids and
// decoded text with tokenizers' on a multilingual corpus and on random strings. One
// Python process does it all for the package (fixture), and the tests read its answers.

// trainScript trains the tokenizers named in kinds (see build_*), then encodes and
// decodes the inputs. Argument: the path of a JSON file {"dir", "kjv", "texts",
// "seed"}; it writes the answers as JSON to stdout.
const trainScript = `
import json, os, random, sys
from tokenizers import Tokenizer, AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers

args = json.load(open(sys.argv[1], encoding="utf-8"))
out_dir, texts = args["dir"], args["texts"]

lines = list(args["paragraphs"])
if args["kjv"] and os.path.exists(args["kjv"]):
    with open(args["kjv"], encoding="utf-8") as f:
        kjv = [l.strip() for l in f if l.strip()]
    lines += kjv[:3000]
lines = lines * 2

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
QWEN2 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

# DeepSeek-V3's pre-tokenizer (its tokenizer.json, with the CJK range's \u3040 as the
# character the JSON escape stands for) and GPT-OSS's o200k pattern.
DEEPSEEK = [r"\p{N}{1,3}", "[一-龥\u3040-ゟ゠-ヿ]+",
            r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_""" "\x60" r"""{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""]
O200K = r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

def template(tok, bos):
    return processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])

def byte_level(pre, normalizer, specials, bos, ignore_merges=False, extra_words=()):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=1200, min_frequency=2, special_tokens=specials,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(lines, tr)
    if extra_words:
        # Whole words that the merges do not build: only ignore_merges finds them.
        d = json.loads(tok.to_str())
        vocab = d["model"]["vocab"]
        for w in extra_words:
            mapped = "".join(t for t, _ in pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False).pre_tokenize_str(w))
            if mapped not in vocab:
                vocab[mapped] = len(vocab)
        tok = Tokenizer.from_str(json.dumps(d))
    tok.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False), template(tok, bos)])
    return tok

def sentencepiece(normalizer, pre, decoder, bos, byte_fallback=True, fuse_unk=True, prefix=None, suffix=None, limit_alphabet=120, drop_bytes=()):
    # Train the merges on the text as the tokenizer will see it, then lay the vocabulary
    # out as Llama 2's: <unk> <s> </s>, the 256 byte tokens, the learnt tokens.
    opt = {}
    if prefix:
        opt["continuing_subword_prefix"] = prefix
    if suffix:
        opt["end_of_word_suffix"] = suffix
    t0 = Tokenizer(models.BPE(unk_token="<unk>", **opt))
    t0.normalizer = normalizer
    t0.pre_tokenizer = pre
    tr = trainers.BpeTrainer(vocab_size=1500, min_frequency=2, special_tokens=["<unk>", "<s>", "</s>"],
                             limit_alphabet=limit_alphabet, show_progress=False, **opt)
    t0.train_from_iterator(lines, tr)
    d = json.loads(t0.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    if byte_fallback:
        for b in range(256):
            if b not in drop_bytes:
                vocab["<0x%02X>" % b] = len(vocab)
    for t, _ in sorted(d["vocab"].items(), key=lambda kv: kv[1]):
        if t not in vocab:
            vocab[t] = len(vocab)
    merges = [tuple(m) for m in d["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=byte_fallback,
                               fuse_unk=fuse_unk, **opt))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoder
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in ["<unk>", "<s>", "</s>"]])
    tok.post_processor = template(tok, bos)
    return tok

llama2_decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])

def build_gpt2():
    tok = byte_level(pre_tokenizers.ByteLevel(add_prefix_space=False), None, ["<|endoftext|>"], "<|endoftext|>")
    # Added tokens that are not made of byte characters: the ByteLevel decoder passes
    # them through.
    tok.add_tokens([AddedToken("<mask>", lstrip=True, special=False, normalized=False),
                    AddedToken("new token", special=False), AddedToken("工具", special=False)])
    return tok

def build_llama3():
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok = byte_level(pre, None, ["<|begin_of_text|>", "<|end_of_text|>"], "<|begin_of_text|>", ignore_merges=True,
                     extra_words=[" Jerusalem", " thereof", "Hello", " 1234", " 的", " unthinkable"])
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in
                            ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|reserved_special_token_0|>"]])
    tok.add_tokens([AddedToken("[END]", rstrip=True, special=False, normalized=False)])
    return tok

def build_qwen2():
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok = byte_level(pre, normalizers.NFC(), ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], "<|im_start|>")
    tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False),
                    AddedToken("Café", special=False, normalized=True)])
    return tok

def build_llama2():
    norm = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok = sentencepiece(norm, None, llama2_decoder, "<s>")
    tok.add_tokens([AddedToken("hello world", special=False, normalized=True),
                    AddedToken("[WORD]", single_word=True, special=False, normalized=False)])
    return tok

def build_mistral():
    # Without the byte tokens of 4-byte characters, emoji fall back to <unk>, fused.
    pre = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok = sentencepiece(None, pre, llama2_decoder, "<s>", drop_bytes=range(0xF0, 0xF5))
    tok.add_special_tokens([AddedToken("[INST]", special=True, normalized=False), AddedToken("[/INST]", special=True, normalized=False)])
    return tok

def build_metaspace():
    # Metaspace split into words with NFKC, continuing_subword_prefix and
    # end_of_word_suffix, an unk without fusing and without byte fallback, Metaspace's
    # decoder.
    pre = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    # (A Strip decoder with stop > 0 is left out: tokenizers panics on an empty token.)
    dec = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(replacement="▁", prepend_scheme="always")])
    norm = normalizers.Sequence([normalizers.Strip(left=True, right=False), normalizers.NFKC()])
    return sentencepiece(norm, pre, dec, "<s>", byte_fallback=False, fuse_unk=False,
                         prefix="##", suffix="</w>", limit_alphabet=80)

def build_splits():
    # Split on literal strings with every behavior, then ByteLevel with its own regex
    # and prefix space; no decoder (tokens joined by spaces).
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(" ", behavior="merged_with_previous"),
        pre_tokenizers.Split("\n", behavior="contiguous"),
        pre_tokenizers.Split(",", behavior="removed"),
        pre_tokenizers.Split("th", behavior="merged_with_next"),
        pre_tokenizers.Split("e", behavior="isolated", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
    tok = byte_level(pre, normalizers.NFD(), ["<|endoftext|>"], "<|endoftext|>")
    tok.decoder = None
    return tok

def build_deepseek():
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False) for p in DEEPSEEK] +
                                  [pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    return byte_level(pre, None, ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"], "<｜begin▁of▁sentence｜>")

def build_o200k():
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(O200K), behavior="isolated", invert=False),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok = byte_level(pre, None, ["<|startoftext|>", "<|endoftext|>", "<|return|>"], "<|startoftext|>")
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in ["<|start|>", "<|message|>", "<|end|>"]])
    return tok

def build_words():
    # Lowercase and Replace with regexes (a lookbehind and a lookahead), Whitespace then
    # Digits one by one.
    norm = normalizers.Sequence([normalizers.Lowercase(), normalizers.Replace(Regex(r"\s{2,}"), " "),
                                 normalizers.Replace(Regex(r"(?<=\d),(?=\d)"), "")])
    pre = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)])
    return sentencepiece(norm, pre, None, "<s>")

def build_punct():
    # WhitespaceSplit, Punctuation merged with the next piece, Digits in runs.
    pre = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(behavior="merged_with_next"),
                                   pre_tokenizers.Digits(individual_digits=False)])
    return sentencepiece(normalizers.NFKC(), pre, decoders.ByteFallback(), "<s>")

def spm_model(byte_fallback):
    # A SentencePiece Unigram model trained on the lines, as a .model file.
    import io, sentencepiece as spm
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines[:4000]), model_writer=buf, vocab_size=1500,
                                   model_type="unigram", byte_fallback=byte_fallback, hard_vocab_limit=False,
                                   character_coverage=0.995, minloglevel=2)
    path = os.path.join(out_dir, "sp%d.model" % byte_fallback)
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    return path

def build_unigram():
    # transformers' SentencePiece converter: Precompiled (the model's NFKC rules) and a
    # regex Replace, Metaspace, Unigram with byte fallback.
    from transformers.convert_slow_tokenizer import SpmConverter
    class Conv(SpmConverter):
        handle_byte_fallback = True
    class Slow:
        vocab_file = spm_model(True)
        legacy = False
        add_prefix_space = True
    tok = Conv(Slow()).converted()
    tok.post_processor = template(tok, "<s>")
    tok.add_special_tokens([AddedToken("[MASK]", special=True, normalized=False)])
    return tok

def build_t5():
    # transformers 5's T5 tokenizer from a SentencePiece model: WhitespaceSplit and
    # Metaspace, Unigram with an unk and no byte fallback, "$A </s>", extra ids.
    import transformers
    return transformers.T5TokenizerFast(vocab_file=spm_model(False), extra_ids=5).backend_tokenizer

def build_bert():
    # BertWordPieceTokenizer as transformers' BERT files have it: BertNormalizer with
    # clean_text, handle_chinese_chars, lowercase and strip_accents null (it follows
    # lowercase), BertPreTokenizer, WordPiece with "##" and max_input_chars_per_word,
    # BertProcessing, the WordPiece decoder with cleanup. A smaller alphabet than the
    # text's leaves characters no token covers: their words are [UNK].
    from tokenizers.implementations import BertWordPieceTokenizer
    bw = BertWordPieceTokenizer(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True)
    bw.train_from_iterator(lines, vocab_size=1500, min_frequency=2, limit_alphabet=300, show_progress=False)
    tok = bw._tokenizer
    tok.model = models.WordPiece(tok.get_vocab(), unk_token="[UNK]", max_input_chars_per_word=40)
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")), ("[CLS]", tok.token_to_id("[CLS]")))
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    return tok

def build_roberta():
    # RoBERTa's layout: byte-level BPE without a prefix space, <mask> with lstrip,
    # RobertaProcessing (<s> $A </s>) with trim_offsets.
    tok = byte_level(pre_tokenizers.ByteLevel(add_prefix_space=False), None, ["<s>", "<pad>", "</s>", "<unk>"], "<s>")
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True, normalized=False)])
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")),
                                                      trim_offsets=True, add_prefix_space=False)
    return tok

kinds = args["kinds"]
rng = random.Random(args["seed"])
result = {}
def answers(tok, all_ids=True):
    n = tok.get_vocab_size(with_added_tokens=True)
    r = {"vocab_size": n, "special": [], "plain": [], "decoded": [], "decoded_skip": [], "offsets": [], "plain_offsets": []}
    for text in texts:
        e = tok.encode(text, add_special_tokens=True)
        with_special = e.ids
        r["special"].append(with_special)
        r["offsets"].append(e.offsets)
        e = tok.encode(text, add_special_tokens=False)
        r["plain"].append(e.ids)
        r["plain_offsets"].append(e.offsets)
        r["decoded"].append(tok.decode(with_special, skip_special_tokens=False))
        r["decoded_skip"].append(tok.decode(with_special, skip_special_tokens=True))
    # Random id sequences (a few past the vocabulary, which decode drops).
    seqs = [[rng.randrange(n + 3) for _ in range(rng.randrange(1, 24))] for _ in range(300)]
    r["random_ids"] = seqs
    r["random_decoded"] = [tok.decode(s, skip_special_tokens=False) for s in seqs]
    r["random_decoded_skip"] = [tok.decode(s, skip_special_tokens=True) for s in seqs]
    # Streaming decode of the corpus encodings and of the random ids.
    def stream(ids, skip):
        from tokenizers.decoders import DecodeStream
        ds, steps = DecodeStream(skip_special_tokens=skip), []
        for i in ids:
            try:
                steps.append(ds.step(tok, i))
            except Exception as e:
                steps.append({"error": str(e)})
                break
        return steps
    r["stream"] = [stream(ids, False) for ids in r["special"]] + [stream(s, False) for s in seqs]
    r["stream_skip"] = [stream(ids, True) for ids in r["special"]]
    # The fuzz texts: ids only, in one batch.
    r["fuzz"] = [e.ids for e in tok.encode_batch(args["fuzz"], add_special_tokens=True)]
    # Every id of a trained kind; of a real file's large vocabulary, a sample and every
    # added token.
    ids = range(n + 2)
    if not all_ids:
        ids = sorted(set(range(0, n, max(1, n // 3000))) | set(tok.get_added_tokens_decoder()) | {n - 1, n, n + 1})
        r["ids"] = ids
    r["id_to_token"] = [tok.id_to_token(i) for i in ids]
    r["token_to_id"] = [None if s is None else tok.token_to_id(s) for s in r["id_to_token"]]
    return r

for kind in kinds:
    tok = globals()["build_" + kind]()
    tok.save(os.path.join(out_dir, kind + ".json"))
    result[kind] = answers(tok)
    if kind == "gpt2":
        # GPT-2's own post-processor: ByteLevel with trim_offsets, which drops the spaces
        # at a token's ends from its offsets.
        tok.post_processor = processors.ByteLevel(add_prefix_space=True, trim_offsets=True)
        tok.save(os.path.join(out_dir, "gpt2trim.json"))
        result["gpt2trim"] = answers(tok)

# The real files: as transformers loads them, without the file's truncation and padding.
for name, path in args["real"].items():
    tok = Tokenizer.from_file(path)
    tok.no_truncation()
    tok.no_padding()
    result["real/" + name] = answers(tok, all_ids=False)

def ranges(cps):
    out = []
    for c in cps:
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out

def bert_tables():
    # What BertNormalizer does to each code point alone (its character tables): the ones
    # clean_text removes or makes a space, the ones handle_chinese_chars pads, the ones
    # strip_accents changes beyond NFD. Code points are joined with "|" (which none of
    # these touch), 4096 to a text.
    cps = [c for c in range(0x110000) if not (0xD800 <= c < 0xE000 or c == 0x7C)]
    def each(**kw):
        n = normalizers.BertNormalizer(**kw)
        out = []
        for i in range(0, len(cps), 4096):
            out += n.normalize_str("|".join(chr(c) for c in cps[i:i + 4096])).split("|")
        assert len(out) == len(cps)
        return out
    off = dict(clean_text=False, handle_chinese_chars=False, strip_accents=False, lowercase=False)
    clean = each(**dict(off, clean_text=True))
    chinese = each(**dict(off, handle_chinese_chars=True))
    strip = each(**dict(off, strip_accents=True))
    nfd = normalizers.NFD()
    return {"removed": ranges([c for c, o in zip(cps, clean) if o == ""]),
            "space": ranges([c for c, o in zip(cps, clean) if o == " " and c != 0x20]),
            "chinese": ranges([c for c, o in zip(cps, chinese) if o != chr(c)]),
            "strip": ranges([c for c, o in zip(cps, strip) if o != nfd.normalize_str(chr(c))])}

if "bert" in kinds:
    result["bert_tables"] = bert_tables()

json.dump(result, sys.stdout, ensure_ascii=True)
`

// paragraphs is training text beside the KJV lines: the scripts, digits and code of the
// parity corpus, so that their merges exist.
var paragraphs = []string{
	"The quick brown fox jumps over the lazy dog. It's 3:45 PM and we'll see what they've done; I'm sure he'd agree.",
	"Machine learning models are trained on large datasets. Tokenizers split text into tokens before the model sees it.",
	"机器学习模型在大规模数据集上训练。分词器把文本切分成词元，然后模型才能处理它。今天天气很好，我们去公园散步吧。",
	"日本語のテキストも含めます。東京は日本の首都です。ひらがなとカタカナと漢字を混ぜて書きます。",
	"Привет, мир! Это пример текста на русском языке. Москва — столица России.",
	"Café, naïve, résumé, façade, coöperate, Zürich, São Paulo, Ångström, crème brûlée.",
	"func main() {\n\tfmt.Println(\"hello, world\")\n\tfor i := 0; i < 10; i++ {\n\t\tx += i * 2\n\t}\n}\n",
	"def encode(self, text: str) -> list[int]:\n    return [self.vocab[t] for t in text.split()]  # 4 spaces\n",
	"Numbers: 1234567890, 3.14159, 2024-06-01, $1,299.99, 100%, 0x1F600, 1e-10.",
	"Emoji: 😀 😃 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ 🎉🎉🎉 and text around them.",
	"한국어 문장도 있습니다. 안녕하세요! العربية لغة جميلة. हिन्दी भी है। Ελληνικά γράμματα.",
	"Whitespace   runs\t\ttabs\r\nwindows lines\n\n\nblank lines   \n  indented\u00a0nbsp",
}

// corpus is what the parity test compares on.
var corpus = []string{
	"",
	" ",
	"  ",
	"\n",
	"Hello, world!",
	"hello world",
	" leading space",
	"   three leading spaces",
	"trailing spaces   ",
	"The quick brown fox jumps over the lazy dog.",
	"It's they're we've I'm he'll she'd IT'S THEY'RE 'tis 'twas don't",
	"'ſ 'S 'Ll 'rE 'VE 'M 'D 'x '",
	"机器学习模型在大规模数据集上训练。",
	"我爱北京天安门，天安门上太阳升。",
	"東京タワーは333メートルです。",
	"Привет, мир!",
	"😀😃😄😁 👍🏽 👨‍👩‍👧‍👦 👩🏾‍💻 🏳️‍🌈 🇯🇵 ❤️",
	"Café café CAFÉ",
	"Cafe\u0301 cafe\u0301 re\u0301sume\u0301", // NFD
	"Caf\u00e9 r\u00e9sum\u00e9 na\u00efve",    // NFC
	"ﬁne ﬂour ① ² ½ Ⅻ ｆｕｌｌｗｉｄｔｈ １２３",           // NFKC changes these
	"func f(x int) int {\n\treturn x * 2 // double\n}",
	"if (a && b) { return a->c[0] + b.d; }",
	"<div class=\"x\">&nbsp;</div>",
	"1 12 123 1234 12345 123456 1234567 12345678901234567890",
	"٠١٢٣٤٥ ０１２ 3.14 -42 +7 1,000,000",
	"a  b   c    d     e",
	"tab\there\t\ttwo tabs",
	"line1\r\nline2\r\n\r\nline4",
	"cr\ronly",
	"\n\n\nnewlines first",
	"ends with newline\n",
	"  \n  \t \n x",
	"mixed\u00a0nbsp\u2009thin\u3000ideographic\u2028line",
	"<|endoftext|>",
	"Hello<|endoftext|>world",
	"Hello <|endoftext|> world",
	"<|begin_of_text|>Hi<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello",
	"<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>",
	"<s>[INST] What is 2+2? [/INST] 4</s>",
	"<s> <s>  </s>text</s>",
	"a <mask> b  <mask>c <mask>",
	"done [END]   next [END]\n[END]",
	"call <tool_call>{\"name\": \"f\"}</tool_call>",
	"Café Cafe\u0301 Cafés",
	"hello world, hello  world, Hello world, say hello world",
	"[WORD] x[WORD] [WORD]y a [WORD] b",
	"<unk> <0x41> ▁ ▁▁ ▁x",
	"Jerusalem thereof unthinkable Hello 1234 的",
	"x\x1cy\x1c\x1cz \x00 \x7f \u180e \u200b \ufeff",
	"ǅungla ǈ ǋ ß ẞ İstanbul ﬀ",
	"श्री नमस्ते مرحبا بالعالم שלום",
	strings.Repeat("long word ", 30) + strings.Repeat("x", 300),
	strings.Repeat("超长", 200),
}

// randomStrings draws n strings from characters of the kinds that decide splits:
// letters of many scripts, numbers, whitespace of every sort, punctuation, marks,
// emoji with their joiners and modifiers, apostrophes with contraction letters, and
// pieces of the special tokens. All are in Unicode 14, so Go's tables and
// tokenizers' agree on them (docs/tokenizer.md).
func randomStrings(seed uint64, n int) []string {
	rng := rand.New(rand.NewPCG(seed, 1))
	ranges := [][2]rune{
		{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'!', '/'}, {':', '@'}, {'[', '`'}, {'{', '~'},
		{0xC0, 0xFF}, {0x300, 0x36F}, {0x391, 0x3C9}, {0x410, 0x44F}, {0x5D0, 0x5EA},
		{0x627, 0x64A}, {0x660, 0x669}, {0x905, 0x939}, {0x93E, 0x94D}, {0x3041, 0x3096},
		{0x30A1, 0x30FA}, {0x4E00, 0x4E80}, {0xAC00, 0xAC40}, {0xFF10, 0xFF5A},
		{0x2160, 0x216F}, {0x2460, 0x2473}, {0xB2, 0xB3}, {0xBC, 0xBE}, {0x1F600, 0x1F64F},
		{0x1F3FB, 0x1F3FF}, {0x1F1E6, 0x1F1FF}, {0x2000, 0x200D}, {0x2028, 0x2029},
		{0xFB00, 0xFB06}, {0x1D400, 0x1D433},
	}
	specials := []string{
		" ", " ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u0085", "\x1c", "\u200d", "\ufe0f",
		"'s", "'S", "'ſ", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "'",
		"<|endoftext|>", "<|im_start|>", "<|eot_id|>", "<s>", "</s>", "<mask>", "[END]", "[WORD]",
		"hello world", "Café", "▁", "<0x41>", "<unk>", "e\u0301", "👨‍👩‍👧", "123456",
	}
	out := make([]string, n)
	for i := range out {
		var sb strings.Builder
		for range rng.IntN(24) {
			if rng.IntN(4) == 0 {
				sb.WriteString(specials[rng.IntN(len(specials))])
				continue
			}
			r := ranges[rng.IntN(len(ranges))]
			sb.WriteRune(r[0] + rune(rng.IntN(int(r[1]-r[0]+1))))
		}
		out[i] = sb.String()
	}
	return out
}

type kindResult struct {
	VocabSize         int        `json:"vocab_size"`
	Special           [][]int64  `json:"special"`
	Plain             [][]int64  `json:"plain"`
	Decoded           []string   `json:"decoded"`
	DecodedSkip       []string   `json:"decoded_skip"`
	RandomIDs         [][]int64  `json:"random_ids"`
	RandomDecoded     []string   `json:"random_decoded"`
	RandomDecodedSkip []string   `json:"random_decoded_skip"`
	Stream            [][]any    `json:"stream"`
	StreamSkip        [][]any    `json:"stream_skip"`
	Fuzz              [][]int64  `json:"fuzz"`
	Offsets           [][][2]int `json:"offsets"`
	PlainOffsets      [][][2]int `json:"plain_offsets"`
	IDs               []int64    `json:"ids"` // the ids of IDToToken, when not all of them
	IDToToken         []*string  `json:"id_to_token"`
	TokenToID         []*int64   `json:"token_to_id"`
}

// realKinds are the real files that scripts/fetch_tokenizers.py puts under
// .cache/tokenizers, compared as the trained kinds are (as "real/NAME"). bert-uncased is
// bert-base-uncased's WordPiece tokenizer, deepseek-v3 DeepSeek-V3's.
var realKinds = []string{"llama3.2", "qwen3", "smollm2", "gemma3", "mistral-v3", "deepseek-v3", "bert-uncased"}

var kinds = []string{"gpt2", "llama3", "qwen2", "llama2", "mistral", "metaspace", "splits", "deepseek", "o200k", "words", "punct", "unigram", "t5", "bert", "roberta"}

// randomCount random strings get the whole comparison (ids, decoding, streaming);
// fuzzCount more, from fuzzStrings, get their ids compared, in one batch.
const (
	randomCount = 400
	fuzzCount   = 3000
)

// fuzzStrings are random texts for the ids comparison: randomStrings' characters with
// runs of digits, whitespace, punctuation and one script mixed in, so that quantifiers
// ({1,3}, +, *) and lookaheads meet long runs and every boundary between classes.
func fuzzStrings(seed uint64, n int) []string {
	rng := rand.New(rand.NewPCG(seed, 2))
	base := randomStrings(seed, n)
	runs := []string{"0123456789", " \t\u00a0\u3000", "\r\n", "!?.,;:'\"-/()[]{}", "abcXYZ", "ΑβγΔ", "漢字カナかな", "😀👍🏽\u200d"}
	for i := range base {
		var sb strings.Builder
		sb.WriteString(base[i])
		for range rng.IntN(4) {
			src := []rune(runs[rng.IntN(len(runs))])
			for range 1 + rng.IntN(9) {
				sb.WriteRune(src[rng.IntN(len(src))])
			}
			if rng.IntN(2) == 0 {
				sb.WriteString(randomStrings(rng.Uint64(), 1)[0])
			}
		}
		base[i] = sb.String()
	}
	return base
}

var fixture struct {
	once    sync.Once
	dir     string
	texts   []string
	fuzz    []string
	results map[string]*kindResult
	tables  *bertTables
	// real maps the real files found to their tokenizer.json; missing says why the others
	// are not.
	real    map[string]string
	missing map[string]string
}

// bertTables are the code points that BertNormalizer's options act on alone, as ranges
// [first, last] (the fixture's bert_tables).
type bertTables struct {
	Removed [][2]rune `json:"removed"`
	Space   [][2]rune `json:"space"`
	Chinese [][2]rune `json:"chinese"`
	Strip   [][2]rune `json:"strip"`
}

// trained runs the Python side once for the package and returns the directory of the
// tokenizer.json files, the texts and tokenizers' answers.
func trained(t *testing.T) (string, []string, map[string]*kindResult) {
	t.Helper()
	testpy.Python(t, "tokenizers")
	fixture.once.Do(func() {
		dir, err := os.MkdirTemp("", "tokenizer-parity-")
		if err != nil {
			panic(err)
		}
		fixture.dir = dir
		fixture.texts = append(append([]string(nil), corpus...), randomStrings(33, randomCount)...)
		fixture.fuzz = fuzzStrings(34, fuzzCount)
		fixture.real, fixture.missing = map[string]string{}, map[string]string{}
		for _, name := range realKinds {
			path := filepath.Join(testpy.Root(), ".cache", "tokenizers", name, "tokenizer.json")
			if _, err := os.Stat(path); err != nil {
				fixture.missing[name] = err.Error()
				continue
			}
			fixture.real[name] = path
		}
		in, err := json.Marshal(map[string]any{
			"dir":        dir,
			"texts":      fixture.texts,
			"fuzz":       fixture.fuzz,
			"paragraphs": paragraphs,
			"kjv":        filepath.Join(testpy.Root(), ".cache", "corpus", "kjv.txt"),
			"seed":       33,
			"kinds":      kinds,
			"real":       fixture.real,
		})
		if err != nil {
			panic(err)
		}
		args := filepath.Join(dir, "args.json")
		if err := os.WriteFile(args, in, 0o644); err != nil {
			panic(err)
		}
		out := testpy.Run(t, trainScript, []string{"tokenizers"}, args)
		var tables struct {
			Tables *bertTables `json:"bert_tables"`
		}
		if err := json.Unmarshal(out, &tables); err != nil {
			panic(fmt.Sprintf("reading the Python answers: %v", err))
		}
		fixture.tables = tables.Tables
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(out, &raw); err != nil {
			panic(fmt.Sprintf("reading the Python answers: %v", err))
		}
		delete(raw, "bert_tables")
		fixture.results = make(map[string]*kindResult, len(raw))
		for k, v := range raw {
			var r kindResult
			if err := json.Unmarshal(v, &r); err != nil {
				panic(fmt.Sprintf("reading the Python answers for %s: %v", k, err))
			}
			fixture.results[k] = &r
		}
	})
	if fixture.results == nil {
		t.Fatal("the Python side failed in an earlier test")
	}
	return fixture.dir, fixture.texts, fixture.results
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixture.dir != "" {
		os.RemoveAll(fixture.dir)
	}
	os.Exit(code)
}

// kindPath is the tokenizer.json of a trained kind or of a real file ("real/NAME").
func kindPath(dir, kind string) string {
	if name, ok := strings.CutPrefix(kind, "real/"); ok {
		return fixture.real[name]
	}
	return filepath.Join(dir, kind+".json")
}

// loadKind loads a kind's tokenizer: afresh for a trained kind (a test may change it),
// once for a real file (the large ones take a second).
func loadKind(t *testing.T, dir, kind string) *Tokenizer {
	t.Helper()
	if _, real := strings.CutPrefix(kind, "real/"); real {
		if tok, ok := realLoaded.Load(kind); ok {
			return tok.(*Tokenizer)
		}
	}
	tok, err := Load(kindPath(dir, kind))
	require.NoError(t, err, kind)
	if strings.HasPrefix(kind, "real/") {
		realLoaded.Store(kind, tok)
	}
	return tok
}

var realLoaded sync.Map

// allKinds are the trained kinds and the real files (present or not).
func allKinds() []string {
	all := append([]string(nil), kinds...)
	for _, name := range realKinds {
		all = append(all, "real/"+name)
	}
	return all
}

// skipMissing skips the subtest of a real file that is not in .cache/tokenizers, or
// fails it under CI=true.
func skipMissing(t *testing.T, kind string) {
	t.Helper()
	name, ok := strings.CutPrefix(kind, "real/")
	if !ok {
		return
	}
	if why, missing := fixture.missing[name]; missing {
		msg := fmt.Sprintf("real tokenizer %s missing (%s); run scripts/setup.sh", name, why)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " (CI=true: parity tests may not skip)")
		}
		t.Skip(msg)
	}
}

// eachKind runs f as a subtest for each kind and real file, with its tokenizer,
// tokenizers' answers for it and the texts they are for.
func eachKind(t *testing.T, f func(t *testing.T, kind string, tok *Tokenizer, r *kindResult, texts []string)) {
	dir, texts, results := trained(t)
	for _, kind := range allKinds() {
		t.Run(kind, func(t *testing.T) {
			skipMissing(t, kind)
			f(t, kind, loadKind(t, dir, kind), results[kind], texts)
		})
	}
}

// TestParityEncode compares ids, with and without special tokens, on the corpus and the
// random strings.
func TestParityEncode(t *testing.T) {
	eachKind(t, func(t *testing.T, kind string, tok *Tokenizer, r *kindResult, texts []string) {
		require.Equal(t, r.VocabSize, tok.VocabSize())
		bad := 0
		require.Len(t, r.Fuzz, len(fixture.fuzz))
		for i, text := range fixture.fuzz {
			got, err := tok.TryEncode(text, true)
			require.NoError(t, err)
			if !equalIDs(got, r.Fuzz[i]) && bad < 5 {
				bad++
				t.Errorf("%s: fuzz text %d %q:\n go     %v\n python %v", kind, i, text, got, r.Fuzz[i])
			}
		}
		for i, text := range texts {
			got := tok.Encode(text, true)
			if !equalIDs(got, r.Special[i]) && bad < 5 {
				bad++
				t.Errorf("%s: text %d %q:\n go     %v\n python %v", kind, i, text, got, r.Special[i])
			}
			got = tok.Encode(text, false)
			if !equalIDs(got, r.Plain[i]) && bad < 5 {
				bad++
				t.Errorf("%s: text %d %q without special tokens:\n go     %v\n python %v", kind, i, text, got, r.Plain[i])
			}
		}
	})
}

// TestParityDecode compares decoded text: of the corpus ids, and of random id sequences
// (byte tokens that do not complete a character, special tokens, ids past the end).
func TestParityDecode(t *testing.T) {
	eachKind(t, func(t *testing.T, _ string, tok *Tokenizer, r *kindResult, texts []string) {
		for i := range texts {
			require.Equal(t, r.Decoded[i], tok.Decode(r.Special[i], false), "text %d %q", i, texts[i])
			require.Equal(t, r.DecodedSkip[i], tok.Decode(r.Special[i], true), "text %d %q", i, texts[i])
		}
		for i, ids := range r.RandomIDs {
			require.Equal(t, r.RandomDecoded[i], tok.Decode(ids, false), "ids %v", ids)
			require.Equal(t, r.RandomDecodedSkip[i], tok.Decode(ids, true), "ids %v", ids)
		}
		for k, want := range r.IDToToken {
			id := int64(k)
			if r.IDs != nil {
				id = r.IDs[k]
			}
			got, ok := tok.IDToToken(id)
			if want == nil {
				require.False(t, ok, "id %d", id)
				continue
			}
			require.True(t, ok, "id %d", id)
			require.Equal(t, *want, got, "id %d", id)
			// Not always id: a normalized added token decodes as its normalized text.
			back, ok := tok.TokenToID(got)
			if wantBack := r.TokenToID[k]; wantBack == nil {
				require.False(t, ok, "token %q", got)
			} else {
				require.True(t, ok, "token %q", got)
				require.Equal(t, *wantBack, back, "token %q", got)
			}
		}
	})
}

// TestParityDecodeStream feeds ids one at a time and compares each step's text with
// tokenizers' DecodeStream.
func TestParityDecodeStream(t *testing.T) {
	eachKind(t, func(t *testing.T, _ string, tok *Tokenizer, r *kindResult, _ []string) {
		seqs := append(append([][]int64(nil), r.Special...), r.RandomIDs...)
		check := func(ids []int64, want []any, skip bool) {
			s := tok.NewDecodeStream(skip)
			for k, w := range want {
				got, err := s.Step(ids[k])
				if m, isErr := w.(map[string]any); isErr {
					require.Error(t, err, "ids %v step %d: tokenizers failed with %v", ids, k, m["error"])
					return
				}
				require.NoError(t, err, "ids %v step %d", ids, k)
				if w == nil {
					require.Equal(t, "", got, "ids %v step %d", ids, k)
				} else {
					require.Equal(t, w, got, "ids %v step %d", ids, k)
				}
			}
		}
		for i, want := range r.Stream {
			check(seqs[i], want, false)
		}
		for i, want := range r.StreamSkip {
			check(r.Special[i], want, true)
		}
	})
}

// TestParityBertNormalizerTables checks BertNormalizer's character classes on every code
// point against tokenizers': what clean_text removes (its control and format characters,
// from tables older than Go's) and turns into a space, the ideographs
// handle_chinese_chars pads, and what strip_accents removes after NFD (its nonspacing
// marks).
func TestParityBertNormalizerTables(t *testing.T) {
	trained(t)
	tb := fixture.tables
	require.NotNil(t, tb)
	inRanges := func(rs [][2]rune) func(rune) bool {
		return func(r rune) bool {
			k := sort.Search(len(rs), func(k int) bool { return rs[k][1] >= r })
			return k < len(rs) && rs[k][0] <= r
		}
	}
	removed, space, chinese, strip := inRanges(tb.Removed), inRanges(tb.Space), inRanges(tb.Chinese), inRanges(tb.Strip)
	bad := 0
	check := func(r rune, what string, got, want bool) {
		if got != want && bad < 10 {
			bad++
			t.Errorf("U+%04X: %s is %v here, %v in tokenizers", r, what, got, want)
		}
	}
	var buf []rune
	for r := rune(0); r < 0x110000; r++ {
		if (r >= 0xD800 && r < 0xE000) || r == '|' {
			continue
		}
		check(r, "removed by clean_text", bertRemoved(r), removed(r))
		check(r, "a space for clean_text", !bertRemoved(r) && bertSpace(r) && r != ' ', space(r))
		check(r, "padded by handle_chinese_chars", isChineseChar(r), chinese(r))
		stripped := false
		for _, d := range decomposeRune(buf[:0], r, norm.NFD) {
			stripped = stripped || isBertMn(d)
		}
		check(r, "changed by strip_accents", stripped, strip(r))
	}
}

func equalIDs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// hfScript saves tokenizer.json files as transformers' save_pretrained does (with
// tokenizer_config.json naming the bos, eos and pad tokens) and prints the ids
// transformers' AutoTokenizer gives the corpus and those tokens. Arguments: a JSON file
// {"dirs": [[tokenizer.json, out dir, bos, eos, pad], ...], "texts": [...]}.
const hfScript = `
import json, sys
import transformers
transformers.logging.set_verbosity_error()
args = json.load(open(sys.argv[1], encoding="utf-8"))
out = []
for path, d, bos, eos, pad in args["dirs"]:
    transformers.PreTrainedTokenizerFast(tokenizer_file=path, bos_token=bos, eos_token=eos, pad_token=pad).save_pretrained(d)
    hf = transformers.AutoTokenizer.from_pretrained(d)
    out.append({"bos": hf.bos_token_id, "eos": hf.eos_token_id, "pad": hf.pad_token_id,
                "ids": [hf(t)["input_ids"] for t in args["texts"]]})
json.dump(out, sys.stdout)
`

// TestLoadDirTransformers reads directories that transformers' save_pretrained wrote:
// the special token ids come from tokenizer_config.json, and the ids of the corpus are
// those of transformers' AutoTokenizer.
func TestLoadDirTransformers(t *testing.T) {
	dir, _, _ := trained(t)
	out := t.TempDir()
	cases := [][]string{
		{"llama3", "<|begin_of_text|>", "<|eot_id|>", "<|end_of_text|>"},
		{"llama2", "<s>", "</s>", "<unk>"},
	}
	var dirs [][]string
	for _, c := range cases {
		dirs = append(dirs, []string{filepath.Join(dir, c[0]+".json"), filepath.Join(out, c[0]), c[1], c[2], c[3]})
	}
	in, err := json.Marshal(map[string]any{"dirs": dirs, "texts": corpus})
	require.NoError(t, err)
	args := filepath.Join(out, "args.json")
	require.NoError(t, os.WriteFile(args, in, 0o644))
	var hf []struct {
		BOS, EOS, PAD int64
		IDs           [][]int64
	}
	require.NoError(t, json.Unmarshal(testpy.Run(t, hfScript, []string{"transformers"}, args), &hf))
	require.Len(t, hf, len(cases))
	for k, c := range cases {
		t.Run(c[0], func(t *testing.T) {
			tok, err := LoadDir(filepath.Join(out, c[0]))
			require.NoError(t, err)
			for _, s := range []struct {
				name string
				get  func() (int64, bool)
				want int64
			}{{"bos", tok.BOS, hf[k].BOS}, {"eos", tok.EOS, hf[k].EOS}, {"pad", tok.PAD, hf[k].PAD}} {
				id, ok := s.get()
				require.True(t, ok, s.name)
				require.Equal(t, s.want, id, s.name)
			}
			for i, text := range corpus {
				require.Equal(t, hf[k].IDs[i], tok.Encode(text, true), "text %q", text)
			}
		})
	}
}

// TestParityCorpusReachesOptions checks that the parity inputs reach each option they
// are there to test: with the option switched off, some ids differ from tokenizers', so
// a mistake in it could not hide behind inputs that never use it.
func TestParityCorpusReachesOptions(t *testing.T) {
	dir, texts, results := trained(t)
	setAdded := func(content string, f func(*AddedToken)) func(*Tokenizer) {
		return func(tk *Tokenizer) {
			id := tk.added.byContent[content]
			tok := tk.added.tokens[id]
			f(&tok)
			tk.added.tokens[id] = tok
		}
	}
	setBert := func(f func(*normBert)) func(*Tokenizer) {
		return func(tk *Tokenizer) {
			n := tk.normalizer.(normBert)
			f(&n)
			tk.normalizer = n
		}
	}
	cases := []struct {
		kind, option string
		off          func(*Tokenizer)
	}{
		{"llama3", "ignore_merges", func(tk *Tokenizer) { tk.model.(*bpe).ignoreMerges = false }},
		{"llama3", "rstrip", setAdded("[END]", func(a *AddedToken) { a.RStrip = false })},
		{"gpt2", "lstrip", setAdded("<mask>", func(a *AddedToken) { a.LStrip = false })},
		{"llama2", "single_word", setAdded("[WORD]", func(a *AddedToken) { a.SingleWord = false })},
		{"llama2", "byte_fallback", func(tk *Tokenizer) { tk.model.(*bpe).byteFallback = false }},
		{"mistral", "prepend_scheme first", func(tk *Tokenizer) { tk.pre.(*preMetaspace).scheme = prependAlways }},
		{"mistral", "fuse_unk", func(tk *Tokenizer) { tk.model.(*bpe).fuseUnk = false }},
		{"qwen2", "NFC", func(tk *Tokenizer) { tk.normalizer = nil }},
		{"unigram", "byte_fallback", func(tk *Tokenizer) { tk.model.(*unigram).byteFallback = false }},
		{"unigram", "Precompiled", func(tk *Tokenizer) { tk.normalizer = tk.normalizer.(normSequence)[1:] }},
		{"t5", "unk", func(tk *Tokenizer) { tk.model.(*unigram).unk = -1 }},
		{"metaspace", "continuing_subword_prefix", func(tk *Tokenizer) { tk.model.(*bpe).prefix = "" }},
		{"bert", "strip_accents", setBert(func(n *normBert) { n.stripAccents = false })},
		{"bert", "handle_chinese_chars", setBert(func(n *normBert) { n.chinese = false })},
		{"bert", "clean_text", setBert(func(n *normBert) { n.cleanText = false })},
		{"bert", "lowercase", setBert(func(n *normBert) { n.lowercase = false })},
		{"bert", "max_input_chars_per_word", func(tk *Tokenizer) { tk.model.(*wordPiece).maxChars = 1000 }},
		{"bert", "unk", func(tk *Tokenizer) { tk.model.(*wordPiece).unk = -1 }},
	}
	for _, c := range cases {
		t.Run(c.kind+" "+c.option, func(t *testing.T) {
			tok := loadKind(t, dir, c.kind)
			c.off(tok)
			differ := 0
			for i, text := range texts {
				if !equalIDs(tok.Encode(text, true), results[c.kind].Special[i]) {
					differ++
				}
			}
			require.Positive(t, differ, "no parity input depends on %s", c.option)
		})
	}
}
