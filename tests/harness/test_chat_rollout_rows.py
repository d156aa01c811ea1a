"""The rollout builds its ids from the model's own chat template (ablate/harness/
chat/conventions.py): for the tiny model (its template, instruct and thinking, masks on and
off) and for Qwen3's template (the repository's copy, on the tiny model's weights) the
episodes are row for row those of the Qwen3-only harness it replaced, recorded in
tests/fixtures/chat_rollout_rows.json (ids, masks, allowed sets exactly; logprobs to
1e-4).

Re-record (only when a change of behaviour is intended):
    python tests/harness/test_chat_rollout_rows.py --record
"""
from __future__ import annotations

import copy
import hashlib
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ablate.harness.config import HarnessConfig, ModeConfig
from ablate.harness.rollout import rollout
from ablate.models.tokenizer import QWEN3_CHAT_TEMPLATE
from ablate.samplers.hf import HFSampler

FIXTURE = Path(__file__).parents[1] / "fixtures" / "chat_rollout_rows.json"
INSTRUCT = ModeConfig()
THINKING = ModeConfig(name="thinking", enable_thinking=True, max_think_tokens=8)
MASKED = HarnessConfig(action_masking=True, answer_masking=True, keyword_masking=True)
FREE = HarnessConfig(max_new_tokens_per_turn=48)
CASES = {"tiny_instruct_masked": ("tiny", INSTRUCT, MASKED),
         "tiny_thinking_masked": ("tiny", THINKING, MASKED),
         "tiny_instruct_free": ("tiny", INSTRUCT, FREE),
         "qwen3_template_instruct_masked": ("qwen3", INSTRUCT, MASKED)}


def _setup(tmp: Path):
    from ablate.envs.email import EmailEnv, synthetic
    from ablate.envs.email.data import read_tasks
    from ablate.envs.email.db import EmailDB
    from ablate.models.tiny import load_tiny
    p = synthetic.generate(tmp, seed=123, num_inboxes=2, emails_per_inbox=60, train_tasks=2,
                           test_tasks=2, max_hops=2)
    env = EmailEnv.over_db(EmailDB.build(p["emails"], tmp / "db.sqlite"))
    model, tok = load_tiny(SimpleNamespace(path=None, dtype="float32"))
    return model, tok, env, read_tasks(p["test_tasks"])


def _rows(model, tok, env, tasks, case):
    template, mode, harness = CASES[case]
    if template == "qwen3":
        tok = copy.deepcopy(tok)
        tok.chat_template = QWEN3_CHAT_TEMPLATE
    eps = rollout(tasks, group_size=2, sampler=HFSampler(model, tok), tokenizer=tok, env=env,
                  harness_cfg=harness, mode_cfg=mode, max_turns=3, temperature=1.0, seed=5)
    return [{"end": e.end_reason, "answer": e.final_answer,
             "segments": [_segment(s) for s in e.segments]} for e in eps]


def _segment(s) -> dict:
    """A segment's record: the hash of all its ids, the ids from its first generated
    position on, its mask, its allowed sets and its generated tokens' logprobs."""
    first = s.mask.index(1) if 1 in s.mask else len(s.mask)
    return {"sha": hashlib.sha256(json.dumps(s.ids).encode()).hexdigest(),
            "tail": s.ids[first:], "mask": s.mask,
            "logprobs": [round(x, 6) for x, m in zip(s.logprobs, s.mask) if m],
            "allowed": {str(k): v for k, v in (s.allowed or {}).items()}}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return _setup(tmp_path_factory.mktemp("rows"))


@pytest.mark.parametrize("case", list(CASES))
def test_rollout_rows_unchanged(setup, case):
    want = json.loads(FIXTURE.read_text())[case]
    got = _rows(*setup, case)
    assert len(got) == len(want)
    assert sum(len(s["mask"]) for e in want for s in e["segments"]) > 2000   # real episodes
    for g, w in zip(got, want):
        assert (g["end"], g["answer"]) == (w["end"], w["answer"])
        assert len(g["segments"]) == len(w["segments"])
        for gs, ws in zip(g["segments"], w["segments"]):
            assert gs["tail"] == ws["tail"] and gs["mask"] == ws["mask"]
            assert gs["sha"] == ws["sha"]
            assert gs["allowed"] == ws["allowed"]
            assert max(abs(a - b) for a, b in zip(gs["logprobs"], ws["logprobs"])) < 1e-4


if __name__ == "__main__" and "--record" in sys.argv:
    import tempfile
    s = _setup(Path(tempfile.mkdtemp(prefix="rows-")))
    FIXTURE.write_text(json.dumps({c: _rows(*s, c) for c in CASES}) + "\n")
    print("wrote", FIXTURE)
