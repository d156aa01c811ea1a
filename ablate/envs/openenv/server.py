"""Serving an installed OpenEnv app (`env.app=pkg.module:app`) on a free loopback port for
the life of the environment: `python -m uvicorn` in a child process, ready when its
/health answers (http_server.py of openenv-core registers /health), stopped at close.
Its stderr goes to an unlinked temporary file, never an undrained pipe: a pipe fills at
64 KiB of server tracebacks and then blocks the server's event loop mid-run."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from ablate.protocol.environment import EnvError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str, timeout_s: float) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s) as r:
            return r.status == 200
    except OSError:
        return False


class Served:
    """A child uvicorn serving `app`; `url` is its base URL."""

    def __init__(self, app: str, start_timeout_s: float):
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port",
             str(port), "--log-level", "warning", "--timeout-graceful-shutdown", "2"],
            stdout=subprocess.DEVNULL, stderr=self.log, env=dict(os.environ))
        deadline = time.monotonic() + start_timeout_s
        while not healthy(self.url, 1.0):
            if self.proc.poll() is not None:
                last = self.last_log_line() or f"exit {self.proc.returncode}"
                raise EnvError(f"env.app={app!r}: the server exited before it answered "
                               f"({last})")
            if time.monotonic() > deadline:
                self.stop()
                raise EnvError(f"env.app={app!r}: no answer from {self.url}/health within "
                               f"env.start_timeout_s={start_timeout_s}")
            time.sleep(0.2)

    def last_log_line(self) -> str:
        self.log.seek(0)
        lines = self.log.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
