"""/metrics is Prometheus text with the figures a TTS service is judged by, fallbacks included."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from lab.config import load_preset
from lab.pipeline import Pipeline
from tests.serve.conftest import MODEL, metric, running, speech

FAMILIES = {
    "lab_speech_requests": "counter",
    "lab_time_to_first_audio_seconds": "histogram",
    "lab_request_latency_seconds": "histogram",
    "lab_engine_admission_wait_seconds": "histogram",
    "lab_real_time_factor": "histogram",
    "lab_queue_depth": "gauge",
    "lab_active_slots": "gauge",
    "lab_slots": "gauge",
    "lab_tokens_per_second": "gauge",
    "lab_tokens": "counter",
    "lab_fallbacks": "counter",
    "lab_worker_rounds": "counter",
    "lab_worker_busy_seconds": "counter",
    "lab_gpu_present": "gauge",
    "process_resident_memory_bytes": "gauge",
}


def test_metrics_parse_as_prometheus_text(serve_pipeline):
    with running(serve_pipeline) as srv:
        endpoint = f"{srv.url}/v1/audio/speech"
        assert httpx.post(endpoint, json=speech(), timeout=60).status_code == 200
        assert httpx.post(endpoint, json=speech(input="")).status_code == 400
        response = httpx.get(f"{srv.url}/metrics")
        assert response.headers["content-type"].startswith("text/plain")
        families = {f.name: f for f in text_string_to_metric_families(response.text)}
        for name, kind in FAMILIES.items():
            assert families[name].type == kind, name
        assert metric(srv.url, "lab_speech_requests_total", {"status": "200"}) == 1
        assert metric(srv.url, "lab_speech_requests_total", {"status": "400"}) == 1
        assert metric(srv.url, "lab_time_to_first_audio_seconds_count") == 1
        rtf = metric(srv.url, "lab_real_time_factor_sum")
        assert 0 < rtf < 10
        assert metric(srv.url, "lab_gpu_present") == 0  # CPU: no NVML GPU here
        assert metric(srv.url, "lab_worker_rounds_total") >= 1  # the request's own rounds
        assert 0 < metric(srv.url, "lab_worker_busy_seconds_total") < 60
        assert "lab_engine_waiting" not in families  # the Piper voice has no such engine


def test_an_engine_family_shows_what_its_engine_holds_back():
    """Requests past the server's queue that the pipeline's engine has not let in yet, and
    the steps its admission gate was shut, read live from the Orpheus engine."""
    pipeline = Pipeline(load_preset("orpheus-tiny-cpu", admit_lead_ms=40))
    try:
        with running(pipeline) as srv:
            families = {f.name: f for f in text_string_to_metric_families(
                httpx.get(f"{srv.url}/metrics").text)}
            assert families["lab_engine_waiting"].type == "gauge"
            assert families["lab_admission_held_steps"].type == "counter"
            assert metric(srv.url, "lab_engine_waiting") == 0
            assert families["lab_engine_device_wait_seconds"].type == "counter"
            backend = pipeline.backend
            backend.tts.held_steps = 7  # as the gate counts them (tests/models/test_orpheus.py)
            assert metric(srv.url, "lab_admission_held_steps_total") == 7
            assert families["lab_engine_round_seconds"].type == "gauge"
            backend.tts.round_s = 0.0123  # as its steps average it (tests/models/test_orpheus.py)
            assert metric(srv.url, "lab_engine_round_seconds") == 0.0123
            backend.tts.decoder.collected_windows = 40  # as collect counts them
            backend.tts.decoder.collect_lag_s = 0.6  # (tests/models/test_snac_codec.py)
            assert families["lab_codec_windows"].type == "counter"
            assert metric(srv.url, "lab_codec_windows_total") == 40
            assert metric(srv.url, "lab_codec_lag_seconds_total") == 0.6
    finally:
        pipeline.close()


def test_fallbacks_are_counted_and_logged(caplog):
    """int8 quantization has no linear layer to act on in the Piper voice: a real fallback."""
    pipeline = Pipeline(load_preset(MODEL, quant="int8-weight"))
    try:
        note = pipeline.fallbacks[0]
        with caplog.at_level("WARNING", logger="lab.serve"), running(pipeline) as srv:
            assert metric(srv.url, "lab_fallbacks_total", {"fallback": note}) == 1
        assert any(note in record.getMessage() for record in caplog.records)
    finally:
        pipeline.close()
