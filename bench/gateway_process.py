"""``specgate serve`` in a child process on a free port, for the real test tier and
the benchmark scripts that drive real vLLM engines over HTTP.

The gateway runs in its own process group so that stopping it also stops its
engine-core processes, and its output goes to a log file that failures quote.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import httpx

STARTUP_TIMEOUT_S = 1500.0


class GatewayNotReady(RuntimeError):
    """The gateway exited, failed its start-up, or did not become ready in time."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class GatewayProcess:
    def __init__(self, log: Path, env: Mapping[str, str] | None = None,
                 args: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.log = log
        self.env = {**os.environ, "SPECGATE_PORT": str(self.port), "HF_HUB_OFFLINE": "1",
                    **(env or {})}
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def start(self) -> None:
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "serve", *self.args], env=self.env,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise GatewayNotReady(f"specgate exited with {self.proc.returncode}:\n"
                                      f"{self.log_tail()}")
            try:
                r = httpx.get(self.url + "/ready", timeout=5)
                if r.status_code == 200:
                    return
                if r.json().get("phase") == "failed":
                    raise GatewayNotReady(f"start-up failed: {r.json().get('error')}\n"
                                          f"{self.log_tail()}")
            except (httpx.TransportError, ValueError):
                pass
            time.sleep(2)
        raise GatewayNotReady(f"gateway not ready after {timeout_s:.0f} s:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 60.0) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> GatewayProcess:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
