"""The per-call cost of ablate.core.lora_rows.adapter_rows, which the HF sampler enters at
every decode step of a batched pack (ablate/samplers/hf.py `_forward`): with its per-model
plan kept (the default) against the plan rebuilt at every call (the module tree walked,
every LoRA layer checked), in one run, over a Qwen3-4B-shaped module tree (36 layers,
LoRA r16 on q, k, v, o; narrow widths, since only the module count matters here) holding
--adapters adapters, the rows spread over all of them.

    python benchmarks/bench_adapter_rows.py [--adapters 8] [--calls 50] [--out FILE]

Prints one JSON object: milliseconds per enter + exit, kept and rebuilt, their ratio."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import peft
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ablate.core import lora_rows  # noqa: E402


def tree(adapters: int):
    cfg = transformers.Qwen3Config(hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=36, num_attention_heads=4,
                                   num_key_value_heads=2, head_dim=16, vocab_size=512)
    lc = peft.LoraConfig(r=16, lora_alpha=32,
                         target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    model = peft.get_peft_model(transformers.AutoModelForCausalLM.from_config(cfg), lc,
                                adapter_name="cell0")
    for i in range(1, adapters):
        model.add_adapter(f"cell{i}", lc)
    return model.eval()


def per_call_ms(model, names, calls: int, rebuild: bool) -> float:
    for _ in range(3):
        with lora_rows.adapter_rows(model, names):
            pass
    t0 = time.perf_counter()
    for _ in range(calls):
        if rebuild:
            lora_rows._PLANS.clear()
        with lora_rows.adapter_rows(model, names):
            pass
    return (time.perf_counter() - t0) / calls * 1e3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adapters", type=int, default=8)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    model = tree(a.adapters)
    names = [f"cell{i % a.adapters}" for i in range(2 * a.adapters)]
    kept = per_call_ms(model, names, a.calls, False)
    rebuilt = per_call_ms(model, names, a.calls, True)
    out = {"adapters": a.adapters, "modules": sum(1 for _ in model.modules()),
           "lora_layers": len(lora_rows._lora_layers(model)), "kept_ms": kept,
           "rebuilt_ms": rebuilt, "rebuilt_over_kept": rebuilt / kept,
           "date": time.strftime("%Y-%m-%d")}
    text = json.dumps(out, indent=1)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
