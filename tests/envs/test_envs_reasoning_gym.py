"""env=reasoning_gym (ablate/envs/reasoning_gym): reasoning-gym's datasets as an ablate
environment. The judge is the dataset's own score_answer; train and test come from
disjoint generator seeds and never share a question; answers written as <answer> text go
through the harness to the answer tool; the calculator makes episodes multi-turn; 1-step
cells complete on two datasets; without the package, one line with the install command."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

pytest.importorskip("reasoning_gym")
import reasoning_gym  # noqa: E402

from ablate.apps.cli import compose_config, normalise_overrides  # noqa: E402
from ablate.envs import EnvError, make_env, run_episode, tool_names  # noqa: E402
from ablate.protocol.environment import prompt_tools  # noqa: E402
from ablate.envs.reasoning_gym.calculator import CalcError, evaluate  # noqa: E402
from ablate.harness.config import HarnessConfig, ModeConfig  # noqa: E402
from ablate.harness.rollout import rollout  # noqa: E402
from ablate.loop.cell import run_cell  # noqa: E402
from ablate.loop.config import validate  # noqa: E402

import test_harness_util as U  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def env_of(**cfg):
    return make_env(OmegaConf.create({"name": "reasoning_gym", **cfg}))


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ------------------------------------------------------------------ the judge
# (dataset, options, a right answer, wrong answers): hand-picked per dataset, scored by
# the dataset's own score_answer on the same entry
CASES = [
    ("chain_sum", {"max_terms": 3}, lambda e: e["answer"], ["12345", "", "the answer"]),
    ("basic_arithmetic", {}, lambda e: e["answer"], ["0.5x", "-999999"]),
    ("spell_backward", {}, lambda e: e["answer"], ["xyz", "abc"]),
]


@pytest.mark.parametrize("dataset,options,right,wrongs", CASES, ids=[c[0] for c in CASES])
def test_judge_equals_score_answer(dataset, options, right, wrongs):
    env = env_of(dataset=dataset, options=options, train_tasks=5, test_tasks=5)
    ds = reasoning_gym.create_dataset(dataset, **options, seed=env.split_seed("test"),
                                      size=5)
    for task in env.tasks("test")[:3]:
        entry = ds[task.metadata["source_index"]]
        assert entry["question"] == task.prompt and entry["answer"] == task.answer
        gold = right(entry)
        partial = f"I think it is {gold}"          # partial credit in the default scorer
        for answer in [gold, partial, *wrongs]:
            score = ds.score_answer(answer, entry)
            assert env.score(task, answer) == pytest.approx(score)
            assert env.is_correct(task, answer, None) is (score >= 1.0)
        assert env.is_correct(task, gold, None) is True
        assert env.is_correct(task, wrongs[0], None) is False
        assert env.is_correct(task, None, None) is False


def test_threshold_and_rg_score_reward_follow_the_score():
    env = env_of(dataset="chain_sum", correct_threshold=0.3, train_tasks=3, test_tasks=3)
    task = env.tasks("test")[0]
    ds = env.source("test")
    partial = f"= {task.answer}"
    score = ds.score_answer(partial, task.payload)
    assert 0.3 <= score < 1.0
    assert env.is_correct(task, partial, None)
    traj = run_episode(env, task, lambda res: None if res else ("answer", {"answer": partial}),
                       max_turns=1)
    assert traj.results[-1].extra["score"] == pytest.approx(score)
    from ablate.envs.reasoning_gym.rewards import rg_score
    total, comps = rg_score(traj)
    assert total == pytest.approx(score) and comps == {"score": pytest.approx(score)}
    assert env.behaviour(task, traj.results)["score"] == pytest.approx(score)


# ------------------------------------------------------------------ the splits
def test_train_and_test_questions_are_disjoint_and_deterministic():
    env = env_of(dataset="chain_sum", options={"max_terms": 2, "max_digits": 1},
                 train_tasks=40, test_tasks=30)
    train, test = env.tasks("train"), env.tasks("test")
    assert len(train) == 40 and len(test) == 30
    assert not {t.prompt for t in train} & {t.prompt for t in test}
    assert len({t.prompt for t in test}) == 30      # no repeats inside a split either
    assert env.split_seed("train") != env.split_seed("test")
    again = env_of(dataset="chain_sum", options={"max_terms": 2, "max_digits": 1},
                   train_tasks=40, test_tasks=30)
    assert [t.prompt for t in again.tasks("test")] == [t.prompt for t in test]
    other = env_of(dataset="chain_sum", gen_seed=1, train_tasks=40, test_tasks=30)
    assert [t.prompt for t in other.tasks("train")] != [t.prompt for t in train]


def test_a_generator_too_small_for_the_split_is_one_line():
    # two 1-digit terms joined by + or -: 200 questions at most
    with pytest.raises(EnvError, match=r"gave only \d+ distinct train questions of "
                                       r"env.train_tasks=250"):
        env_of(dataset="chain_sum", options={"min_terms": 2, "max_terms": 2,
                                             "max_digits": 1}, train_tasks=250).tasks("train")


# ------------------------------------------------------------------ configuration
def test_options_are_the_generators_arguments():
    cfg = compose_config(normalise_overrides(
        ["env=reasoning_gym", "env.dataset=basic_arithmetic", "env.options.max_terms=3"]))
    assert cfg.env.options == {"max_terms": 3}
    env = make_env(cfg.env)
    assert env.source("train").config.max_terms == 3
    with pytest.raises(EnvError, match=r"dataset chain_sum takes no option "
                                       r"env.options.bogus; allowed: min_terms, max_terms"):
        env_of(dataset="chain_sum", options={"bogus": 1})
    with pytest.raises(EnvError, match=r"env.options.seed.*come from env.gen_seed"):
        env_of(dataset="chain_sum", options={"seed": 1})
    with pytest.raises(EnvError, match=r"env.dataset='no_such' is not a reasoning-gym "
                                       r"dataset; allowed: .*chain_sum"):
        env_of(dataset="no_such")
    with pytest.raises(EnvError, match=r"env.tools='abacus'; allowed: none, calculator"):
        env_of(tools="abacus")
    with pytest.raises(EnvError, match=r"rejects its options"):
        env_of(dataset="chain_sum", options={"min_terms": 5, "max_terms": 2}).tasks("train")


def test_without_the_package_one_line_with_the_install_command(tmp_path):
    shadow = tmp_path / "shadow" / "reasoning_gym"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('simulated: not installed')\n")
    env = dict(os.environ, WANDB_MODE="disabled",
               PYTHONPATH=f"{shadow.parent}{os.pathsep}{REPO}")
    proc = subprocess.run([sys.executable, "-m", "ablate", "env=reasoning_gym",
                           f"hydra.run.dir={tmp_path / 'cell'}"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if "reasoning-gym" in ln]
    assert lines == ["ablate: error: env=reasoning_gym needs the reasoning-gym package: pip "
                     "install 'ablate[reasoning-gym]' (or: pip install "
                     "reasoning-gym==0.1.25)"], proc.stderr[-2000:]
    assert not (tmp_path / "cell").exists()


# ------------------------------------------------------------------ tools, harness
def test_calculator_evaluates_safely():
    assert [evaluate(e) for e in ("4 - 1 - 7", "2 - -1", "(2+3)*4", "7/2", "2**10")] == \
        ["-4", "3", "20", "3.5", "1024"]
    for bad in ("__import__('os')", "9**9**9", "1/0", "x + 1", "", "1" * 300):
        with pytest.raises(CalcError):
            evaluate(bad)


def test_text_answers_and_the_calculator_through_the_harness():
    """A scripted sampler writes a calculator call, reads its value, then answers in
    <answer> tags: the harness routes the text to the answer tool, and the judge scores
    it; the answer tool is not described in the prompt."""
    env = env_of(dataset="chain_sum", tools="calculator", max_turns=3, train_tasks=4,
                 test_tasks=4)
    tasks = env.tasks("test")[:2]
    expr = {t.prompt: t.payload["metadata"]["expression"] for t in tasks}

    def script(prompt, turn):
        question = next(q for q in expr if q in prompt)
        if turn == 0:
            return U.chat.format_tool_call("calculator", {"expression": expr[question]})
        value = prompt.rsplit("<tool_response>", 1)[-1].split("</tool_response>")[0].strip()
        return f"The sum is done. <answer>{value}</answer>"

    sampler = U.ScriptedSampler(U.tokenizer(), script)
    eps = rollout(tasks, group_size=1, sampler=sampler, tokenizer=U.tokenizer(), env=env,
                  harness_cfg=HarnessConfig(), mode_cfg=ModeConfig(), max_turns=3,
                  temperature=1.0)
    first_prompt = sampler.prompts[0]
    assert '"calculator"' in first_prompt and '"name": "answer"' not in first_prompt
    for ep, task in zip(eps, tasks):
        assert ep.end_reason == "answer" and ep.final_answer == task.answer
        assert [c.name for c in ep.calls] == ["calculator", "answer"]
        assert env.is_correct(task, ep.final_answer, ep.state)
        assert ep.env_metrics["calculator_calls"] == 1 and ep.env_metrics["score"] == 1.0


def test_a_reply_without_answer_tags_is_no_answer_unless_answer_format_text():
    tag, text = env_of(train_tasks=2, test_tasks=2), env_of(answer_format="text",
                                                           train_tasks=2, test_tasks=2)
    assert tag.text_answer("it is 5") is None
    assert tag.text_answer("x <answer> 5 </answer> y <answer>6</answer>") == {"answer": "6"}
    assert text.text_answer("  it is 5\n") == {"answer": "it is 5"}
    assert text.text_answer("<answer>7</answer> trailing") == {"answer": "7"}
    assert prompt_tools(tag) == [] and tool_names(tag) == ("answer",)


def test_shots_are_train_questions_shown_as_earlier_turns():
    """env.shots=K: the first K train questions with their gold answers in the answer
    format, rendered by the chat template as user/assistant turns before the question;
    K above env.train_tasks is one line."""
    env = env_of(dataset="chain_sum", shots=2, train_tasks=5, test_tasks=3)
    train = env.tasks("train")
    assert env.examples() == [(t.prompt, f"<answer>{t.answer}</answer>") for t in train[:2]]
    assert env_of(answer_format="text", shots=1, train_tasks=2,
                  test_tasks=2).examples()[0][1] == env_of(
        train_tasks=2, test_tasks=2).tasks("train")[0].answer
    assert env_of(train_tasks=2, test_tasks=2).examples() == []
    task = env.tasks("test")[0]
    sampler = U.ScriptedSampler(U.tokenizer(), lambda prompt, turn: "<answer>1</answer>")
    rollout([task], group_size=1, sampler=sampler, tokenizer=U.tokenizer(), env=env,
            harness_cfg=HarnessConfig(), mode_cfg=ModeConfig(), max_turns=1,
            temperature=1.0)
    want = U.tokenizer().apply_chat_template(
        [{"role": "system", "content": env.system_prompt()},
         {"role": "user", "content": train[0].prompt},
         {"role": "assistant", "content": f"<answer>{train[0].answer}</answer>"},
         {"role": "user", "content": train[1].prompt},
         {"role": "assistant", "content": f"<answer>{train[1].answer}</answer>"},
         {"role": "user", "content": task.prompt}], tokenize=False,
        add_generation_prompt=True, enable_thinking=False)
    assert sampler.prompts[0] == want
    with pytest.raises(EnvError, match=r"env.shots=6; allowed 0..env.train_tasks \(5\)"):
        env_of(shots=6, train_tasks=5, test_tasks=3)


def test_shots_seed_draws_the_examples_from_the_whole_train_split():
    """env.shots_seed=S: K distinct train questions drawn with S, in train order, the same
    for the same seed; null keeps the first K; through Hydra the key composes and the
    cell's environment gets it."""
    train = env_of(train_tasks=30, test_tasks=3).tasks("train")
    index = {t.prompt: i for i, t in enumerate(train)}

    def picked(seed):
        return [index[q] for q, _ in env_of(shots=4, shots_seed=seed, train_tasks=30,
                                            test_tasks=3).examples()]
    draws = {seed: picked(seed) for seed in range(6)}
    for got in draws.values():
        assert len(set(got)) == 4 and got == sorted(got)
    assert picked(3) == draws[3]                            # a function of the seed
    assert len({tuple(d) for d in draws.values()}) >= 5     # and not the same draw
    assert any(max(d) >= 4 for d in draws.values())         # beyond the first four
    assert picked(None) == [0, 1, 2, 3]
    cfg = compose_config(normalise_overrides(["env=reasoning_gym", "env.shots=2",
                                              "env.shots_seed=7", "env.train_tasks=30"]))
    validate(cfg)
    env = make_env(cfg.env)
    assert env.shots_seed == 7 and len(env.examples()) == 2


# ------------------------------------------------------------------ cells
def cell_overrides(dataset: str, *extra: str) -> list[str]:
    return normalise_overrides([
        "env=reasoning_gym", f"env.dataset={dataset}", "env.train_tasks=8",
        "env.test_tasks=4", "trainer.max_steps=1", "trainer.tasks_per_step=2",
        "trainer.group_size=2", "eval.num_tasks=2", "eval.samples=1", "eval.greedy=false",
        "harness.action_masking=false", "harness.answer_masking=false",
        "harness.keyword_masking=false", "harness.max_new_tokens_per_turn=16",
        "run.quiet=true", *extra])


@pytest.mark.parametrize("dataset,options", [
    ("chain_sum", ["env.options.max_terms=2"]), ("spell_backward", [])])
def test_one_step_cell_completes_on_two_datasets(tmp_path, dataset, options):
    """The embedded tiny model (its masks off: they are built for the email world)."""
    cfg = compose_config(cell_overrides(dataset, *options))
    assert cfg.reward.name == "outcome"           # the environment's default_reward
    run_cell(cfg, tmp_path)
    assert (tmp_path / "COMPLETE").exists()
    train = rows(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in train] == [1] and train[0]["episodes"] == 4
    evals = rows(tmp_path / "eval.jsonl")
    assert len(evals) == 4 and {r["step"] for r in evals} == {0, 1}
    assert all(r["task_id"].startswith("test-") and "score" in r for r in evals)
    described = json.loads((tmp_path / "environment.json").read_text())
    assert described["name"] == "reasoning_gym" and described["tools"] == ["answer"]


def test_scripted_calculator_cell_is_multi_turn_and_correct(tmp_path):
    cfg = compose_config(normalise_overrides([
        "env=reasoning_gym", "env.tools=calculator", "env.max_turns=3", "model=scripted",
        "env.train_tasks=8", "env.test_tasks=4", "eval.num_tasks=4", "eval.samples=1",
        "eval.greedy=false", "run.quiet=true", "reward.name=rg_score"]))
    run_cell(cfg, tmp_path)
    evals = rows(tmp_path / "eval.jsonl")
    assert len(evals) == 4 and all(r["correct"] for r in evals)
    assert all(r["calculator_calls"] == 1 and r["turns"] == 2 for r in evals)
    assert all(r["reward"] == 1.0 and r["reward/score"] == 1.0 for r in evals)


@pytest.mark.heavy
@pytest.mark.skipif(not U.smollm_installed(), reason="needs the smollm extra")
def test_smollm_one_step_cell(tmp_path):
    """SmolLM2-135M-Instruct (LoRA) on chain_sum: a real pretrained model, ~1-3 min."""
    cfg = compose_config(cell_overrides("chain_sum", "model=smollm2_135m",
                                        "env.options.max_terms=2", "env.options.max_digits=1",
                                        "harness.max_new_tokens_per_turn=24"))
    run_cell(cfg, tmp_path)
    train = rows(tmp_path / "metrics.jsonl")
    assert train[0]["episodes"] == 4 and train[0]["update/train_tokens"] > 0
    assert len(rows(tmp_path / "eval.jsonl")) == 4
