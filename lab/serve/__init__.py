"""An OpenAI-compatible streaming speech server over one loaded pipeline (`lab serve`).

`create_app(pipeline, options)` builds the FastAPI app; `LabServer` runs it under uvicorn on
loopback by default, with admission control, a per-request deadline, Prometheus metrics and a
graceful shutdown that finishes the requests in flight. See docs/serving.md.
"""

from lab.serve.app import create_app
from lab.serve.options import ServeOptions
from lab.serve.server import LabServer

__all__ = ["LabServer", "ServeOptions", "create_app"]
