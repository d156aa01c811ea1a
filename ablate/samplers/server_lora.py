"""Adapter-native sync for `sampler=vllm_server` (issue 61): a LoRA cell's servers keep
the base they loaded and each push loads the adapter alone, so a step moves the
adapter's bytes (megabytes), never a merged copy of the base.

What vLLM 0.32's OpenAI server offers for it (read in the installed vllm):

* `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True` in the server's environment attaches
  `POST /v1/load_lora_adapter` and `POST /v1/unload_lora_adapter`
  (vllm/entrypoints/serve/lora/api_router.py; without it they answer HTTP 404), and
  `--enable-lora --max-lora-rank R --max-loras 1` starts the engine with LoRA slots
  (vllm/engine/arg_utils.py; R one of vllm/config/lora.py MaxLoRARanks).
* load: `{"lora_name", "lora_path"}` (vllm/entrypoints/serve/lora/protocol.py
  LoadLoRAAdapterRequest); the handler adds the adapter to the engine before it answers
  (vllm/entrypoints/openai/models/serving.py `load_lora_adapter`: `engine_client.add_lora`),
  under a new integer id, and refuses a name already loaded. A request that names the
  adapter as its `model` runs with it (vllm/entrypoints/serve/engine/serving.py
  `_maybe_get_adapters`).
* unload: `{"lora_name"}` forgets the name only; the engine's LoRA cache holds
  max_cpu_loras (= max_loras = 1) adapters and evicts the oldest when the next one is
  added (vllm/lora/worker_manager.py LRUCacheWorkerLoRAManager.add_adapter), so the
  previous adapter leaves the engine when the new one arrives.

The adapter folder (peft's saved format, ablate/core/adapter.py) is written to
`sampler.weights_dir` when set (a filesystem the servers share), else to /dev/shm (memory,
never the disk), else to the sampler's temporary weights folder; it is kept while its
adapter is the servers' (the engine reloads an evicted adapter from its path) and removed
after the next push. `sampler.weight_sync=collective` broadcasts full weights only: the
adapter always goes by file, it is small.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

LORA_ENV = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}


def lora_args(rank: int) -> list[str]:
    """The server flags that let it load adapters of `rank` (one at a time)."""
    # deferred: ablate.samplers.vllm imports vllm where installed (the engine-side classes)
    from ablate.samplers.vllm import lora_slot
    return ["--enable-lora", "--max-lora-rank", str(lora_slot(rank)), "--max-loras", "1"]


def adapter_root(weights_dir: str | None, fallback: Path) -> Path:
    """Where pushed adapter folders go: `sampler.weights_dir`, else /dev/shm where it is
    writable, else `fallback` (the sampler's own temporary folder)."""
    if weights_dir:
        return Path(weights_dir)
    from ablate.samplers.vllm import _shm   # deferred, as lora_args
    shm = _shm()
    return Path(shm) if shm else Path(fallback)


def no_lora_hint(url: str, rank: int | None) -> str:
    """The one line for a server that cannot load adapters at run time."""
    slot = lora_args(rank)[2] if rank else "<learner.lora.rank>"
    return (f"vLLM server {url} does not load LoRA adapters at run time (learner.lora.enable"
            f"=true pushes the adapter alone): start it with VLLM_ALLOW_RUNTIME_LORA_UPDATING"
            f"=True and --enable-lora --max-lora-rank {slot} --max-loras 1")


class AdapterPush:
    """VLLMServerSampler's adapter route (a mixin over its servers, `_each`, `_after_push`,
    `_next_version`, `version` and `push_seconds`)."""
    lora_rank: int | None = None          # the learner's LoRA rank; None: no adapters
    adapter_dir: Path | None = None
    adapter: tuple[str, Path] | None = None   # (name, folder) the servers hold
    _adapter_pushes = 0

    def load_adapter(self, adapter, version: int | None = None) -> None:
        """Adapter-native sync: `adapter` (ablate.core.adapter.LoraAdapter) as a folder,
        loaded on every server under a new name, the previous one unloaded; requests then
        name it as their model. `version` as load_weights."""
        if not self.lora_rank:
            raise ValueError("load_adapter: this sampler=vllm_server was made without LoRA "
                             "(make_sampler(..., lora=learner.lora))")
        version = self._next_version(version)
        t0 = time.perf_counter()
        self._adapter_pushes += 1
        # a new name per push, unique beyond this process (given servers outlive cells)
        name = f"ablate-lora-{os.getpid()}-{self._adapter_pushes}"
        root = self.adapter_dir or self.weights_dir
        root.mkdir(parents=True, exist_ok=True)
        folder = adapter.save(Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root)))
        try:
            self._each(lambda s: self._load_lora(s, name, folder))
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        old, self.adapter = self.adapter, (name, folder)
        if old is not None:
            self._each(lambda s: s.request("/v1/unload_lora_adapter", {"lora_name": old[0]},
                                           timeout=self.timeout))
            shutil.rmtree(old[1], ignore_errors=True)
        self._each(lambda s: self._after_push(s, version))
        self.version = version
        self.push_seconds.append(time.perf_counter() - t0)

    def _load_lora(self, s, name: str, folder: Path) -> None:
        try:
            s.request("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(folder)},
                      timeout=self.timeout)
        except RuntimeError as exc:       # VLLMServerError: one line, the same type again
            # no route (HTTP 404 {"detail":"Not Found"}: the variable unset), or an engine
            # without LoRA (vllm/v1/worker/lora_model_runner_mixin.py: "LoRA is not enabled")
            if '"Not Found"' in str(exc) or "LoRA is not enabled" in str(exc):
                raise type(exc)(no_lora_hint(s.url, self.lora_rank) + s.where()) from None
            raise

    def adapter_model(self, model: str) -> str:
        """The `model` a request names: the adapter the servers hold, else the base."""
        return self.adapter[0] if self.adapter is not None else model

    def drop_adapter(self) -> None:
        adapter, self.adapter = self.adapter, None
        if adapter is not None:
            shutil.rmtree(adapter[1], ignore_errors=True)
