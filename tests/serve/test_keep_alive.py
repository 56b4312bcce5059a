"""An idle connection outlives a client's pool expiry, so a reused connection is never one
the server is closing."""

import http.client
import json
import time

import pytest

from lab.serve import ServeOptions
from tests.serve.conftest import running

CLIENT_POOL_EXPIRY_S = 5.0  # httpx's default keepalive_expiry, which the openai client keeps


def _get(conn: http.client.HTTPConnection, path: str) -> dict:
    conn.request("GET", path)
    response = conn.getresponse()
    assert response.status == 200
    return json.loads(response.read())


def test_a_connection_idle_past_a_clients_pool_expiry_still_answers(serve_pipeline):
    with running(serve_pipeline) as server:
        conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
        try:
            assert _get(conn, "/health") == {"status": "ok"}
            time.sleep(CLIENT_POOL_EXPIRY_S + 1)
            assert _get(conn, "/health") == {"status": "ok"}  # the same socket, not reopened
        finally:
            conn.close()


def test_an_idle_connection_closes_after_the_keep_alive(serve_pipeline):
    with running(serve_pipeline, keep_alive_s=0.5) as server:
        conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
        try:
            _get(conn, "/health")
            time.sleep(1.5)
            with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
                _get(conn, "/health")
        finally:
            conn.close()


@pytest.mark.parametrize("bad", [0, -1.0])
def test_a_keep_alive_that_is_not_positive_is_refused(bad):
    with pytest.raises(ValueError, match="keep_alive_s"):
        ServeOptions(keep_alive_s=bad)
