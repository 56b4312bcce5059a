"""`lab serve --replicas 2`: the same API from two CPU replicas behind Ray Serve's proxy.

One real local Ray cluster for the whole module (starting Ray is the slow part), run as the
command itself in a child process on a free loopback port. Its teardown stops it with SIGTERM
and then kills, by pid, any process of the cluster still alive, so a failing test leaves no
Ray process behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import numpy as np
import psutil
import pytest
import soundfile as sf
from openai import OpenAI

from lab.cli import main
from lab.config import load_preset
from lab.metrics.repeats import pinned_threads
from lab.serve.replica import PID_HEADER, REPLICA_HEADER
from lab.serve.replicas import Placement
from tests.serve.conftest import LONG, MODEL, SHORT, pcm_of, speech

REPLICAS = 2
START_TIMEOUT_S = 180.0
REQUEST_TIMEOUT_S = 60.0  # every request of the module ends by then, or the test fails
RESTART_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
WAV_HEADER = 44
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
# Long enough that a stream is still running when its replica is killed.
KILLED_TEXT = " ".join([LONG] * 2)


class Cluster:
    """`lab serve --replicas 2 --port 0` in a child process; its output is drained by a
    thread (a full pipe would stall the command) and kept for the assertions."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lab.cli", "serve", "--preset", MODEL, "--port", "0",
             "--replicas", str(REPLICAS), "--deadline", str(REQUEST_TIMEOUT_S)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.terminated = False
        self._fresh: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._drain, daemon=True).start()
        self.url = self._wait_for_url()

    def _drain(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            self._fresh.put(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def _wait_for_url(self) -> str:
        waited = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < waited and self.proc.poll() is None:
            with contextlib.suppress(queue.Empty):
                found = re.search(r"serving (http://127\.0\.0\.1:\d+)", self._fresh.get(timeout=1))
                if found:
                    return found.group(1)
        raise RuntimeError(f"lab serve --replicas did not start; its output:\n{self.output}")

    def processes(self) -> list[psutil.Process]:
        """The command and every process of its cluster (Ray's, the replicas)."""
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        return []

    def terminate(self) -> None:
        """SIGTERM, once: a second one would force the exit without draining."""
        if not self.terminated:
            self.terminated = True
            self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> int:
        """SIGTERM, then a kill after a minute; the exit status."""
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def replica_pids(cluster: Cluster) -> set[int]:
    return {p.pid for p in cluster.processes()[1:] if "ServeReplica" in _name(p)}


def _name(process: psutil.Process) -> str:
    with contextlib.suppress(psutil.Error):
        return process.name()
    return ""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    started = Cluster()
    seen: list[psutil.Process] = []
    try:
        seen = started.processes()
        yield started
    finally:
        seen += started.processes()
        started.stop()
        _, alive = psutil.wait_procs(seen, timeout=30)
        for process in alive:
            with contextlib.suppress(psutil.Error):
                process.kill()


@pytest.fixture(scope="module")
def reference(serve_pipeline) -> dict[str, np.ndarray]:
    """The single-process pipeline's audio, rendered on a replica's thread count."""
    with pinned_threads(Placement.of(load_preset(MODEL), REPLICAS).threads):
        return {text: pcm_of(serve_pipeline.synthesize(text).audio)
                for text in (LONG, KILLED_TEXT)}


def test_placement_shares_the_cores_between_cpu_replicas():
    place = Placement.of(load_preset(MODEL), 2, cores=8)
    assert (place.device, place.gpus, place.cpus, place.threads) == ("cpu", 0, 4.0, 4)
    assert Placement.of(load_preset(MODEL), 3, cores=2).threads == 1
    env = place.actor_options()["runtime_env"]["env_vars"]
    assert env["OMP_NUM_THREADS"] == "4"


def test_a_bad_replica_count_exits_2_before_ray_starts(capsys):
    assert main(["serve", "--replicas", "0"]) == 2
    assert "replicas=0" in capsys.readouterr().err


def test_openai_client_streams_through_the_proxy_the_pipelines_audio(cluster, reference):
    client = OpenAI(base_url=f"{cluster.url}/v1", api_key="unused", max_retries=0,
                    timeout=REQUEST_TIMEOUT_S)
    arrivals, parts = [], []
    start = time.perf_counter()
    with client.audio.speech.with_streaming_response.create(
            model=MODEL, voice="default", input=LONG, response_format="wav") as response:
        assert response.headers["content-type"] == "audio/wav"
        assert response.headers[PID_HEADER] and response.headers[REPLICA_HEADER]
        for part in response.iter_bytes():
            arrivals.append(time.perf_counter() - start)
            parts.append(part)
    assert len(parts) >= 3, "the proxy delivered the audio in one piece, not streamed"
    assert arrivals[-1] - arrivals[0] > 0.1, "every chunk arrived at once"
    audio, _ = sf.read(io.BytesIO(b"".join(parts)), dtype="int16")
    np.testing.assert_array_equal(audio, reference[LONG])


def test_errors_and_models_are_the_single_servers(cluster):
    refused = httpx.post(f"{cluster.url}/v1/audio/speech", json=speech(input="   "),
                         timeout=REQUEST_TIMEOUT_S)
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "input"
    assert refused.json()["error"]["type"] == "invalid_request_error"
    models = httpx.get(f"{cluster.url}/v1/models", timeout=REQUEST_TIMEOUT_S).json()
    assert MODEL in [m["id"] for m in models["data"]]


async def _replica_of_each(url: str, count: int) -> list[str]:
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S, trust_env=False) as client:
        answers = await asyncio.gather(*[
            client.post(f"{url}/v1/audio/speech", json=speech(input=SHORT))
            for _ in range(count)])
    assert all(a.status_code == 200 for a in answers)
    return [a.headers[PID_HEADER] for a in answers]


def test_requests_spread_over_both_replicas(cluster):
    """Concurrent requests go to the replica with fewer in flight, so a few rounds of four
    reach both (sequential ones could land on either, by chance)."""
    seen: set[str] = set()
    for _ in range(5):
        seen |= set(asyncio.run(_replica_of_each(cluster.url, 4)))
        if len(seen) == REPLICAS:
            break
    assert seen == {str(pid) for pid in replica_pids(cluster)}


def test_each_replica_starts_on_its_share_of_the_threads(cluster):
    threads = str(Placement.of(load_preset(MODEL), REPLICAS).threads)
    for pid in replica_pids(cluster):
        assert psutil.Process(pid).environ()["OMP_NUM_THREADS"] == threads


@dataclass
class Outcome:
    pid: int | None = None
    status: int | None = None
    audio: bytes = b""
    error: str | None = None
    seconds: float = 0.0


async def _stream(client: httpx.AsyncClient, url: str, text: str, outcome: Outcome,
                  streaming: asyncio.Event) -> Outcome:
    """One PCM request; `streaming` is set once its first audio has arrived."""
    start = time.monotonic()
    try:
        async with client.stream("POST", f"{url}/v1/audio/speech",
                                 json=speech(input=text, response_format="pcm")) as response:
            outcome.pid, outcome.status = int(response.headers[PID_HEADER]), response.status_code
            async for data in response.aiter_bytes():
                outcome.audio += data
                streaming.set()
    except httpx.HTTPError as err:
        outcome.error = f"{type(err).__name__}: {err}"
    finally:
        streaming.set()
        outcome.seconds = time.monotonic() - start
    return outcome


async def _load_and_kill(url: str) -> tuple[int, list[Outcome]]:
    """Four streams in flight, then SIGKILL to the replica of the first; every outcome.

    Each stream starts once the one before it has: Ray's router picks the replica with fewer
    requests in flight, but from queue lengths it caches, so four requests sent at once can
    all land on one replica."""
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S, trust_env=False) as client:
        outcomes, tasks = [Outcome() for _ in range(4)], []
        for outcome in outcomes:
            started = asyncio.Event()
            tasks.append(asyncio.create_task(_stream(client, url, KILLED_TEXT, outcome, started)))
            await asyncio.wait_for(started.wait(), REQUEST_TIMEOUT_S)
        victim = outcomes[0].pid
        os.kill(victim, signal.SIGKILL)
        await asyncio.wait_for(asyncio.gather(*tasks), REQUEST_TIMEOUT_S)
    return victim, outcomes


def _restarted(cluster: Cluster, before: set[int]) -> int:
    """The pid of a replica that was not there `before`, once it answers /ready."""
    waited = time.monotonic() + RESTART_TIMEOUT_S
    while time.monotonic() < waited:
        with contextlib.suppress(httpx.HTTPError):
            ready = httpx.get(f"{cluster.url}/ready", timeout=5)
            pid = int(ready.headers.get(PID_HEADER, 0))
            if ready.status_code == 200 and pid and pid not in before:
                return pid
        time.sleep(0.5)
    raise AssertionError(f"no new replica answered within {RESTART_TIMEOUT_S:g} s; now "
                         f"{replica_pids(cluster)}, before {before}")


def test_kill_9_of_a_replica_fails_its_streams_only_and_ray_restarts_it(cluster, reference):
    before = replica_pids(cluster)
    victim, outcomes = asyncio.run(_load_and_kill(cluster.url))
    killed = [o for o in outcomes if o.pid == victim]
    spared = [o for o in outcomes if o.pid != victim]
    assert spared, "all four streams went to one replica; the router did not spread them"
    for outcome in killed:
        assert outcome.error is not None or outcome.status != 200, outcome
        assert outcome.seconds < REQUEST_TIMEOUT_S
    expected = reference[KILLED_TEXT].tobytes()
    for outcome in spared:
        assert (outcome.status, outcome.error) == (200, None), outcome
        assert outcome.audio == expected
    _restarted(cluster, before)
    assert victim not in replica_pids(cluster)


def test_the_cluster_listens_on_loopback_only(cluster):
    listening = {(_name(p), conn.laddr.ip, conn.laddr.port)
                 for p in cluster.processes() for conn in _listening(p)}
    assert listening
    assert {ip for _, ip, _ in listening} <= LOOPBACK, listening


def _listening(process: psutil.Process) -> list:
    with contextlib.suppress(psutil.Error):
        return [c for c in process.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    return []


def test_sigterm_drains_the_stream_in_flight_and_stops_the_cluster(cluster, reference):
    processes = cluster.processes()
    with httpx.stream("POST", f"{cluster.url}/v1/audio/speech", json=speech(input=LONG),
                      timeout=REQUEST_TIMEOUT_S) as response:
        chunks = response.iter_raw()
        first = next(chunks)
        cluster.terminate()
        data = first + b"".join(chunks)
    np.testing.assert_array_equal(np.frombuffer(data[WAV_HEADER:], "<i2"), reference[LONG])
    assert cluster.stop() == 0, cluster.output[-3000:]
    assert "stopped" in cluster.output
    _, alive = psutil.wait_procs(processes, timeout=30)
    assert not alive, f"left running: {[(p.pid, _name(p)) for p in alive]}"
