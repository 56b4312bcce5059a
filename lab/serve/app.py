"""The HTTP API: OpenAI's `/v1/audio/speech` and `/v1/models`, plus health, readiness, metrics.

`create_app` wraps a loaded `Pipeline`; the caller owns it (loads it, closes it), so a test or
the app's Serve tab can put several servers in turn on one model. Every refusal is a JSON
error naming the field at fault, counted on `/metrics`; nothing a client sends ends the server.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from lab.metrics.telemetry import TelemetrySampler
from lab.pipeline import Pipeline
from lab.serve.admission import Admission
from lab.serve.errors import SERVER, ApiError, invalid
from lab.serve.metrics import ServerMetrics
from lab.serve.offer import Offer
from lab.serve.options import ServeOptions
from lab.serve.schema import SpeechRequest
from lab.serve.speech import Served, respond

log = logging.getLogger("lab.serve")


def validation_error(err: RequestValidationError) -> ApiError:
    """The first problem pydantic found, naming its top-level field. Malformed JSON is 400
    (param `body`); a well-formed body of the wrong shape is 422."""
    first = err.errors()[0]
    loc = [str(part) for part in first.get("loc", ())]
    if first.get("type") == "json_invalid":
        detail = first.get("ctx", {}).get("error", first.get("msg", ""))
        return invalid("body", f"body is not valid JSON: {detail}")
    param = loc[1] if len(loc) > 1 and loc[0] == "body" else (loc[-1] if loc else "body")
    return invalid(param, f"{param}: {first.get('msg', 'invalid')}", status=422)


def create_app(pipeline: Pipeline, options: ServeOptions | None = None) -> FastAPI:
    options = options or ServeOptions()
    admission = Admission(options.slots_for(pipeline), options.queue, options.retry_after_s)
    sampler = TelemetrySampler(interval_s=1.0)
    metrics = ServerMetrics(admission, sampler, pipeline.engine_queue, pipeline.worker_load)
    served = Served(pipeline, Offer.of(pipeline, options.model_name), admission, metrics,
                    options.deadline_s)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        sampler.start()
        metrics.note_fallbacks(pipeline.fallbacks)
        try:
            yield
        finally:
            sampler.stop()

    app = FastAPI(title="TTS Optimization Lab", lifespan=lifespan)
    app.state.served = served

    def refuse(err: ApiError) -> JSONResponse:
        metrics.count(err.status)
        if err.status >= 500:
            log.warning("speech request refused (%d %s): %s", err.status, err.code, err.message)
        return err.response()

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, err: ApiError) -> JSONResponse:
        return refuse(err)

    @app.exception_handler(RequestValidationError)
    async def _bad_request(_request: Request, err: RequestValidationError) -> JSONResponse:
        return refuse(validation_error(err))

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, err: Exception) -> JSONResponse:
        log.exception("speech request failed")
        return refuse(ApiError(500, f"{type(err).__name__}: {err}", kind=SERVER,
                               code="internal_error"))

    @app.post("/v1/audio/speech")
    async def speech(body: SpeechRequest, request: Request) -> Response:
        return await respond(served, body, request)

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list",
                "data": [{"id": name, "object": "model", "created": 0, "owned_by": "lab"}
                         for name in served.offer.models]}

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/ready")
    async def ready() -> JSONResponse:
        if admission.draining:
            return JSONResponse({"ready": False, "reason": "shutting down: finishing the "
                                 "requests in flight, taking no new ones"}, status_code=503)
        return JSONResponse({"ready": True, "family": pipeline.family.name,
                             "models": list(served.offer.models),
                             "voices": list(served.offer.voices),
                             "sample_rate": pipeline.sample_rate, "slots": admission.slots,
                             "queue": admission.queue, "startup_ms": pipeline.startup,
                             "fallbacks": pipeline.fallbacks})

    @app.get("/metrics")
    async def metrics_text() -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    return app
