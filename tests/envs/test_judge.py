"""Judges: normalised exact match, and the LLM judge against a stub OpenAI-compatible
server on 127.0.0.1 (verdicts, disk cache, retries, unreachable endpoint)."""
from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ablate.envs.email import ExactJudge, JudgeError, LLMJudge, make_judge
from ablate.envs.email.config import JudgeConfig
from ablate.envs.email.judge import normalize_answer, parse_verdict


# ---------------------------------------------------------------------- exact
@pytest.mark.parametrize("text,tokens", [
    ("1,200", ["1200"]), ("1200.0", ["1200"]), ("$1,200.50", ["1200.5"]),
    ("$4.2M", ["4200000"]), ("4.2 million", ["4200000"]), ("4,200,000 USD", ["4200000"]),
    ("3k", ["3000"]), ("1.5 billion", ["1500000000"]), ("0.50", ["0.5"]), (".5", ["0.5"]),
    ("May 3, 2001", ["2001-05-03"]), ("3rd of May 2001", ["2001-05-03"]),
    ("Thursday, May 3, 2001", ["2001-05-03"]), ("05/03/2001", ["2001-05-03"]),
    ("5/3/01", ["2001-05-03"]), ("25/12/2000", ["2000-12-25"]), ("2001-5-3", ["2001-05-03"]),
    ("Sept. 2001", ["2001-09"]), ("15%", ["15", "percent"]), ("fifteen percent", ["15", "percent"]),
    ("The  Houston office!", ["houston", "office"]), ("ＨＯＵＳＴＯＮ", ["houston"]),
    ("5 m", ["5", "m"]),   # a detached 'm' is not a scale (metres?)
])
def test_normalize_answer(text, tokens):
    assert normalize_answer(text) == tokens


@pytest.mark.parametrize("gold,pred,ok", [
    ("Houston", "houston", True),
    ("Houston", "The meeting is in Houston.", True),
    ("$4.2 million", "4,200,000 dollars", True),
    ("May 3, 2001", "2001-05-03", True),
    ("1,200", "1200.0", True),
    ("John Smith", "Smith", False),            # missing part of the gold
    ("12", "12 or 13", False),                 # hedge
    ("12", "120", False),                      # whole tokens only
    ("12", "It was 12 on 2001-05-03", False),  # a second number is a second candidate
    ("Houston", "not Houston", False),         # negation
    ("Houston", "Houston, but I'm not sure", False),
    ("Houston", "the answer is probably somewhere near the big city of Houston in Texas", False),
    ("Houston", "I don't know", False),
    ("Houston", "", False),
    ("Houston", None, False),
    ("Dallas", "Houston", False),
])
def test_exact_judge(gold, pred, ok):
    assert ExactJudge().judge("Where?", gold, pred) is ok


def test_exact_judge_many_accepts_tuples_and_dicts():
    j = ExactJudge()
    assert j.judge_many([("q", "a1", "A1"), {"question": "q", "gold": "x", "prediction": "y"}]) \
        == [True, False]
    with pytest.raises(ValueError, match="lacks key 'gold'"):
        j.judge_many([{"question": "q", "prediction": "y"}])


@pytest.mark.parametrize("reply,verdict", [
    ("CORRECT", True), ("incorrect", False), (" Correct.\n", True), ("**INCORRECT**", False),
    ("Verdict: CORRECT", True), ("<think>hmm, incorrect?</think>\nCORRECT", True),
    ("The answer is correct", None), ("CORRECT INCORRECT", None), ("", None), (None, None),
    ("yes", None),
])
def test_parse_verdict_is_strict(reply, verdict):
    assert parse_verdict(reply) is verdict


# ---------------------------------------------------------------------- stub server
class Stub:
    """OpenAI-compatible /v1/chat/completions: CORRECT when the predicted answer mentions
    the gold answer's first word, else INCORRECT; `script` overrides the next replies."""

    def __init__(self):
        self.requests: list[dict] = []
        self.script: list = []        # items: int (HTTP status), str (reply), float (sleep)
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append({"path": self.path, "body": body,
                                      "auth": self.headers.get("Authorization")})
                action = stub.script.pop(0) if stub.script else None
                if isinstance(action, float):
                    time.sleep(action)
                    action = None
                if isinstance(action, int):
                    self.send_response(action)
                    self.end_headers()
                    self.wfile.write(b'{"error": "scripted"}')
                    return
                if action is None:
                    user = body["messages"][-1]["content"]
                    gold = user.split("Gold answer: ")[1].split("\n")[0]
                    pred = user.split("Predicted answer: ")[1].split("\n")[0]
                    action = "CORRECT" if gold.split()[0].lower() in pred.lower() else "INCORRECT"
                out = json.dumps({"choices": [{"message": {"role": "assistant",
                                                           "content": action}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass   # the timeout test's client hangs up before the late reply

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub():
    s = Stub()
    yield s
    s.close()


def llm(stub, tmp_path, **kw):
    kw = {"timeout_s": 2.0, "max_retries": 2, "backoff_s": 0.01, **kw}
    return LLMJudge(stub.url, "judge-model", cache_dir=tmp_path / "cache", **kw)


def test_llm_judge_verdicts_and_request_shape(stub, tmp_path, monkeypatch):
    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-test")
    j = llm(stub, tmp_path, api_key_env="JUDGE_TEST_KEY")
    assert j.judge("Where was the meeting?", "Houston office", "in houston") is True
    assert j.judge("Where was the meeting?", "Houston office", "Dallas") is False
    assert len(stub.requests) == 2
    r = stub.requests[0]
    assert r["path"] == "/v1/chat/completions" and r["auth"] == "Bearer sk-test"
    assert r["body"]["model"] == "judge-model" and r["body"]["temperature"] == 0
    assert "Question: Where was the meeting?" in r["body"]["messages"][-1]["content"]


def test_llm_judge_skips_the_call_for_exact_matches_and_abstentions(stub, tmp_path):
    j = llm(stub, tmp_path)
    assert j.judge("q", "$4.2 million", "4,200,000") is True
    assert j.judge("q", "Houston", "I don't know") is False
    assert j.judge("q", "Houston", None) is False
    assert stub.requests == []


def test_llm_judge_cache_hit_in_process_and_on_disk(stub, tmp_path):
    j = llm(stub, tmp_path)
    assert j.judge("q", "Houston office", "the houston one") is True
    assert j.judge("q", "Houston office", "the houston one") is True
    assert len(stub.requests) == 1
    j.close()
    fresh = llm(stub, tmp_path)                      # new process-like instance, same dir
    assert fresh.judge("q", "Houston office", "the houston one") is True
    assert len(stub.requests) == 1
    other_model = LLMJudge(stub.url, "another-model", cache_dir=tmp_path / "cache")
    assert other_model.judge("q", "Houston office", "the houston one") is True
    assert len(stub.requests) == 2                   # the model is part of the key


def test_llm_judge_retries_after_500_and_malformed_replies(stub, tmp_path):
    j = llm(stub, tmp_path)
    stub.script = [500, "I think it is right"]
    assert j.judge("q", "Houston office", "houston") is True
    assert len(stub.requests) == 3 and j.calls == 3


def test_llm_judge_gives_up_with_a_clear_error(stub, tmp_path):
    j = llm(stub, tmp_path, max_retries=1)
    stub.script = ["maybe", "probably yes"]
    with pytest.raises(JudgeError, match=r"failed after 2 attempt\(s\): no CORRECT/INCORRECT"):
        j.judge("q", "Houston office", "houston")
    stub.script = [503, 503]
    with pytest.raises(JudgeError, match="HTTP 503"):
        j.judge("q", "Houston office", "houston area")
    stub.script = [401]
    with pytest.raises(JudgeError, match=r"HTTP 401 \(is \$OPENAI_API_KEY set\?\)"):
        j.judge("q", "Houston office", "houston town")
    assert len(stub.requests) == 5                   # 401 is not retried


def test_llm_judge_timeout_is_retried_then_reported(stub, tmp_path):
    j = llm(stub, tmp_path, timeout_s=0.2, max_retries=1)
    stub.script = [0.5, 0.5]
    with pytest.raises(JudgeError, match="timed out after 0.2s"):
        j.judge("q", "Houston office", "houston")


def test_unreachable_endpoint_is_a_judge_error_naming_the_url(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]                    # closed again: nothing listens
    j = LLMJudge(f"http://127.0.0.1:{port}", "m", max_retries=1, backoff_s=0.01,
                 cache_dir=tmp_path)
    with pytest.raises(JudgeError, match=rf"http://127.0.0.1:{port}/v1/chat/completions.*"
                                         "unreachable"):
        j.judge("q", "Houston", "Dallas")


def test_judge_many_keeps_order_with_concurrency(stub, tmp_path):
    j = llm(stub, tmp_path, concurrency=4)
    items = [("q", f"gold{i} x", f"gold{i}" if i % 3 else "wrong") for i in range(9)]
    assert j.judge_many(items) == [i % 3 != 0 for i in range(9)]


def test_make_judge_factory(tmp_path, stub):
    assert isinstance(make_judge(JudgeConfig()), ExactJudge)
    j = make_judge(JudgeConfig(name="llm", base_url=stub.url, model="m",
                               cache_dir=str(tmp_path), timeout_s=5, max_retries=0))
    assert isinstance(j, LLMJudge) and j.url == stub.url + "/chat/completions"
    assert j.max_retries == 0 and j.timeout_s == 5
    with pytest.raises(ValueError, match="judge.name='oracle'"):
        make_judge(JudgeConfig(name="oracle"))
    with pytest.raises(ValueError, match="needs base_url and model"):
        make_judge(JudgeConfig(name="llm"))


@pytest.mark.parametrize("kw,needle", [({"timeout_s": 0}, "judge.timeout_s=0"),
                                       ({"max_retries": -1}, "judge.max_retries=-1")])
def test_llm_judge_rejects_bad_settings_naming_the_key(kw, needle, tmp_path):
    with pytest.raises(ValueError, match=needle):
        LLMJudge("http://127.0.0.1:9", "m", cache_dir=tmp_path, **kw)
