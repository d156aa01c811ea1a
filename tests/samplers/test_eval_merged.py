"""The evaluation's sampled and greedy episodes in one rollout (issue 31): per-prompt
temperatures in the HF sampler, and the merged rollout's rows against two rollouts.

Row-equality budget (docs/cpu.md): the sampled rows draw the same random numbers as
alone, so they may differ only where batch composition changes float rounding enough to
move a sampled id; a greedy row only where two logits tie within that rounding. Here,
as in the default cell's 192 evaluation rows, nothing differs."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from ablate.harness.config import HarnessConfig, ModeConfig
from ablate.harness.rollout import rollout
from ablate.samplers.hf import HFSampler

import test_harness_util as U

MASKED = HarnessConfig(action_masking=True, answer_masking=True, keyword_masking=True)


@pytest.fixture(scope="module")
def tiny():
    from ablate.models.tiny import load_tiny
    return load_tiny(SimpleNamespace(path=None, dtype="float32"))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from ablate.envs.email import synthetic
    from ablate.envs.email.data import read_tasks
    from ablate.envs.email.db import EmailDB
    d = tmp_path_factory.mktemp("mergedenv")
    p = synthetic.generate(d, seed=123, num_inboxes=2, emails_per_inbox=60, train_tasks=2,
                           test_tasks=3, max_hops=2)
    return EmailDB.build(p["emails"], d / "db.sqlite"), read_tasks(p["test_tasks"])


def test_per_prompt_temperatures_draw_as_alone():
    tok = U.tokenizer()
    model = U.tiny_model(tok, seed=5)
    s = HFSampler(model, tok)
    prompts = [tok.encode(t) for t in ("alpha beta", "gamma", "delta epsilon zeta", "eta")]
    kw = dict(max_new_tokens=[6, 9, 4, 7], seed=11)
    mixed = s.generate(prompts, temperature=[1.0, 0.0, 1.0, 0.0], **kw)
    sampled = s.generate([prompts[0], prompts[2]], temperature=1.0, seed=11,
                         max_new_tokens=[6, 4])
    greedy = s.generate([prompts[1], prompts[3]], temperature=0.0, seed=99,
                        max_new_tokens=[9, 7])
    for a, b in zip([mixed[0], mixed[2], mixed[1], mixed[3]], sampled + greedy):
        assert a.ids == b.ids and a.finish_reason == b.finish_reason
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
    with pytest.raises(ValueError, match="temperature: 3 values for 4 prompts"):
        s.generate(prompts, temperature=[1.0, 0.0, 1.0], **kw)


def test_merged_rollout_rows_equal_two_rollouts(tiny, env):
    from ablate.envs.email import EmailEnv
    model, tok = tiny
    db, tasks = env

    def run(group_size, temperature, seed):
        return rollout(tasks, group_size=group_size, sampler=HFSampler(model, tok),
                       tokenizer=tok, env=EmailEnv.over_db(db), harness_cfg=MASKED,
                       mode_cfg=ModeConfig(), max_turns=5, temperature=temperature, seed=seed)

    merged = run(3, [1.0, 1.0, 0.0], 3)
    sampled, greedy = run(2, 1.0, 3), run(1, 0.0, 4)
    assert max(e.num_turns for e in merged) >= 3
    pairs = list(zip([e for e in merged if e.sample < 2], sampled)) + \
        list(zip([e for e in merged if e.sample == 2], greedy))
    assert len(pairs) == 3 * len(tasks)
    for a, b in pairs:
        assert (a.task.id, a.group) == (b.task.id, b.group)
        assert [x.ids for x in a.segments] == [x.ids for x in b.segments]
        assert (a.end_reason, a.final_answer, a.behaviour()) == \
            (b.end_reason, b.final_answer, b.behaviour())
        for x, y in zip(a.segments, b.segments):
            assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs),
                                  atol=1e-5)
