"""The RWML-style world-model reward (reward.world_model): environments' outcome labels,
<predict> tags in the rollout, the reward component on hand-built episodes, the action
mask for the tag, and a 2-step cell that logs prediction accuracy."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ablate.loop.cell import run_cell
from ablate.apps.cli import compose_config
from ablate.loop.config import ConfigError, validate
from ablate.envs import run_episode
from ablate.protocol.task import Task, ToolResult
from ablate.envs.coderepair.env import CodeRepairEnv
from ablate.harness.chat import format_tool_call as call
from ablate.harness.config import HarnessConfig, ModeConfig
from ablate.harness.episode import Episode, Turn
from ablate.harness.masking import ActionMask, token_bytes
from ablate.harness.parser import parse_actions, prediction_counts, step_metrics
from ablate.harness.rollout import rollout
from ablate.rewards import compute_reward
from ablate.rewards.config import RewardConfig
from ablate.rewards.world_model import WorldModelConfig, world_model_reward
import test_harness_util as U
from test_harness_util import db, tok  # noqa: F401  (fixtures)

SEARCH = call("search_inbox", {"keywords": ["budget"]})
NOTHING = call("search_inbox", {"keywords": ["zeppelin"]})
READ0 = call("read_email", {"message_id": "m0"})
ANSWER = call("return_final_answer", {"answer": "$5,000", "sources": ["m0"]})
EMAIL_LABELS = ["hits", "none", "answer", "no_answer"]


def _call(name, prediction="-", outcome=None):
    extra = {"outcome": outcome}
    if prediction != "-":
        extra["prediction"] = prediction
    return ToolResult(name=name, arguments={}, observation="", extra=extra)


def _episode(*calls, correct=False):
    task = Task(id="t", prompt="q", answer="a")
    return Episode(task=task, group=0, sample=0, correct=correct,
                   turns=[Turn(text="", completion_tokens=1, calls=[c]) for c in calls])


# ------------------------------------------------------------------ the reward
RIGHT, WRONG = _call("search_inbox", "hits", "hits"), _call("read_email", "answer", "no_answer")
MISSING = _call("search_inbox", None, "none")
FINAL = _call("return_final_answer", None, None)          # not predictable


@pytest.mark.parametrize("calls,counts,mean,total", [
    ((RIGHT, WRONG, FINAL), (1, 2, 2), 0.5 * 1 / 2, 0.5 * 1),
    ((RIGHT, RIGHT, RIGHT, WRONG), (3, 4, 4), 0.5 * 3 / 4, 0.5 * 3),
    ((MISSING, RIGHT), (1, 2, 1), 0.5 * 1 / 2, 0.5 * 1),    # a missing prediction is wrong
    ((WRONG, MISSING), (0, 2, 1), 0.0, 0.0),
    ((FINAL,), (0, 0, 0), 0.0, 0.0),                        # nothing to predict: 0
    ((), (0, 0, 0), 0.0, 0.0),
])
def test_reward_on_hand_built_episodes(calls, counts, mean, total):
    ep = _episode(*calls)
    assert prediction_counts(ep) == counts
    assert world_model_reward(ep, WorldModelConfig(weight=0.5)) == pytest.approx(mean)
    assert world_model_reward(ep, WorldModelConfig(weight=0.5, aggregate="sum")) == \
        pytest.approx(total)


def test_component_joins_any_scheme_only_when_enabled():
    ep = _episode(RIGHT, WRONG, FINAL, correct=True)
    off = compute_reward(ep, RewardConfig(name="outcome"))
    assert off == (1.0, {"correct": 1.0, "format_penalty": 0.0})
    on = RewardConfig(name="outcome", world_model=WorldModelConfig(enable=True, weight=0.2))
    total, comps = compute_reward(ep, on)
    assert comps == {"correct": 1.0, "format_penalty": 0.0, "world_model": pytest.approx(0.1)}
    assert total == pytest.approx(sum(comps.values()))
    cfg = compose_config(["reward.name=naive", "reward.world_model.enable=true",
                          "reward.world_model.weight=0.4", "reward.world_model.aggregate=sum"])
    assert cfg.harness.predict is True                 # the harness follows the reward
    total, comps = compute_reward(ep, cfg.reward)
    assert comps["world_model"] == pytest.approx(0.4) and total == pytest.approx(1.4)
    assert compose_config(["harness.predict=true"]).reward.world_model.enable is False


@pytest.mark.parametrize("override,msg", [
    ("reward.world_model.aggregate=max", r"reward.world_model.aggregate='max' is not one of"),
    ("reward.world_model.weight=-1", r"reward.world_model.weight=-1.0 is not allowed; must"),
])
def test_config_errors_name_the_key(override, msg):
    with pytest.raises(ConfigError, match=msg):
        validate(compose_config([override]))


# ------------------------------------------------------------------ outcome labels


def test_email_outcome_labels(db):
    env = U.email_env(db)
    assert set(env.outcome_labels()) == {"search_inbox", "read_email"}
    state = env.reset(U.TASKS[0])                     # gold answer "$5,000", in m0 only
    label = lambda name, args: env.outcome_label(state, env.call(state, name, args))  # noqa
    assert label("search_inbox", {"keywords": ["budget"]}) == "hits"
    assert label("search_inbox", {"keywords": ["zeppelin"]}) == "none"
    assert label("read_email", {"message_id": "m0"}) == "answer"
    assert label("read_email", {"message_id": "m1"}) == "no_answer"   # "budget", no $5,000
    assert label("search_inbox", {"keywords": "budget"}) is None       # an error
    assert label("return_final_answer", {"answer": "x", "sources": []}) is None


def test_coderepair_outcome_labels():
    env = CodeRepairEnv(gen_seed=0, train_tasks=2, test_tasks=2)
    task = env.tasks("train")[0]
    assert env.outcome_labels() == {"run_tests": {"pass": "every test passes",
                                                  "fail": "some test fails"}}
    state = env.reset(task)
    assert env.outcome_label(state, env.call(state, "run_tests", {})) == "fail"  # planted bugs
    assert env.outcome_label(state, env.call(state, "list_files", {})) is None
    traj = run_episode(env, task, env.baseline(task), max_turns=40)
    assert traj.correct
    assert env.outcome_label(traj.state, env.call(traj.state, "run_tests", {})) == "pass"


# ------------------------------------------------------------------ in the rollout
def run(tok, db, script, max_turns=5, **harness):
    sampler = U.ScriptedSampler(tok, script)
    ep = rollout(U.TASKS[:1], group_size=1, sampler=sampler, tokenizer=tok,
                 env=U.email_env(db), harness_cfg=HarnessConfig(**harness),
                 mode_cfg=ModeConfig(), max_turns=max_turns, temperature=1.0, seed=0)[0]
    return ep, sampler


SCRIPT = [SEARCH + "<predict>hits</predict>",              # right
          "Reading. " + READ0 + "\n<predict>no_answer</predict>",   # wrong: m0 holds it
          ANSWER]


def test_rollout_records_predictions_and_outcomes(tok, db):
    ep, sampler = run(tok, db, lambda p, t: SCRIPT[t], predict=True)
    assert "<predict>LABEL</predict>" in sampler.prompts[0]
    assert "- search_inbox: hits = it returns at least one email" in sampler.prompts[0]
    assert [(c.extra["prediction"], c.extra["outcome"]) for c in ep.calls] == [
        ("hits", "hits"), ("no_answer", "answer"), (None, None)]
    b = ep.behaviour()
    assert (b["predictions_right"], b["predictable_calls"], b["predictions_made"]) == (1, 2, 2)
    cfg = RewardConfig(name="outcome", world_model=WorldModelConfig(enable=True, weight=0.1))
    assert compute_reward(ep, cfg)[1]["world_model"] == pytest.approx(0.05)
    assert step_metrics([ep], predict=True)["world_model/accuracy"] == 0.5
    # the prediction tokens are generated tokens: loss mask 1, trained like any other
    seg = ep.segments[0]
    trained = tok.decode([i for i, m in zip(seg.ids, seg.mask) if m])
    assert "<predict>hits</predict>" in trained and "<predict>no_answer</predict>" in trained
    off, sampler = run(tok, db, lambda p, t: SCRIPT[t])
    assert "<predict>" not in sampler.prompts[0].split("<|im_start|>assistant")[0]
    assert all("prediction" not in c.extra for c in off.calls)
    assert "predictable_calls" not in off.behaviour()


def test_each_call_gets_the_tag_written_after_it(tok, db):
    two = SEARCH + "<predict>none</predict> " + READ0 + "<predict>answer</predict>"
    ep, _ = run(tok, db, lambda p, t: two if t == 0 else ANSWER, predict=True,
                calls_per_turn="all")
    assert [c.extra["prediction"] for c in ep.calls[:2]] == ["none", "answer"]
    acts = parse_actions(SEARCH + "<predict> HITS </predict>" + READ0, "strict", True)
    assert [a.prediction for a in acts] == ["hits", None]         # normalised, not carried
    acts = parse_actions("<predict>hits</predict>" + SEARCH, "strict", True)
    assert acts[0].prediction is None                               # before: not its tag
    acts = parse_actions(SEARCH + "<predict>hits</predict><predict>none</predict>",
                         "strict", True)
    assert acts[0].prediction == "hits"                             # the first tag counts


def test_world_model_on_an_environment_without_labels_is_a_config_error():
    from ablate.apps.preflight import check_env_reward
    search = f"hydra.searchpath=[file://{Path(__file__).resolve().parents[1]}/envs_external/conf]"
    cfg = compose_config([search, "env=counter", "reward.name=outcome",
                          "reward.world_model.enable=true"])
    with pytest.raises(ConfigError, match=r"reward.world_model.enable=true: env=counter "
                                          r"defines no outcome_labels\(\) to predict"):
        check_env_reward(cfg)
    check_env_reward(compose_config(["env=coderepair", "reward.name=outcome",
                                     "reward.world_model.enable=true"]))


def test_predict_needs_an_environment_with_labels(tok):
    from envs_external.counter import CounterEnv
    env = CounterEnv()
    with pytest.raises(ValueError, match=r"harness.predict=true .*defines no outcome_labels"):
        rollout([env.tasks("train")[0]], group_size=1, sampler=U.ScriptedSampler(tok, None),
                tokenizer=tok, env=env, harness_cfg=HarnessConfig(predict=True),
                mode_cfg=ModeConfig(), max_turns=1, temperature=1.0)


# ------------------------------------------------------------------ the action mask
def test_mask_constrains_the_label_after_a_written_tag(tok):
    vb = token_bytes(tok)
    m = ActionMask(vb, predict_labels=EMAIL_LABELS, max_think_tokens=16)
    ids = tok.encode("<think>\nok\n</think>\n\nI guess <predict>hits</predict> " + SEARCH
                     + "<predict>none</predict>", add_special_tokens=False)
    allowed = m.replay(ids)
    assert m.violations == 0 and allowed
    first = min(allowed)
    assert tok.decode(ids[:first]).endswith("<predict>")         # first constrained spot
    cands = [x + "</predict>" for x in EMAIL_LABELS]
    strings = {tok.decode([i]) for i in allowed[first]}
    assert strings and all(any(c.startswith(s) or s.startswith(c) for c in cands)
                           for s in strings)
    assert tok.decode(ids[first:first + 1]) in strings
    after = ids.index(tok.convert_tokens_to_ids("</tool_call>")) + 1
    tag = {tok.decode([i]) for i in allowed[after]}       # forced: the whole tag after a call
    assert tag and all("<predict>".startswith(s) or s.startswith("<predict>") for s in tag)
    ends = ActionMask(vb, predict_labels=EMAIL_LABELS, predict_ends_turn=True)
    one = tok.encode(SEARCH + "<predict>hits</predict>", add_special_tokens=False)
    ends.replay(one)
    assert ends.allowed_next() == [tok.convert_tokens_to_ids("<|im_end|>")]  # the turn ends
    free = ActionMask(vb, predict_labels=EMAIL_LABELS)       # calls_per_turn=all: goes on
    free.replay(one)
    assert free.allowed_next() is None and ends.violations == free.violations == 0
    again = ActionMask.from_spec(vb, m.spec())                # how the vLLM engine builds it
    assert again.replay(ids) == allowed
    bad = tok.encode("<think>\nok\n</think>\n\n<predict>maybe</predict>", add_special_tokens=False)
    m2 = ActionMask(vb, predict_labels=EMAIL_LABELS, max_think_tokens=16)
    m2.replay(bad)
    assert m2.violations >= 1                      # "maybe" was not allowed


# ------------------------------------------------------------------ a 2-step cell
def test_two_step_cell_logs_prediction_accuracy(tmp_path):
    cfg = compose_config(["reward.world_model.enable=true", "harness.action_masking=true",
                          "env.num_inboxes=6", "env.emails_per_inbox=40",
                          "env.train_tasks=40", "env.test_tasks=16", "learner=torch",
                          "trainer.max_steps=2", "trainer.tasks_per_step=2",
                          "trainer.group_size=2", "eval.num_tasks=2", "eval.every=0",
                          "eval.samples=1", "eval.greedy=false", "env.max_turns=3",
                          "harness.max_tokens_per_episode=192", "run.quiet=true"])
    validate(cfg)
    run_cell(cfg, tmp_path)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["world_model/predictable"] > 0 and 0.0 <= r["world_model/accuracy"] <= 1.0
        assert r["world_model/predicted"] == 1.0          # the mask opens each turn with one
        assert 0.0 <= r["reward/world_model"] <= 0.1
        assert {"harness/malformed_calls", "harness/retries_used"} <= set(r)
    evals = [json.loads(x) for x in (tmp_path / "eval.jsonl").read_text().splitlines()]
    assert all("predictions_right" in e and "reward/world_model" in e for e in evals)
    traj = (tmp_path / "trajectories.jsonl").read_text()
    assert '"prediction"' in traj and '"outcome"' in traj
