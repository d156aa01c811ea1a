"""One learner-to-sampler push of a LoRA cell: the merged route (the adapter merged into
a copy of the whole base, the full state loaded by the sampler: ablate.loop.policy with
ADAPTER_SYNC=False) against the adapter route (the adapter alone, loaded unmerged:
HFSampler.load_adapter), and a full fine-tune's push, in one run, on the CPU.

    python benchmarks/bench_push.py [--shape tiny|qwen3_4b|both] [--layers 4] [--repeats 3]

Each route is the library's own code: export (ablate.learners.lora merged_state_dict /
adapter_of over the learner's gathered tensors, as TorchLearner gathers them) then the
HF sampler's load. Bytes are the tensor bytes that cross (the same count
ablate.loop.policy.push_weights logs as push/bytes); seconds are wall time (median of
--repeats), export included.

The Qwen3-4B shape (Qwen/Qwen3-4B config.json: hidden 2560, MLP 9728, 32 heads, 8 KV
heads, head_dim 128, vocab 151936, tied; LoRA r16/alpha32 on q, k, v, o as
conf/paper_cell/qwen3_4b_shaped_lora.yaml) is built with random bfloat16 weights and
--layers of its 36 layers: the learner's model, the sampler's copy and the merged export
of all 36 would need ~24 GB on this 24 GiB host. A push's cost is a fixed part (the
embedding, the final norm) plus one part per layer, so the model is also built with 1
layer: per layer = (at L - at 1) / (L - 1), and `scaled_36` = at 1 + per layer x 35, for
the bytes (exact). Seconds are reported as measured at --layers only: on a shared host
the difference of two timings is noise-dominated (it came out negative). The merged and
full states count the tied head twice: the HF sampler receives both keys (vLLM drops
lm_head when tied: 8.04 GB at Qwen3-4B). Prints one JSON object; --out writes it too."""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from omegaconf import OmegaConf  # noqa: E402

from ablate.learners.lora import adapter_of, apply_lora, merged_state_dict  # noqa: E402
from ablate.samplers.hf import HFSampler  # noqa: E402

SHAPES = {   # Qwen3 configs: the tests' tiny model and Qwen/Qwen3-4B's config.json
    "tiny": dict(vocab_size=600, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16, dtype="float32"),
    "qwen3_4b": dict(vocab_size=151936, hidden_size=2560, intermediate_size=9728,
                     num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                     head_dim=128, dtype="bfloat16"),
}
LORA = {"tiny": dict(rank=8, alpha=16), "qwen3_4b": dict(rank=16, alpha=32)}


class _Tok:   # HFSampler reads only the pad / eos ids from its tokenizer
    pad_token_id, eos_token_id = 0, 1


def build(shape: str, layers: int | None):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    spec = dict(SHAPES[shape])
    dtype = getattr(torch, spec.pop("dtype"))
    if layers is not None:
        spec["num_hidden_layers"] = layers
    torch.manual_seed(0)
    config = Qwen3Config(**spec, tie_word_embeddings=True, max_position_embeddings=4096)
    return Qwen3ForCausalLM(config).to(dtype).eval()


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def routes(base, shape: str, repeats: int) -> dict:
    lora = OmegaConf.create({**LORA[shape], "dropout": 0.0,
                             "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]})
    learner = apply_lora(copy.deepcopy(base), lora)
    sampler = HFSampler(copy.deepcopy(base), _Tok())
    adapter_sampler = HFSampler(copy.deepcopy(base), _Tok())
    out = {}

    def merged():
        gathered = {k: v.detach().cpu().clone() for k, v in learner.state_dict().items()}
        state = merged_state_dict(learner, gathered)
        sampler.load_weights(state)
        out["merged_bytes"] = sum(t.numel() * t.element_size() for t in state.values())

    def adapter():
        trained = {n: p.detach().cpu().clone() for n, p in learner.named_parameters()
                   if p.requires_grad}
        a = adapter_of(learner, trained)
        adapter_sampler.load_adapter(a)
        out["adapter_bytes"] = a.nbytes

    def full():
        state = {k: v.detach().cpu().clone() for k, v in base.state_dict().items()}
        sampler.load_weights(state)
        out["full_bytes"] = sum(t.numel() * t.element_size() for t in state.values())

    out["merged_s"] = timed(merged, repeats)
    out["adapter_s"] = timed(adapter, repeats)
    out["full_s"] = timed(full, repeats)
    out["bytes_ratio"] = out["merged_bytes"] / out["adapter_bytes"]
    out["seconds_ratio"] = out["merged_s"] / out["adapter_s"]
    return out


def measure(shape: str, layers: int | None, repeats: int) -> dict:
    row = {"shape": shape, "layers": layers or SHAPES[shape]["num_hidden_layers"]}
    row.update(routes(build(shape, layers), shape, repeats))
    if shape == "qwen3_4b" and layers is not None:
        # a 1-layer model separates the fixed part (embedding, norm) from the per-layer one
        one = routes(build(shape, 1), shape, repeats)
        full = SHAPES[shape]["num_hidden_layers"]
        row["scaled_36"] = {k: one[k] + (row[k] - one[k]) / (layers - 1) * (full - 1)
                            for k in ("merged_bytes", "adapter_bytes", "full_bytes")}
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=["tiny", "qwen3_4b", "both"], default="both")
    ap.add_argument("--layers", type=int, default=4, help="Qwen3-4B layers built (2..36)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    shapes = ["tiny", "qwen3_4b"] if a.shape == "both" else [a.shape]
    rows = [measure(s, a.layers if s == "qwen3_4b" else None, a.repeats) for s in shapes]
    report = {"rows": rows, "threads": torch.get_num_threads()}
    text = json.dumps(report, indent=1)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
