"""`lab serve` in a child process, for the tools that load a server from outside it.

A load test or a soak must meet the server a user starts, with its own process, threads and
memory, not an object in the client's process. The child's output is read on a thread as it
comes (so its pipe never fills and blocks the server), kept for reports, and searched for the
line in which `lab serve` names its URL.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence

import psutil

SERVING = re.compile(r"serving (http://\S+?)/v1/audio/speech")


class ServeProcess:
    """`python -m lab.cli serve ARGS` until `stop`; `url` once it listens, `lines` its output.
    `on_start_line`, if given, hears each line up to the one that says it listens: its set-up
    stages as they happen, which on a GPU take minutes."""

    def __init__(self, args: Sequence[str], *, env: dict[str, str] | None = None,
                 start_timeout_s: float = 600.0,
                 on_start_line: Callable[[str], None] | None = None) -> None:
        self._on_start_line = on_start_line
        command = [sys.executable, "-m", "lab.cli", "serve", *args]
        self.proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.url: str | None = None
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self._ready.wait(start_timeout_s) or self.url is None:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("lab serve did not start; its output ended:\n"
                               + "".join(self.lines[-20:]))

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            if self.url is not None:
                continue
            if self._on_start_line is not None:
                self._on_start_line(line.rstrip("\n"))
            if found := SERVING.search(line):
                self.url = found.group(1)
                self._ready.set()
        self._ready.set()

    def rss(self) -> int:
        return psutil.Process(self.proc.pid).memory_info().rss

    def stop(self, timeout_s: float = 120.0) -> int:
        """SIGTERM, which drains the requests in flight; a kill if that takes too long."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode
