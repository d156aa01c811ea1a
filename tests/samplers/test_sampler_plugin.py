"""A sampler backend from outside the package (tests/samplers_external/capped.py) with its
own keys, check and memory terms: selected with `plugins=[...] sampler=NAME`, listed with
its keys, planned with its terms, and a real cell run through it from the command line."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ablate.apps.cli import compose_config
from ablate.core.errors import ConfigError
from ablate.loop.config import validate

REPO = Path(__file__).resolve().parents[2]
PLUGIN = "plugins=[samplers_external.capped]"


def test_its_keys_come_with_sampler_equals_its_name():
    cfg = compose_config([PLUGIN, "sampler=capped", "sampler.max_new_tokens_cap=8"])
    validate(cfg)
    assert cfg.sampler.name == "capped" and cfg.sampler.max_new_tokens_cap == 8
    assert "tensor_parallel_size" not in cfg.sampler      # vLLM's keys are vLLM's
    with pytest.raises(ConfigError, match=r"^sampler.max_new_tokens_cap=0 is not allowed; "
                                          r"must be >= 1$"):
        validate(compose_config([PLUGIN, "sampler=capped", "sampler.max_new_tokens_cap=0"]))


def test_its_key_on_another_sampler_names_the_backend_that_owns_it(capsys):
    from ablate.apps.cli import preflight
    assert preflight([PLUGIN, "sampler.max_new_tokens_cap=8"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("ablate: error: sampler.max_new_tokens_cap is a key of sampler=capped, "
                   "not of sampler=hf: add sampler=capped (each backend's keys are its own, "
                   "docs/configuration.md)")


def test_the_memory_plan_composes_its_declared_terms():
    from ablate.apps.memory_plan import memory_plan
    from ablate.core.plan import DTYPE_BYTES
    cfg = compose_config([PLUGIN, "sampler=capped", "sampler.max_new_tokens_cap=8"])
    plan = memory_plan(cfg)
    terms = {t.name: t.bytes for t in plan.terms}
    episodes = cfg.trainer.tasks_per_step * cfg.trainer.group_size
    tokens = episodes * min(cfg.harness.max_tokens_per_episode, cfg.env.max_turns * 8)
    per_token = plan.shape.kv_bytes_per_token(DTYPE_BYTES[cfg.model.dtype])
    assert terms["capped kv cache"] == tokens * per_token
    assert "kv cache" not in terms                          # not the hf sampler's term
    wider = memory_plan(compose_config([PLUGIN, "sampler=capped",
                                        "sampler.max_new_tokens_cap=16"]))
    assert {t.name: t.bytes for t in wider.terms}["capped kv cache"] > terms["capped kv cache"]


def test_a_cell_runs_through_the_plugin_with_its_own_keys(tmp_path):
    log = tmp_path / "calls.jsonl"
    env = dict(os.environ, WANDB_MODE="disabled", ABLATE_CACHE=str(tmp_path / "cache"),
               PYTHONPATH=f"{REPO}{os.pathsep}{REPO / 'tests'}")
    proc = subprocess.run(
        [sys.executable, "-m", "ablate", PLUGIN, "sampler=capped",
         "sampler.max_new_tokens_cap=6", f"sampler.log_path={log}",
         f"hydra.run.dir={tmp_path / 'cell'}", "run.quiet=true", "run.num_threads=1",
         "trainer.max_steps=1", "trainer.tasks_per_step=1", "trainer.group_size=2",
         "eval.num_tasks=2", "eval.samples=1", "eval.greedy=false", "env.max_turns=3"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "cell" / "COMPLETE").exists()
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls and all(c["cap"] == 6 and 0 < c["longest"] <= 6 for c in calls)
    stored = (tmp_path / "cell" / "config.yaml").read_text()
    assert "max_new_tokens_cap: 6" in stored and "name: capped" in stored
