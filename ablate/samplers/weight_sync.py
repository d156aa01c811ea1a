"""Collective weight transfer (`sampler.weight_sync=collective`, docs/vllm_server.md):
the learner (rank 0) and every vLLM worker (ranks 1..) of every server join a process
group of their own and each push broadcasts the tensors from rank 0.

The mechanism is the one vLLM 0.32 documents for RL weight updates
(vllm/distributed/weight_transfer/nccl_engine.py, examples/rl/rlhf_http_nccl.py;
TRL's VLLMClient.init_communicator / update_named_param the same): a TCP-store rendezvous
opened by the trainer, the workers joining through `collective_rpc` at a rank offset, the
worker-side RPC issued concurrently with the trainer's broadcast. vLLM's own helpers
(StatelessProcessGroup + PyNcclCommunicator) are CUDA-only and need vLLM in the learner's
process, so the group here is a plain torch ProcessGroupGloo / ProcessGroupNCCL built on
a TCPStore (as vllm/distributed/utils.py: stateless_init_torch_distributed_process_group
does, without init_process_group: vLLM owns the default group in the worker). Backend
nccl when the learner's tensors are on CUDA, gloo otherwise: one code path, testable on
CPU. Tensors travel in buckets of one dtype (as vllm's packed_tensor.py packs them).

This module needs only torch: the learner side runs without vLLM installed.
"""
from __future__ import annotations

import json
from datetime import timedelta

BUCKET_BYTES = 256 * 2**20        # one broadcast carries up to this many bytes
GROUP_PREFIX = "ablate-weight-sync"


def open_group(address: str, port: int, rank: int, world_size: int, backend: str,
               timeout_s: float, store=None):
    """A process group of `world_size` ranks on the TCPStore at address:port (rank 0
    passes the store it serves). Blocks until every rank has joined."""
    import torch.distributed as dist
    timeout = timedelta(seconds=float(timeout_s))
    if store is None:
        store = dist.TCPStore(address, int(port), int(world_size), is_master=False,
                              timeout=timeout)
    prefix = dist.PrefixStore(f"{GROUP_PREFIX}/{port}", store)
    if backend == "gloo":
        return dist.ProcessGroupGloo(prefix, int(rank), int(world_size), timeout)
    if backend == "nccl":
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        return dist.ProcessGroupNCCL(prefix, int(rank), int(world_size), opts)
    raise ValueError(f"weight sync backend {backend!r}: expected gloo or nccl")


def serve_store(address: str, world_size: int, timeout_s: float):
    """Rank 0's TCPStore on a free port of `address` (the port is read back, no race)."""
    import torch.distributed as dist
    return dist.TCPStore(address, 0, int(world_size), is_master=True,
                         timeout=timedelta(seconds=float(timeout_s)),
                         wait_for_workers=False)


def describe(state) -> list[list]:
    """[[name, dtype, shape]] of a state dict: what the workers allocate (JSON-able)."""
    return [[k, str(v.dtype).removeprefix("torch."), list(v.shape)] for k, v in state.items()]


def buckets(meta, limit: int = BUCKET_BYTES) -> list[list[int]]:
    """Consecutive indices of `meta` grouped by dtype, each group <= `limit` bytes (one
    tensor larger than that goes alone). Sender and receivers compute the same plan."""
    import torch
    out, size, dtype = [], 0, None
    for i, (_, dt, shape) in enumerate(meta):
        n = torch.Size(shape).numel() * torch.empty((), dtype=getattr(torch, dt)).element_size()
        if not out or dt != dtype or size + n > limit:
            out.append([])
            size, dtype = 0, dt
        out[-1].append(i)
        size += n
    return out


def _broadcast(group, flat) -> None:
    import torch.distributed as dist
    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    group.broadcast([flat], opts).wait()


def send(group, state, meta, limit: int = BUCKET_BYTES) -> int:
    """Rank 0: broadcast `state` (ordered as `meta`) bucket by bucket; tensors count."""
    import torch
    values = [state[name] for name, _, _ in meta]
    for idx in buckets(meta, limit):
        _broadcast(group, torch.cat([values[i].reshape(-1) for i in idx]))
    return len(values)


def receive(group, meta, device, limit: int = BUCKET_BYTES) -> dict:
    """Ranks 1..: the state dict rank 0 broadcasts, allocated on `device`."""
    import torch
    state = {}
    for idx in buckets(meta, limit):
        dtype = getattr(torch, meta[idx[0]][1])
        sizes = [torch.Size(meta[i][2]).numel() for i in idx]
        flat = torch.empty(sum(sizes), dtype=dtype, device=device)
        _broadcast(group, flat)
        for i, part in zip(idx, flat.split(sizes)):
            state[meta[i][0]] = part.view(meta[i][2])
    return state


def join_spec(address: str, port: int, world_size: int, rank_offset: int, backend: str,
              timeout_s: float) -> str:
    """What a server's workers need to join (one JSON string: /collective_rpc args are
    strings)."""
    return json.dumps({"address": address, "port": int(port), "world_size": int(world_size),
                       "rank_offset": int(rank_offset), "backend": backend,
                       "timeout_s": float(timeout_s)})


def abort(group) -> None:
    """Tear a broken group down so that a blocked broadcast returns (best effort)."""
    for name in ("abort", "shutdown"):
        try:
            getattr(group, name)()
            return
        except Exception:                 # noqa: BLE001 - not supported by this backend
            continue


def daemon(fn) -> "Future":
    """`fn()` in a daemon thread, as a Future: a broadcast blocked on a dead peer must
    not keep the process from exiting (its group timeout ends it anyway)."""
    import threading
    from concurrent.futures import Future
    fut: Future = Future()

    def body():
        try:
            fut.set_result(fn())
        except BaseException as exc:      # noqa: BLE001 - handed to the waiter
            fut.set_exception(exc)
    threading.Thread(target=body, daemon=True, name="ablate-weight-sync").start()
    return fut


class Sender:
    """The learner's side (rank 0), at `address` (reachable by every worker). `rpcs`: one
    callable per engine/server, `rpc(method, arg) -> [one result per worker]` (a
    collective_rpc on every worker); `run(thunks, futures)`: run the thunks concurrently,
    wait for them and the futures under the caller's deadline, return all results in
    order or raise. The first push joins; a failed one tears the group down and the next
    push joins again."""

    def __init__(self, address: str, timeout_s: float):
        self.address, self.timeout = address, float(timeout_s)
        self.group = self.store = None

    def join(self, rpcs, run, backend: str) -> list[int]:
        """Rendezvous with every worker; the number of workers per engine."""
        ranks = run([lambda r=r: r("ablate_sync_rank", None) for r in rpcs], [])
        sizes = [len(x) for x in ranks]
        for i, got in enumerate(ranks):
            if sorted(int(x) for x in got) != list(range(sizes[i])):
                raise RuntimeError(f"weight sync: engine {i}'s workers report ranks {got}, "
                                   f"expected 0..{sizes[i] - 1}")
        world, address = 1 + sum(sizes), self.address
        self.store = serve_store(address, world, self.timeout)
        port = self.store.port
        own = daemon(lambda: open_group(address, port, 0, world, backend, self.timeout,
                                        store=self.store))
        specs = [join_spec(address, port, world, 1 + sum(sizes[:i]), backend, self.timeout)
                 for i in range(len(rpcs))]
        try:
            out = run([lambda r=r, sp=sp: r("ablate_sync_join", sp)
                       for r, sp in zip(rpcs, specs)], [own])
        except BaseException:
            self.close()
            raise
        self.group = out[-1]
        return sizes

    def push(self, state, rpcs, run) -> list[list]:
        """Broadcast `state` to every worker (each reloads it); each engine's results.
        Backend nccl when the tensors are on CUDA, else gloo."""
        if self.group is None:
            self.join(rpcs, run, "nccl" if next(iter(state.values())).is_cuda else "gloo")
        meta = describe(state)
        sent = daemon(lambda: send(self.group, state, meta))
        arg = json.dumps(meta)
        try:
            return run([lambda r=r: r("ablate_sync_receive", arg) for r in rpcs], [sent])[:-1]
        except BaseException:
            self.close()                  # the group is unusable; the next push rejoins
            raise

    def close(self) -> None:
        group, self.group, self.store = self.group, None, None
        if group is not None:
            abort(group)


def run_all(thunks, futures, timeout_s: float) -> list:
    """A plain `run` for Sender (in-process engines): the thunks in threads, then every
    result in order within `timeout_s`, the first failure raised as it comes."""
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
    pool = ThreadPoolExecutor(max_workers=max(1, len(thunks)))
    try:
        futs = [pool.submit(t) for t in thunks] + list(futures)
        done, pending = wait(futs, timeout=timeout_s, return_when=FIRST_EXCEPTION)
        for f in done:
            if f.exception() is not None:
                raise f.exception()
        if pending:
            raise TimeoutError(f"weight sync: no answer within sampler.request_timeout_s="
                               f"{timeout_s:g}s")
        return [f.result() for f in futs]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
