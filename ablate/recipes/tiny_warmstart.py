"""The embedded tiny model warm-started on another environment's scripted agent.

The shipped tiny checkpoint (ablate/models/assets/tiny) learned the email task; on a
second world (env=coderepair) it writes the email tools' arguments after the other
world's tool names. This is a short SFT from that checkpoint on the environment's own
scripted baseline (Environment.baseline, e.g. the code-repair HonestFixer that reads,
edits and tests), its episodes rendered with the harness's chat functions so that SFT
and RL see token-identical text (ablate/harness/chat/conventions.py `demonstration`).

    python -m ablate.recipes.tiny warmstart --env coderepair [--out DIR] [--demos N] ...
    then: model=tiny_coderepair (conf/model/tiny_coderepair.yaml loads the shipped result)

Deterministic for a recipe on the same torch build: the demonstrations are the first
`demos` correct scripted episodes on the environment's train split (default generator
seed, the split RL trains on), SFT with the torch learner (ablate/recipes/sft.py). Saved in
float16 like the shipped email checkpoint, with the recipe beside the weights.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ablate.models.tiny import WARM_ASSETS, load_tiny

RECIPE_FILE = "ablate_warmstart.json"


@dataclass(frozen=True)
class Recipe:
    env: str = "coderepair"
    demos: int = 160          # correct scripted episodes of the train split
    epochs: int = 2
    batch: int = 8            # episodes per optimizer step
    lr: float = 1e-3
    seed: int = 0


def demonstrations(env, conv, n: int) -> list[tuple[list[int], list[int]]]:
    """(ids, loss_mask) of the first `n` correct episodes of env's scripted baseline."""
    from ablate.protocol.trajectory import run_episode
    from ablate.harness.chat import demonstration
    out = []
    for task in env.tasks("train"):
        policy = env.baseline(task)
        if policy is None:
            raise ValueError(f"env {env.name} has no scripted baseline to learn from")
        tr = run_episode(env, task, policy, env.max_turns)
        if not tr.correct:
            continue
        turns = [(conv.format_call(r.name, r.arguments), [r.observation])
                 for r in tr.results]
        turns[-1] = (turns[-1][0], [])           # the answer tool ends the episode
        out.append(demonstration(conv, env.system_prompt(), task.prompt,
                                 env.tool_schemas(), turns))
        if len(out) == n:
            return out
    raise ValueError(f"env {env.name}: only {len(out)} correct scripted episodes in its "
                     f"train split, {n} asked for")


def build(recipe: Recipe = Recipe(), out: str | Path | None = None, log=print) -> Path:
    """Fine-tune the shipped tiny model on `recipe` and write it to `out` (atomically:
    a killed build leaves the previous checkpoint in place)."""
    from ablate.apps.cli import compose_config
    from ablate.envs.registry import make_env
    from ablate.harness.chat import ChatConventions
    from ablate.recipes.sft import fit
    final = Path(out) if out else WARM_ASSETS[recipe.env]
    cfg = compose_config([f"env={recipe.env}", "learner=torch",
                          "learner.lora.enable=false"])
    model, tok = load_tiny()
    env = make_env(cfg.env)
    demos = demonstrations(env, ChatConventions.from_tokenizer(tok), recipe.demos)
    log(f"warmstart: {len(demos)} demonstrations of env={recipe.env}, "
        f"{sum(sum(m) for _, m in demos)} trained tokens")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    try:
        sd = fit(model, cfg.learner, demos, epochs=recipe.epochs, batch=recipe.batch,
                 lr=recipe.lr, seed=recipe.seed, work=tmp, log=log)
        fresh, _ = load_tiny()
        fresh.load_state_dict(sd)
        fresh.half().save_pretrained(str(tmp / "model"), safe_serialization=True)
        tok.save_pretrained(str(tmp / "model"))
        (tmp / "model" / RECIPE_FILE).write_text(
            json.dumps(dataclasses.asdict(recipe), sort_keys=True) + "\n")
        if final.exists():
            shutil.rmtree(final)
        (tmp / "model").rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"warmstart: wrote {final}")
    return final
