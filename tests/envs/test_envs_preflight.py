"""Preflight's protocol conformance (ablate.envs.conformance) through the real CLI: each
mistake a newcomer makes in an environment (tests/envs_external/broken.py) stops
`python -m ablate` with exit 2 and one line naming the environment, the tool or key and
what was expected, no traceback, and no cell directory; and an exception inside a tool
is logged once per (tool, exception type), then counted."""
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ablate.envs import make_env

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "tests" / "envs_external" / "conf"


def run_cli(args, tmp_path: Path, timeout=300):
    env = dict(os.environ, WANDB_MODE="disabled", ABLATE_CACHE=str(tmp_path / "cache"),
               PYTHONPATH=f"{REPO}{os.pathsep}{REPO / 'tests'}")
    return subprocess.run([sys.executable, "-m", "ablate", f"hydra.searchpath=[file://{CONF}]",
                           f"hydra.run.dir={tmp_path / 'cell'}", *args], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=timeout)


def target(cls: str, name: str) -> list[str]:
    return ["env=broken", f"env._target_=envs_external.broken.{cls}", f"env.name={name}"]


CASES = {
    "missing method": (target("NoIsCorrect", "noiscorrect"),
                       "env=noiscorrect: NoIsCorrect lacks the protocol method(s) is_correct"),
    "missing answer_tool": (target("NoAnswerTool", "noanswer"),
                            "env=noanswer: answer_tool is not set; expected the name of the "
                            "tool that ends the episode, one of look, answer"),
    "tool returns a str": (target("StrTool", "strtool"),
                           "env=strtool: step() returned a str for tool look; expected an "
                           "ablate.envs.ToolResult"),
    "dict observation": (target("DictObservation", "dictobs"),
                         "env=dictobs: tool look returned a dict observation; expected a str"),
    "name contradicts registration": (target("Named", "named_wrong"),
                                      "env.name='named_wrong' contradicts env._target_="
                                      "'envs_external.broken.Named', registered as "
                                      "'named_right'; expected that name"),
    "unknown option": (["env=broken", "+env.options.sise=3"],
                       "env=broken takes no option env.options.sise; allowed: size"),
    "duplicate tool name": (target("DuplicateTool", "duptool"),
                            "env=duptool: two tools are named 'look'; expected each tool "
                            "name once in tool_schemas() (look, look, answer)"),
    "tool shadowing the answer tool": (target("ShadowAnswer", "shadow"),
                                       "env=shadow: tool 'Answer' shadows the answer tool "
                                       "'answer' (tool names match without case, '-' and "
                                       "'_'); expected every other tool named apart from it"),
    "test copied from train": (target("CopiedTest", "copied"),
                               "env=copied: test task 'train-0' is train task 'train-0' (the "
                               "same prompt and answer); expected a held-out test split that "
                               "shares no task with train"),
    "reward component returns None": (target("RewardNone", "rewnone"),
                                      "reward.name='broken_none' on env=rewnone's conformance "
                                      "episode: component looked_none returned None; "
                                      "expected a finite float"),
    "reward component returns a str": (target("RewardStr", "rewstr"),
                                       "reward.name='broken_str' on env=rewstr's conformance "
                                       "episode: component looked_str returned '0.1' (str); "
                                       "expected a finite float"),
    "_target_ names a missing class": (target("Missng", "missing"),
                                       "env._target_='envs_external.broken.Missng': cannot "
                                       "import it: 'envs_external.broken' has no class "
                                       "'Missng'; its Environment classes: "),
    "_target_ names a missing module": (["env=broken", "env._target_=envs_external.brokn.X"],
                                        "env._target_='envs_external.brokn.X': cannot import "
                                        "it: package 'envs_external' has no module 'brokn'"),
    # issue 63: a newcomer's world
    "a mask allowing no tool": (target("EmptyMask", "emptymask"),
                                "env=emptymask: mask_candidates() allows no tool on turn 2 of "
                                "the conformance episode (tool_names: []); expected at least "
                                "one of its tools"),
    "schema arguments the method does not take": (
        target("SchemaMismatch", "schemamis"),
        "env=schemamis: tool look's schema names argument(s) 'place', which "
        "SchemaMismatch.look(state, where) does not take; expected the schema's properties to be the method's parameters"),
    "schema arguments a dispatched function does not take": (
        target("DispatchMismatch", "dispatchmis"),
        "env=dispatchmis: tool look raised on the conformance episode's call {\"place\": "
        "\"shelf\"} (TypeError: _look_where() got an unexpected keyword argument 'place'); "
        "expected step() to return a ToolResult"),
    "two tasks of one id": (target("DuplicateIds", "dupids"),
                            "env=dupids: tasks('train') holds the id 'train-0' twice (tasks 0 "
                            "and 1); expected each task id once in a split"),
    "a generator on the global random": (target("Unseeded", "unseeded"),
                                         "env=unseeded: tasks('train') differs when the world "
                                         "is built again for another seed (task 'train-0': "),
    "a generator on the run's seed": (target("RunSeeded", "runseeded"),
                                      "env=runseeded: tasks('train') differs when the world is "
                                      "built again for another seed (task 'train-0': \"Look at "
                                      "lamp 0-train-0"),
    "a declared seed that changes nothing": (target("IgnoresSeed", "ignoresseed"),
                                             "env=ignoresseed: its tasks are the same under "
                                             "env.options.seed=0 and 1; expected its declared "
                                             "seed_key='seed' to draw the tasks"),
    "reset returns a str": (target("ResetStr", "resetstr"),
                            "env=resetstr: reset() returned a str (\"Look at lamp train-0, "
                            "then answer ok.\"); expected the episode's state"),
    "reset returns None": (target("ResetNone", "resetnone"),
                           "env=resetnone: reset() returned None; expected the episode's "
                           "state"),
    "unknown key": (["env=broken", "env.size=3"],
                    "env=broken has no key env.size; allowed: name, _target_, options, "
                    "max_turns, cache_dir and env.options.<size>"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_mistake_is_one_line_before_any_cell_directory(case, tmp_path):
    args, needle = CASES[case]
    proc = run_cli([*args, "model=scripted"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "cell").exists()


def test_a_raising_tool_is_logged_once_per_exception_type_then_counted(caplog):
    env = make_env(OmegaConf.create({"_target_": "envs_external.broken.RaisingTool",
                                     "name": "raising"}))
    state = env.reset(env.tasks("train")[0])
    with caplog.at_level(logging.ERROR, logger="ablate.protocol.environment"):
        results = [env.call(state, "look", {}) for _ in range(18)]
    assert all(r.error == "internal: ValueError: the lamp is broken" for r in results)
    assert {r.observation for r in results} == {"Error: look failed inside the environment."}
    logged = [r for r in caplog.records if r.name == "ablate.protocol.environment"]
    assert len(logged) == 2, [r.getMessage() for r in logged]
    assert logged[0].exc_info is not None and "raised ValueError" in logged[0].getMessage()
    assert "10 times so far" in logged[1].getMessage()
    assert env.tool_failures == {("look", "ValueError"): 18}


@pytest.mark.parametrize("env,warned", [("counter", True), ("kvlookup", False)])
def test_tiny_model_on_an_environment_without_masks_is_warned_once(env, warned, caplog):
    from ablate.apps.cli import compose_config
    from ablate.apps.preflight import check_env
    cfg = compose_config([f"hydra.searchpath=[file://{CONF}]", f"env={env}"])  # model=tiny
    with caplog.at_level(logging.WARNING, logger="ablate"):
        check_env(cfg)
    said = [r.getMessage() for r in caplog.records if "mask_candidates" in r.getMessage()]
    assert said == ([f"env={env} returns no mask_candidates: model=tiny writes its tool "
                     "calls unconstrained and most will be malformed (docs/environments.md, "
                     "\"Action masking\")"] if warned else [])


def _scored_with(scheme, tmp_path):
    """check_reward_scoring of the counter world's conformance episode under `scheme`,
    registered for this test as reward.name=probe."""
    from ablate.apps.cli import compose_config
    from ablate.apps.preflight import check_reward_scoring
    from ablate.envs.conformance import play_one
    from ablate.rewards import REWARDS
    cfg = compose_config([f"hydra.searchpath=[file://{CONF}]", "env=counter",
                          "reward.name=outcome"])
    cfg.reward.name = "probe"
    env = make_env(cfg.env)
    REWARDS.register("probe", scheme)
    try:
        traj, _ = play_one(env, "counter", 4)
        check_reward_scoring(cfg, env, traj)
    finally:
        del REWARDS["probe"]


@pytest.mark.parametrize("scheme,needle", [
    (lambda ep, cfg=None: (float("nan"), {}), "its total returned nan (float)"),
    (lambda ep, cfg=None: 1.0, "the scheme returned 1.0 (float); expected (total, "),
    (lambda ep, cfg=None: (1.0, {"x": None}), "component x returned None"),
    (lambda ep, cfg=None: 1 / 0, "the scheme raised ZeroDivisionError: division by zero"),
])
def test_a_plain_scheme_is_scored_too(scheme, needle, tmp_path):
    from ablate.core.errors import ConfigError
    with pytest.raises(ConfigError, match="reward.name='probe' on env=counter's conformance "
                                          "episode: ") as info:
        _scored_with(scheme, tmp_path)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_finite_components_pass(tmp_path):
    from ablate.rewards import Rubric, correct

    def turns(episode, cfg=None):
        return len(episode.results)            # an int is a number too
    _scored_with(Rubric(correct, turns), tmp_path)
    _scored_with(lambda ep, cfg=None: (1.0, {"a": 1.0}), tmp_path)


def test_reset_str_is_named_as_reset_with_the_tiny_model_too(tmp_path):
    """The mask warning of model=tiny used to read the state first and name
    mask_candidates; reset's type is checked before anything reads it (issue 63)."""
    proc = run_cli(target("ResetStr", "resetstr"), tmp_path)             # model=tiny
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "env=resetstr: reset() returned a str" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout and not (tmp_path / "cell").exists()


@pytest.mark.parametrize("cls,name", [("MethodTools", "methodtools"), ("UsesSeed", "usesseed"),
                                      ("Good", "good")])
def test_a_world_without_those_mistakes_passes(cls, name):
    """The checks of issue 63 refuse the mistakes only: tools as methods whose parameters
    are their schema's, and a declared seed that draws the tasks, pass."""
    from ablate.apps.cli import compose_config
    from ablate.apps.preflight import check_env
    check_env(compose_config([f"hydra.searchpath=[file://{CONF}]", *target(cls, name),
                              "model=scripted"]))


@pytest.mark.parametrize("env", ["counter", "kvlookup", "synthetic", "coderepair"])
def test_the_shipped_worlds_pass_the_new_checks(env, tmp_path):
    from ablate.apps.cli import compose_config
    from ablate.apps.preflight import check_env
    check_env(compose_config([f"hydra.searchpath=[file://{CONF}]", f"env={env}",
                              f"env.cache_dir={tmp_path}"]))


def test_weights_summing_to_zero_warn_once(caplog):
    from ablate.apps import preflight
    from ablate.apps.cli import compose_config
    cfg = compose_config([f"hydra.searchpath=[file://{CONF}]", "env=kvlookup",
                          "+reward.weights.correct=0", "+reward.weights.looked_up=0"])
    preflight._WARNED.clear()
    with caplog.at_level(logging.WARNING, logger="ablate"):
        preflight.warn_zero_weights(cfg)
        preflight.warn_zero_weights(cfg)            # a grid's second job: said once
    said = [r.getMessage() for r in caplog.records if "sum to 0" in r.getMessage()]
    assert said == ["reward.weights of reward.name=kv_lookup sum to 0 (correct=0, "
                    "looked_up=0): every component is off: every reward is 0 and nothing is "
                    "learnt (reward.weights.<name>, docs/rewards.md)"]
    cfg.reward.weights.looked_up = 0.5
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ablate"):
        preflight.warn_zero_weights(cfg)
    assert not [r for r in caplog.records if "sum to 0" in r.getMessage()]


def test_a_value_mask_with_no_candidates_is_warned_once(caplog):
    """An empty `answers` list constrains nothing: the answer tool allowed beside it
    writes its value free, the leak of issue 63; warned once per world and tool."""
    from ablate.apps.cli import compose_config
    from ablate.apps.preflight import check_env
    from ablate.envs import conformance
    conformance._WARNED.clear()
    cfg = compose_config([f"hydra.searchpath=[file://{CONF}]",
                          *target("EmptyAnswers", "emptyanswers"), "model=scripted"])
    with caplog.at_level(logging.WARNING, logger="ablate"):
        check_env(cfg)
        check_env(cfg)
    said = [r.getMessage() for r in caplog.records if "is not masked" in r.getMessage()]
    assert said == ["env=emptyanswers: mask_candidates() allows answer on turn 1 with "
                    "answers: [], so its argument 'value' is not masked (an empty list "
                    "constrains nothing); leave answer out of tool_names until there are "
                    "answers (docs/environments.md, \"Action masking\")"]
