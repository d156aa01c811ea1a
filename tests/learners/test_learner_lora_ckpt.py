"""LoRA checkpoints hold the adapters and their optimizer state, not the frozen base
(reloaded from model.path on resume), and still resume exactly: both learners."""
from __future__ import annotations

import pytest
import torch
import transformers
from omegaconf import OmegaConf

from ablate.learners import make_learner
from ablate.learners import LEARNERS
from ablate.learners.config import LoraConfig
from test_learners import PARTITION_ALL, clipped_token_mean, make_batch, weights


def lora_model_config():
    """Wider than tests/learners/test_learners.py's tiny model, so that the adapters (rank 16 on
    q and v) outweigh a checkpoint's fixed overhead (RNG states, DeepSpeed metadata)."""
    return transformers.Qwen3Config(
        hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=64, vocab_size=512, tie_word_embeddings=True,
        max_position_embeddings=512)


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    torch.manual_seed(4321)
    d = tmp_path_factory.mktemp("lora_base")
    transformers.AutoModelForCausalLM.from_config(lora_model_config()).save_pretrained(d)
    return str(d)


def lora_learner(base_dir, ckpt, name):
    c = LEARNERS.config(name, micro_batch_tokens=128, warmup_steps=2)
    c.lora = LoraConfig(enable=True, rank=16, alpha=32, target_modules=["q_proj", "v_proj"])
    if name == "deepspeed":
        c.ds_overrides = PARTITION_ALL
    model = transformers.AutoModelForCausalLM.from_pretrained(base_dir)   # model.path
    return make_learner(OmegaConf.structured(c), model, lr=1e-2, seed=0, temperature=1.0,
                        ckpt_dir=ckpt, device="cpu")


def folder_bytes(path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@pytest.mark.parametrize("name", ["torch", "deepspeed"])
def test_lora_checkpoint_is_adapter_sized_and_resumes_exactly(base_dir, tmp_path, name):
    (b1, a1), (b2, a2) = make_batch(1), make_batch(2)
    first = lora_learner(base_dir, tmp_path / "ck", name)
    first.update(b1, a1, clipped_token_mean)
    first.save(1, {"step": 1})
    # fp32 adapter bytes (a ZeRO-3 parameter keeps its full size in ds_numel)
    adapter = sum(getattr(p, "ds_numel", p.numel()) * 4
                  for p in first.model.parameters() if p.requires_grad)
    frozen = sum(getattr(p, "ds_numel", p.numel()) * 4
                 for p in first.model.parameters() if not p.requires_grad)
    size = folder_bytes(tmp_path / "ck" / "step_00000001")
    # at most twice the adapters plus Adam's two moments of them; the base is 14x that
    assert size <= 2 * (adapter + 2 * adapter) < frozen, (size, adapter, frozen)
    after = first.update(b2, a2, clipped_token_mean)
    expected, expected_lp = weights(first), first.logprobs(b2)

    resumed = lora_learner(base_dir, tmp_path / "ck", name)   # base from model.path
    assert resumed.load() == (1, {"step": 1})
    again = resumed.update(b2, a2, clipped_token_mean)
    assert again["loss"] == after["loss"] and again["grad_norm"] == after["grad_norm"]
    got = weights(resumed)
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    assert all(torch.equal(x, y) for x, y in zip(resumed.logprobs(b2), expected_lp))


@pytest.mark.slow
def test_a_killed_lora_cell_resumes_to_identical_rows(tmp_path):
    """A LoRA cell killed after step 2's update resumes from its adapter-only checkpoint
    (the frozen base reloaded from the model) to the rows of an uninterrupted run."""
    from test_hardening_resume import TINY, outputs, run
    lora = [*[a for a in TINY if not a.startswith("trainer.max_steps")],
            "trainer.max_steps=3", "learner.lora.enable=true", "learner.lora.rank=4"]
    ref, cell = tmp_path / "ref", tmp_path / "cell"
    done = run([*lora, f"hydra.run.dir={ref}"], tmp_path, tmp_path / "cache")
    assert done.returncode == 0, done.stderr[-3000:]
    killed = run([*lora, f"hydra.run.dir={cell}"], tmp_path, tmp_path / "cache",
                 kill=("step", 2))
    assert killed.returncode != 0 and not (cell / "COMPLETE").exists()
    ckpt = max((cell / "ckpt").glob("step_*"))
    size = sum(f.stat().st_size for f in ckpt.rglob("*") if f.is_file())
    assert size < 2 * 2 ** 20, size          # adapters and their Adam state, not the base
    resumed = run([*lora, f"hydra.run.dir={cell}"], tmp_path, tmp_path / "cache")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert outputs(cell) == outputs(ref)
