"""Checkpoints verify themselves: every file written with one has its sha256 in
DIGESTS.json, checked on load; a corrupt or truncated newest checkpoint falls back to the
newest valid one with a warning; none valid is one CheckpointError line."""
from __future__ import annotations

import logging

import pytest
import torch
import transformers
from omegaconf import OmegaConf

from ablate.learners import CheckpointError, make_learner
from ablate.learners import LEARNERS


@pytest.fixture(scope="module")
def weights_dir(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.Qwen3Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                   vocab_size=64, tie_word_embeddings=True)
    d = tmp_path_factory.mktemp("tiny")
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(d)
    return d


def learner(weights_dir, ckpt):
    cfg = OmegaConf.structured(LEARNERS.config("torch", keep_checkpoints=3))
    model = transformers.AutoModelForCausalLM.from_pretrained(weights_dir)
    return make_learner(cfg, model, lr=1e-3, seed=0, temperature=1.0, ckpt_dir=ckpt)


def saved(weights_dir, tmp_path):
    lrn = learner(weights_dir, tmp_path / "ckpt")
    for step in (1, 2):
        with torch.no_grad():
            next(lrn.model.parameters()).add_(1.0)    # a different state per step
        lrn.save(step, {"step": step})
    return tmp_path / "ckpt"


def flip(path, at=None):
    data = bytearray(path.read_bytes())
    at = len(data) // 2 if at is None else at
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def test_every_checkpoint_file_has_a_digest(weights_dir, tmp_path):
    ck = saved(weights_dir, tmp_path)
    assert (ck / "step_00000002" / "DIGESTS.json").exists()
    assert learner(weights_dir, ck).load() == (2, {"step": 2})


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous(damage, weights_dir,
                                                                tmp_path, caplog):
    ck = saved(weights_dir, tmp_path)
    pt = ck / "step_00000002" / "learner.pt"
    if damage == "flip":
        flip(pt)     # inside the tensors' bytes: torch.load alone would accept it
    else:
        pt.write_bytes(pt.read_bytes()[:1000])
    lrn = learner(weights_dir, ck)
    with caplog.at_level(logging.WARNING, logger="ablate.learners"):
        assert lrn.load() == (1, {"step": 1})
    assert "step_00000002" in caplog.text and ("corrupt" in caplog.text
                                               or "truncated" in caplog.text)
    ref = learner(weights_dir, tmp_path / "other")
    with torch.no_grad():
        next(ref.model.parameters()).add_(1.0)
    assert all(torch.equal(a, b) for a, b in zip(lrn.model.parameters(),
                                                 ref.model.parameters()))


def test_no_valid_checkpoint_is_one_line(weights_dir, tmp_path):
    ck = saved(weights_dir, tmp_path)
    for step in (1, 2):
        flip(ck / f"step_{step:08d}" / "learner.pt")
    with pytest.raises(CheckpointError) as err:
        learner(weights_dir, ck).load()
    text = str(err.value)
    assert "\n" not in text and "step_00000001" in text and "step_00000002" in text


def test_a_checkpoint_without_digests_still_loads_and_an_unreadable_one_falls_back(
        weights_dir, tmp_path):
    ck = saved(weights_dir, tmp_path)
    (ck / "step_00000001" / "DIGESTS.json").unlink()       # written before digests
    (ck / "step_00000002" / "DIGESTS.json").unlink()
    (ck / "step_00000002" / "learner.pt").write_bytes(b"not a pickle")
    assert learner(weights_dir, ck).load() == (1, {"step": 1})
