"""Rollout throughput vs pure batched generation (harness overhead), on a random tiny
Qwen3 with the real tools over a synthetic mailbox.

    python benchmarks/bench_rollout.py [--tasks 8] [--group 8] [--threads 1] [--masking]

Reports episodes/s and generated tokens/s of `rollout` (HF sampler, real ToolBox), then
generates the same number of tokens per episode in ONE batched call from the same first
prompts (no stops, no tools), and prints the ratio rollout_time / pure_time.
A random model rarely stops, so most turns run to max_new_tokens_per_turn: the numbers
measure the harness, not the policy.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--masking", action="store_true")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from ablate.env.db import EmailDB
    from ablate.env.data import read_tasks
    from ablate.env.synthetic import generate
    from ablate.env.tools import TOOL_SCHEMAS, ToolBox
    from ablate.harness import chat
    from ablate.harness.config import HarnessConfig, ModeConfig
    from ablate.harness.rollout import rollout
    from ablate.models.tokenizer import build_tokenizer
    from ablate.samplers.hf import HFSampler

    work = Path(tempfile.mkdtemp(prefix="bench-rollout-"))
    paths = generate(work, seed=0, num_inboxes=4, emails_per_inbox=60, train_tasks=40,
                     test_tasks=8)
    db = EmailDB.build(paths["emails"], work / "emails.db")
    tasks = read_tasks(paths["train_tasks"])[: a.tasks]
    emails = [json.loads(line) for line in open(paths["emails"], encoding="utf-8")]
    texts = [json.dumps(TOOL_SCHEMAS), chat.DEFAULT_SYSTEM_PROMPT] + \
        [e["subject"] + "\n" + e["body"] for e in emails]
    tok = build_tokenizer(texts, 2000, extra_tokens=[e["message_id"] for e in emails])
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(
        vocab_size=len(tok), hidden_size=a.hidden, intermediate_size=2 * a.hidden,
        num_hidden_layers=a.layers, num_attention_heads=4, num_key_value_heads=2,
        head_dim=a.hidden // 4, tie_word_embeddings=True)).eval()
    n_params = sum(p.numel() for p in model.parameters())
    sampler = HFSampler(model, tok)
    harness = HarnessConfig(action_masking=a.masking, answer_masking=a.masking)
    make_tb = lambda t: ToolBox(db, t.inbox_address, t.query_date)  # noqa: E731

    kw = dict(group_size=a.group, sampler=sampler, tokenizer=tok, make_toolbox=make_tb,
              harness_cfg=harness, mode_cfg=ModeConfig(), max_turns=a.turns,
              temperature=1.0, seed=0)
    rollout(tasks[:1], **{**kw, "group_size": 2, "max_turns": 1})      # warm-up
    t0 = time.perf_counter()
    eps = rollout(tasks, **kw)
    t_roll = time.perf_counter() - t0
    gen = sum(e.response_tokens for e in eps)
    calls = sum(len(e.calls) for e in eps)

    prompts = [chat.render_prompt(tok, e.task, TOOL_SCHEMAS, ModeConfig()) for e in eps]
    t0 = time.perf_counter()
    outs = sampler.generate(prompts, max_new_tokens=[e.response_tokens for e in eps],
                            temperature=1.0, seed=0)
    t_pure = time.perf_counter() - t0
    assert sum(len(o.ids) for o in outs) == gen
    ctx = sum(len(s.ids) for e in eps for s in e.segments) / len(eps)
    print(json.dumps({
        "model_params": n_params, "vocab": len(tok), "threads": a.threads,
        "episodes": len(eps), "turns_per_episode": sum(e.num_turns for e in eps) / len(eps),
        "tool_calls": calls, "generated_tokens": gen, "mean_episode_tokens": round(ctx),
        "masking": a.masking,
        "rollout_s": round(t_roll, 2), "episodes_per_s": round(len(eps) / t_roll, 2),
        "rollout_gen_tokens_per_s": round(gen / t_roll, 1),
        "pure_generate_s": round(t_pure, 2), "pure_gen_tokens_per_s": round(gen / t_pure, 1),
        "harness_overhead_ratio": round(t_roll / t_pure, 2)}, indent=1))


if __name__ == "__main__":
    main()
