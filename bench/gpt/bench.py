"""The Python side of bench/gpt: the same GPT-2 (loaded from the directory gotrain wrote),
batches, optimizer and thread count, timed the same way. Prints one JSON object."""
import json, sys, time
import torch
from transformers import GPT2LMHeadModel

path = sys.argv[1]
batch, seq, steps, warmup, new, threads = (int(a) for a in sys.argv[2:8])
torch.set_num_threads(threads)
m = GPT2LMHeadModel.from_pretrained(path)
vocab = m.config.vocab_size
prompt = torch.tensor([[(i * 7) % vocab for i in range(16)]])

m.eval()
with torch.no_grad():
    m.generate(prompt, max_new_tokens=4, do_sample=False, pad_token_id=0)  # warm-up
    t = time.perf_counter()
    out = m.generate(prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False, use_cache=True, pad_token_id=0)
    gen_s = time.perf_counter() - t
generated = out[0, prompt.shape[1]:].tolist()

m.train()
torch.manual_seed(1)
batches = [torch.randint(0, vocab, (batch, seq)) for _ in range(warmup + steps)]
opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=1e-2, fused=True)
first = None
for i, ids in enumerate(batches):
    if i == warmup:
        t = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = m(ids, labels=ids).loss
    loss.backward()
    opt.step()
    l = loss.item()
    if i == 0:
        first = l
train_s = time.perf_counter() - t
print(json.dumps({"train_tokens_per_s": steps * batch * seq / train_s, "gen_tokens_per_s": len(generated) / gen_s,
                  "first_loss": first, "generated": generated}))
