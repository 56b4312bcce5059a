"""Soak `lab serve` on the default voice: good input, bad input and clients that leave mid-stream.

    python scripts/serve_soak.py [--requests 1000] [--concurrency 4] [--max-seconds 3600]
                                 [--seed 0] [--out benchmarks/results]

Starts `lab serve --preset cpu-default` on a free loopback port, sends `--warmup` requests, reads
the server's resident memory, then sends the rest, drawn at random (seeded): good requests
(the lab's short and medium sentences, every response and stream format), bad ones (each kind
of input the server must refuse) and disconnects (a client that leaves after the first chunk,
or before the response starts). It stops after `--requests` or `--max-seconds`, whichever
comes first, waits for the server's active slots to return to 0, stops the server with SIGTERM
and writes serve_soak.json and serve_soak.md with the command in the header.

It passes when good input never gets a 5xx, every bad input gets a 4xx, no slot leaks, the
server's RSS at the end is within 10% of its RSS after warm-up, and the server exits 0.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from lab.serve.child import ServeProcess

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = ROOT / "lab" / "data" / "sentences"
MODEL = "cpu-default"
RSS_TOLERANCE = 0.10
TREND_EVERY = 100
"""Requests between two readings of the server's RSS: a leak climbs at every reading, while an
allocator that settles rises early and then stays."""
SHARES = {"good": 0.6, "bad": 0.25, "disconnect": 0.15}


def body(**fields) -> dict:
    return {"model": MODEL, "input": "Hello.", "voice": "default", **fields}


BAD = {
    "empty": body(input=""),
    "whitespace": body(input=" \n\t "),
    "oversized": body(input="a" * 5001),
    "controls only": body(input="\x00\x07\x1b[31m"),
    "unknown voice": body(voice="alloy"),
    "unknown format": body(response_format="mp3"),
    "speed out of range": body(speed=9),
    "speed not honoured": body(speed=1.5),
    "unknown field": body(volume=3),
    "malformed JSON": b'{"model": "cpu-default", "input": ',
}


@dataclass
class Outcome:
    kind: str
    case: str
    status: int | None
    seconds: float
    ttfb_s: float | None = None
    error: str | None = None


def texts() -> list[str]:
    lines = []
    for name in ("short.txt", "medium.txt"):
        lines += [t.strip() for t in (SENTENCES / name).read_text().splitlines() if t.strip()]
    return lines


def good(client: httpx.Client, url: str, rng: random.Random, pool: list[str]) -> Outcome:
    fmt = rng.choice(["wav", "pcm", "flac"])
    stream_format = rng.choice(["audio", "sse"])
    start = time.perf_counter()
    ttfb = None
    payload = body(input=rng.choice(pool), response_format=fmt, stream_format=stream_format)
    data = b""
    with client.stream("POST", f"{url}/v1/audio/speech", json=payload) as response:
        for part in response.iter_raw():
            ttfb = ttfb if ttfb is not None else time.perf_counter() - start
            data += part
    # A raw audio stream cut short raises on read; an SSE stream ends with an error event.
    unfinished = stream_format == "sse" and b'"speech.audio.done"' not in data
    return Outcome("good", f"{fmt}/{stream_format}", response.status_code,
                   time.perf_counter() - start, ttfb,
                   error="the SSE stream ended without speech.audio.done" if unfinished else None)


def bad(client: httpx.Client, url: str, rng: random.Random) -> Outcome:
    case = rng.choice(list(BAD))
    sent = BAD[case]
    start = time.perf_counter()
    if isinstance(sent, bytes):
        response = client.post(f"{url}/v1/audio/speech", content=sent,
                               headers={"content-type": "application/json"})
    else:
        response = client.post(f"{url}/v1/audio/speech", json=sent)
    param = response.json().get("error", {}).get("param")
    return Outcome("bad", case, response.status_code, time.perf_counter() - start,
                   error=None if param else "the error names no field")


def disconnect(url: str, rng: random.Random, pool: list[str]) -> Outcome:
    """Leave after the first chunk, or before the response starts (a read timeout)."""
    early = rng.random() < 0.3
    start = time.perf_counter()
    timeout = httpx.Timeout(60, read=0.05) if early else httpx.Timeout(60)
    payload = body(input=" ".join(rng.sample(pool, 3)))
    with httpx.Client(timeout=timeout) as client:
        try:
            with client.stream("POST", f"{url}/v1/audio/speech", json=payload) as response:
                next(response.iter_raw())
                status = response.status_code
        except httpx.ReadTimeout:
            status = None
    return Outcome("disconnect", "before headers" if early else "after first chunk", status,
                   time.perf_counter() - start)


def one(url: str, kind: str, seed: int, pool: list[str], local: threading.local) -> Outcome:
    rng = random.Random(seed)
    if not hasattr(local, "client"):
        local.client = httpx.Client(timeout=120)
    try:
        if kind == "good":
            return good(local.client, url, rng, pool)
        if kind == "bad":
            return bad(local.client, url, rng)
        return disconnect(url, rng, pool)
    except httpx.HTTPError as err:
        return Outcome(kind, "transport", None, 0.0, error=f"{type(err).__name__}: {err}")


def metric(url: str, name: str) -> float | None:
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    return None


def run_batch(url: str, kinds: list[str], seeds: list[int], pool: list[str], concurrency: int,
              stop_at: float) -> list[Outcome]:
    local = threading.local()

    def task(kind: str, seed: int) -> Outcome | None:
        return None if time.monotonic() > stop_at else one(url, kind, seed, pool, local)

    with ThreadPoolExecutor(concurrency) as pool_exec:
        done = list(pool_exec.map(task, kinds, seeds))
    return [o for o in done if o is not None]


def wait_for_idle(url: str, timeout: float = 30.0) -> int | None:
    end = time.monotonic() + timeout
    while (active := metric(url, "lab_active_slots")) and time.monotonic() < end:
        time.sleep(0.1)
    return None if active is None else int(active)


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def summarize(outcomes: list[Outcome]) -> dict:
    by_kind: dict[str, dict[str, int]] = {}
    for o in outcomes:
        counts = by_kind.setdefault(o.kind, {})
        counts[str(o.status)] = counts.get(str(o.status), 0) + 1
    goods = [o for o in outcomes if o.kind == "good"]
    bads = [o for o in outcomes if o.kind == "bad"]
    seconds = [o.seconds for o in goods if o.status == 200]
    ttfb = [o.ttfb_s for o in goods if o.status == 200 and o.ttfb_s is not None
            and not o.case.startswith("flac")]  # FLAC is sent whole, once synthesis ends
    return {
        "by_kind_and_status": by_kind,
        "good_5xx": sum(1 for o in goods if o.status is not None and o.status >= 500),
        "good_not_200": sum(1 for o in goods if o.status != 200),
        "good_unfinished": sum(1 for o in goods if o.error),
        "bad_not_4xx": sum(1 for o in bads if o.status is None or not 400 <= o.status < 500),
        "bad_without_field": sum(1 for o in bads if o.error),
        "transport_errors": [o.error for o in outcomes if o.case == "transport"],
        "good_latency_p50_s": quantile(seconds, 0.5),
        "good_latency_p95_s": quantile(seconds, 0.95),
        "good_ttfb_p50_s": quantile(ttfb, 0.5),
        "good_ttfb_p95_s": quantile(ttfb, 0.95),
    }


def markdown(report: dict) -> str:
    s, checks = report["summary"], report["checks"]
    rows = [("requests sent", report["requests_sent"]),
            ("wall time", f"{report['wall_s']:.0f} s"),
            ("good input answered 5xx", s["good_5xx"]),
            ("good input not 200, or unfinished", s["good_not_200"] + s["good_unfinished"]),
            ("bad input not 4xx", s["bad_not_4xx"]),
            ("bad input without a field named", s["bad_without_field"]),
            ("active slots after", report["active_slots_after"]),
            ("errors in the server log", len(report["server_errors"])),
            ("RSS after warm-up", f"{report['rss_warm_mb']:.0f} MB"),
            ("RSS at the end", f"{report['rss_end_mb']:.0f} MB "
                               f"({100 * report['rss_change']:+.1f}%)"),
            (f"RSS every {TREND_EVERY} requests", " ".join(
                f"{mb:.0f}" for _, mb in report.get("rss_trend_mb", [])) + " MB"),
            ("good latency p50 / p95", f"{s['good_latency_p50_s']:.2f} / "
                                       f"{s['good_latency_p95_s']:.2f} s"),
            ("good first byte p50 / p95 (wav, pcm)", f"{s['good_ttfb_p50_s']:.2f} / "
                                          f"{s['good_ttfb_p95_s']:.2f} s"),
            ("server exit code", report["server_exit"]),
            ("verdict", "PASS" if all(checks.values()) else "FAIL: " + ", ".join(
                name for name, ok in checks.items() if not ok))]
    kinds = "; ".join(f"{kind}: " + ", ".join(f"{n}x {status}" for status, n in counts.items())
                      for kind, counts in s["by_kind_and_status"].items())
    return "\n".join([
        "# Serve soak: the default voice on CPU",
        "",
        f"`lab serve --preset {MODEL}` on loopback, {report['concurrency']} clients at once, "
        f"{report['warmup']} warm-up requests then the rest; mix {SHARES} (seed "
        f"{report['seed']}). Command: `{report['command']}`.",
        "",
        "| figure | value |",
        "| --- | ---: |",
        *[f"| {name} | {value} |" for name, value in rows],
        "",
        f"Statuses by kind: {kinds}.",
        "",
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=None,
                        help="requests before the RSS baseline (default: 10%%, at least 10)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--slots", type=int, default=None, help="passed to lab serve")
    parser.add_argument("--max-seconds", type=float, default=3600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()
    warmup = args.warmup if args.warmup is not None else max(10, args.requests // 10)
    rng = random.Random(args.seed)
    kinds = rng.choices(list(SHARES), weights=list(SHARES.values()), k=args.requests)
    seeds = [rng.randrange(2**31) for _ in kinds]
    pool = texts()
    started = time.monotonic()
    stop_at = started + args.max_seconds
    server = ServeProcess(["--preset", MODEL, "--port", "0",
                           *(["--slots", str(args.slots)] if args.slots else [])])
    try:
        print(f"server at {server.url}; warming up with {warmup} requests", flush=True)
        outcomes = run_batch(server.url, ["good"] * warmup, seeds[:warmup], pool,
                             args.concurrency, stop_at)
        rss_warm = server.rss()
        trend = [(len(outcomes), rss_warm / 2**20)]
        print(f"soaking with {len(kinds) - warmup} requests", flush=True)
        for start in range(warmup, len(kinds), TREND_EVERY):
            part = slice(start, start + TREND_EVERY)
            outcomes += run_batch(server.url, kinds[part], seeds[part], pool, args.concurrency,
                                  stop_at)
            trend.append((len(outcomes), server.rss() / 2**20))
        active_after = wait_for_idle(server.url)
        rss_end = server.rss()
    finally:
        exit_code = server.stop()
    change = rss_end / rss_warm - 1
    summary = summarize(outcomes)
    errors = [line for line in server.lines if "ERROR" in line or "Traceback" in line]
    report = {
        "command": " ".join(["python", "scripts/serve_soak.py", *sys.argv[1:]]),
        "requests_sent": len(outcomes), "warmup": warmup, "concurrency": args.concurrency,
        "seed": args.seed, "wall_s": time.monotonic() - started,
        "active_slots_after": active_after, "rss_warm_mb": rss_warm / 2**20,
        "rss_end_mb": rss_end / 2**20, "rss_change": change, "server_exit": exit_code,
        "rss_trend_mb": [[n, round(mb, 1)] for n, mb in trend],
        "summary": summary,
        "checks": {"no 5xx for good input": summary["good_5xx"] == 0,
                   "every good input finished": not (summary["good_not_200"]
                                                     or summary["good_unfinished"]),
                   "every bad input 4xx naming a field": not (summary["bad_not_4xx"]
                                                              or summary["bad_without_field"]),
                   "no transport errors": not summary["transport_errors"],
                   "no errors in the server log": not errors,
                   "no slot leak": active_after == 0,
                   f"RSS within {RSS_TOLERANCE:.0%}": abs(change) <= RSS_TOLERANCE,
                   "server exits 0 after draining": exit_code == 0},
        "outcomes": [asdict(o) for o in outcomes],
        "server_errors": errors,
        "server_log_tail": server.lines[-20:],
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "serve_soak.json").write_text(json.dumps(report, indent=2))
    (out / "serve_soak.md").write_text(markdown(report))
    print(markdown(report))
    return 0 if all(report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
