"""The speech server the Serve tab drives: started here, or attached to, then described.

A server is the app's, not a browser session's (a port is one resource), so one `Serving`
holds it for every session, and a second Start is refused while one runs. A server started
here runs in-process (`LabServer`) on 127.0.0.1 over a pipeline the caller hands it (the
app's cached one); the port is bound before anything loads, so a port in use costs nothing.
Stop drains it (requests in flight finish), then lets the pipeline's worker exit once idle:
safe whether or not the cache still holds it, since a later job starts a new worker
(`lab.worker`). An attached server is only forgotten. Every URL passes the load generator's
loopback guard (`lab.bench.loopback`) before a socket opens.

Nothing here imports Gradio, so the tab's plumbing is testable without a browser.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import httpx
from prometheus_client.parser import text_string_to_metric_families

from lab.bench.host_work import ThreadClock, clock_of_values
from lab.bench.loadtest import LoadTestError, SpeechTarget, served_model, speech_url
from lab.bench.loopback import loopback_client, loopback_url
from lab.serve import LabServer, ServeOptions
from lab.serve.server import listen

if TYPE_CHECKING:
    from lab.pipeline import Pipeline

HOST = "127.0.0.1"
PROBE_TIMEOUT_S = 5.0
FORMAT = "pcm"  # the lab's server states its rate in a header: no WAV header to parse
FALLBACK_RATE = 22050  # for a server that is not the lab's and sends no rate header
SPEECH_BODY = '{"model": "%s", "voice": "%s", "input": "Hello from the lab."}'


@dataclass(frozen=True)
class Target:
    """A server the tab loads: one it started (`server` and its `pipeline` set), or one it
    attached to. `ready` is the lab's `/ready` answer ({} from another OpenAI server)."""

    url: str
    model: str
    voice: str
    ready: dict
    server: LabServer | None = None
    pipeline: Pipeline | None = None

    def speech(self, timeout_s: float) -> SpeechTarget:
        """What `lab loadtest` sends this server, each request bounded by `timeout_s`."""
        rate = int(self.ready.get("sample_rate", FALLBACK_RATE))
        return SpeechTarget(speech_url(self.url), self.model, self.voice, FORMAT, rate, timeout_s)


def base_url(url: str) -> str:
    """The server's root, from its root or any endpoint under it; NotLoopback (a
    ValueError) for a URL that would send traffic off this machine."""
    root = loopback_url(url.strip()).copy_with(path="/", query=None, fragment=None)
    return str(root).rstrip("/")


async def probe(url: str) -> Target:
    """What the server at `url` answers to: its first model, and the lab's `/ready` facts."""
    base = base_url(url)
    async with loopback_client(PROBE_TIMEOUT_S) as client:
        try:
            model = await served_model(client, base)
        except LoadTestError as err:
            raise ValueError(f"no speech server answers at {base}: GET /v1/models failed "
                             f"({err.__cause__!r})") from err
        try:
            ready = (await client.get(f"{base}/ready")).json()
        except (httpx.HTTPError, ValueError):
            ready = {}
    ready = ready if isinstance(ready, dict) else {}
    return Target(base, model, (ready.get("voices") or ["default"])[0], ready)


class Serving:
    """The one server the tab loads, shared by every browser session."""

    def __init__(self) -> None:
        self.current: Target | None = None
        self._lock = threading.Lock()

    def _vacant(self) -> None:
        if self.current is not None:
            raise ValueError(f"the tab already loads {self.current.url}; stop or detach it "
                             "first")

    def start(self, port: int, model_name: str | None,
              pipeline: Callable[[], Pipeline]) -> Target:
        """Bind `port` (0: a free one), then get the pipeline and serve it."""
        with self._lock:
            self._vacant()
            listener = listen(HOST, port)
            try:
                pipe = pipeline()
                server = LabServer(pipe, ServeOptions(model_name=model_name), listener=listener,
                                   log_level="warning").start()
            except BaseException:
                listener.close()
                raise
            try:
                self.current = replace(asyncio.run(probe(server.url)), server=server,
                                       pipeline=pipe)
            except BaseException:
                server.stop()
                raise
            return self.current

    def attach(self, url: str) -> Target:
        with self._lock:
            self._vacant()
            self.current = asyncio.run(probe(url))
            return self.current

    def stop(self) -> Target | None:
        """Forget the target, draining a server started here; the target, or None."""
        with self._lock:
            target, self.current = self.current, None
            if target is not None and target.server is not None:
                target.server.stop()
                target.pipeline.close()
            return target


def describe(target: Target) -> str:
    ready = target.ready
    what = f"`{target.model}`" + (f" ({ready['family']})" if "family" in ready else "")
    if target.server is None:
        return (f"**Attached** to {target.url}, serving {what}. Stop detaches; the server "
                "there keeps running.")
    return (f"**Serving** {what} at {target.url} · {ready.get('slots', '?')} slots, queue "
            f"{ready.get('queue', '?')}. Stop drains it: requests in flight finish first.")


def snippets(target: Target) -> tuple[str, str]:
    """A curl command and OpenAI's Python client, both streaming from this server."""
    body = SPEECH_BODY % (target.model, target.voice)
    curl = (f"curl -N {target.url}/v1/audio/speech -H 'content-type: application/json' \\\n"
            f"  -d '{body}' -o hello.wav")
    python = (
        "from openai import OpenAI\n\n"
        f'client = OpenAI(base_url="{target.url}/v1", api_key="unused")\n'
        "with client.audio.speech.with_streaming_response.create(\n"
        f'        model="{target.model}", voice="{target.voice}",\n'
        '        input="Streaming starts at once.", response_format="wav") as response:\n'
        '    response.stream_to_file("hello.wav")\n')
    return curl, python


@dataclass(frozen=True)
class Recent:
    """A server between two looks at its `/metrics`: the share of wall time its serving thread
    spent on host work (near 100%, the host thread, not the device, sets the pace of every
    stream), and its codec windows' mean time from launch to hand-out (the codec work that a
    side stream keeps out of the engine's round). None where it is not known."""

    host_share: float | None = None
    codec_lag_ms: float | None = None


class SinceLastLook:
    """`Recent` per server URL, from the counters each look reads; a restarted or other server
    starts afresh."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._last: dict[str, tuple[float, ThreadClock | None]] = {}

    def update(self, url: str, values: dict[str, float]) -> Recent:
        """What changed since the previous look at `url`, from its samples now (`metric_samples`):
        nothing at the first look, nor from counters it does not report or that went back (a
        new server on the same port)."""
        now, clock = self.clock(), clock_of_values(values)
        last, self._last[url] = self._last.get(url), (now, clock)
        if clock is None or last is None or last[1] is None or now <= last[0]:
            return Recent()
        then, before = last
        host_s = clock.host_s - before.host_s
        share = min(1.0, host_s / (now - then)) if host_s >= 0 else None
        windows = clock.codec_windows - before.codec_windows
        lag = None
        if windows > 0 and clock.codec_lag_s >= before.codec_lag_s:
            lag = 1000 * (clock.codec_lag_s - before.codec_lag_s) / windows
        return Recent(share, lag)


def metric_samples(exposition: str) -> tuple[dict[str, float], dict[str, float]]:
    """Every sample by name, and the request counts by status, from Prometheus text."""
    values: dict[str, float] = {}
    statuses: dict[str, float] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == "lab_speech_requests_total":
                statuses[sample.labels["status"]] = sample.value
            else:
                values[sample.name] = sample.value
    return values, statuses


def highlights(exposition: str, recent: Recent | None = None) -> str:
    """The gauges a person watches under load, from the server's Prometheus text, and the
    serving thread's share of host work and its codec's lag since the last look (`Recent`)
    where known."""
    values, statuses = metric_samples(exposition)
    if "lab_active_slots" not in values:
        return "**/metrics**: this server does not report the lab's gauges."
    done = ", ".join(f"{s}: {n:.0f}" for s, n in sorted(statuses.items())) or "none yet"
    line = (f"**/metrics** · active slots **{values['lab_active_slots']:.0f} / "
            f"{values.get('lab_slots', 0):.0f}** · queue depth "
            f"**{values.get('lab_queue_depth', 0):.0f}** · requests by status: {done}")
    if values.get("lab_tokens_per_second"):
        line += f" · {values['lab_tokens_per_second']:.0f} tokens/s"
    if "lab_engine_waiting" in values:
        line += (f" · held back in the engine **{values['lab_engine_waiting']:.0f}** (admission "
                 f"gate shut on {values.get('lab_admission_held_steps_total', 0):.0f} steps)"
                 f" · engine round {1e3 * values.get('lab_engine_round_seconds', 0):.1f} ms")
    recent = recent or Recent()
    if recent.host_share is not None:
        line += f" · serving thread on host work **{recent.host_share:.0%}** since the last look"
    if recent.codec_lag_ms is not None:
        line += f" · codec windows back **{recent.codec_lag_ms:.1f} ms** after launch"
    if values.get("lab_gpu_present"):
        return line + f" · GPU {values.get('lab_gpu_utilization_percent', 0):.0f}% busy"
    return line + " · no GPU on the server"


async def scrape(url: str, since: SinceLastLook | None = None) -> str:
    """`highlights` of the server at `url` now, or why they could not be read; with `since`,
    also what its serving thread and codec did since `since` last looked at it."""
    async with loopback_client(PROBE_TIMEOUT_S) as client:
        try:
            response = await client.get(f"{url}/metrics")
            response.raise_for_status()
        except httpx.HTTPError as err:
            return f"**/metrics**: could not be read ({err!r})."
    recent = None if since is None else since.update(url, metric_samples(response.text)[0])
    return highlights(response.text, recent)
