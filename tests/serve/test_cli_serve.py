"""`lab serve`: refusals before anything loads, and a real process that drains on SIGTERM."""

from __future__ import annotations

import platform
import re
import signal
import socket
import subprocess
import sys
import threading

import httpx
import numpy as np
import pytest

from lab.cli import _config, _engine_process, _parser, main
from lab.config import load_preset
from lab.serve.server import SWITCH_INTERVAL_MS, server_pipeline
from lab.worker import LINGER_S
from tests.serve.conftest import LONG, MODEL, pcm_of, speech

WAV_HEADER = 44


def test_serve_listens_on_loopback_by_default():
    args = _parser().parse_args(["serve"])
    assert args.host == "127.0.0.1" and args.preset == "cpu-default"


@pytest.mark.parametrize(("argv", "words"), [
    (["--preset", "no-such-preset"], "not found"),
    (["--set", "dtyp=bf16"], "unknown key 'dtyp'"),
    (["--slots", "0"], "slots=0"),
    (["--deadline", "0"], "deadline_s=0"),
    (["--keep-alive", "0"], "keep_alive_s=0"),
    (["--keep-alive", "30", "--replicas", "2"], "Ray Serve's proxy"),
    (["--switch-interval", "0"], "switch interval 0.0 ms must be > 0"),
    (["--switch-interval", "1", "--replicas", "2"], "each replica's process"),
    (["--engine-process", "--replicas", "2"], "each replica serves its own pipeline"),
    (["--no-engine-process", "--replicas", "2"], "each replica serves its own pipeline"),
])
def test_bad_options_exit_2_before_loading(argv, words, capsys):
    assert main(["serve", *argv]) == 2
    assert words in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "expected"), [([], False), (["--engine-process"], True),
                                                (["--no-engine-process"], False)])
def test_the_engine_process_is_on_where_asked_and_off_by_default_on_a_cpu(argv, expected):
    args = _parser().parse_args(["serve", *argv])
    assert _engine_process(args.engine_process, _config(args)) is expected


def test_a_port_in_use_exits_2_before_loading(capsys):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert main(["serve", "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_sigterm_drains_the_request_in_flight_and_exits_0(serve_pipeline):
    proc = subprocess.Popen([sys.executable, "-m", "lab.cli", "serve", "--preset", MODEL,
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        lines = []
        while not (found := re.search(r"serving (http://127\.0\.0\.1:\d+)", lines[-1]
                                      if lines else "")):
            line = proc.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
        url = found.group(1)
        assert httpx.get(f"{url}/ready", timeout=10).json()["ready"]
        with httpx.stream("POST", f"{url}/v1/audio/speech", json=speech(input=LONG),
                          timeout=60) as response:
            chunks = response.iter_raw()
            first = next(chunks)
            proc.send_signal(signal.SIGTERM)
            data = first + b"".join(chunks)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert "stopped" in out
    assert f"lock changes hands every {SWITCH_INTERVAL_MS:g} ms" in "".join(lines)
    if platform.libc_ver()[0] == "glibc":  # the allocator cap that keeps the soak's RSS flat
        assert "malloc arenas capped at 2" in "".join(lines)
    expected = pcm_of(serve_pipeline.synthesize(LONG).audio)
    np.testing.assert_array_equal(np.frombuffer(data[WAV_HEADER:], "<i2"), expected)


def test_a_served_pipeline_keeps_its_worker_thread_through_idle_spells():
    """The pipeline `lab serve` builds keeps one worker thread (and its OpenMP team) however
    long it waits between requests, where a plain pipeline's thread leaves after `LINGER_S`,
    and its process hands Python's lock over at the server's interval."""
    before = sys.getswitchinterval()
    pipe = server_pipeline(load_preset(MODEL), switch_interval_ms=0.25)
    try:
        assert sys.getswitchinterval() == pytest.approx(0.25e-3)
        first = pipe._worker.call(threading.current_thread)
        first.join(timeout=LINGER_S + 1)
        assert first.is_alive() and pipe._worker.call(threading.current_thread) is first
        assert pipe.synthesize("Still here.").audio.size
    finally:
        pipe.close()
        sys.setswitchinterval(before)
    assert not first.is_alive()
