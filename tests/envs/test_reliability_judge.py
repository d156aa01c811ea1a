"""The LLM judge has a total deadline per request (a server trickling one byte a second
cannot hold a cell), and its errors never carry the API key a server echoed back."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from ablate.envs.email import JudgeError, LLMJudge


def listen(server) -> None:
    """Bind `server.sock` to a free loopback port, set `server.url`, serve in a thread."""
    server.sock = socket.socket()
    server.sock.bind(("127.0.0.1", 0))
    server.sock.listen(8)
    server.url = f"http://127.0.0.1:{server.sock.getsockname()[1]}/v1"
    threading.Thread(target=server._serve, daemon=True).start()


class Trickle:
    """A raw HTTP server on 127.0.0.1 that answers every request one byte a second:
    `headers=True` trickles the status line and headers too, else only the body."""

    def __init__(self, headers: bool):
        self.headers = headers
        self.stop = False
        listen(self)

    def _serve(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn):
        body = b'{"choices": [{"message": {"content": "CORRECT"}}]}' * 100
        head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(body)).encode() + b"\r\n\r\n")
        try:
            conn.recv(65536)
            if not self.headers:
                conn.sendall(head)
            for i in range(len(body) + (len(head) if self.headers else 0)):
                data = (head + body) if self.headers else body
                conn.sendall(data[i:i + 1])
                time.sleep(1.0)
                if self.stop:
                    break
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.stop = True
        self.sock.close()


@pytest.mark.parametrize("headers", [False, True])
def test_a_one_byte_per_second_judge_ends_within_its_deadline(headers, tmp_path):
    server = Trickle(headers)
    try:
        j = LLMJudge(server.url, "m", timeout_s=1.0, max_retries=1, backoff_s=0.01,
                     cache_dir=tmp_path)
        t0 = time.monotonic()
        with pytest.raises(JudgeError, match=r"failed after 2 attempt\(s\): timed out"):
            j.judge("q", "Houston office", "Dallas")
        assert time.monotonic() - t0 < 1.0 * 2 + 1.0
        assert j.calls == 2
    finally:
        server.close()


class Echo:
    """Answers 401 or 500 with the request (headers included) echoed in the body."""

    def __init__(self, status: int):
        self.status = status
        listen(self)

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                request = conn.recv(65536)
                body = b"unauthorised request was:\n" + request
                conn.sendall(b"HTTP/1.1 %d X\r\nContent-Length: %d\r\nConnection: close"
                             b"\r\n\r\n" % (self.status, len(body)) + body)


@pytest.mark.parametrize("status", [401, 500])
def test_an_echoed_bearer_key_never_reaches_the_error_text(status, tmp_path, monkeypatch):
    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-secret-123456")
    server = Echo(status)
    j = LLMJudge(server.url, "m", api_key_env="JUDGE_TEST_KEY", max_retries=0,
                 backoff_s=0.01, cache_dir=tmp_path)
    with pytest.raises(JudgeError) as err:
        j.judge("q", "Houston office", "Dallas")
    server.sock.close()
    text = str(err.value)
    assert f"HTTP {status}" in text
    assert "sk-secret-123456" not in text and "secret" not in text
    assert "<redacted>" in j._redact("Authorization: Bearer sk-secret-123456\r\n")
    assert "sk-other" not in j._redact('{"headers": {"authorization": "Bearer sk-other"}}')
