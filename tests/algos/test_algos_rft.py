"""RFT and STaR (ablate.algos.rft): the loss is the token-mean cross-entropy of the kept
episodes' generated tokens (against a plain re-implementation), STaR's rationalised
episodes are trained without the hint in their context (id for id, action masks included,
against an unhinted rollout of the same actions); RFT, STaR and DPO each run a 2-step cell
and resume after SIGKILL (the helper serves tests/algos/test_curriculum.py too)."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import test_harness_util as U
import test_learners as L
from ablate.algos import RFT, STaR
from ablate.algos.hints import remask, same_masks
from ablate.algos.protocol import StepContext
from ablate.algos.rft import keep_mask
from ablate.loop.scoring import score
from ablate.apps.cli import compose_config, normalise_overrides
from ablate.envs.email import EmailEnv
from ablate.envs.email.env import as_task
from ablate.envs.email.judge import make_judge
from ablate.harness import chat
from ablate.harness.episode import Episode
from ablate.harness.rollout import rollout

torch.set_num_threads(1)
TASKS = [as_task(t) for t in U.TASKS]   # the generic Task the email world serves


def episodes_of(segments, correct, groups):
    return [Episode(task=U.TASKS[0], group=g, sample=i, segments=[s], correct=c)
            for i, (s, c, g) in enumerate(zip(segments, correct, groups))]


@pytest.fixture(scope="module")
def weights_dir(tmp_path_factory):
    torch.manual_seed(1234)
    import transformers
    model = transformers.AutoModelForCausalLM.from_config(L.tiny_config())
    d = tmp_path_factory.mktemp("tiny_qwen3")
    model.save_pretrained(d)
    return str(d)


def plain_nll(model, segments) -> float:
    """Token-mean cross-entropy over the segments' masked tokens (position 0 excluded)."""
    total, count = 0.0, 0
    with torch.no_grad():
        for s in segments:
            ids = torch.tensor([s.ids])
            logits = model(input_ids=ids).logits[0, :-1]
            m = torch.tensor(s.mask[1:], dtype=torch.bool)
            total += float(F.cross_entropy(logits[m], ids[0, 1:][m], reduction="sum"))
            count += int(m.sum())
    return total / count


@pytest.mark.parametrize("micro", [64, 4096])
def test_rft_loss_is_token_mean_cross_entropy_of_kept_episodes(weights_dir, tmp_path, micro):
    segments, _ = L.make_batch(seed=3)
    correct = [True, False, False, False, True, True]
    eps = episodes_of(segments, correct, [0, 0, 1, 1, 2, 2])
    rft = RFT()
    kept, rewards, groups, metrics = rft.augment(eps, [float(c) for c in correct],
                                                 [e.group for e in eps], None)
    assert [e.sample for e in kept] == [0, 4, 5] and metrics["rft/kept"] == 3
    batch = rft.prepare(kept, rewards, groups, None)
    expected = plain_nll(L.load(weights_dir), [segments[i] for i in (0, 4, 5)])
    lrn = L.learner(weights_dir, tmp_path, "torch", micro_batch_tokens=micro)
    stats = lrn.update(batch.segments, batch.advantages, rft.loss_fn(batch))
    assert stats["loss"] == pytest.approx(expected, rel=1e-5)
    assert stats["nll"] == pytest.approx(expected, rel=1e-5)
    assert (stats["micro_batches"] > 1) == (micro == 64)


def test_rft_keep_rules():
    eps = episodes_of([None] * 4, [True, True, False, True], [0, 0, 0, 1])
    assert keep_mask(eps, [1, 1, 0, 1], keep="correct", threshold=1, max_per_task=0,
                     group_ids=[0, 0, 0, 1]) == [True, True, False, True]
    assert keep_mask(eps, [1, 1, 0, 1], keep="correct", threshold=1, max_per_task=1,
                     group_ids=[0, 0, 0, 1]) == [True, False, False, True]
    assert keep_mask(eps, [0.2, 0.9, 0.5, 0.4], keep="reward", threshold=0.5, max_per_task=0,
                     group_ids=[0, 0, 0, 1]) == [False, True, True, False]
    with pytest.raises(ValueError, match="algo.rft.keep='best'"):
        RFT(keep="best")


# --- STaR: the hint is removed token-exactly ------------------------------------------------

WRONG = chat.format_tool_call("return_final_answer", {"answer": "nobody", "sources": []})


def hint_script(prompt, turn):
    """Solves a task only when its prompt carries the hint; answers wrongly otherwise."""
    return U.demo_script(U.demo_steps())(prompt, turn) if "Hint:" in prompt else WRONG


class Policy:
    def __init__(self, db, cfg, script):
        self.db, self.cfg, self.script = db, cfg, script

    def act(self, tasks, group_size, *, temperature=1.0, seed=0):
        tok = U.tokenizer()
        return rollout(tasks, group_size=group_size, sampler=U.ScriptedSampler(tok, self.script),
                       tokenizer=tok, env=U.email_env(self.db),
                       harness_cfg=self.cfg.harness, mode_cfg=self.cfg.mode, max_turns=4,
                       temperature=temperature, seed=seed)


@pytest.mark.parametrize("mode", ["instruct", "thinking"])
def test_star_trains_hinted_episodes_without_the_hint_in_context(tmp_path, mode):
    cfg = compose_config(normalise_overrides([f"+mode={mode}"]))
    db = U.make_db(tmp_path)
    judge = EmailEnv.over_db(db, judge=make_judge(cfg.env.judge))   # scores like a cell
    policy = Policy(db, cfg, hint_script)
    first = policy.act(TASKS, 2)
    scored = score(first, judge, cfg.reward)
    assert not any(e.correct for e in first)            # every task failed: rationalise all
    ctx = StepContext(1, 2, act=lambda tasks, n: policy.act(tasks, n),
                      score=lambda e: score(e, judge, cfg.reward), cfg=cfg,
                      tokenizer=U.tokenizer(), env=judge)
    star = STaR(hint=" (Hint: the correct answer is {answer}.)")
    eps, rewards, groups, metrics = star.augment(first, [r for r, _ in scored],
                                                 [e.group for e in first], ctx)
    assert metrics["star/rationalized"] == 4 and len(eps) == 4 and groups == [0, 0, 1, 1]
    assert metrics["generated_tokens"] > 0
    # the same actions taken without any hint: what the stripped episodes must equal
    oracle = Policy(db, cfg, U.demo_script(U.demo_steps())).act(TASKS, 2)
    tok = U.tokenizer()
    hint_ids = tok.encode("Hint:", add_special_tokens=False)
    for e, o in zip(eps, oracle):
        assert e.task == o.task and e.correct
        assert len(e.segments) == len(o.segments) >= (3 if mode == "thinking" else 1)
        for s, so in zip(e.segments, o.segments):
            assert s.ids == so.ids and s.mask == so.mask
            assert (s.allowed or {}) == (so.allowed or {})
            assert "Hint" not in tok.decode(s.ids) and not _contains(s.ids, hint_ids)
            assert all(math.isnan(lp) == bool(m) for lp, m in zip(s.logprobs, s.mask))
    batch = star.prepare(eps, rewards, groups, None)
    assert [s.ids for s in batch.segments] == [s.ids for o in oracle for s in o.segments]
    assert batch.advantages.tolist() == [1.0] * len(batch.segments)   # weight 1: same mix


def _contains(seq, sub) -> bool:
    return any(seq[i:i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))


def test_star_drops_episodes_the_unhinted_masks_cannot_produce(tmp_path):
    """Keyword masking (on by default) allows the question's words as search keywords: a
    hinted episode that searched for a word only the hint contains is dropped."""
    cfg = compose_config([])
    assert cfg.harness.keyword_masking
    db = U.make_db(tmp_path)
    judge = EmailEnv.over_db(db, judge=make_judge(cfg.env.judge))   # scores like a cell
    budget, falcon = (steps for _, steps in U.demo_steps())
    lopez = [chat.format_tool_call("search_inbox", {"keywords": ["Lopez"]})] + falcon[1:]

    def script(prompt, turn):
        if "Hint:" not in prompt:
            return WRONG
        return (budget if U.TASKS[0].question in prompt else lopez)[min(turn, 2)]
    policy = Policy(db, cfg, script)
    first = policy.act(TASKS, 1)
    scored = score(first, judge, cfg.reward)
    ctx = StepContext(1, 1, act=lambda tasks, n: policy.act(tasks, n),
                      score=lambda e: score(e, judge, cfg.reward), cfg=cfg,
                      tokenizer=U.tokenizer(), env=judge)
    star = STaR(hint=" (Hint: the correct answer is {answer}.)")
    eps, _, groups, metrics = star.augment(first, [r for r, _ in scored], [0, 1], ctx)
    assert groups == [0] and metrics["star/dropped"] == 1 and metrics["star/rationalized"] == 1


# --- every new method: a 2-step cell on the default tiny model, resumed after SIGKILL ----------

CELL = ["trainer.max_steps=2", "trainer.tasks_per_step=2", "trainer.group_size=2",
        "eval.num_tasks=2"]


def cell_resumes_after_sigkill(overrides, tmp_path) -> list[dict]:
    """Run a reference cell and one killed after step 2's update, then resumed: identical
    metrics, evaluations and trajectories. Returns the reference's metric rows."""
    import signal
    from test_hardening_resume import TINY, outputs, run
    args = [*TINY, *CELL, *overrides]
    ref, cell, cache = tmp_path / "ref", tmp_path / "cell", tmp_path / "cache"
    done = run([*args, f"hydra.run.dir={ref}"], tmp_path, cache)
    assert done.returncode == 0, done.stderr[-3000:]
    killed = run([*args, f"hydra.run.dir={cell}"], tmp_path, cache, kill=("step", 2))
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    resumed = run([*args, f"hydra.run.dir={cell}"], tmp_path, cache)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    got, expected = outputs(cell), outputs(ref)
    for rows in (got["metrics"], expected["metrics"]):
        for r in rows:   # a cost, not a result: the sampler's prefix cache is warm in an
            r.pop("sampler/encoded_tokens")   # uninterrupted run, cold after a restart
    # its logprobs from a reused cache may then differ in the last float bits
    assert [sorted(r) for r in got["metrics"]] == [sorted(r) for r in expected["metrics"]]
    for g, e in zip(got.pop("metrics"), expected["metrics"]):
        assert all(g[k] == pytest.approx(e[k], rel=1e-5, abs=1e-7) for k in e), (g, e)
    assert got == {k: v for k, v in expected.items() if k != "metrics"}
    return expected["metrics"]


@pytest.mark.parametrize("algo,key", [
    pytest.param("rft", "rft/kept", marks=pytest.mark.slow),      # the kept-sample path,
    pytest.param("star", "star/rationalized", marks=pytest.mark.slow),   # as dpo's below
    ("dpo", "dpo/pairs")])
def test_new_algorithm_runs_a_cell_and_resumes_after_sigkill(algo, key, tmp_path):
    rows = cell_resumes_after_sigkill([f"+algo={algo}"], tmp_path)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(key in r for r in rows)
    import json
    assert json.loads((tmp_path / "ref" / "objective.json").read_text())["algorithm"] == algo


def test_star_rebuilds_masks_with_the_cells_tool_format(tmp_path):
    """remask builds the chat conventions from the cell's model config, as the rollout
    does: with the format the episode was rolled out in it reproduces the recorded masks;
    with another (model.tool_format=llama3_json) it does not, so an auto-detected format
    in its place would drop every hinted episode of a cell that set one."""
    cfg = compose_config([])
    db = U.make_db(tmp_path)
    episode = Policy(db, cfg, U.demo_script(U.demo_steps())).act(U.TASKS, 1)[0]
    assert any(s.allowed for s in episode.segments)    # action masks were recorded
    fmt = (lambda name: SimpleNamespace(tool_format=name, chat_template=None))
    rebuilt = (lambda model: remask(episode, U.tokenizer(), cfg.harness, cfg.mode,
                                    U.email_env(db), model))
    assert same_masks(episode, rebuilt(None)) and same_masks(episode, rebuilt(fmt("hermes")))
    assert not same_masks(episode, rebuilt(fmt("llama3_json")))
