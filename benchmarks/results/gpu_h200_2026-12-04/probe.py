"""GPU probe 1 (throwaway): the HF sampler on CUDA: cascade on/off agree (greedy, tiny);
sampled logprobs equal a recompute; a Qwen3-4B-shaped random model's decode throughput."""
import copy, json, os, sys, time
from types import SimpleNamespace
import torch
from ablate.models.tiny import load_tiny
from ablate.samplers.hf import HFSampler
out = sys.argv[1]
res = {}
model, tok = load_tiny(SimpleNamespace(path=None, dtype="float32"))
prompts = [tok("You are an agent. Search the inbox for the meeting date " * 3)["input_ids"] + [i]
           for i in range(5, 13)]
share = prompts[0][:-1]
runs = {}
for cascade in (True, False):
    s = HFSampler(copy.deepcopy(model), tok, device="cuda", cascade=cascade)
    s.share_prefix(share)
    t0 = time.time()
    g = s.generate(prompts, max_new_tokens=48, temperature=0.0, seed=1)
    r = s.generate(prompts, max_new_tokens=48, temperature=1.0, seed=1)
    torch.cuda.synchronize()
    runs[cascade] = (g, r, time.time() - t0, s.stats["cascade_rows"])
gc, rc = runs[True][0], runs[False][0]
res["tiny_greedy_equal_cascade_on_off"] = all(a.ids == b.ids for a, b in zip(gc, rc))
res["tiny_greedy_max_lp_diff"] = max(abs(x - y) for a, b in zip(gc, rc)
                                     for x, y in zip(a.logprobs, b.logprobs))
res["tiny_cascade_rows"] = runs[True][3]
# sampled logprobs vs a plain full forward on the GPU
m = model.to("cuda").eval()
diffs = []
for p, c in zip(prompts, runs[True][1]):
    ids = torch.tensor([p + c.ids], device="cuda")
    with torch.no_grad():
        lp = torch.log_softmax(m(ids).logits[0, len(p) - 1:-1].float(), -1)
    want = lp.gather(-1, torch.tensor(c.ids, device="cuda").view(-1, 1)).view(-1)
    diffs.append((want.cpu() - torch.tensor(c.logprobs)).abs().max().item())
res["tiny_sampled_lp_vs_forward_maxdiff"] = max(diffs)
print(json.dumps(res), flush=True)
# Qwen3-4B shape, random bf16 weights, the tiny tokenizer's vocab
from transformers import AutoConfig, AutoModelForCausalLM
cfg = AutoConfig.for_model("qwen3", vocab_size=len(tok), hidden_size=2560, intermediate_size=9728,
        num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=40960, rope_theta=1e6, tie_word_embeddings=True)
torch.manual_seed(0)
with torch.device("cuda"):
    big = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
res["qwen3_4b_shape_params"] = sum(p.numel() for p in big.parameters())
base = [int(x) % len(tok) for x in torch.randint(0, len(tok), (600,), generator=torch.Generator().manual_seed(0))]
for rows in (16, 64):
    for cascade in (True, False):
        s = HFSampler(big, tok, device="cuda", cascade=cascade)
        s.share_prefix(base)
        ps = [base + [7 + i, 9, 11 + i % 5] for i in range(rows)]
        torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
        t0 = time.time()
        g = s.generate(ps, max_new_tokens=128, temperature=1.0, seed=2)
        torch.cuda.synchronize(); dt = time.time() - t0
        n = sum(len(c.ids) for c in g)
        res[f"4b_rows{rows}_cascade{int(cascade)}_tok_s"] = round(n / dt, 1)
        res[f"4b_rows{rows}_cascade{int(cascade)}_peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        print(json.dumps(res), flush=True)
json.dump(res, open(os.path.join(out, "probe.json"), "w"), indent=1)
