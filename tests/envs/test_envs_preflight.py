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
                           "env=strtool: tool look returned a str; expected an "
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
