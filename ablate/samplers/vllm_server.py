"""VLLMServerSampler (`sampler=vllm_server`): OpenAI-compatible vLLM servers behind the
Sampler interface (docs/vllm_server.md).

* Servers: started by the cell (`vllm.entrypoints.openai.api_server` run by
  `sampler.python`, one port each, `CUDA_VISIBLE_DEVICES` from `sampler.devices`, output
  to `vllm_server_<i>.log` in the log directory, the process group killed on close and
  at exit), or given by `sampler.urls`. Requests are spread over servers by a hash of
  their first tokens after the shared prefix (`route`): an episode's turns stay on one
  server, whose prefix cache holds the earlier ones.
* Token in, token out: `/v1/completions` with `prompt` a list of ids,
  `return_token_ids=true` (the ids the engine sampled) and `logprobs=0` (the sampled
  token's logprob); nothing is re-tokenised. The engine runs with
  `--logprobs-mode processed_logprobs`, so logprobs are those of the masked, tempered
  distribution, as VLLMSampler reports them. Request grouping and seeds as VLLMSampler
  (`plan_requests`): identical prompts go out once with n = their count and disjoint
  seed offsets, so a run is reproducible where vLLM is.
* Action masks run inside the server: `--logits-processors
  ablate.samplers.vllm:ActionMaskAdapter`, the mask spec as JSON text in `vllm_xargs`.
* Weight push (vllm 0.32's dev-mode endpoints, VLLM_SERVER_DEV_MODE=1), then
  `/reset_prefix_cache` and `/update_weight_version`. `sampler.weight_sync=file`: the
  state dict is written as one safetensors file, `/collective_rpc` calls
  `WeightPushExtension.ablate_push_file(path)` (ablate/samplers/vllm.py, the in-process
  sampler's reload) on every worker of every server (all tensor-parallel ranks); the
  file must be readable by the servers (`sampler.weights_dir` on a shared filesystem for
  remote ones). `collective`: this process and every worker join a process group of
  their own and each push is a broadcast (ablate/samplers/weight_sync.py), the workers'
  `/collective_rpc ablate_sync_receive` running concurrently with it.
* LoRA cells (ablate/samplers/server_lora.py): started with `--enable-lora` and
  VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, each push is the adapter alone
  (`load_adapter`: /v1/load_lora_adapter under a new name, the previous one unloaded),
  and requests name it as their model.
* Policy version: the learner step whose weights the servers hold; `load_weights(state,
  version=None)` (None = previous + 1, the first push is 0). Every generate call checks
  that each server reports it (`/weight_info`) - staleness 0, trainer.max_async_level=0 -
  puts it in each Completion.extra["policy_version"] and appends a row to
  `sampler_batches.jsonl` in the log directory.
* Failures: a started server that exits, or any server that does not answer within
  `sampler.request_timeout_s` (startup: `sampler.startup_timeout_s`), is a one-line
  VLLMServerError naming the server and its log, never a silent wait.
"""
from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zlib
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path

from ablate.samplers.base import Completion, Sampler, per_prompt
from ablate.samplers.server_lora import LORA_ENV, AdapterPush, adapter_root, lora_args
from ablate.samplers.server_process import WATCHDOG, live_group_members, signal_group, \
    with_parent
from ablate.samplers.weight_sync import Sender

ABLATE_ROOT = Path(__file__).resolve().parents[2]   # put on the servers' PYTHONPATH
ROUTE_TOKENS = 32       # tokens after the shared prefix that pick a prompt's server


class VLLMServerError(RuntimeError):
    """A vLLM server died, hung or refused a request (one line)."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_command(python: str, model_path: str, port: int, *, host: str, dtype: str,
                   seed: int, sc, lora_rank: int | None = None) -> list[str]:
    """The command line of one started server (vllm 0.32's OpenAI entrypoint); with
    `lora_rank`, LoRA enabled (server_lora.lora_args)."""
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_path),
           "--host", host, "--port", str(port), "--dtype", dtype, "--seed", str(seed),
           "--tensor-parallel-size", str(sc.tensor_parallel_size),
           "--gpu-memory-utilization", str(sc.gpu_memory_utilization),
           "--enable-prefix-caching", "--logprobs-mode", "processed_logprobs",
           "--logits-processors", "ablate.samplers.vllm:ActionMaskAdapter",
           "--worker-extension-cls", "ablate.samplers.vllm.WeightPushExtension",
           "--disable-uvicorn-access-log"]
    if sc.enforce_eager:
        cmd.append("--enforce-eager")
    if sc.max_model_len:
        cmd += ["--max-model-len", str(sc.max_model_len)]
    if lora_rank:
        cmd += lora_args(lora_rank)
    return cmd + [str(a) for a in sc.server_args]


def server_env(device: str | None = None, lora: bool = False) -> dict:
    env = dict(os.environ, **(LORA_ENV if lora else {}), VLLM_SERVER_DEV_MODE="1",
               VLLM_USE_V2_MODEL_RUNNER="0",
               PYTHONPATH=os.pathsep.join(
                   [str(ABLATE_ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(device)
    return env


def plan_requests(prompts, limits, specs, greedy: bool, seed):
    """[(prompt ids, limit, spec, n, seed, indices)]: identical (prompt, limit, mask) rows
    go out once with n = their count (vLLM seeds child k with seed + k, so groups start
    at disjoint offsets); greedy rows once with n = 1 (copied back). Limit 0: no request."""
    groups: dict[tuple, list[int]] = {}
    for i, p in enumerate(prompts):
        if limits[i] <= 0:
            continue
        if not p:
            raise ValueError("empty prompt")
        key = (tuple(int(t) for t in p), limits[i], json.dumps(specs[i], sort_keys=True))
        groups.setdefault(key, []).append(i)
    plan, offset = [], 0
    for (ids, limit, _), idx in groups.items():
        plan.append((list(ids), limit, specs[idx[0]], 1 if greedy else len(idx),
                     None if seed is None else int(seed) + offset, idx))
        offset += len(idx)
    return plan


def completion_body(model: str, ids, limit: int, n: int, *, temperature: float,
                    top_p: float, stop_token_ids, seed, spec) -> dict:
    """One /v1/completions request: ids in, ids and the sampled tokens' logprobs out."""
    greedy = temperature < 1e-5
    body = {"model": model, "prompt": [int(t) for t in ids], "max_tokens": int(limit),
            "n": int(n), "temperature": 0.0 if greedy else float(temperature),
            "top_p": float(top_p), "top_k": 0, "logprobs": 0, "return_token_ids": True,
            "stop_token_ids": [int(t) for t in stop_token_ids], "ignore_eos": True,
            "skip_special_tokens": False, "stream": False}
    if seed is not None:
        body["seed"] = int(seed)
    if spec is not None:
        body["vllm_xargs"] = {"ablate_mask": json.dumps(spec)}
    return body


def parse_choices(resp: dict, n: int, url: str) -> list[Completion]:
    """The n completions of a response, in choice order; one-line error if malformed."""
    choices = sorted(resp.get("choices") or [], key=lambda c: c.get("index", 0))
    if len(choices) != n:
        raise VLLMServerError(f"vLLM server {url} returned {len(choices)} choices for n={n}")
    out = []
    for c in choices:
        ids = c.get("token_ids")
        lps = (c.get("logprobs") or {}).get("token_logprobs")
        if ids is None or lps is None or len(ids) != len(lps) or None in lps:
            raise VLLMServerError(f"vLLM server {url} returned no token ids / logprobs for "
                                  f"each generated token (does it support return_token_ids?)")
        out.append(Completion([int(t) for t in ids], [float(x) for x in lps],
                              "stop" if c.get("finish_reason") == "stop" else "length"))
    return out


class Server:
    """One server: its URL and, when this process started it, the process and log."""

    def __init__(self, url: str, proc: subprocess.Popen | None = None,
                 log_path: Path | None = None):
        self.url, self.proc, self.log_path = url.rstrip("/"), proc, log_path
        self.watchdog: subprocess.Popen | None = None

    def where(self) -> str:
        return f"; log: {self.log_path}" if self.log_path else ""

    def death(self) -> str | None:
        """The one-line reason if a started server has exited, else None."""
        if self.proc is None or self.proc.poll() is None:
            return None
        return (f"vLLM server {self.url} (pid {self.proc.pid}) exited with code "
                f"{self.proc.returncode}: {self.last_log_line()}{self.where()}")

    def last_log_line(self) -> str:
        try:
            lines = [x.strip() for x in self.log_path.read_text(errors="replace").splitlines()
                     if x.strip()]
        except (OSError, AttributeError):
            return "(no log)"
        # the root cause is the first exception line (later ones re-raise it)
        errs = [x for x in lines if re.search(r"\b\w*(Error|Exception): ", x)]
        line = errs[0] if errs else (lines or ["(empty log)"])[-1]
        return re.sub(r"^.*?\] ", "", line)[-300:]

    def request(self, path: str, body=None, *, timeout: float, method: str | None = None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method or (
            "GET" if data is None else "POST"), headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:300].replace("\n", " ")
            raise VLLMServerError(f"vLLM server {self.url}{path} answered HTTP {e.code}: "
                                  f"{detail}{self.where()}") from None
        except (TimeoutError, socket.timeout):
            raise VLLMServerError(self.death() or (
                f"vLLM server {self.url} did not answer {path} within "
                f"sampler.request_timeout_s={timeout:g}s{self.where()}")) from None
        except (urllib.error.URLError, ConnectionError, OSError) as e:
            why = getattr(e, "reason", e)
            raise VLLMServerError(self.death() or (
                f"vLLM server {self.url} is unreachable ({path}: {why}){self.where()}")) \
                from None
        try:
            return json.loads(raw) if raw.strip() else None
        except ValueError:                # /v1/load_lora_adapter answers plain text
            return raw.decode(errors="replace")

    def close(self, grace: float = 10.0) -> None:
        """SIGTERM to the server's process group, SIGKILL to what is left after `grace`
        seconds (vLLM's engine processes outlive a dead API server otherwise)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and live_group_members(proc.pid):
            proc.poll()
            time.sleep(0.2)
        signal_group(proc.pid, signal.SIGKILL)
        for _ in range(50):                   # SIGKILL takes a moment to land
            if not live_group_members(proc.pid):
                break
            time.sleep(0.1)
        watchdog, self.watchdog = self.watchdog, None
        if watchdog is not None:
            watchdog.kill()
        for p in (proc, watchdog):
            try:
                p and p.wait(5)
            except subprocess.TimeoutExpired:
                pass


def start_server(cmd: list[str], env: dict, log_path: Path, url: str) -> Server:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(with_parent(cmd), env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    server = Server(url, proc, log_path)
    server.watchdog = subprocess.Popen(
        with_parent([sys.executable, "-c", WATCHDOG, str(proc.pid)], signal.SIGTERM),
        stdin=subprocess.DEVNULL)
    return server


def wait_ready(server: Server, timeout: float, poll: float = 1.0) -> str:
    """Poll /v1/models until the server answers; its model card. One-line error if the
    process exits or `timeout` passes first."""
    deadline = time.monotonic() + timeout
    while True:
        dead = server.death()
        if dead:
            raise VLLMServerError(dead)
        try:
            models = server.request("/v1/models", timeout=5.0)
            return models["data"][0]
        except VLLMServerError:
            if time.monotonic() > deadline:
                raise VLLMServerError(
                    f"vLLM server {server.url} was not ready within "
                    f"sampler.startup_timeout_s={timeout:g}s: {server.last_log_line()}"
                    f"{server.where()}") from None
            time.sleep(poll)


class VLLMServerSampler(AdapterPush, Sampler):
    name = "vllm_server"

    def __init__(self, servers: list[Server], *, request_timeout_s: float,
                 startup_timeout_s: float, log_dir: Path, weights_dir: Path,
                 tie_word_embeddings: bool | None = None, max_context: int | None = None,
                 weight_sync: str = "file"):
        self.servers, self.timeout = servers, float(request_timeout_s)
        self.weight_sync, self.sender = weight_sync, None
        self.log_dir, self.weights_dir = Path(log_dir), Path(weights_dir)
        self.tied, self._max_context = tie_word_embeddings, max_context
        self.version: int | None = None      # the policy version the servers hold
        self.calls = 0
        self.push_seconds: list[float] = []
        atexit.register(self.close)
        try:
            cards = self._run([lambda s=s: wait_ready(s, startup_timeout_s)
                               for s in servers], startup_timeout_s,
                              "sampler.startup_timeout_s")
        except BaseException:
            self.close()
            raise
        self.models = [c["id"] for c in cards]
        lens = [c.get("max_model_len") for c in cards if c.get("max_model_len")]
        self._max_context = max_context or (min(lens) if lens else None)

    @property
    def max_context(self) -> int | None:
        return self._max_context

    # --- weights -------------------------------------------------------------------
    def _next_version(self, version: int | None) -> int:
        return (0 if self.version is None else self.version + 1) if version is None \
            else int(version)

    def load_weights(self, state_dict, version: int | None = None) -> None:
        version = self._next_version(version)
        t0 = time.perf_counter()
        if self.weight_sync == "collective":
            self._push_collective(state_dict)
        else:
            self._push_file(state_dict, version)
        self._each(lambda s: self._after_push(s, version))
        self.version = version
        self.push_seconds.append(time.perf_counter() - t0)

    def _state(self, state_dict, device: str | None = "cpu") -> dict:
        """What is pushed: contiguous tensors, lm_head.weight left out when tied."""
        return {k: v.detach().to(device or v.device).contiguous()
                for k, v in state_dict.items()
                if not (k == "lm_head.weight" and self.tied is not False)}

    def _push_file(self, state_dict, version: int) -> None:
        from safetensors.torch import save_file
        state = self._state(state_dict)
        self.weights_dir.mkdir(parents=True, exist_ok=True)
        path = self.weights_dir / f"policy_v{version}.safetensors"
        tmp = path.with_suffix(".tmp")
        save_file(state, str(tmp))
        os.replace(tmp, path)                 # servers never see a half-written file
        try:
            self._each(lambda s: self._reloaded(s, self._rpc(s)("ablate_push_file", str(path)),
                                                len(state)))
        finally:
            path.unlink(missing_ok=True)

    def _push_collective(self, state_dict) -> None:
        """sampler.weight_sync=collective (ablate/samplers/weight_sync.py): broadcast from
        this process (rank 0) to every worker of every server, joined on the first push."""
        state = self._state(state_dict, device=None)
        self.sender = self.sender or Sender(self._learner_address(), self.timeout)
        try:
            results = self.sender.push(state, [self._rpc(s) for s in self.servers],
                                       self._run_with)
        except VLLMServerError:
            raise
        except Exception as exc:          # the broadcast itself (torch): one line
            why = (str(exc).strip().splitlines() or [""])[0][:300]
            raise VLLMServerError(
                f"vLLM server(s) {', '.join(s.url for s in self.servers)}: collective "
                f"weight push failed: {type(exc).__name__}: {why}{self.servers[0].where()}") \
                from None
        for s, res in zip(self.servers, results):
            self._reloaded(s, res, len(state))

    def _learner_address(self) -> str:
        """This host's address on the route to the first server (the TCP store's)."""
        from urllib.parse import urlparse
        u = urlparse(self.servers[0].url)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sk:
            sk.connect((u.hostname, u.port or 80))     # no packet is sent
            return sk.getsockname()[0]

    def _rpc(self, s: Server):
        """`rpc(method, arg)`: /collective_rpc on every worker of `s`, their results."""
        def rpc(method: str, arg: str | None) -> list:
            body = {"method": method, "args": [] if arg is None else [arg],
                    "timeout": self.timeout}
            return list((s.request("/collective_rpc", body, timeout=self.timeout)
                         or {}).get("results", []))
        return rpc

    def _reloaded(self, s: Server, results: list, expected: int) -> None:
        counts = [int(r) for r in results]
        if not counts or any(c != expected for c in counts):
            raise VLLMServerError(f"vLLM server {s.url}: weight push reloaded {counts} "
                                  f"tensors per worker, expected {expected}{s.where()}")

    def _after_push(self, s: Server, version: int) -> None:
        s.request("/reset_prefix_cache", {}, timeout=self.timeout)  # old weights' keys
        s.request("/update_weight_version", {"new_version": str(version)},
                  timeout=self.timeout)

    def _check_versions(self) -> None:
        """Staleness 0 (trainer.max_async_level=0): every server holds the last push."""
        def check(s: Server):
            held = (s.request("/weight_info", timeout=self.timeout) or {}).get("weight_version")
            if held != str(self.version):
                raise VLLMServerError(f"vLLM server {s.url} holds policy version {held}, not "
                                      f"{self.version} (restarted?){s.where()}")
        self._each(check)

    # --- sampling ------------------------------------------------------------------
    def share_prefix(self, ids) -> None:
        self._shared = len(ids)

    def route(self, ids) -> int:
        """The server for a prompt: a hash of its first tokens after the shared prefix
        (the task's question), so an episode's later turns, which extend its earlier
        prompts, reach the server whose prefix cache holds them."""
        head = ids[:getattr(self, "_shared", 0) + ROUTE_TOKENS]
        return zlib.crc32(json.dumps(list(head)).encode()) % len(self.servers)

    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0,
                 stop_token_ids=(), logits_processors=None, seed=None) -> list[Completion]:
        # deferred: ablate.samplers.vllm imports vllm itself at module level where it is
        # installed (the engine-side adapter's base), and ablate.samplers imports this
        # module: at the top it would load vllm into every cell (not installed on the
        # 2-core host, so not timed there)
        from ablate.samplers.vllm import _mask_spec
        if self.version is None:
            raise VLLMServerError("vllm_server: generate before the first load_weights "
                                  "(the policy version the servers hold is unknown)")
        n = len(prompts)
        limits = [int(m) for m in per_prompt(max_new_tokens, n, "max_new_tokens")]
        procs = per_prompt(logits_processors, n, "logits_processors") \
            if logits_processors is not None else [None] * n
        greedy = temperature < 1e-5
        plan = plan_requests(prompts, limits, [_mask_spec(p) for p in procs], greedy, seed)
        self._check_versions()
        jobs = []
        for ids, limit, spec, m, sd, idx in plan:
            k = self.route(ids)
            s = self.servers[k]
            body = completion_body(self.adapter_model(self.models[k]), ids, limit, m,
                                   temperature=temperature, top_p=top_p,
                                   stop_token_ids=stop_token_ids, seed=sd, spec=spec)
            jobs.append((s, body, m, idx))
        outs = self._run([lambda j=j: parse_choices(
            j[0].request("/v1/completions", j[1], timeout=self.timeout), j[2], j[0].url)
            for j in jobs])
        result = [Completion([], [], "length", {"policy_version": self.version})
                  for _ in range(n)]
        for (_, _, _, idx), comps in zip(jobs, outs):
            comps = comps * (len(idx) if greedy else 1)
            for i, c in zip(idx, comps):
                c.extra["policy_version"] = self.version
                result[i] = Completion(list(c.ids), list(c.logprobs), c.finish_reason,
                                       dict(c.extra))
        self._record(n, result)
        return result

    def _record(self, n: int, result: list[Completion]) -> None:
        self.calls += 1
        row = {"call": self.calls, "policy_version": self.version, "prompts": n,
               "generated_tokens": sum(len(c.ids) for c in result), "time": time.time()}
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_dir / "sampler_batches.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")

    # --- concurrency and failure -----------------------------------------------------
    def _each(self, fn) -> list:
        return self._run([lambda s=s: fn(s) for s in self.servers])

    def _run_with(self, thunks, futures) -> list:
        return self._run(thunks, futures=futures)

    def _run(self, thunks, limit_s: float | None = None,
             key: str = "sampler.request_timeout_s", futures=()) -> list:
        """Run the thunks concurrently (one thread each), and wait for them and the
        `futures` (results in that order); the first failure, a started server's death
        (checked every second) or the total deadline (a server trickling bytes defeats a
        socket timeout) is raised at once as one line."""
        if not thunks and not futures:
            return []
        limit_s = self.timeout if limit_s is None else limit_s
        deadline = time.monotonic() + limit_s + 2.0
        pool = ThreadPoolExecutor(max_workers=max(1, len(thunks)))
        try:
            futs = [pool.submit(t) for t in thunks] + list(futures)
            pending = set(futs)
            while pending:
                if time.monotonic() > deadline:
                    raise VLLMServerError(
                        f"vLLM server(s) {', '.join(s.url for s in self.servers)} did not "
                        f"answer within {key}={limit_s:g}s{self.servers[0].where()}")
                done, pending = wait(pending, timeout=1.0, return_when=FIRST_EXCEPTION)
                for f in done:
                    if f.exception() is not None:
                        raise f.exception()
                for s in self.servers:
                    dead = s.death()
                    if dead:
                        raise VLLMServerError(dead)
            return [f.result() for f in futs]
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        sender, self.sender = getattr(self, "sender", None), None
        if sender is not None:
            sender.close()
        for s in getattr(self, "servers", []):
            s.close()
        self.drop_adapter()
        if getattr(self, "own_weights_dir", False):
            shutil.rmtree(self.weights_dir, ignore_errors=True)


def _log_dir(sc) -> Path:
    """sampler.log_dir, else the cell directory (Hydra's output dir), else a temp dir."""
    if sc.log_dir:
        return Path(sc.log_dir)
    try:
        from hydra.core.hydra_config import HydraConfig
        return Path(HydraConfig.get().runtime.output_dir)
    except Exception:                     # noqa: BLE001 - not under Hydra (tests, scripts)
        return Path(tempfile.mkdtemp(prefix="ablate-vllm-server-"))


def make_server_sampler(sc, model_path: str, *, dtype: str, seed: int,
                        tie_word_embeddings: bool | None,
                        lora_rank: int | None = None) -> VLLMServerSampler:
    """Start sc.num_servers servers (or attach to sc.urls) and wait until they answer.
    `lora_rank` (a LoRA cell): started servers load adapters, and pushes are adapters."""
    log_dir = _log_dir(sc)
    weights_dir = Path(sc.weights_dir) if sc.weights_dir else \
        Path(tempfile.mkdtemp(prefix="ablate-vllm-weights-"))
    if sc.urls:
        servers = [Server(u) for u in sc.urls]
    else:
        python = sc.python or sys.executable
        servers = []
        for i in range(sc.num_servers):
            port = free_port(sc.host)
            cmd = server_command(python, model_path, port, host=sc.host, dtype=dtype,
                                 seed=seed, sc=sc, lora_rank=lora_rank)
            device = sc.devices[i] if i < len(sc.devices) else None
            servers.append(start_server(cmd, server_env(device, lora=bool(lora_rank)),
                                        log_dir / f"vllm_server_{i}.log",
                                        f"http://{sc.host}:{port}"))
    sampler = VLLMServerSampler(servers, request_timeout_s=sc.request_timeout_s,
                                startup_timeout_s=sc.startup_timeout_s, log_dir=log_dir,
                                weights_dir=weights_dir,
                                tie_word_embeddings=tie_word_embeddings,
                                max_context=sc.max_model_len,
                                weight_sync=sc.weight_sync)
    sampler.own_weights_dir = not sc.weights_dir
    if lora_rank:
        sampler.lora_rank = int(lora_rank)
        sampler.adapter_dir = adapter_root(sc.weights_dir, weights_dir)
    return sampler
