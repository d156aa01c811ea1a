"""Faults that would stop a Qwen3-4B cell behind vLLM in its first minutes (issue 61),
checked on CPU without vllm: the engine gets sampler.max_model_len, an untied model's
head is known untied from its weights' config.json, the learner's cached blocks are
returned before vLLM wakes, and the LoRA paper cell has the documented rank."""
import json
from pathlib import Path
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


class RecordingEngine:
    """collective_rpc as the engine's workers see it: each message's method and size;
    a pushed file is read back as the worker reads it."""

    def __init__(self):
        self.messages, self.states = [], []

    def collective_rpc(self, method, args=()):
        from safetensors.torch import load, load_file
        (arg,) = args
        self.messages.append((method, len(arg)))
        self.states.append(load(arg) if method == "ablate_push_weights" else load_file(arg))
        return [len(self.states[-1])]


@pytest.mark.parametrize("cap_mb, method", [(1024.0, "ablate_push_weights"),
                                            (0.001, "ablate_push_file")])
def test_a_push_past_the_cap_never_rides_in_one_message(cap_mb, method):
    import torch
    state = {"model.embed_tokens.weight": torch.randn(64, 32),
             "model.layers.0.mlp.up_proj.weight": torch.randn(96, 32)}
    s = vllm_mod.VLLMSampler.__new__(vllm_mod.VLLMSampler)
    s.push_cap, s.llm = cap_mb * 2**20, RecordingEngine()
    s._push_file(state)
    (sent, size), = s.llm.messages
    assert sent == method and size <= s.push_cap
    assert all(torch.equal(s.llm.states[0][k], v) for k, v in state.items())
    assert vllm_mod.push_bytes(state) >= sum(t.numel() * 4 for t in state.values())
    if method == "ablate_push_file":            # the shared-memory file is gone after
        assert not list(Path(vllm_mod.SHM).glob("ablate-push-*"))


def test_the_push_cap_is_checked():
    from ablate.core.errors import ConfigError
    from ablate.loop.config import validate
    with pytest.raises(ConfigError, match=r"^sampler.push_cap_mb=4096.0 is not allowed"):
        validate(compose_config(["sampler=vllm", "sampler.push_cap_mb=4096"]))
