"""Reward schemes on hand-built episodes: every component, exact arithmetic, the ranges,
the naive avoidance trap and the state-change condition."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ablate.envs.email.data import Task
from ablate.envs.email.tools import ToolCall as BoxCall
from ablate.envs.email.env import tool_result
from ablate.envs.email.rewards import credited_tools, shaped
from ablate.harness.episode import Episode, Turn
from ablate.rewards import REWARDS, Rubric, compute_reward, naive, outcome


def ToolCall(*args, **kw):
    """A ToolBox record as the harness logs it: the email env's ToolResult."""
    return tool_result(BoxCall(*args, **kw))
from ablate.rewards.config import RewardConfig

CONF = Path(__file__).resolve().parents[2] / "conf" / "reward"
EVIDENCE = ["m1", "m2", "m3", "m4"]
TASK = Task(id="t1", question="Who approved the Q3 budget?", answer="Sally Beck",
            message_ids=EVIDENCE, inbox_address="jeff@enron.com",
            query_date="2001-06-01 00:00:00", hops=4)


def search(hits, new_hits=None, error=None):
    return ToolCall("search_inbox", None if error else {"keywords": ["budget"]}, "...",
                    error=error, hits=list(hits),
                    new_hits=len(hits) if new_hits is None else new_hits)


def read(mid, new=True, error=None):
    return ToolCall("read_email", None if error else {"message_id": mid}, "...", error=error,
                    read_id=None if error else mid, new_read=new and not error)


def answer(text="Sally Beck"):
    return ToolCall("return_final_answer", {"answer": text, "sources": ["m1"]}, "")


def episode(calls_per_turn, *, correct=None, final="Sally Beck", max_turns=10):
    turns = [Turn(text="", completion_tokens=10, calls=list(c)) for c in calls_per_turn]
    return Episode(task=TASK, group=0, sample=0, turns=turns, final_answer=final,
                   max_turns=max_turns, correct=correct)


def full_episode(turns=4, correct=True, evidence_read=4, final="Sally Beck"):
    """search, then reads of `evidence_read` evidence emails, then the answer, spread over
    exactly `turns` turns (reads share turns when needed)."""
    calls = [[search(EVIDENCE)]]
    reads = [read(m) for m in EVIDENCE[:evidence_read]]
    middle = max(turns - 2, 1)
    calls += [reads[i::middle] for i in range(middle)]
    calls.append([answer(final)])
    assert len(calls) == turns
    return episode(calls, correct=correct, final=final)


# --- shaped -------------------------------------------------------------------------------

def test_shaped_components_exact_arithmetic():
    total, c = shaped(full_episode(turns=4, evidence_read=4))
    assert c == pytest.approx({"process": 0.15, "witness": 0.1, "correctness": 1.0,
                               "efficiency": 0.1 * (1 - 4 / 10)})
    assert total == pytest.approx(0.15 + 0.1 + 1.0 + 0.06)
    total, c = shaped(full_episode(turns=3, evidence_read=1, correct=False, final="Bob"))
    assert c == pytest.approx({"process": 0.15, "witness": 0.025, "correctness": 0.0,
                               "efficiency": 0.0})
    assert total == pytest.approx(0.175)


def test_shaped_maximum_is_approached_but_not_exceeded():
    # the fewest turns that can search, read and answer is 3; 1 turn with all calls is
    # possible with calls_per_turn=all: 0.15 + 0.1 + 1 + 0.1·(1 - 1/10) = 1.34
    one_turn = episode([[search(EVIDENCE)] + [read(m) for m in EVIDENCE] + [answer()]],
                       correct=True)
    assert shaped(one_turn)[0] == pytest.approx(1.34)
    big = episode([[search(EVIDENCE)] + [read(m) for m in EVIDENCE] + [answer()]],
                  correct=True, max_turns=1000)
    assert shaped(big)[0] == pytest.approx(1.35 - 0.1 / 1000)
    assert shaped(big)[0] < 1.35


def test_shaped_never_negative_and_bounded():
    tools = [search(["m1"]), search([], new_hits=0), read("m1"), read("m9"),
             read("m2", new=False), read("x", error="unknown id"),
             ToolCall("", None, "error", error="malformed"), answer()]
    for n in range(0, 4):
        for combo in itertools.combinations(tools, n):
            for correct in (True, False, None):
                for turns in (1, 5, 10, 15):
                    calls = [list(combo)] + [[] for _ in range(turns - 1)]
                    ep = episode(calls, correct=correct)
                    total, comps = shaped(ep)
                    assert 0.0 <= total <= 1.35
                    assert total == pytest.approx(sum(comps.values()))
                    assert set(comps) == {"process", "witness", "correctness", "efficiency"}


def test_shaped_process_needs_successful_calls_and_counts_each_tool_once():
    ep = episode([[search([], error="bad args"), read("m1", error="missing")],
                  [read("m7"), read("m8")], [answer()]], correct=False)
    assert shaped(ep)[1]["process"] == pytest.approx(0.10)      # read + answer, not search
    assert shaped(episode([[]], final=None))[1]["process"] == 0.0


def test_shaped_efficiency_floors_at_zero_past_max_turns():
    ep = episode([[search(EVIDENCE)]] + [[] for _ in range(11)] + [[answer()]], correct=True,
                 max_turns=10)
    assert shaped(ep)[1]["efficiency"] == 0.0
    assert shaped(ep)[1]["correctness"] == 1.0


def test_witness_counts_distinct_evidence_only():
    ep = episode([[read("m1"), read("m1", new=False), read("other")], [answer()]],
                 correct=False)
    assert shaped(ep)[1]["witness"] == pytest.approx(0.1 * 1 / 4)


# --- naive and outcome --------------------------------------------------------------------

def test_naive_avoidance_trap():
    right = full_episode(correct=True)
    wrong = full_episode(correct=False, final="Bob")
    idk = full_episode(correct=False, final="I don't know.")
    silent = episode([[search(["m1"])]], correct=None, final=None)
    assert naive(right) == (1.0, {"correct": 1.0, "wrong": 0.0})
    assert naive(wrong) == (-1.0, {"correct": 0.0, "wrong": -1.0})
    assert naive(idk) == (0.0, {"correct": 0.0, "wrong": 0.0})
    assert naive(silent)[0] == 0.0
    # the trap: abstaining strictly beats a wrong guess under naive, not under outcome
    assert naive(idk)[0] > naive(wrong)[0]
    assert outcome(idk)[0] == outcome(wrong)[0] == 0.0


def test_outcome_is_binary():
    assert outcome(full_episode(correct=True)) == (1.0, {"correct": 1.0})
    assert outcome(full_episode(correct=False, final="Bob")) == (0.0, {"correct": 0.0})
    assert outcome(episode([[]], correct=None, final=None)) == (0.0, {"correct": 0.0})


# --- compute_reward: registry, format penalty, state change -------------------------------

def cfg(name, **kw):
    base = OmegaConf.merge(OmegaConf.structured(RewardConfig), OmegaConf.load(CONF / f"{name}.yaml"))
    for k, v in kw.items():
        base[k] = v
    return base


# reward yaml files that preset a registered scheme's options: file -> (scheme, bonus)
PRESETS = {"tool_bonus_state_change": ("tool_bonus", True)}


def test_registry_and_yaml_files_agree():
    # every environment's reward schemes registered (other tests import them in any order)
    import ablate.envs.openenv.rewards  # noqa: F401
    import ablate.envs.reasoning_gym.rewards  # noqa: F401
    builtin = set(REWARDS.builtin())   # a test world (tests/envs_external) may add its own
    assert builtin == {"shaped", "naive", "outcome", "tool_bonus", "rg_score",
                       "openenv_reward", "vf_reward"}
    assert {p.stem for p in CONF.glob("*.yaml")} == builtin | set(PRESETS)
    for name in builtin:
        c = cfg(name)
        assert c.name == name and c.format_penalty == 0.0 and c.state_change_bonus is False
    for file, (name, bonus) in PRESETS.items():
        c = cfg(file)
        assert c.name == name and c.format_penalty == 0.0 and c.state_change_bonus is bonus


@pytest.mark.parametrize("name", ["shaped", "naive", "outcome"])
def test_compute_reward_matches_scheme_and_keys_are_stable(name):
    eps = [full_episode(), full_episode(correct=False, final="Bob"),
           episode([[]], correct=None, final=None)]
    keys = None
    for ep in eps:
        total, comps = compute_reward(ep, cfg(name))
        assert total == REWARDS[name](ep)[0]
        assert comps["format_penalty"] == 0.0
        keys = keys or set(comps)
        assert set(comps) == keys


def test_format_penalty_per_malformed_call():
    bad = ToolCall("", None, "could not parse", error="malformed")
    ep = episode([[bad], [search(["m1"])], [bad, answer()]], correct=True)
    base, _ = compute_reward(ep, cfg("outcome"))
    total, comps = compute_reward(ep, cfg("outcome", format_penalty=0.1))
    assert comps["format_penalty"] == pytest.approx(-0.2)
    assert total == pytest.approx(base - 0.2) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="format_penalty"):
        compute_reward(ep, cfg("outcome", format_penalty=-1.0))


def test_state_change_bonus_stops_action_farming():
    # farmer: searches that return nothing new and re-reads an email already read
    farmer = episode([[search(["m1"])], [read("m1")], [search(["m1"], new_hits=0)],
                      [read("m1", new=False)], [answer("Bob")]], correct=False)
    stale = episode([[search([], new_hits=0)], [read("m1", new=False)], [answer("Bob")]],
                    correct=False)
    on = cfg("shaped", state_change_bonus=True)
    assert compute_reward(farmer, on)[1]["process"] == pytest.approx(0.15)
    assert compute_reward(stale, on)[1]["process"] == pytest.approx(0.05)   # answer only
    assert compute_reward(stale, cfg("shaped"))[1]["process"] == pytest.approx(0.15)
    assert credited_tools(stale, True) == {"return_final_answer"}
    # naive / outcome have no process credit: the flag changes nothing there
    for name in ("naive", "outcome"):
        assert compute_reward(stale, cfg(name, state_change_bonus=True)) == \
            compute_reward(stale, cfg(name))


def test_unknown_scheme_is_rejected_with_the_allowed_names():
    with pytest.raises(ValueError, match="naive"):
        compute_reward(full_episode(), RewardConfig(name="shapd"))


def test_config_validation_reads_the_registry():
    from ablate.apps.cli import compose_config
    from ablate.loop.config import ConfigError, validate

    cfg = compose_config(["reward.name=half"])
    with pytest.raises(ConfigError, match=r"^reward.name='half' is not one of \['naive', "
                                          r"'outcome', .*'shaped'"):
        validate(cfg)

    def half(episode, cfg=None) -> float:
        return 0.5
    REWARDS.register("half", Rubric(half))
    try:
        validate(cfg)                      # a registered scheme is allowed at once
        assert compute_reward(full_episode(), cfg.reward)[0] == 0.5
        with pytest.raises(ValueError, match="registered twice"):
            REWARDS.register("half", Rubric(half))
    finally:
        del REWARDS["half"]


# --- weighted components: the defaults are the published formulas, exactly ---------------

def shaped_formula(tools, read, evidence, turns, max_turns, correct):
    """EnronHop v0.2.0 (docs/rewards.md), written out: 0.05 per tool + 0.1 x read/evidence
    + (if correct) 1.0 + 0.1 x max(0, 1 - turns/max_turns)."""
    if not correct:
        return 0.05 * tools + 0.1 * read / evidence + 0.0 + 0.0
    return 0.05 * tools + 0.1 * read / evidence + 1.0 + 0.1 * max(0.0, 1 - turns / max_turns)


def task_with(evidence: int) -> Task:
    return Task(id=f"t{evidence}", question="q", answer="Sally Beck",
                message_ids=[f"m{i}" for i in range(1, evidence + 1)],
                inbox_address="jeff@enron.com", query_date="2001-06-01 00:00:00", hops=evidence)


SHAPED_CASES = [(m, r, t, mt, c) for m in (3, 4) for r in range(m + 1) for t in (3, 5, 7)
                for mt in (7, 10) for c in (True, False)]


@pytest.mark.parametrize("evidence,read_n,turns,max_turns,correct", SHAPED_CASES)
def test_shaped_default_weights_equal_the_formula_exactly(evidence, read_n, turns, max_turns,
                                                          correct):
    task = task_with(evidence)
    calls = [[search(task.message_ids)], [read(m) for m in task.message_ids[:read_n]]]
    calls += [[] for _ in range(turns - 3)] + [[answer()]]
    ep = Episode(task=task, group=0, sample=0, turns=[Turn(text="", completion_tokens=1,
                 calls=c) for c in calls], final_answer="Sally Beck", max_turns=max_turns,
                 correct=correct)
    tools = 3 if read_n else 2
    expected = shaped_formula(tools, read_n, evidence, turns, max_turns, correct)
    for c in (None, cfg("shaped"), RewardConfig(name="shaped")):
        assert shaped(ep, c)[0] == expected                   # bit for bit, not approx
    assert compute_reward(ep, cfg("shaped"))[0] == expected


@pytest.mark.parametrize("correct,final", [(True, "Sally Beck"), (False, "Bob"),
                                           (False, "I don't know."), (None, None)])
def test_naive_and_outcome_default_weights_equal_the_formula_exactly(correct, final):
    ep = full_episode(correct=bool(correct), final=final) if final else \
        episode([[]], correct=None, final=None)
    right, answered = ep.correct is True, ep.answered
    # EnronHop article: naive +1 / -1 / 0 (no answer or "I don't know"); outcome 1 / 0
    assert naive(ep, cfg("naive"))[0] == (1.0 if right else -1.0 if answered else 0.0)
    assert outcome(ep, cfg("outcome"))[0] == (1.0 if right else 0.0)


@pytest.mark.parametrize("runs,changed,correct", [(0, 0, True), (3, 1, False), (7, 2, True),
                                                  (10, 10, False)])
def test_tool_bonus_default_weights_equal_the_formula_exactly(runs, changed, correct):
    from types import SimpleNamespace
    from ablate.protocol.task import ToolResult
    from ablate.envs.coderepair.rewards import tool_bonus
    results = [ToolResult("run_tests", {}, observation="", state_changed=i < changed)
               for i in range(runs)]
    tr = SimpleNamespace(results=results, correct=correct)
    for flag, paid in ((False, runs), (True, changed)):
        c = cfg("tool_bonus", state_change_bonus=flag)
        # ablate/envs/coderepair/rewards.py docstring: outcome + 0.1 per (changed) run
        assert tool_bonus(tr, c)[0] == (1.0 if correct else 0.0) + 0.1 * paid


def test_a_zero_weight_removes_that_component_from_shaped():
    ep = full_episode(turns=4, evidence_read=2)
    base_total, base = compute_reward(ep, cfg("shaped"))
    for name in ("process", "witness", "correctness", "efficiency"):
        total, comps = compute_reward(ep, cfg("shaped", weights={**cfg("shaped").weights,
                                                                name: 0.0}))
        assert comps[name] == 0.0
        assert total == pytest.approx(base_total - base[name])
        assert {k: v for k, v in comps.items() if k != name} == \
            {k: v for k, v in base.items() if k != name}
    total, comps = compute_reward(ep, cfg("shaped", weights={"witness": 2.0}))
    assert comps["witness"] == pytest.approx(2 * base["witness"])


def test_weights_from_the_command_line_and_their_errors():
    from ablate.apps.cli import compose_config, normalise_overrides
    from ablate.loop.config import ConfigError, validate

    for args in (["reward.weights.witness=0"], ["+reward=shaped", "reward.weights.witness=0"]):
        c = compose_config(normalise_overrides(args))
        validate(c)
        assert c.reward.weights.witness == 0.0
        assert compute_reward(full_episode(), c.reward)[1]["witness"] == 0.0
    bad = [(["reward.weights.witnes=0"], r"^reward.weights.witnes is not a component of "
            r"reward.name='shaped'; its components: \['process', 'witness', 'correctness', "
            r"'efficiency'\]$"),
           (["+reward=shaped", "reward.name=naive"], r"^reward.weights.process is not a "
            r"component of reward.name='naive'"),
           (["reward.weights.witness=nan"], r"^reward.weights.witness=nan: must be a finite number")]
    for args, message in bad:
        with pytest.raises(ConfigError, match=message):
            validate(compose_config(normalise_overrides(args)))


def test_a_user_reward_from_a_plugins_module_runs_a_cell(tmp_path):
    """The documented route (docs/rewards.md): a Rubric registered in REWARDS by a module
    outside ablate/, listed in `plugins`, selected with reward.name, weighted from the yaml."""
    import json
    from ablate.apps.cli import compose_config, normalise_overrides
    from ablate.loop.cell import run_cell
    cfg_ = compose_config(normalise_overrides([
        "plugins=[rewards_user_plugin]", "reward.name=per_call_cost",
        "reward.weights.call_cost=2", "env=coderepair", "model=scripted",
        "trainer.max_steps=1", "eval.num_tasks=2", "eval.samples=1", "eval.greedy=false",
        "run.quiet=true"]))
    run_cell(cfg_, tmp_path)
    rows = [json.loads(x) for x in (tmp_path / "eval.jsonl").read_text().splitlines()]
    assert rows and all(r["reward/correct"] == 1.0 for r in rows)   # the honest fixer
    from rewards_user_plugin import COST
    for r in rows:
        calls = r["reward/call_cost"] / (-2 * COST)
        assert calls >= 2 and calls == pytest.approx(round(calls))
        assert r["reward"] == pytest.approx(1.0 + r["reward/call_cost"])
