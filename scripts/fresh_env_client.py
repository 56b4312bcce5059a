"""One synthesis through the running app, as a client would do it, and a check of the WAV.

    python scripts/fresh_env_client.py synth URL OUT_DIR TEXT   # via gradio_client
    python scripts/fresh_env_client.py check WAV TEXT           # just the WAV check

Used by `scripts/fresh_env_check.sh` inside a new virtual environment. The endpoint is found
by the Synthesize tab's element ids (`synth-text` in, `synth-take` out), not by its generated
api name, so renaming the handler does not break CI. That endpoint is the tab's streaming
generator; `Job.result()` waits for its last update, which carries the whole take as a WAV.
Only the standard library, numpy and gradio_client (shipped with gradio) are used.
"""

from __future__ import annotations

import sys
import wave
from pathlib import Path

import numpy as np

SAMPLE_RATE = 22050
SECONDS_PER_CHAR = (0.02, 0.2)  # generous bounds for English speech at any sane rate
MIN_RMS = 0.005  # of full scale; silence or a near-silent click fails


def check_wav(path: Path, text: str) -> str:
    """Raise SystemExit unless `path` is 22.05 kHz audio of a plausible length with signal."""
    with wave.open(str(path), "rb") as w:
        rate, width, channels, frames = (w.getframerate(), w.getsampwidth(),
                                         w.getnchannels(), w.getnframes())
        raw = w.readframes(frames)
    if width != 2:
        sys.exit(f"FAIL {path}: expected 16-bit PCM, got {8 * width}-bit")
    audio = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    audio = audio.reshape(-1, channels).mean(axis=1)
    seconds = len(audio) / rate if rate else 0.0
    rms = float(np.sqrt(np.mean(audio**2))) if len(audio) else 0.0
    low, high = (k * len(text) for k in SECONDS_PER_CHAR)
    summary = f"{path.name}: {rate} Hz, {seconds:.2f} s, rms {rms:.4f}"
    if rate != SAMPLE_RATE:
        sys.exit(f"FAIL {summary}: sample rate should be {SAMPLE_RATE}")
    if not low <= seconds <= high:
        sys.exit(f"FAIL {summary}: {len(text)} characters should last {low:.1f}-{high:.1f} s")
    if rms < MIN_RMS:
        sys.exit(f"FAIL {summary}: silent (rms below {MIN_RMS})")
    return summary


def synth_endpoint(config: dict) -> tuple[str, int, int]:
    """(api name, position of the text among API parameters, position of the take output)."""
    by_elem = {c.get("props", {}).get("elem_id"): c["id"] for c in config["components"]}
    kinds = {c["id"]: c["type"] for c in config["components"]}
    text_id, take_id = by_elem.get("synth-text"), by_elem.get("synth-take")
    if text_id is None or take_id is None:
        sys.exit("FAIL: the app has no synth-text / synth-take components")
    for dep in config["dependencies"]:
        if text_id in dep["inputs"] and take_id in dep["outputs"] and dep.get("api_name"):
            shown = [i for i in dep["inputs"] if kinds[i] != "state"]  # State is not an argument
            return "/" + dep["api_name"], shown.index(text_id), dep["outputs"].index(take_id)
    sys.exit("FAIL: no API endpoint takes synth-text and returns synth-take")


def synth(url: str, out_dir: Path, text: str) -> None:
    from gradio_client import Client

    client = Client(url, verbose=False, download_files=str(out_dir), analytics_enabled=False)
    api_name, text_at, take_at = synth_endpoint(client.config)
    params = client.view_api(print_info=False, return_format="dict")["named_endpoints"][api_name]
    args = [p.get("parameter_default") for p in params["parameters"]]  # the panel's defaults
    args[text_at] = text
    print(f"calling {api_name} with {len(args)} arguments (text at {text_at})", flush=True)
    job = client.submit(*args, api_name=api_name)
    outputs = job.result(timeout=300)
    take = outputs[take_at]
    status = outputs[-1]
    print(f"app status: {status}")
    if not isinstance(take, str) or not Path(take).is_file():
        sys.exit(f"FAIL: no WAV came back from {api_name} (got {take!r}; status {status!r})")
    print("OK", check_wav(Path(take), text))


def main(argv: list[str]) -> None:
    if len(argv) == 4 and argv[0] == "synth":
        synth(argv[1], Path(argv[2]), argv[3])
    elif len(argv) == 3 and argv[0] == "check":
        print("OK", check_wav(Path(argv[1]), argv[2]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
