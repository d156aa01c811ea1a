"""Rollout throughput vs pure batched generation (harness overhead), and KV reuse across
turns vs re-encoding every prompt (the old engine), on a tiny Qwen3 with the real tools
over a synthetic mailbox.

    python benchmarks/bench_rollout.py [--tasks 8] [--group 8] [--threads 1] [--masking]
                                       [--tiny]

Reports episodes/s and generated tokens/s of `rollout` (HF sampler with KV reuse, real
ToolBox), then the same rollout with `kv_reuse=False` (every turn re-encodes the whole
history; same seed, so the same episodes), the sampler tokens encoded per episode over
the episode's own length (prompt + generated + observations) for both, and the time
ratio full/reuse. Then it generates the same number of tokens per episode in ONE batched
call from the same first prompts (no stops, no tools) and prints rollout_time /
pure_time. A random model rarely stops, so most turns run to max_new_tokens_per_turn;
--tiny uses the shipped warm-started tiny model instead (real multi-turn episodes, the
default cell's policy) with its harness defaults (action, answer and keyword masking).
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch


def build(a, work: Path):
    """(model, tokenizer, db, tasks, harness config) for the chosen model."""
    from ablate.envs.email.data import read_tasks
    from ablate.envs.email.db import EmailDB
    from ablate.envs.email.synthetic import generate
    from ablate.harness.config import HarnessConfig
    paths = generate(work, seed=0, num_inboxes=4, emails_per_inbox=60, train_tasks=40,
                     test_tasks=8)
    db = EmailDB.build(paths["emails"], work / "emails.db")
    tasks = read_tasks(paths["train_tasks"])[: a.tasks]
    if a.tiny:
        from types import SimpleNamespace

        from ablate.models.tiny import load_tiny
        model, tok = load_tiny(SimpleNamespace(path=None, dtype="float32"))
        return model, tok, db, tasks, HarnessConfig(action_masking=True, answer_masking=True,
                                                    keyword_masking=True)
    return (*random_model(a, paths), db, tasks,
            HarnessConfig(action_masking=a.masking, answer_masking=a.masking))


def random_model(a, paths):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from ablate.envs.email.tools import SYSTEM_PROMPT, TOOL_SCHEMAS
    from ablate.models.tokenizer import build_tokenizer
    emails = [json.loads(line) for line in open(paths["emails"], encoding="utf-8")]
    texts = [json.dumps(TOOL_SCHEMAS), SYSTEM_PROMPT] + \
        [e["subject"] + "\n" + e["body"] for e in emails]
    tok = build_tokenizer(texts, 2000, extra_tokens=[e["message_id"] for e in emails])
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(
        vocab_size=len(tok), hidden_size=a.hidden, intermediate_size=2 * a.hidden,
        num_hidden_layers=a.layers, num_attention_heads=4, num_key_value_heads=2,
        head_dim=a.hidden // 4, tie_word_embeddings=True)).eval()
    return model, tok


def own_length(tok, ep, thinking: bool = False) -> int:
    """The episode's own tokens: prompt, generated ids and observations (instruct: its
    one segment; thinking: the last segment plus the thinking stripped from earlier turns)."""
    from ablate.harness import chat
    stripped = 0
    if thinking:
        for seg in ep.segments[:-1]:
            gen = [t for t, m in zip(seg.ids, seg.mask) if m]
            stripped += len(gen) - len(chat.strip_thinking_ids(tok, gen))
    return len(ep.segments[-1].ids) + stripped


def timed_rollout(tasks, kw, kv_reuse: bool):
    from ablate.harness.rollout import rollout
    from ablate.samplers.hf import HFSampler
    sampler = HFSampler(kw["model"], kw["tokenizer"], kv_reuse=kv_reuse)
    args = {k: v for k, v in kw.items() if k != "model"}
    t0 = time.perf_counter()
    eps = rollout(tasks, sampler=sampler, **args)
    return eps, time.perf_counter() - t0, sampler


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--masking", action="store_true")
    ap.add_argument("--tiny", action="store_true", help="the shipped warm-started model")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    from ablate.envs.email import EmailEnv
    from ablate.envs.email.tools import SYSTEM_PROMPT, TOOL_SCHEMAS
    from ablate.harness import chat
    from ablate.harness.config import ModeConfig

    model, tok, db, tasks, harness = build(a, Path(tempfile.mkdtemp(prefix="bench-rollout-")))
    kw = dict(group_size=a.group, model=model, tokenizer=tok, harness_cfg=harness,
              env=EmailEnv.over_db(db),
              mode_cfg=ModeConfig(), max_turns=a.turns, temperature=1.0, seed=0)
    timed_rollout(tasks[:1], {**kw, "group_size": 2, "max_turns": 1}, True)   # warm-up
    eps, t_roll, sampler = timed_rollout(tasks, kw, True)
    full, t_full, s_full = timed_rollout(tasks, kw, False)
    own = sum(own_length(tok, e) for e in eps)
    gen = sum(e.response_tokens for e in eps)

    prompts = [chat.render_prompt(tok, e.task, TOOL_SCHEMAS, ModeConfig(), SYSTEM_PROMPT)
               for e in eps]
    t0 = time.perf_counter()
    outs = sampler.generate(prompts, max_new_tokens=[e.response_tokens for e in eps],
                            temperature=1.0, seed=0)
    t_pure = time.perf_counter() - t0
    assert sum(len(o.ids) for o in outs) == gen
    print(json.dumps({
        "model_params": sum(p.numel() for p in model.parameters()), "vocab": len(tok),
        "threads": a.threads, "episodes": len(eps),
        "turns_per_episode": sum(e.num_turns for e in eps) / len(eps),
        "tool_calls": sum(len(e.calls) for e in eps), "generated_tokens": gen,
        "mean_episode_tokens": round(own / len(eps)), "masking": harness.action_masking,
        "same_episodes_as_full_recompute": [s.ids for e in eps for s in e.segments] ==
        [s.ids for e in full for s in e.segments],
        "encoded_per_episode_length_reuse": round(sampler.stats["encoded_tokens"] / own, 3),
        "encoded_per_episode_length_full": round(s_full.stats["encoded_tokens"] / own, 3),
        "rollout_s": round(t_roll, 2), "rollout_full_recompute_s": round(t_full, 2),
        "speedup_full_over_reuse": round(t_full / t_roll, 2),
        "episodes_per_s": round(len(eps) / t_roll, 2),
        "rollout_gen_tokens_per_s": round(gen / t_roll, 1),
        "pure_generate_s": round(t_pure, 2), "pure_gen_tokens_per_s": round(gen / t_pure, 1),
        "harness_overhead_ratio": round(t_roll / t_pure, 2)}, indent=1))


if __name__ == "__main__":
    main()
