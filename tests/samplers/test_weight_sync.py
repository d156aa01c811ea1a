"""sampler.weight_sync=collective's transport (ablate/samplers/weight_sync.py) without
vLLM: the learner's Sender and real worker processes running WeightPushExtension's
ablate_sync_* methods over a real gloo group. Only the last step, vLLM's reload, is
replaced: each worker writes what it received to a safetensors file, which is compared
bit for bit with what was sent. The vLLM servers themselves are tested in
tests/samplers/test_samplers_vllm_server.py (marked vllm). ~5-15 s on 2 loaded cores."""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from types import SimpleNamespace

import pytest
import torch

from ablate.samplers.weight_sync import Sender, buckets, describe, run_all


def test_buckets_split_by_dtype_and_size():
    meta = [["a", "float32", [4, 4]], ["b", "float32", [8]], ["c", "bfloat16", [4]],
            ["d", "float32", [100]], ["e", "float32", [2]], ["f", "int64", [1]]]
    # a: 64 B, b: 32 B, c: 8 B, d: 400 B (over the limit: alone), e: 8 B, f: 8 B
    assert buckets(meta, limit=100) == [[0, 1], [2], [3], [4], [5]]
    assert buckets(meta, limit=10**6) == [[0, 1], [2], [3, 4], [5]]
    assert describe({"w": torch.zeros(2, 3, dtype=torch.bfloat16)}) == \
        [["w", "bfloat16", [2, 3]]]


def _worker(conn, rank: int, world: int, out: str) -> None:
    """One engine worker: answers (method, args) over a pipe with WeightPushExtension."""
    from safetensors.torch import save_file

    from ablate.samplers.vllm import WeightPushExtension

    class Worker(WeightPushExtension):
        parallel_config = SimpleNamespace(rank=rank, world_size=world, data_parallel_index=0)
        device = torch.device("cpu")
        pushes = 0

        def _ablate_reload(self, state):       # vLLM's reload replaced: keep the bytes
            Worker.pushes += 1
            save_file(state, f"{out}.{Worker.pushes}")
            return len(state)

    w = Worker()
    conn.send(("ready", None))
    while True:
        method, args = conn.recv()
        try:
            conn.send(("ok", getattr(w, method)(*args)))
        except Exception as exc:               # noqa: BLE001 - reported to the learner
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


def _engine(ctx, tmp_path, tag: str, workers: int):
    """An `rpc(method, arg)` over `workers` processes (an engine's collective_rpc)."""
    procs, conns = [], []
    for r in range(workers):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_worker, args=(child, r, workers, str(tmp_path / f"{tag}{r}")),
                        daemon=True)
        p.start()
        procs.append(p)
        conns.append(parent)
    for c in conns:                            # imports done (slow on a loaded host)
        assert c.poll(300) and c.recv() == ("ready", None)

    def rpc(method, arg):
        for c in conns:
            c.send((method, () if arg is None else (arg,)))
        out = []
        for c in conns:
            status, value = c.recv()           # EOFError if the worker died
            if status != "ok":
                raise RuntimeError(value)
            out.append(value)
        return out
    return rpc, procs


def test_sender_broadcasts_to_every_worker_of_every_engine(tmp_path):
    """Two engines (2 workers and 1 worker): ranks 1-2 and 3 of one gloo group; two
    pushes (float32, bfloat16 and int64 tensors, three buckets) arrive bit for bit."""
    from safetensors.torch import load_file
    ctx = mp.get_context("spawn")
    (a, pa), (b, pb) = _engine(ctx, tmp_path, "a", 2), _engine(ctx, tmp_path, "b", 1)
    sender = Sender("127.0.0.1", timeout_s=60)

    def run(thunks, futures):
        return run_all(thunks, futures, 60)
    try:
        assert sender.join([a, b], run, "gloo") == [2, 1]
        assert sender.group.size() == 4
        g = torch.Generator().manual_seed(0)
        for push in (1, 2):
            state = {"w": torch.randn(300, 500, generator=g),
                     "v": torch.randn(70000, generator=g),
                     "h": torch.randn(64, generator=g).to(torch.bfloat16),
                     "step": torch.tensor([push])}
            assert buckets(describe(state)) == [[0, 1], [2], [3]]   # w and v: one buffer
            assert sender.push(state, [a, b], run) == [[4, 4], [4]]
            for f in ("a0", "a1", "b0"):
                got = load_file(str(tmp_path / f"{f}.{push}"))
                assert got.keys() == state.keys()
                assert all(torch.equal(got[k], state[k]) for k in state)
    finally:
        sender.close()
        for p in pa + pb:
            p.kill()


def test_push_to_a_dead_worker_fails_fast_and_tears_the_group_down(tmp_path):
    """A worker killed after the rendezvous: the next push raises (the engine's RPC
    breaks, or the broadcast does) well within the timeout, never a hang."""
    ctx = mp.get_context("spawn")
    (a, pa), (b, pb) = _engine(ctx, tmp_path, "a", 1), _engine(ctx, tmp_path, "b", 1)
    sender = Sender("127.0.0.1", timeout_s=30)

    def run(thunks, futures):
        return run_all(thunks, futures, 30)
    try:
        sender.join([a, b], run, "gloo")
        os.kill(pb[0].pid, signal.SIGKILL)
        pb[0].join(10)
        t0 = time.monotonic()
        with pytest.raises((EOFError, RuntimeError, ConnectionError, OSError)):
            sender.push({"w": torch.randn(1000, 1000)}, [a, b], run)
        assert time.monotonic() - t0 < 25
        assert sender.group is None
    finally:
        sender.close()
        for p in pa + pb:
            p.kill()
