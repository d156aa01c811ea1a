"""The email task through the protocol is the email task: same prompt, tools,
observations, metrics and scripted accuracy as ablate.envs.email / ablate.harness."""
import random

import pytest
from omegaconf import OmegaConf

from ablate.envs.email.judge import ExactJudge
from ablate.envs.email.scripted import ScriptedAgent, evaluate
from ablate.envs.email.tools import SYSTEM_PROMPT, TOOL_SCHEMAS
from ablate.envs import make_env, run_episode
from ablate.envs.email import EmailEnv

EMAIL_METRICS = {"searches", "reads", "keywords_per_search", "zero_hit_rate",
                 "read_after_hit", "fabricated_sources", "evidence_read"}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    cfg = OmegaConf.create({
        "name": "synthetic", "cache_dir": str(tmp_path_factory.mktemp("envs_email")),
        "max_results": 10, "gen_seed": 3, "num_inboxes": 6, "emails_per_inbox": 90,
        "train_tasks": 24, "test_tasks": 24, "max_hops": 3})
    made = make_env(cfg)
    yield made
    made.close()


def test_prompt_tools_and_tasks_are_the_harness_ones(env):
    assert isinstance(env, EmailEnv) and env.name == "synthetic"
    assert env.system_prompt() == SYSTEM_PROMPT and env.tool_schemas() is TOOL_SCHEMAS
    for task in env.tasks("test"):
        assert task.prompt == task.payload.prompt
        assert task.prompt.startswith(task.payload.question + "\n\nMy email address is ")
        assert task.metadata["hops"] == task.payload.hops and task.answer == task.payload.answer


def test_observations_and_metrics_equal_the_toolbox_run(env):
    tasks = env.tasks("test")[:8]
    for task in tasks:
        ep, steps = ScriptedAgent.perfect().run(task.payload, env.bundle.toolbox(task.payload),
                                                random.Random(0))
        traj = run_episode(env, task, env.baseline(task, 0, ScriptedAgent.perfect()),
                           max_turns=10)
        assert [r.observation for r in traj.results] == [s.observation for s in steps]
        m = env.behaviour(task, traj.results)
        assert set(m) == EMAIL_METRICS
        assert m["searches"] == sum(c.name == "search_inbox" and c.error is None
                                    for c in ep.calls)
        assert m["reads"] == sum(c.name == "read_email" and c.error is None for c in ep.calls)
        assert m["evidence_read"] == len({c.read_id for c in ep.calls if c.read_id}
                                         & set(task.payload.message_ids))
        assert m["fabricated_sources"] == 0            # the perfect agent cites what it read
        assert traj.answer == ep.final_answer


def test_scripted_accuracy_is_unchanged(env):
    tasks = env.tasks("test")
    judge = ExactJudge()
    _, _, direct = evaluate([t.payload for t in tasks], env.bundle.toolbox,
                            ScriptedAgent.perfect(),
                            lambda t, a: judge.judge(t.question, t.answer, a), seed=0)
    through = [run_episode(env, t, env.baseline(t, 0, ScriptedAgent.perfect()), 10).correct
               for t in tasks]
    assert sum(through) / len(through) == pytest.approx(direct)
    assert direct > 0.5


def test_state_changed_is_new_information(env):
    task = env.tasks("train")[0]
    state = env.reset(task)
    policy = env.baseline(task)
    first = env.call(state, *policy([]))            # the scripted agent's first search
    assert first.name == "search_inbox" and first.error is None
    assert first.state_changed == bool(first.extra["hits"])
    again = env.call(state, first.name, first.arguments)
    assert again.observation == first.observation and not again.state_changed
    assert ("read_email" in env.mask_candidates(state)["tool_names"]) == \
        bool(first.extra["hits"])
    if first.extra["hits"]:
        mid = first.extra["hits"][0]
        read = env.call(state, "read_email", {"message_id": mid})
        assert read.state_changed and not env.call(state, "read_email",
                                                   {"message_id": mid}).state_changed
        assert mid in env.mask_candidates(state)["ids"]


def test_a_configured_judge_overrides(env):
    class Always:
        def judge(self, question, gold, prediction):
            return True
    cfg = OmegaConf.create({"name": "synthetic", "cache_dir": str(env.bundle.root.parents[1]),
                            "max_results": 10, "gen_seed": 3, "num_inboxes": 6,
                            "emails_per_inbox": 90, "train_tasks": 24, "test_tasks": 24,
                            "max_hops": 3})
    judged = make_env(cfg, judge=Always())
    task = judged.tasks("test")[0]
    assert judged.is_correct(task, "surely wrong", judged.reset(task))
    assert not env.is_correct(task, "surely wrong", env.reset(task))
    judged.close()


def test_hostile_calls_get_the_toolbox_messages(env):
    task = env.tasks("train")[0]
    state, box = env.reset(task), env.bundle.toolbox(task.payload)
    for name, args in [("search_inbox", {}), ("search_inbox", {"keywords": []}),
                       ("read_email", {"message_id": 3}), ("read_email", {"x": 1}),
                       ("return_final_answer", {"answer": 1}), ("nope", {}), (None, "{")]:
        assert env.call(state, name, args).observation == box.call(name, args).observation
