"""SFT warm start of SmolLM2-135M-Instruct on scripted email-agent demonstrations
rendered with its OWN chat template (ablate.harness.chat: json_text tool format,
tools in the system turn), so that it writes tool calls before RL starts. Without it the
model answers in prose: 0 well-formed calls in 10 masks-off turns (benchmarks/bench_smollm.py).

    python -m ablate.recipes.smollm_warmstart warmstart [--demos 8] [--epochs 2] [--batch 4]
    then: model=smollm2_135m model.warm_start=true

Demonstrations: the scripted agent (ablate.envs.email.scripted.ScriptedAgent, no
thinking) on a synthetic mailbox, kept when it answers correctly; each rendered by
ablate.harness.chat.demonstration (prompt + Σ turn + <|im_end|> + observation
piece, loss on the turns), i.e. token-identical to what a rollout feeds the model.
Training: the ordinary torch learner (full weights, AdamW), loss the token-mean negative
log-likelihood of the demonstrated turns (supervised fine-tuning, Ouyang et al. 2022,
"Training language models to follow instructions with human feedback", §3.5 SFT).
The result is cached beside the conversion, keyed by the conversion and the recipe.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import shutil
import tempfile
from dataclasses import fields
from pathlib import Path

from ablate.models.smollm import DONE_MARK, Recipe, converted_dir, warm_dir  # noqa: F401


def demonstrations(conv, recipe: Recipe, work: Path) -> list[tuple[list[int], list[int]]]:
    """(ids, loss_mask) of `recipe.demos` correct scripted episodes."""
    from ablate.envs.email.data import read_tasks
    from ablate.envs.email.db import EmailDB
    from ablate.envs.email.scripted import ScriptedAgent
    from ablate.envs.email.synthetic import generate
    from ablate.envs.email.tools import SYSTEM_PROMPT, TOOL_SCHEMAS, ToolBox
    from ablate.harness.chat import demonstration
    p = generate(work, seed=1000 + recipe.seed, num_inboxes=max(4, recipe.demos // 3),
                 emails_per_inbox=40, train_tasks=2 * recipe.demos, test_tasks=2,
                 max_hops=recipe.max_hops)
    agent, rng, out = ScriptedAgent(think=False, give_up_prob=0.0), \
        random.Random(recipe.seed), []
    db = EmailDB.build(p["emails"], work / "db.sqlite")
    for t in read_tasks(p["train_tasks"]):
        ep, steps = agent.run(t, ToolBox(db, t.inbox_address, t.query_date), rng)
        if ep.final_answer != t.answer:
            continue
        turns = [(conv.format_call(s.name, s.arguments), [s.observation]) for s in steps]
        turns[-1] = (turns[-1][0], [])                 # the answer ends the episode
        out.append(demonstration(conv, SYSTEM_PROMPT, t.prompt, TOOL_SCHEMAS, turns))
        if len(out) == recipe.demos:
            break
    return out


def train(model, tok, learner_cfg, recipe: Recipe, work: Path, log=print):
    """Fine-tune `model` in place on the demonstrations; returns the merged state dict."""
    from ablate.harness.chat import ChatConventions
    from ablate.recipes.sft import fit
    demos = demonstrations(ChatConventions.from_tokenizer(tok), recipe, work / "demos")
    log(f"warmstart: {len(demos)} demonstrations, "
        f"{sum(sum(m) for _, m in demos)} trained tokens")
    return fit(model, learner_cfg, demos, epochs=recipe.epochs, batch=recipe.batch,
               lr=recipe.lr, seed=recipe.seed, work=work, log=log)


def build(recipe: Recipe = Recipe(), log=print) -> str:
    """The warm-started directory (built when absent; atomic like the conversion)."""
    from ablate.apps.cli import compose_config
    from ablate.models.loading import load_policy
    base = converted_dir("smollm2_135m")
    final = warm_dir(base, recipe)
    if (final / DONE_MARK).is_file():
        return str(final)
    cfg = compose_config(["model=smollm2_135m", "learner=torch", "learner.lora.enable=false",
                          "learner.micro_batch_tokens=1024"])   # 49k-vocab logits: memory
    model, tok = load_policy(cfg.model)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    try:
        sd = train(model, tok, cfg.learner, recipe, tmp)
        out, _ = load_policy(cfg.model)
        out.load_state_dict(sd)
        out.save_pretrained(str(tmp / "model"), safe_serialization=True)
        tok.save_pretrained(str(tmp / "model"))
        (tmp / "model" / DONE_MARK).write_text(json.dumps(dataclasses.asdict(recipe)) + "\n")
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp / "model", final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"warmstart: wrote {final}")
    return str(final)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ablate.recipes.smollm_warmstart")
    ap.add_argument("command", choices=["convert", "warmstart"])
    for f in fields(Recipe):
        ap.add_argument(f"--{f.name}", type=type(f.default), default=f.default)
    a = ap.parse_args(argv)
    if a.command == "convert":
        print(converted_dir("smollm2_135m"))
        return 0
    print(build(Recipe(**{f.name: getattr(a, f.name) for f in fields(Recipe)})))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
