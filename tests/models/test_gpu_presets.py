"""The GPU presets (issue 61 fault 9): every paper cell samples with vLLM, whose bf16
logprobs come from other kernels than the learner's, so it takes the PPO ratio against
the learner's recomputed pi_old with a token-level truncated importance weight
(algo.rollout_correction=token-tis, Yao et al. 2025); the CPU default keeps none."""
from __future__ import annotations

from ablate.apps.cli import compose_config, expand_jobs

PAPER_DATA = ["env.emails_path=/d/e.jsonl", "env.train_tasks_path=/d/tr.jsonl",
              "env.test_tasks_path=/d/te.jsonl"]


def test_paper_cells_default_to_a_token_level_correction():
    cells = {}
    for job in expand_jobs(["+experiment=enronhop_paper", *PAPER_DATA], True):
        cfg = compose_config(job)
        cell = next(j.split("=")[1] for j in job if j.startswith("+paper_cell"))
        cells[cell] = (str(cfg.sampler.name), str(cfg.algo.rollout_correction),
                       float(cfg.algo.correction_cap))
    assert len(cells) == 4
    assert set(cells.values()) == {("vllm", "token-tis", 2.0)}      # main: "none"


def test_a_command_line_value_still_wins_and_the_cpu_default_is_none():
    cfg = compose_config(["+experiment=enronhop_paper", "+paper_cell=qwen3_4b_shaped",
                          "algo.rollout_correction=none", *PAPER_DATA])
    assert cfg.algo.rollout_correction == "none"
    assert compose_config([]).algo.rollout_correction == "none"
    assert compose_config(["sampler=vllm"]).algo.rollout_correction == "none"
