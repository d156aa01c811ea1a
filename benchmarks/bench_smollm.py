"""SmolLM2-135M-Instruct (model=smollm2_135m, the `smollm` extra) on CPU, in one process:

    python benchmarks/bench_smollm.py [--tasks 4] [--group 2] [--new 48] [--turns 2] [--threads 1]
        [--warm] [--skip-off] [--skip-on]

1. Tool-call habit with the harness masks OFF, on a small synthetic mailbox, through the
   real rollout (ablate.harness.rollout) with the chat conventions of the model's own
   template (ablate.harness.chat): the rate of turns whose first call is
   well-formed (parses; `valid_tool` also needs a known tool name), for each tool format
     json_text    the one detected from SmolLM2's template (tools described in the
                  system turn, the call a JSON object)
     hermes       <tool_call> JSON (Qwen3's syntax), described in the system turn
   and the HF sampler's generated tokens/s over all of these.
2. Masks ON: one task x `group` episodes; the sampler's logprobs against the learner's
   recomputation (max |diff| over generated tokens), for LoRA under DeepSpeed ZeRO-3 and
   under plain torch; one update each (learner tokens/s, ratio ZeRO-3 / torch); one step's
   wall time (rollout + ZeRO-3 update); the weights pushed back to the sampler, a fresh
   rollout, and the same check after the update (with the change of the learner's
   logprobs on the old episodes, > 0 when the update moved the policy). Prints one JSON
   object.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ablate.apps.cli import compose_config  # noqa: E402
from ablate.envs.email import EmailEnv  # noqa: E402
from ablate.envs.email.data import read_tasks  # noqa: E402
from ablate.envs.email.db import EmailDB  # noqa: E402
from ablate.envs.email.synthetic import generate  # noqa: E402
from ablate.harness.rollout import rollout  # noqa: E402
from ablate.learners import make_learner  # noqa: E402
from ablate.models.loading import load_policy  # noqa: E402
from ablate.samplers.hf import HFSampler  # noqa: E402


def call_rates(turn_calls: list, names: set) -> dict:
    """Per turn, its first call: well-formed = parsed (arguments read as a JSON object),
    valid_tool = well-formed and naming one of the tools."""
    firsts = [c[0] if c else None for c in turn_calls]
    n = max(len(firsts), 1)
    parsed = [c for c in firsts if c is not None and c.arguments is not None]
    return {"turns": len(firsts), "well_formed": round(len(parsed) / n, 3),
            "valid_tool": round(sum(c.name in names for c in parsed) / n, 3)}


def masks_off(a, tasks, sampler, tok, cfg, env) -> tuple[dict, int, float]:
    h = copy.deepcopy(cfg.harness)
    h.action_masking = h.answer_masking = h.keyword_masking = False
    h.max_new_tokens_per_turn = a.new
    names = {s["function"]["name"] for s in env.tool_schemas()}
    out, gen, secs = {}, 0, 0.0
    for fmt in ("json_text", "hermes"):
        t = time.perf_counter()
        eps = rollout(tasks, group_size=a.group, sampler=sampler, tokenizer=tok, env=env,
                      harness_cfg=h, mode_cfg=cfg.mode, max_turns=a.turns, temperature=1.0,
                      seed=0, model_cfg=SimpleNamespace(tool_format=fmt, chat_template=None))
        secs += time.perf_counter() - t
        gen += sum(e.response_tokens for e in eps)
        out[fmt] = call_rates([list(turn.calls) for e in eps for turn in e.turns], names)
        out[fmt]["example"] = eps[0].turns[0].text[:160]
    return out, gen, secs


def max_diff(segments, recomputed) -> float:
    d = 0.0
    for seg, lp in zip(segments, recomputed):
        m = torch.tensor(seg.mask, dtype=torch.bool)
        d = max(d, float((lp[m] - torch.tensor(seg.logprobs)[m]).abs().max()))
    return d


def loss_fn(x):
    ratio = torch.exp(x.logprobs - x.old_logprobs)        # GRPO/PPO clip, token mean
    adv = x.advantages[:, None]
    per_tok = -torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
    return (per_tok * x.mask).sum() / max(x.num_tokens, 1), {}


def masks_on(a, tasks, model, sampler, tok, cfg, env) -> dict:
    kw = dict(group_size=a.group, sampler=sampler, tokenizer=tok, env=env,
              harness_cfg=cfg.harness, mode_cfg=cfg.mode, max_turns=a.turns,
              temperature=1.0, seed=1, model_cfg=cfg.model)
    t0 = time.perf_counter()
    eps = rollout(tasks[:1], **kw)
    rollout_s = time.perf_counter() - t0
    segs = [s for e in eps for s in e.segments]
    adv = torch.tensor([1.0 if i % 2 else -1.0 for i in range(len(segs))])
    res = {"episode_tokens": [len(s.ids) for s in segs],
           "generated": [sum(s.mask) for s in segs],
           "example": eps[0].turns[0].text[:160], "rollout_s": round(rollout_s, 2),
           "end_reasons": [e.end_reason for e in eps]}
    for name in ("deepspeed", "torch"):
        lcfg = copy.deepcopy(cfg.learner)
        lcfg.name = name
        lrn = make_learner(lcfg, copy.deepcopy(model), lr=1e-3, seed=0, temperature=1.0,
                           ckpt_dir=tempfile.mkdtemp(prefix="bench-smollm-"))
        before = lrn.logprobs(segs)
        stats = lrn.update(segs, adv, loss_fn)
        after = lrn.logprobs(segs)
        res[name] = {"max_abs_diff_before": max_diff(segs, before),
                     "update_s": round(stats["seconds"], 2),
                     "tokens_per_s": round(stats["tokens_per_s"], 1),
                     "moved": max(float((x - y).abs().max()) for x, y in zip(before, after))}
        if name == "deepspeed":
            sampler.load_weights(lrn.export_state_dict())
            segs2 = [s for e in rollout(tasks[1:2], **kw) for s in e.segments]
            res[name]["max_abs_diff_after_push"] = max_diff(segs2, lrn.logprobs(segs2))
        del lrn
    res["zero3_over_torch_update_s"] = round(res["deepspeed"]["update_s"] /
                                             res["torch"]["update_s"], 3)
    res["step_s_rollout_plus_zero3_update"] = round(rollout_s + res["deepspeed"]["update_s"], 2)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--group", type=int, default=2)
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)   # 1: as run.num_threads (shared CPU)
    ap.add_argument("--skip-off", action="store_true")
    ap.add_argument("--skip-on", action="store_true")
    ap.add_argument("--warm", action="store_true",     # model.warm_start=true
                    help="the SFT warm start (python -m ablate.recipes.smollm_warmstart warmstart)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    cfg = compose_config(["model=smollm2_135m", f"model.warm_start={str(a.warm).lower()}"])
    work = Path(tempfile.mkdtemp(prefix="bench-smollm-"))
    paths = generate(work, seed=0, num_inboxes=4, emails_per_inbox=40, train_tasks=20,
                     test_tasks=4)
    env = EmailEnv.over_db(EmailDB.build(paths["emails"], work / "emails.db"))
    tasks = read_tasks(paths["train_tasks"])[: a.tasks]
    t = time.perf_counter()
    model, tok = load_policy(cfg.model)
    out = {"load_s": round(time.perf_counter() - t, 1), "args": vars(a)}
    sampler = HFSampler(copy.deepcopy(model), tok)
    if not a.skip_off:
        rates, gen, secs = masks_off(a, tasks, sampler, tok, cfg, env)
        out.update(masks_off=rates, hf_generated_tokens=gen,
                   hf_gen_tokens_per_s=round(gen / secs, 1))
    if not a.skip_on:
        out["masks_on"] = masks_on(a, tasks, model, sampler, tok, cfg, env)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
