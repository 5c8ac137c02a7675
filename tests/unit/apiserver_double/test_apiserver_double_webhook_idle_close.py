"""A webhook server that closes a pooled keep-alive connection just as a request goes out
on it: the double sends the request again on a new connection, as kube-apiserver's Go
transport does, and only then; a request whose fresh connection fails still fails.

The server below answers the first request of each connection and closes the
connection, unanswered, on its next request: the moment an idle timeout fires as a
request arrives, made deterministic.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
from kubernetes.aio import client
from kubernetes.aio.client.exceptions import ApiException

from admission.apiserver_double import ApiServer, ServingCert, make_serving_cert
from tests.unit.apiserver_double._support import (
    cluster,
    decide,
    job,
    webhook_configurations,
)


@dataclass
class Seen:
    connections: int = 0
    answered: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


async def read_request(reader: asyncio.StreamReader) -> tuple[str, bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    length = int({k.lower(): v for k, v in headers.items()}.get("content-length", "0"))
    return lines[0].split(" ")[1], await reader.readexactly(length)


@asynccontextmanager
async def closing_webhook(
    cert: ServingCert, *, answer_first: bool
) -> AsyncIterator[tuple[str, Seen]]:
    """Answers request 1 of each connection (when ``answer_first``) and drops request 2."""
    seen = Seen()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.connections += 1
        first = True
        while (request := await read_request(reader)) is not None:
            path, body = request
            if not (first and answer_first):
                seen.dropped.append(path)
                break
            first = False
            review = json.loads(body)["request"]
            seen.answered.append(path)
            reply = json.dumps({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": review["uid"], **decide(path, review)},
            }).encode()  # fmt: skip
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(reply)}\r\n\r\n".encode()
                + reply
            )
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=cert.server_ssl_context())
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"https://127.0.0.1:{port}", seen
    finally:
        server.close()


@asynccontextmanager
async def double_behind_closing_webhook(
    *, answer_first: bool
) -> AsyncIterator[tuple[Seen, ApiServer, client.ApiClient]]:
    cert = make_serving_cert(["wh.hooks.svc"])
    async with closing_webhook(cert, answer_first=answer_first) as (url, seen):
        async with cluster(
            webhook_configurations=webhook_configurations(cert.ca_bundle),
            service_routes={"hooks/wh": url},
        ) as (server, api):
            yield seen, server, api


def test_a_request_on_a_connection_the_webhook_closed_as_idle_is_sent_again() -> None:
    async def scenario() -> None:
        async with double_behind_closing_webhook(answer_first=True) as (seen, server, api):
            batch = client.BatchV1Api(api)
            for name in ("one", "two"):
                created = await batch.create_namespaced_job("default", job(name))
                assert created.metadata.labels == {"mutated": "yes"}
        # every review was answered once; each dropped one went out on a reused connection
        assert seen.answered == ["/mutate-job", "/validate"] * 2
        assert seen.dropped and seen.connections == len(seen.answered)

    asyncio.run(scenario())


def test_a_fresh_connection_that_ends_unanswered_is_not_sent_again() -> None:
    async def scenario() -> None:
        async with double_behind_closing_webhook(answer_first=False) as (seen, server, api):
            with pytest.raises(ApiException) as err:
                await client.BatchV1Api(api).create_namespaced_job("default", job("j"))
            assert err.value.status == 500
            assert server.get_object("jobs", "j", "default") is None
        assert seen.dropped == ["/mutate-job"] and seen.connections == 1

    asyncio.run(scenario())
