"""Every bad request gets its status and a JSON error naming the field; the server serves on."""

from __future__ import annotations

import httpx
import pytest
import torch

from lab.serve.speech import describe_failure
from tests.serve.conftest import running, speech

TOO_LONG = "a" * 5001  # cpu-default keeps the config's max_chars of 5000

BAD = {
    "empty input": (speech(input=""), 400, "input", "empty"),
    "whitespace input": (speech(input="  \n\t "), 400, "input", "whitespace"),
    "oversized input": (speech(input=TOO_LONG), 400, "input", "max_chars"),
    "control characters only": (speech(input="\x00\x07\x1b[31m"), 400, "input", "control"),
    "input not a string": (speech(input=42), 422, "input", "string"),
    "input missing": ({"model": "cpu-default", "voice": "default"}, 422, "input", "required"),
    "unknown voice": (speech(voice="alloy"), 400, "voice", "single speaker"),
    "unknown custom voice": (speech(voice={"id": "voice_1234"}), 400, "voice", "voice_1234"),
    "unknown format": (speech(response_format="mp3"), 422, "response_format", "wav"),
    "unknown stream format": (speech(stream_format="ws"), 422, "stream_format", "sse"),
    "unknown model": (speech(model="tts-1"), 400, "model", "cpu-default"),
    "speed out of range": (speech(speed=9), 422, "speed", "4"),
    "speed not a number": (speech(speed="fast"), 422, "speed", "number"),
    "speed the voice cannot honour": (speech(speed=1.5), 400, "speed", "length_scale"),
    "instructions": (speech(instructions="whisper"), 400, "instructions", "style"),
    "unknown field": (speech(volume=3), 422, "volume", "extra"),
}
MALFORMED = {
    "malformed JSON": b'{"model": "cpu-default", "input": "Hi",',
    "not JSON at all": b"hello",
}


@pytest.fixture(scope="module")
def server(serve_pipeline):
    with running(serve_pipeline) as srv:
        yield srv


def still_serves(url: str) -> None:
    response = httpx.post(f"{url}/v1/audio/speech", json=speech(), timeout=60)
    assert response.status_code == 200 and len(response.content) > 1000


@pytest.mark.parametrize("case", list(BAD))
def test_bad_field_is_refused_by_name(server, case):
    body, status, param, words = BAD[case]
    response = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param
    assert words.lower() in error["message"].lower(), error["message"]
    still_serves(server.url)


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_json_is_400_naming_the_body(server, case):
    response = httpx.post(f"{server.url}/v1/audio/speech", content=MALFORMED[case],
                          headers={"content-type": "application/json"}, timeout=60)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "body"
    still_serves(server.url)


def test_a_control_character_inside_text_is_a_word_break_not_a_refusal(server):
    """The frontend's one rule: controls in text become word breaks (lab.frontend.validation)."""
    response = httpx.post(f"{server.url}/v1/audio/speech", json=speech(input="Hi\x00there."),
                          timeout=60)
    assert response.status_code == 200


def test_out_of_memory_is_503_with_the_reason():
    err = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore")
    refusal = describe_failure(err, retry_after_s=2)
    assert refusal.status == 503 and refusal.headers == {"Retry-After": "2"}
    assert "Tried to allocate 2.00 GiB" in refusal.message and refusal.code == "out_of_memory"
