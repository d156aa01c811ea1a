"""GiGPO turn-level credit against a plain re-implementation of arXiv:2505.10978 §4.2-4.3,
the anchor states (the email world's, and the history key of a world without), the turn -> token mapping in both modes, and a real
2-step cell."""
from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch

from ablate.algos import build_algorithm, state_keys
from ablate.algos.config import AlgoConfig
from ablate.algos.gigpo import step_advantages, token_advantages, turn_returns
from ablate.envs.email.tools import ToolCall as BoxCall
from ablate.envs.email.env import EmailEnv, tool_result
from ablate.harness.episode import Segment, Turn

TOL = 1e-6


def ref_step_advantages(keys, returns, norm_std, eps):
    """Group every (episode, turn) by its state; (R - mean) / (std + eps) inside groups of
    at least two differing returns, else 0."""
    flat = [(key, i, k) for i, ks in enumerate(keys) for k, key in enumerate(ks)]
    out = [[0.0] * len(ks) for ks in keys]
    for key in {f[0] for f in flat}:
        group = [(i, k) for kk, i, k in flat if kk == key]
        rs = [returns[i][k] for i, k in group]
        if len(rs) < 2 or max(rs) == min(rs):
            continue
        mean = sum(rs) / len(rs)
        std = math.sqrt(sum((x - mean) ** 2 for x in rs) / (len(rs) - 1))
        for (i, k), x in zip(group, rs):
            out[i][k] = (x - mean) / (std + eps) if norm_std else x - mean
    return out


@pytest.mark.parametrize("norm_std", [True, False])
def test_step_advantages_match_reference(norm_std):
    keys = [["s0", "a", "b"], ["s0", "a"], ["s0", "c", "c", "d"], ["s0", "b"]]
    returns = [turn_returns(r, len(k), 0.95) for r, k in zip([1.0, 0.0, 0.5, 0.2], keys)]
    got, coverage = step_advantages(keys, returns, norm_std=norm_std, eps=1e-6)
    ref = ref_step_advantages(keys, returns, norm_std, 1e-6)
    for g, r in zip(got, ref):
        assert g == pytest.approx(r, abs=TOL)
    assert got[2][3] == 0.0                       # "d" is nobody else's state
    assert coverage == pytest.approx(10 / 11)     # every turn but "d" shares its state
    assert turn_returns(2.0, 3, 0.5) == [0.5, 1.0, 2.0]


def turn(n_tokens, calls=()):
    return Turn(text="", completion_tokens=n_tokens, calls=list(calls))


def ToolCall(*args, **kw):
    return tool_result(BoxCall(*args, **kw))


EMAIL = EmailEnv.__new__(EmailEnv)      # anchor_states reads only the calls


def episode(turns, segments, task_id="t1", world=EMAIL):
    """An episode as the rollout leaves it: the world's anchors filled (None without)."""
    anchors = world.anchor_states(None, [t.calls for t in turns]) if world else None
    return SimpleNamespace(turns=turns, segments=segments, task=SimpleNamespace(id=task_id),
                           response_tokens=sum(t.completion_tokens for t in turns),
                           anchors=anchors)


def test_enronhop_anchor_state_is_evidence_seen_not_the_words_used():
    a = episode([turn(2, [ToolCall("search_inbox", {"keywords": ["x"]}, "", hits=["m1"])]),
                 turn(2, [ToolCall("read_email", {}, "", read_id="m1")]), turn(2)], [])
    b = episode([turn(2, [ToolCall("search_inbox", {"keywords": ["y", "z"]}, "",
                                   hits=["m1"])]),
                 turn(2, [ToolCall("read_email", {}, "", read_id=None, error="missing")]),
                 turn(2)], [])
    ka, kb = state_keys(a), state_keys(b)
    assert ka[0] == kb[0] and ka[1] == kb[1]     # same start; same hits, other keywords
    assert ka[2] != kb[2]                        # a read m1, b's read failed
    assert ka[0][0] == "t1" and state_keys(episode(a.turns, [], "t2"))[0] != ka[0]


def test_a_world_without_anchor_states_keys_turns_by_their_history():
    """Without Anchored, turns share a state when the calls and observations before them
    are equal (a deterministic world reaches the same state by the same history)."""
    a = episode([turn(2, [ToolCall("search_inbox", {"keywords": ["x"]}, "hit m1")]),
                 turn(2)], [], world=None)
    b = episode([turn(2, [ToolCall("search_inbox", {"keywords": ["x"]}, "hit m1")]),
                 turn(2)], [], world=None)
    c = episode([turn(2, [ToolCall("search_inbox", {"keywords": ["y"]}, "hit m1")]),
                 turn(2)], [], world=None)
    assert state_keys(a) == state_keys(b) and state_keys(a)[0] == state_keys(c)[0]
    assert state_keys(a)[1] != state_keys(c)[1]      # other words: another history


def test_turn_advantages_reach_their_own_tokens_in_both_modes():
    turns = [turn(2), turn(3), turn(1)]
    # instruct: one segment, prompt 0s, observations (0s) between turns
    seg = Segment(ids=list(range(12)), mask=[0, 0, 1, 1, 0, 1, 1, 1, 0, 0, 1, 0],
                  logprobs=[0.0] * 12)
    (v,) = token_advantages(episode(turns, [seg]), [seg], [0.5, -1.0, 2.0])
    assert v.tolist() == [0, 0, .5, .5, 0, -1, -1, -1, 0, 0, 2, 0]
    # thinking: a segment per turn
    segs = [Segment(ids=[0] * (2 + n), mask=[0, 0] + [1] * n, logprobs=[0.0] * (2 + n))
            for n in (2, 3, 1)]
    vs = token_advantages(episode(turns, segs), segs, [0.5, -1.0, 2.0])
    assert [x.tolist() for x in vs] == [[0, 0, .5, .5], [0, 0, -1, -1, -1], [0, 0, 2]]


def test_gigpo_batch_adds_step_credit_to_the_episode_advantage():
    """Two episodes of one task: the same first state, then they differ; ω = 0.5."""
    segs = [[Segment(ids=[0] * 6, mask=[0, 1, 1, 0, 1, 1], logprobs=[0.0] * 6)],
            [Segment(ids=[0] * 6, mask=[0, 1, 1, 0, 1, 1], logprobs=[0.0] * 6)]]
    eps = [episode([turn(2, [ToolCall("read_email", {}, "", read_id=m)]), turn(2)], s)
           for m, s in zip(["m1", "m2"], segs)]
    cfg = AlgoConfig(algorithm="gigpo", loss_agg="token-mean")
    cfg.gigpo.omega, cfg.gigpo.gamma = 0.5, 0.9
    algo = build_algorithm(cfg, max_len=64)
    batch = algo.prepare(eps, [1.0, 0.0], [0, 0], learner=None)
    a_e = 0.5 / (math.sqrt(0.5) + 1e-6)             # GRPO with two rewards 1, 0
    r0 = [0.9, 0.0]                                  # returns from turn 0: γ · R
    a_s = (r0[0] - 0.45) / (torch.tensor(r0, dtype=torch.float64).std().item() + 1e-6)
    first, second = batch.token_advantages
    assert first[1].item() == pytest.approx(a_e + 0.5 * a_s, abs=1e-5)
    assert first[4].item() == pytest.approx(a_e, abs=1e-5)      # turn 1: its own state
    assert second[1].item() == pytest.approx(-a_e - 0.5 * a_s, abs=1e-5)
    assert batch.metrics["gigpo/anchor_coverage"] == pytest.approx(0.5)


def test_gigpo_runs_a_two_step_cell(tmp_path, monkeypatch):
    from ablate.loop.cell import run_cell
    from ablate.apps.cli import compose_config, normalise_overrides
    from test_algos_protocol import SMALL
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    cfg = compose_config(normalise_overrides([*SMALL, "+algo=gigpo"]))
    run_cell(cfg, tmp_path / "cell")
    rows = [json.loads(x) for x in (tmp_path / "cell" / "metrics.jsonl").read_text().split("\n")
            if x]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert 0 < r["gigpo/anchor_coverage"] <= 1   # turn 0 is always shared by the group
        assert r["update/train_tokens"] > 0
