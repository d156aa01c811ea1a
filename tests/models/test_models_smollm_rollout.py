"""SmolLM2-135M-Instruct (SFT warm-started: the raw model writes no tool calls) acting
through its own chat template (json_text tool format, tools in the system turn,
<|im_end|> closing turns) with the harness masks on: the
rollout's ids are the template's pieces, and the sampler's logprobs equal a plain
forward's recomputation (what the learner computes) within 1e-4 in fp32, on a real
49k BPE whose merges differ from re-encoding the decoded episode text."""
from __future__ import annotations

import pytest
import torch

from ablate.apps.cli import compose_config
from ablate.harness.chat import ChatConventions
from test_harness_util import masked_logprobs, smollm_installed

INSTALLED = smollm_installed()

pytestmark = [pytest.mark.heavy,
              pytest.mark.skipif(not INSTALLED, reason="the smollm extra is not installed")]


def _warm_started() -> bool:
    from ablate.models.loading import ModelNotFoundError
    from ablate.models.smollm import warm_started_dir
    try:
        warm_started_dir("smollm2_135m")
        return True
    except ModelNotFoundError:
        return False


@pytest.mark.skipif(not INSTALLED or not _warm_started(),
                    reason="build it once: python -m ablate.recipes.smollm_warmstart warmstart")
def test_smollm2_rollout_masks_on_token_exact(tmp_path):
    from ablate.envs.email import EmailEnv
    from ablate.envs.email.data import read_tasks
    from ablate.envs.email.db import EmailDB
    from ablate.envs.email.synthetic import generate
    from ablate.harness.rollout import rollout
    from ablate.models.loading import load_policy
    from ablate.samplers.hf import HFSampler
    cfg = compose_config(["model=smollm2_135m", "model.warm_start=true",
                          "harness.max_new_tokens_per_turn=40"])
    model, tok = load_policy(cfg.model)
    p = generate(tmp_path, seed=0, num_inboxes=2, emails_per_inbox=30, train_tasks=2,
                 test_tasks=2)
    env = EmailEnv.over_db(EmailDB.build(p["emails"], tmp_path / "db.sqlite"))
    tasks = read_tasks(p["test_tasks"])[:1]
    eps = rollout(tasks, group_size=2, sampler=HFSampler(model, tok), tokenizer=tok, env=env,
                  harness_cfg=cfg.harness, mode_cfg=cfg.mode, max_turns=2, temperature=1.0,
                  seed=0, model_cfg=cfg.model)
    conv = ChatConventions.from_config(tok, cfg.model, cfg.mode)
    assert conv.fmt.name == "json_text"
    prompt = conv.prompt_ids(env.system_prompt(), tasks[0].prompt, env.tool_schemas())
    worst, masked, retokenized_differs = 0.0, 0, False
    for ep in eps:
        (seg,) = ep.segments
        assert seg.ids[:len(prompt)] == prompt
        assert all(t.calls for t in ep.turns)          # every turn's call was executed
        lp = masked_logprobs(model, seg)
        m = torch.tensor(seg.mask, dtype=torch.bool)
        worst = max(worst, float((lp[m] - torch.tensor(seg.logprobs)[m]).abs().max()))
        masked += len(seg.allowed or {})
        retokenized_differs |= tok.encode(tok.decode(seg.ids), add_special_tokens=False) != seg.ids
    print(f"smollm2 rollout: max |sampler - recomputed| logprob = {worst:.2e}, "
          f"{masked} masked positions")
    assert worst < 1e-4 and masked > 0
    assert any(c.error is None for ep in eps for t in ep.turns for c in t.calls)
    assert retokenized_differs     # the ids are the sampled ones, not a re-encoding
