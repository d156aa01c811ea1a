"""The batched pack's sampler (hydra/launcher=pack hydra.launcher.exact=false,
docs/packs.md): ONE sampler for the pack, holding each cell's LoRA adapter under the
cell's name beside the others, and every cell's generate requests that wait at the same
time decoded in ONE call, each row through its own adapter. sampler=hf: one HFSampler
over the pack's one in-memory base (peft mixed-adapter rows, ablate.core.lora_rows);
sampler=vllm: one vLLM engine with the pack's adapters resident, one LoRA request per row
(SkyRL's and vLLM's multi-LoRA serving).

A cell sees a `PackSampler`: `generate` hands its request to the `PackEngine` and waits
(ablate.core.turns.wait_for) until a batch has served it; the pack's scheduler
(ablate/apps/pack_turns.py) serves the batch when every live cell waits, so a batch holds
the requests of every cell that is rolling out or evaluating at that moment. Without a
scheduler the request is served at once, alone. `load_adapter` replaces the cell's
adapter (a push moves the adapter's bytes); full weights cannot be pushed (a pack trains
adapters only).

Inside `batched()`, `make_sampler` for a sampler declaring "pack_rows" returns the
calling cell's PackSampler; the first cell's call builds the engine's sampler (its
factory with `pack=` the pack's size), from the first cell's model (every cell's model
shares the base's tensors: ablate.models.loading.shared_bases). The engine's sampler
takes `load_adapter(adapter, name=)`, `generate(..., adapters=)` and the per-adapter
`share_prefix` / `release_episodes` / `clear_cache` of ablate.samplers.base.Sampler."""
from __future__ import annotations

import contextlib
import zlib
from dataclasses import dataclass, field

from ablate.core.turns import wait_for
from ablate.samplers.base import Completion, Sampler, per_prompt

_ENGINE: list = []          # the PackEngine inside batched()


@dataclass
class Ticket:
    name: str
    prompts: list
    kw: dict
    result: list | None = None
    done: bool = False
    error: BaseException | None = field(default=None, repr=False)


class PackEngine:
    """The one sampler of a batched pack and the requests waiting for it."""

    def __init__(self, size: int = 8, kept_tokens: int | None = None):
        self.size = size            # the adapters the sampler holds at once (the pack's cells)
        self.kept_tokens = kept_tokens   # hydra.launcher.kept_tokens (Sampler.cap_kept)
        self.sampler = None         # built by the first cell's make_sampler (attach)
        self.cells = 0              # cells attached (each names its adapter cell<k>)
        self.pending: list[Ticket] = []
        self.batches = 0            # generate calls made (tests, the pack's log)
        self.requests = 0           # the cells' generate calls they served
        self.max_rows = MAX_ROWS    # the sampler's own cap once built (attach)

    def attach(self, build) -> str:
        """The calling cell's adapter name; the first cell's `build(size)` becomes the
        engine's sampler."""
        if self.sampler is None:
            self.sampler = build(self.size)
            self.sampler.cap_kept(self.kept_tokens)
            self.max_rows = getattr(self.sampler, "max_call_rows", None) or MAX_ROWS
        self.cells += 1
        return f"cell{self.cells - 1}"

    def submit(self, ticket: Ticket) -> Ticket:
        self.pending.append(ticket)
        return ticket

    def serve(self) -> None:
        """Every waiting request, in calls grouped by what one call shares (stop ids,
        top_p); each row through its cell's adapter; a call holds at most max_rows rows (the
        sampler's max_call_rows) or one request (`calls`)."""
        pending, self.pending = self.pending, []
        groups: dict[tuple, list[Ticket]] = {}
        for t in pending:
            key = (tuple(t.kw.get("stop_token_ids", ())), float(t.kw.get("top_p", 1.0)))
            groups.setdefault(key, []).append(t)
        for (stops, top_p), tickets in groups.items():
            for call in calls(tickets, self.max_rows):
                self._serve_safely(call, stops, top_p)

    def _serve_safely(self, tickets: list[Ticket], stops, top_p) -> None:
        """One call for the tickets; if it raises, each ticket again alone, so only the
        request that raises fails its cell (the others' cells go on)."""
        try:
            self._serve_group(tickets, stops, top_p)
        except Exception as exc:           # noqa: BLE001 - its cell raises it
            if len(tickets) == 1:
                tickets[0].error, tickets[0].done = exc, True
                return
            for t in tickets:
                self._serve_safely([t], stops, top_p)
        except BaseException as exc:       # an interrupt: no waiting cell waits on
            for t in tickets:
                t.error, t.done = exc, True
            raise

    def _serve_group(self, tickets: list[Ticket], stops, top_p) -> None:
        prompts, limits, temps, procs, names = [], [], [], [], []
        for t in tickets:
            n = len(t.prompts)
            prompts += list(t.prompts)
            limits += per_prompt(t.kw["max_new_tokens"], n, "max_new_tokens")
            temps += per_prompt(t.kw.get("temperature", 1.0), n, "temperature")
            lp = t.kw.get("logits_processors")
            procs += per_prompt(lp, n, "logits_processors") if lp is not None else [None] * n
            names += [t.name] * n
        # one stream for the batch, a function of its requests' seeds (deterministic)
        seed = zlib.crc32(repr([t.kw.get("seed") for t in tickets]).encode())
        outs = self.sampler.generate(prompts, max_new_tokens=limits, temperature=temps,
                                     top_p=top_p, stop_token_ids=stops,
                                     logits_processors=procs, seed=seed, adapters=names)
        self.batches += 1
        self.requests += len(tickets)
        at = 0
        for t in tickets:
            t.result, t.done = outs[at:at + len(t.prompts)], True
            at += len(t.prompts)


# The most rows one batched generate call holds (unless one request alone holds more)
# for a sampler that declares no `max_call_rows` of its own (ablate.samplers.base).
MAX_ROWS = 256


def calls(tickets: list[Ticket], max_rows: int) -> list[list[Ticket]]:
    """The tickets in order, in calls of at most max_rows rows (a larger ticket alone)."""
    out: list[list[Ticket]] = []
    rows = 0
    for t in tickets:
        n = len(t.prompts)
        if out and rows + n <= max_rows:
            out[-1].append(t)
            rows += n
        else:
            out.append([t])
            rows = n
    return out


class PackSampler(Sampler):
    """One cell's view of the PackEngine (see the module docstring)."""
    name = "pack"
    mixed_temperatures = True

    def __init__(self, engine: PackEngine, adapter_name: str):
        self.engine, self.adapter_name = engine, adapter_name

    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0,
                 stop_token_ids=(), logits_processors=None, seed=None) -> list[Completion]:
        ticket = self.engine.submit(Ticket(self.adapter_name, list(prompts), dict(
            max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
            stop_token_ids=stop_token_ids, logits_processors=logits_processors, seed=seed)))
        wait_for(lambda: ticket.done, self.engine.serve)
        if ticket.error is not None:
            raise ticket.error
        return ticket.result

    def load_adapter(self, adapter, version=None) -> None:
        self.engine.sampler.load_adapter(adapter, name=self.adapter_name)

    def load_weights(self, state_dict) -> None:
        raise ValueError("a batched pack's cells push their LoRA adapters only "
                         "(learner.lora.enable=true with a sampler declaring 'adapters')")

    def share_prefix(self, ids) -> None:
        """This cell's prompts' common prefix, encoded once under its adapter."""
        self.engine.sampler.share_prefix(ids, adapter=self.adapter_name)

    def release_episodes(self) -> None:
        self.engine.sampler.release_episodes(adapter=self.adapter_name)

    def clear_cache(self) -> None:
        """This cell's kept keys, values and prefix only (the others' rollouts go on)."""
        self.engine.sampler.clear_cache(adapter=self.adapter_name)

    @property
    def stats(self) -> dict:
        """The engine's token counts: a cell's own calls run in its turn, so the change
        around its share_prefix is its prefix's cost (harness/rollout.py reads it)."""
        return getattr(self.engine.sampler, "stats", {})

    @property
    def max_context(self) -> int | None:
        return self.engine.sampler.max_context


@contextlib.contextmanager
def batched(size: int = 8, kept_tokens: int | None = None):
    """Inside: make_sampler hands each cell a PackSampler of one PackEngine, whose
    sampler holds `size` cells' adapters and at most `kept_tokens` kept positions."""
    _ENGINE.append(PackEngine(size, kept_tokens))
    try:
        yield _ENGINE[-1]
    finally:
        _ENGINE.pop()


def engine() -> PackEngine | None:
    return _ENGINE[-1] if _ENGINE else None
