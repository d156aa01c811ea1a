"""One conformance test of the environment protocol, run on every environment: the email
task (through its adapter), the code-repair world, and a user's environment defined
outside the ablate package (tests/envs_external, selected by `_target_`)."""
import json
import re
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ablate.envs import (ENVIRONMENTS, EnvError, Environment, ToolResult, make_env, run_episode,
                         tool_names)

SLOW = 2.0   # seconds: any single hostile call must end well within this


def _email_cfg(cache: str) -> dict:
    return {"name": "synthetic", "cache_dir": cache, "max_results": 10, "gen_seed": 5,
            "num_inboxes": 4, "emails_per_inbox": 60, "train_tasks": 12, "test_tasks": 12,
            "max_hops": 2}


@pytest.fixture(scope="module", params=["email", "coderepair", "counter", "kvlookup",
                                        "reasoning_gym"])
def env(request, tmp_path_factory) -> Environment:
    if request.param == "email":
        cfg = _email_cfg(str(tmp_path_factory.mktemp("envs_cache")))
    elif request.param == "coderepair":
        cfg = {"name": "coderepair", "train_tasks": 6, "test_tasks": 6, "max_hops": 3}
    elif request.param == "reasoning_gym":
        pytest.importorskip("reasoning_gym")
        cfg = {"name": "reasoning_gym", "tools": "calculator", "train_tasks": 6,
               "test_tasks": 6}
    elif request.param == "kvlookup":
        cfg = {"_target_": "envs_external.kvlookup.KVLookupEnv", "num_tasks": 6}
    else:
        cfg = {"_target_": "envs_external.counter.CounterEnv", "num_tasks": 6}
    made = make_env(OmegaConf.create(cfg))
    yield made
    made.close()


def _baseline_trajectory(env, task):
    policy = env.baseline(task, seed=0)
    assert policy is not None, f"{env.name} ships no scripted baseline"
    return run_episode(env, task, policy, max_turns=25)


def test_tasks_schemas_prompt(env):
    train, test = env.tasks("train"), env.tasks("test")
    assert train and test
    assert not {t.id for t in train} & {t.id for t in test}, "held-out split overlaps train"
    assert not {t.identity for t in train} & {t.identity for t in test}
    assert len({t.identity for t in train}) > 1     # the identity tells tasks apart
    names = tool_names(env)
    assert env.answer_tool in names and len(set(names)) == len(names)
    for schema in env.tool_schemas():
        assert schema["type"] == "function"
        params = schema["function"]["parameters"]
        assert params["type"] == "object" and isinstance(params.get("properties"), dict)
        json.dumps(schema)
    assert isinstance(env.system_prompt(), str) and env.system_prompt().strip()
    for t in train[:3]:
        json.dumps(t.to_json())
        assert t.prompt.strip()


def test_good_step_and_answer_ends(env):
    task = env.tasks("train")[0]
    traj = _baseline_trajectory(env, task)
    first = traj.results[0]
    assert isinstance(first, ToolResult) and first.error is None and first.observation
    assert traj.end_reason == "answer" and traj.results[-1].done
    assert traj.results[-1].name == env.answer_tool
    assert not any(r.done for r in traj.results[:-1])
    assert all(set(r.info) >= {"state_changed", "error"} for r in traj.results)
    json.dumps([r.to_json() for r in traj.results])
    assert [s[2] for s in traj.steps()] == [r.observation for r in traj.results]
    metrics = env.behaviour(task, traj.results)
    assert all(isinstance(v, (int, float, bool, str)) for v in metrics.values())


def test_baseline_solves_some_tasks(env):
    solved = [_baseline_trajectory(env, t).correct for t in env.tasks("test")[:4]]
    assert any(solved), f"{env.name}: scripted baseline solved none of 4 tasks"


def _hostile_calls(env) -> list:
    calls = [(None, {}), ("", {}), ("no_such_tool", {}), (123, "{}"),
             ("x" * 100_000, {}), (["list"], None)]
    for name in tool_names(env):
        params = env._params(name)
        calls += [(name, "not json {"), (name, "[1, 2]"), (name, 42), (name, ["a"]),
                  (name, "[" * 50_000 + "]" * 50_000),
                  (name, {"unexpected_key": 1}),
                  (name, {p: None for p in params}), (name, {p: 10 ** 30 for p in params}),
                  (name, {p: "x" * 1_000_000 for p in params}),
                  (name, {p: {"nested": [[[]]]} for p in params}),
                  (name, {p: -1 for p in params}), (name, {p: True for p in params})]
    return calls


def test_hostile_input_never_raises(env):
    task = env.tasks("train")[0]
    state = env.reset(task)
    for name, args in _hostile_calls(env):
        t0 = time.perf_counter()
        r = env.call(state, name, args)
        assert time.perf_counter() - t0 < SLOW, (name, str(args)[:80])
        assert isinstance(r, ToolResult) and isinstance(r.observation, str)
        if r.error is None:   # accepted: then it must be a legal call of a known tool
            assert r.name in tool_names(env) and isinstance(r.arguments, dict)
        else:
            assert not r.done and r.observation
            assert not r.error.startswith("internal"), r.error   # handled, not crashed
    # the state still works after all that
    traj_ok = env.call(state, *env.baseline(task)([]))
    assert traj_ok.error is None


def test_snapshot_restore_replays_identically(env):
    """A world that keeps its own snapshot/restore (email, code repair; no agent of ablate
    needs one, docs/environments.md) restores states that replay identically."""
    if not hasattr(env, "snapshot"):
        pytest.skip(f"{type(env).__name__} keeps no snapshot")
    task = env.tasks("train")[min(1, len(env.tasks("train")) - 1)]
    policy = env.baseline(task)
    state, results = env.reset(task), []
    for _ in range(2):
        results.append(env.call(state, *policy(results)))
    snap = env.snapshot(state)
    calls, after = [], []
    for _ in range(4):
        if results[-1].done:
            break
        call = policy(results)
        calls.append(call)
        results.append(env.call(state, *call))
        after.append(results[-1])
    for _ in range(2):   # restoring twice: independent, identical replays
        again = env.restore(snap)
        replay = [env.call(again, *c) for c in calls]
        assert [(r.observation, r.state_changed, r.error) for r in replay] == \
            [(r.observation, r.state_changed, r.error) for r in after]


def test_registry_is_the_source_of_names():
    assert {"synthetic", "enronhop", "coderepair"} <= set(ENVIRONMENTS)
    with pytest.raises(EnvError, match=r"env.name='nope' is not a registered environment; "
                                       r"allowed: .*coderepair"):
        make_env(OmegaConf.create({"name": "nope"}))
    with pytest.raises(EnvError, match=r"env._target_='no_module.Env': cannot import"):
        make_env(OmegaConf.create({"_target_": "no_module.Env"}))
    with pytest.raises(EnvError, match="is not a subclass of ablate.envs.Environment"):
        make_env(OmegaConf.create({"_target_": "collections.OrderedDict"}))


@pytest.mark.parametrize("module", ["counter.py", "kvlookup.py"])
def test_docs_example_is_the_tested_module(module):
    """docs/environments.md shows tests/envs_external/<module> verbatim."""
    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "environments.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.S)
    assert (root / "tests" / "envs_external" / module).read_text() in blocks


def test_docs_example_config_is_the_tested_file():
    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "environments.md").read_text()
    yaml = (root / "tests" / "envs_external" / "conf" / "env" / "kvlookup.yaml").read_text()
    body = "".join(line + "\n" for line in yaml.splitlines() if not line.startswith("#"))
    assert f"```yaml\n{body}```" in doc


def test_kvlookup_masks_follow_the_episode():
    """mask_candidates as documented: answer only once a value was read; ids are the
    store's keys; answers the values read."""
    env = make_env(OmegaConf.create({"_target_": "envs_external.kvlookup.KVLookupEnv",
                                     "num_tasks": 2}))
    task = env.tasks("test")[0]
    state = env.reset(task)
    first = env.mask_candidates(state)
    assert first["tool_names"] == ["get"] and first["answers"] == []
    assert sorted(first["ids"]) == sorted(task.payload)
    assert all(k in task.prompt for k in first["ids"])        # the question lists them
    env.call(state, "get", {"key": task.metadata["asked"]})
    after = env.mask_candidates(state)
    assert after["tool_names"] == ["get", "answer"] and after["answers"] == [task.answer]
    assert env.mask_candidates(state, answer_masking=False)["answers"] is None
