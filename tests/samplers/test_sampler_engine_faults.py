"""Faults that would stop a Qwen3-4B cell behind vLLM in its first minutes (issue 61),
checked on CPU without vllm: the engine gets sampler.max_model_len, an untied model's
head is known untied from its weights' config.json, the learner's cached blocks are
returned before vLLM wakes, and the LoRA paper cell has the documented rank."""
import json
from types import SimpleNamespace

import pytest

import ablate.samplers.vllm as vllm_mod
from ablate.apps.cli import compose_config
from ablate.samplers import SAMPLERS, make_sampler, tied_in


@pytest.mark.parametrize("config, tied", [
    ({"model_type": "qwen3", "tie_word_embeddings": False}, False),   # Qwen3-30B-A3B
    ({"model_type": "qwen3", "tie_word_embeddings": True}, True),     # Qwen3-4B
    ({"model_type": "llama"}, True),                                  # transformers' default
    ({"model_type": "x", "text_config": {"tie_word_embeddings": False}}, False),
])
def test_tiedness_comes_from_the_weights_config(tmp_path, config, tied):
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert tied_in(tmp_path) is tied
    assert tied_in(tmp_path / "nowhere") is None


def test_the_in_process_engine_gets_max_model_len_and_the_heads_tiedness(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text(json.dumps({"tie_word_embeddings": False}))
    got = {}

    class Engine:
        def __init__(self, path, tokenizer, **kw):
            got.update(kw, path=path)
    monkeypatch.setattr(vllm_mod, "VLLMSampler", Engine)
    monkeypatch.setattr(vllm_mod, "_import_vllm", lambda: None)
    sc = SAMPLERS.config("vllm", max_model_len=32768)
    make_sampler(sc, str(tmp_path), None, dtype="bfloat16")
    assert got["max_model_len"] == 32768 and got["tie_word_embeddings"] is False
    assert got["path"] == str(tmp_path)


def test_the_paper_preset_caps_one_sequence_and_the_lora_cell_is_r16():
    cfg = compose_config(["+experiment=enronhop_paper", "+paper_cell=qwen3_4b_shaped_lora"])
    assert cfg.sampler.name == "vllm" and cfg.sampler.max_model_len == 32768
    assert (cfg.learner.lora.enable, cfg.learner.lora.rank, cfg.learner.lora.alpha) == \
        (True, 16, 32)


def test_waking_the_engine_returns_the_learners_cached_blocks_first(monkeypatch):
    calls = []
    monkeypatch.setattr(vllm_mod.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(vllm_mod.torch.cuda, "empty_cache", lambda: calls.append("empty"))
    s = vllm_mod.VLLMSampler.__new__(vllm_mod.VLLMSampler)
    s.asleep = True
    s.llm = SimpleNamespace(wake_up=lambda tags: calls.append(("wake", tuple(tags))))
    s._wake(["weights"])
    assert calls == ["empty", ("wake", ("weights",))]
    s.asleep, calls[:] = False, []
    s._wake(["kv_cache"])
    assert calls == []                    # awake: nothing to return, nothing to wake
