"""Paper shapes without weights (ablate/models/shapes.py), the learner benchmark
(benchmarks/bench_learner_gpu.py) and the staged smoke (benchmarks/gpu_smoke.sh) on CPU at
tiny sizes, and the offline wheel bundle (scripts/offline_wheels.py)."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement

from ablate.models import shapes
from ablate.models.config import ModelConfig

ROOT = Path(__file__).resolve().parents[2]


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --- shapes ------------------------------------------------------------------------------
def test_paper_configs_carry_the_hugging_face_numbers():
    q4 = shapes.paper_config("qwen3_4b")
    assert (q4.hidden_size, q4.num_hidden_layers, q4.num_attention_heads,
            q4.num_key_value_heads, q4.head_dim, q4.intermediate_size) == \
        (2560, 36, 32, 8, 128, 9728)
    assert q4.vocab_size == 151936 and q4.tie_word_embeddings is True
    assert q4.rope_parameters["rope_theta"] == 1e6 and q4.max_position_embeddings == 40960
    moe = shapes.paper_config("qwen3_30b_a3b", num_layers=4, vocab_size=6577)
    assert type(moe).__name__ == "Qwen3MoeConfig" and moe.num_hidden_layers == 4
    assert (moe.hidden_size, moe.head_dim, moe.num_key_value_heads, moe.num_experts,
            moe.num_experts_per_tok, moe.moe_intermediate_size) == (2048, 128, 4, 128, 8, 768)
    assert moe.norm_topk_prob is True and moe.tie_word_embeddings is False
    assert moe.vocab_size == 6577


def test_parameter_counts_match_the_published_sizes():
    # Qwen3-4B: 4.0B parameters; Qwen3-30B-A3B: 30.5B total, 3.3B activated (model cards)
    assert shapes.parameter_count(shapes.paper_config("qwen3_4b"))["total"] == 4_022_468_096
    moe = shapes.parameter_count(shapes.paper_config("qwen3_30b_a3b"))
    assert moe["total"] == 30_532_122_624
    assert 3.3e9 < moe["active"] + moe["embedding"] < 3.4e9


@pytest.mark.parametrize("name", sorted(shapes.PAPER))
@pytest.mark.parametrize("scale,layers", [("tiny", None), ("paper", 2)])
def test_parameter_count_equals_the_built_model(name, scale, layers):
    cfg = shapes.paper_config(name, scale=scale, num_layers=layers, vocab_size=1000)
    model = shapes.random_model(cfg, device="meta")
    assert sum(p.numel() for p in model.parameters()) == shapes.parameter_count(cfg)["total"]


def test_prime_rl_accounting_reproduces_its_published_mfu():
    """BENCHMARKS.md: Qwen3-4B LoRA r16, 16k, 1xH100: 6.23k tokens/s at MFU 21.7%."""
    cfg = shapes.paper_config("qwen3_4b")
    lora = 36 * 16 * ((2560 + 4096) * 2 + (2560 + 1024) * 2)   # r16 on q, k, v, o
    fpt = shapes.train_flops_per_token(cfg, 16384, lora, attn_head_dim=2560 // 32)
    assert shapes.mfu(6230, fpt) == pytest.approx(0.217, abs=0.003)
    full = shapes.train_flops_per_token(cfg, 16384)   # 6N + 12 L H Q T, Q = head_dim
    assert full == 6 * shapes.matmul_params(cfg) + 12 * 36 * 32 * 128 * 16384


def test_random_model_dir_loads_through_model_path(tmp_path):
    from ablate.models.loading import load_policy
    path = shapes.write_random_model(tmp_path / "q4b", "qwen3_4b", scale="tiny")
    assert (path / "model.safetensors").is_file()
    model, tok = load_policy(ModelConfig(name="qwen3_4b", path=str(path), dtype="bfloat16"))
    assert model.config.vocab_size == len(tok) == 6577
    assert model.config.num_key_value_heads == 1 and model.config.hidden_size == 64
    assert next(model.parameters()).dtype == torch.bfloat16
    assert model.config.eos_token_id == tok.eos_token_id
    info = json.loads((path / "shape_info.json").read_text())
    assert info["random_weights"] and info["params"]["total"] == \
        sum(p.numel() for p in model.parameters())


# --- the learner benchmark ----------------------------------------------------------------
def test_bench_learner_gpu_one_cpu_step_at_tiny_shape(tmp_path):
    bench = _module(ROOT / "benchmarks" / "bench_learner_gpu.py", "bench_learner_gpu")
    out = tmp_path / "b.json"
    bench.main(["--device", "cpu", "--shape", "tiny", "--seq", "64", "--steps", "1",
                "--lora-rank", "16", "0", "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert [r["mode"] for r in rows] == ["lora_r16", "full"]
    cfg = shapes.paper_config("qwen3_4b", scale="tiny", vocab_size=6577)
    for r in rows:
        assert r["micro_batches"] == 2 and r["train_tokens"] == 2 * 63
        assert r["tokens_per_s"] == pytest.approx(126 / r["step_s"], rel=1e-3)
        assert r["mfu"] == pytest.approx(
            r["tokens_per_s"] * r["flops_per_token"] / 989e12, rel=1e-3)
        assert torch.isfinite(torch.tensor(r["loss"])) and r["grad_norm"] > 0
    # LoRA r16 on q, k, v, o of 2 layers (hidden 64, 4 x 16 query, 1 x 16 kv dims)
    assert rows[0]["lora_params"] == 2 * 16 * ((64 + 64) * 2 + (64 + 16) * 2)
    assert rows[1]["flops_per_token"] == shapes.train_flops_per_token(cfg, 64)


# --- the staged smoke ---------------------------------------------------------------------
def _smoke(tmp_path, stages: str, **env):
    e = {**os.environ, "SMOKE_DEVICE": "cpu", "SMOKE_SHAPE": "tiny", "SMOKE_STAGES": stages,
         "SMOKE_OUT": str(tmp_path / "smoke"), "SMOKE_PYTHON": sys.executable,
         "OMP_NUM_THREADS": "1", **env}
    r = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_smoke.sh"),
                        "run.num_threads=1"], env=e, capture_output=True, text=True,
                       timeout=600)
    return r, tmp_path / "smoke"


@pytest.mark.heavy
def test_gpu_smoke_runs_every_stage_on_cpu(tmp_path):
    r, out = _smoke(tmp_path, "tiny q4b_lora moe_lora q4b_full")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary) == ["tiny", "q4b_lora", "moe_lora", "q4b_full"]
    for name, s in summary.items():
        assert (out / f"{name}.rc").read_text().strip() == "0"
        assert s["steps"] == 2 and s["learner_tps"] > 0 and s["step_s"] > 0
        assert s["ckpt_bytes"] > 0 and s["ckpt_s"] is not None
    # LoRA trains adapters only; the full fine-tune trains every parameter
    assert summary["q4b_lora"]["trainable_params"] < summary["q4b_full"]["trainable_params"]
    assert summary["q4b_full"]["trainable_params"] == summary["q4b_full"]["params"]
    assert "== summary" in r.stdout and not (out / "q4b_lora" / "ckpt").exists()


@pytest.mark.slow   # ~18 s: a stage cut by its timeout (.ci/run's second stage)
def test_gpu_smoke_stage_timeout_dumps_stacks_and_next_stage_runs(tmp_path):
    r, out = _smoke(tmp_path, "tiny q4b_lora", SMOKE_TIMEOUT_TINY="8")
    assert (out / "tiny.rc").read_text().strip() != "0"
    log = (out / "tiny.log").read_text()
    assert "Thread 0x" in log or "Current thread" in log   # faulthandler's dump
    assert (out / "q4b_lora.rc").read_text().strip() == "0"
    assert "rc=" in r.stdout and r.returncode == 0


# --- offline wheels -----------------------------------------------------------------------
ow = _module(ROOT / "scripts" / "offline_wheels.py", "offline_wheels")


def test_offline_wheels_reads_the_pins_and_skips():
    reqs = {r.name: str(r.specifier) for r in ow.pins()}
    assert reqs["torch"] == "==2.13.0" and reqs["deepspeed"] == "==0.19.8"
    skip = ow.SKIP
    assert ow.skipped(Requirement("torch==2.13.0"), skip, {})
    assert ow.skipped(Requirement("nvidia-cublas-cu12"), skip, {})
    assert not ow.skipped(Requirement("transformers==5.24.0"), skip, {})
    have = {"transformers": ow.Version("5.17.0"), "packaging": ow.Version("25.0")}
    assert not ow.skipped(Requirement("transformers==5.24.0"), (), have)
    assert ow.skipped(Requirement("packaging>=20"), (), have)
    assert ow.platform_tags("manylinux_2_28_x86_64")[:2] == \
        ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64"]
    assert "manylinux2014_x86_64" in ow.platform_tags("manylinux_2_28_x86_64")


def test_offline_wheels_follows_markers_for_the_target(tmp_path):
    whl = tmp_path / "demo-1.0-py3-none-any.whl"
    meta = "\n".join(["Metadata-Version: 2.1", "Name: demo", "Version: 1.0",
                      "Requires-Dist: alpha>=1", 'Requires-Dist: beta; python_version < "3.11"',
                      'Requires-Dist: gamma; sys_platform == "win32"',
                      'Requires-Dist: delta; extra == "fast"'])
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("demo-1.0.dist-info/METADATA", meta)
    env = ow.marker_env("3.12", "manylinux_2_28_x86_64")
    assert [r.name for r in ow.requires(whl, set(), env)] == ["alpha"]
    assert [r.name for r in ow.requires(whl, {"fast"}, env)] == ["alpha", "delta"]
    old = ow.marker_env("3.10", "manylinux_2_28_x86_64")
    assert [r.name for r in ow.requires(whl, set(), old)] == ["alpha", "beta"]


@pytest.mark.heavy
def test_offline_wheels_install_the_project_without_an_index(tmp_path):
    """The bundle for this machine, installed with --no-index into a fresh venv. The venv
    sees the system's site-packages (--system-site-packages) because that is where the
    skipped packages (torch, numpy, scipy, pandas, matplotlib) come from, as a CUDA
    image's come from the image; every bundled wheel is installed into the venv itself
    and must be what Python imports there."""
    wheels, venv = tmp_path / "wheels", tmp_path / "venv"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "offline_wheels.py"),
                    str(wheels)], check=True, timeout=1800)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    py = str(venv / "bin" / "python")
    pip = [py, "-m", "pip", "install", "-q", "--no-index", "--no-deps"]
    # --ignore-installed: into the venv even where the system has the same version
    subprocess.run(pip + ["--ignore-installed"] + [str(w) for w in wheels.glob("*.whl")],
                   check=True)
    src = tmp_path / "src"   # a copy: an in-tree build would leave build/ in the checkout
    src.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for name in ("ablate", "analysis"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(pip + ["--no-build-isolation", str(src)], check=True, timeout=900)
    # pip check over the venv's own packages (the system's may conflict among themselves)
    ours = {ow.canonicalize_name(line.split("==")[0]) for line in
            (wheels / "requirements.txt").read_text().split()} | {"ablate"}
    check = subprocess.run([py, "-m", "pip", "check"], capture_output=True, text=True).stdout
    broken = [line for line in check.splitlines()
              if line.split() and ow.canonicalize_name(line.split()[0]) in ours]
    assert not broken, broken
    code = ("import ablate, deepspeed, hydra, peft, transformers, sys; "
            "print(transformers.__version__, deepspeed.__version__, transformers.__file__)")
    out = subprocess.run([py, "-c", code], check=True, capture_output=True, text=True,
                         cwd=tmp_path).stdout.splitlines()[-1].split()
    assert out[:2] == ["5.24.0", "0.19.8"] and out[2].startswith(str(venv))
    names = (wheels / "requirements.txt").read_text()
    assert "deepspeed==0.19.8" in names and "torch" not in names
