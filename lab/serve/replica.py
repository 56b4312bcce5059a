"""One replica of `lab serve --replicas N`: a Ray Serve deployment that loads its own pipeline
and serves the very app that `lab serve` serves.

The routes are defined once, in `create_app`. Serve's ASGI ingress hands every request its
proxy routed here to that app, and passes the app's streamed responses back as they are sent.
The app is built late (`__serve_build_asgi_app__`, which Serve calls after the constructor),
because it wraps a loaded pipeline, and a pipeline can only be loaded inside the replica's own
process, on the device Ray gave it.

Every response names the replica that answered (`X-Replica`, Serve's replica id) and its
process (`X-Replica-Pid`), so a client can see how requests spread and which process to look
at in Ray's logs. This module imports Ray; only the replicas code path loads it.

Ray 2.60's replica opens its inter-deployment gRPC port on every interface (`"[::]:0"` in
`ray/serve/_private/replica.py`, with no setting to change it), while everything else the
local cluster runs listens on loopback. Importing this module, which the replica does before
it opens that port, binds it to loopback too; `tests/serve/test_replicas.py` checks that no
process of the cluster listens anywhere else.
"""

from __future__ import annotations

import os

from fastapi import FastAPI
from ray import serve
from ray.serve._private import replica as serve_replica
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lab.config import PipelineConfig
from lab.serve.app import create_app
from lab.serve.options import ServeOptions
from lab.serve.server import server_pipeline

REPLICA_HEADER = "x-replica"
PID_HEADER = "x-replica-pid"
ALL_INTERFACES = "[::]:"


def _bind_loopback(add_port):
    """Ray's `add_port_to_grpc_server`, with an all-interfaces address made loopback."""

    def add(server, address: str) -> int:
        return add_port(server, address.replace(ALL_INTERFACES, "127.0.0.1:", 1))

    return add


serve_replica.add_port_to_grpc_server = _bind_loopback(serve_replica.add_port_to_grpc_server)


class ReplicaHeaders:
    """ASGI middleware that adds fixed headers to every response. Pure ASGI rather than
    Starlette's BaseHTTPMiddleware, which would sit between the app and a streamed body."""

    def __init__(self, app: ASGIApp, headers: dict[str, str]) -> None:
        self.app = app
        self.headers = [(name.encode(), value.encode()) for name, value in headers.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *self.headers]}
            await send(message)

        await self.app(scope, receive, tagged)


@serve.deployment
@serve.ingress()
class LabReplica:
    """A pipeline loaded in this replica's process; Serve stops it through `__del__`."""

    def __init__(self, config: PipelineConfig, options: ServeOptions) -> None:
        self.pipeline = server_pipeline(config)
        self.options = options

    def __serve_build_asgi_app__(self) -> FastAPI:
        app = create_app(self.pipeline, self.options)
        replica = serve.get_replica_context().replica_id.unique_id
        app.add_middleware(ReplicaHeaders, headers={REPLICA_HEADER: replica,
                                                    PID_HEADER: str(os.getpid())})
        return app

    def __del__(self) -> None:
        self.pipeline.close()
