"""The turn number reaches a world's mask callback (issue 63 item 3): `mask_candidates`
gets `turn` (the episode's turn, from 0) when its signature takes it (a `turn` parameter
or **options), in the rollout, in preflight's conformance episode and in the hints'
replay of the masks; a callback whose switches are named and that takes no `turn` (the
email world's) keeps working, called without it."""
from __future__ import annotations

from transformers import AutoTokenizer

from ablate.algos.hints import remask, same_masks, turn_spans
from ablate.envs.conformance import mask_watch, play_one
from ablate.harness.chat import format_tool_call as call
from ablate.harness.config import HarnessConfig, ModeConfig
from ablate.harness.masking import mask_context, takes_turn, token_bytes
from ablate.harness.rollout import rollout
from envs_external.counter import CounterEnv
import test_harness_util as U

TINY = "ablate/models/assets/tiny"
MASKED = HarnessConfig(action_masking=True)


class TurnCounter(CounterEnv):
    """The counter world whose mask offers `add` on turns 0 and 1 and `answer` from
    turn 2 on: a schedule only the turn number gives (the state's value does not)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.seen: list[int] = []

    def mask_candidates(self, state, turn, **options) -> dict:
        self.seen.append(turn)
        return {"tool_names": ["add"] if turn < 2 else ["answer"]}


class Named(CounterEnv):
    """A callback written before the turn was passed: its switches named, no **options."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.calls = 0

    def mask_candidates(self, state, answer_masking=True, keyword_masking=False,
                        keyword_words=1) -> dict:
        self.calls += 1
        return {"tool_names": ["add", "answer"]}


def test_the_signature_decides_whether_turn_is_passed():
    assert takes_turn(TurnCounter.mask_candidates)
    assert takes_turn(lambda self, state, **options: {})
    assert not takes_turn(Named.mask_candidates)
    env, named = TurnCounter(), Named()
    state = env.reset(env.tasks("train")[0])
    assert mask_context(env, state, 3, answer_masking=True)["tool_names"] == ["answer"]
    assert env.seen == [3]
    assert mask_context(named, state, 3, answer_masking=True, keyword_masking=False,
                        keyword_words=1) == {"tool_names": ["add", "answer"]}


def test_rollout_asks_the_mask_with_each_turns_number():
    tok = AutoTokenizer.from_pretrained(TINY)
    env = TurnCounter(num_tasks=2)
    adds = [call("add", {"n": 1}), call("add", {"n": 1}), call("answer", {"value": "9"})]
    sampler = U.ScriptedSampler(tok, lambda prompt, turn: adds[turn])
    eps = rollout(env.tasks("test")[:2], group_size=2, sampler=sampler, tokenizer=tok,
                  env=env, harness_cfg=MASKED, mode_cfg=ModeConfig(), max_turns=3,
                  temperature=1.0, seed=0)
    assert env.seen == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    assert [len(e.turns) for e in eps] == [3, 3, 3, 3]
    # each turn's recorded mask (what the learner trains under) is that turn's schedule
    vb = token_bytes(tok)
    for k, (j, start, end) in enumerate(turn_spans(eps[0])):
        seg = eps[0].segments[j]
        offered = {vb.bytes[i] for p, a in seg.allowed.items() if start <= p < end for i in a}
        assert any(b.startswith(b"ans") for b in offered) == (k == 2), k
        assert any(b.startswith(b"ad") for b in offered) == (k < 2), k
    # the hints' replay rebuilds the same masks, turn numbers included
    env.seen.clear()
    assert same_masks(eps[0], remask(eps[0], tok, MASKED, ModeConfig(), env))
    assert env.seen == [0, 1, 2]


def test_rollout_keeps_a_callback_without_turn_working():
    tok = AutoTokenizer.from_pretrained(TINY)
    env = Named(num_tasks=1)
    sampler = U.ScriptedSampler(tok, lambda prompt, turn: call("answer", {"value": "1"}))
    eps = rollout(env.tasks("test")[:1], group_size=1, sampler=sampler, tokenizer=tok,
                  env=env, harness_cfg=MASKED, mode_cfg=ModeConfig(), max_turns=2,
                  temperature=1.0, seed=0)
    assert env.calls == 1 and eps[0].end_reason == "answer"


def test_conformance_episode_passes_the_turn():
    env = TurnCounter(num_tasks=2)
    watch = mask_watch(env, "turncounter", answer_masking=False)
    play_one(env, "turncounter", 4, watch)
    assert env.seen == [0, 1]          # the baseline adds once, then answers
