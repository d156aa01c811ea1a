"""The small Environment core and its optional features (issue 48, item 1): a feature only
some worlds have is a typing.Protocol beside its consumer, with the plain behaviour for a
world without it, and preflight names the missing method when the config chooses it."""
from pathlib import Path

import pytest

from ablate.agents.skills import SkillWorld, skill_feedback, skill_query
from ablate.core.errors import ConfigError
from ablate.harness.masking import Maskable, mask_context
from ablate.harness.parser import Predictable, outcome_labels
from ablate.harness.rollout import Expands, run_call
from ablate.protocol.environment import BatchJudge, Environment, judge_all
from ablate.protocol.trajectory import Demonstrable, baseline_policy, run_episode
from envs_external.counter import CounterEnv

CONF = Path(__file__).resolve().parents[1] / "envs_external" / "conf"
# every public member of Environment, counted: 40 before the feature Protocols, 29 before
# the declarations moved to register_env; the count may only fall (each single-feature hook
# below lives beside its consumer instead)
CORE_MEMBERS = 16
FEATURES = {"mask_candidates", "outcome_labels", "outcome_label", "baseline", "judge_many",
            "skill_of", "skill_query", "skill_feedback", "run_call", "snapshot", "restore",
            "text_answer", "prompt_tool_schemas", "examples"}
# what a world declares where it registers (ablate/envs/registry.py), not as members
DECLARATIONS = {"default_reward", "reward_schemes", "behaviour_labels", "breakdown_label",
                "config_errors"}


def test_the_environment_core_is_small_and_holds_no_single_feature_hook():
    members = {n for n in dir(Environment) if not n.startswith("_")}
    assert len(members) <= CORE_MEMBERS, sorted(members)
    assert not members & FEATURES and not members & DECLARATIONS


def test_a_world_without_a_feature_gets_the_plain_behaviour():
    env = CounterEnv(num_tasks=2)           # the docs' minimal world: baseline only
    task = env.tasks("train")[0]
    state = env.reset(task)
    assert isinstance(env, Demonstrable) and baseline_policy(env, task) is not None
    assert not isinstance(env, (Maskable, Predictable, BatchJudge, SkillWorld, Expands))
    assert mask_context(env, state, answer_masking=True) == {}
    assert outcome_labels(env) == {}
    done = run_episode(env, task, baseline_policy(env, task), max_turns=10)
    assert done.correct
    assert judge_all(env, [(task, done.answer, done.state), (task, "nope", done.state)]) \
        == [True, False]
    [r] = run_call(env, state, "add", {"n": 1})
    assert r.error is None and r.name == "add"
    assert skill_query(env, task) == task.prompt and skill_feedback(env, task, state) == ""


class _Masked(CounterEnv):
    def mask_candidates(self, state, answer_masking=True, **options):
        return {"tool_names": ["add"] if state.value < 3 else ["answer"],
                "answer_masking": answer_masking}


def test_a_world_with_a_feature_is_asked_for_it():
    env = _Masked(num_tasks=2)
    state = env.reset(env.tasks("train")[0])
    assert isinstance(env, Maskable) and not isinstance(CounterEnv(), Maskable)
    assert mask_context(env, state, answer_masking=False) == {
        "tool_names": ["add"] if state.value < 3 else ["answer"], "answer_masking": False}


class _Batched(CounterEnv):
    calls = 0

    def judge_many(self, items):
        type(self).calls += 1
        return [False for _ in items]       # a judge stricter than is_correct


def test_a_batched_judge_is_used_once_for_all_items():
    env = _Batched(num_tasks=2)
    task = env.tasks("train")[0]
    state = env.reset(task)
    assert judge_all(env, [(task, task.answer, state)] * 3) == [False] * 3
    assert _Batched.calls == 1


def test_voyager_on_a_world_without_skills_is_refused_at_preflight():
    from ablate.apps.cli import compose_config
    from ablate.apps.preflight import check_features
    cfg = compose_config([f"hydra.searchpath=[file://{CONF}]", "env=counter",
                          "agent=voyager"])
    with pytest.raises(ConfigError) as err:
        check_features(cfg)
    msg = str(err.value)
    assert "\n" not in msg and "agent=voyager needs env=counter to implement skill_of(" in msg
    assert "SkillWorld" in msg and "CounterEnv does not" in msg
    check_features(compose_config(["env=coderepair", "agent=voyager"]))   # has skills


def test_a_worlds_own_reward_is_declared_where_it_registers_and_offered_to_it_alone():
    """Issue 48 item 2: one reward registry; a world's schemes join it owned by that world
    (register_env), so importing a world never makes its scheme generic."""
    from types import SimpleNamespace

    from ablate.envs import check_reward_for, declared, register_env
    from ablate.rewards import REWARDS
    from envs_external.kvlookup import KVLookupEnv, kv_lookup

    assert declared(KVLookupEnv).rewards == ("kv_lookup",) and REWARDS["kv_lookup"] is kv_lookup
    assert declared(KVLookupEnv).default_reward == "kv_lookup"
    assert declared(CounterEnv).rewards == () and declared(_Masked) == declared(CounterEnv)
    pick = lambda name: SimpleNamespace(name=name, world_model=None)   # noqa: E731
    check_reward_for(pick("kv_lookup"), KVLookupEnv)
    check_reward_for(pick("outcome"), CounterEnv)
    with pytest.raises(ValueError, match=r"reward.name='kv_lookup' is another environment's "
                                         r"scheme; env=counter allows \[.*'outcome'"):
        check_reward_for(pick("kv_lookup"), CounterEnv(num_tasks=1))
    with pytest.raises(ValueError, match=r"register_env\('nowhere'\): default_reward='nope' is "
                                         r"neither its own scheme nor a registered one"):
        register_env("nowhere", default_reward="nope")


@pytest.mark.parametrize("label", ["correct", "task_id", "two words", ""])
def test_a_breakdown_label_must_be_a_free_row_column(label):
    """The world's breakdown_label names the eval rows' difficulty column
    (ablate/loop/scoring.py eval_rows): a label that is not an identifier, or that is one
    of the rows' own columns, would overwrite or break them."""
    from ablate.envs import register_env
    with pytest.raises(ValueError, match=rf"register_env\('nowhere'\): breakdown_label="
                                         rf"{label!r} names the eval rows' difficulty column"):
        register_env("nowhere", breakdown_label=label)


def test_environment_json_keeps_what_the_world_declared():
    from ablate.envs import describe
    from envs_external.kvlookup import KVLookupEnv

    assert describe(KVLookupEnv(num_tasks=2)) == {
        "name": "kvlookup", "answer_tool": "answer", "tools": ["get", "answer"],
        "default_reward": "kv_lookup",
        "behaviour_labels": {"gets": "values read", "missing_keys": "gets of a missing key"},
        "breakdown_label": "difficulty"}
