"""The DRA informers on a cluster that does not serve ``resource.k8s.io/v1``: said once,
readiness not held back, watched as soon as the API is served."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from admission.kube.client.errors import ApiError
from admission.kube.control.dra_apis import DraApis


class _Client:
    """Lists fail with 404 until ``served``; then one DeviceClass, and an idle watch."""

    def __init__(self) -> None:
        self.served = False
        self.lists = 0

    async def list(self, res: Any, **_: Any) -> dict[str, Any]:
        self.lists += 1
        if not self.served:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        items = [{"metadata": {"name": "gpu.example.com", "resourceVersion": "1"}}]
        return {"metadata": {"resourceVersion": "1"},
                "items": items if res.plural == "deviceclasses" else []}  # fmt: skip

    async def watch(self, *_: Any, **__: Any) -> Any:
        await asyncio.sleep(3600)
        yield {}  # pragma: no cover


def test_an_api_not_served_is_logged_once_and_watched_once_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[tuple[str, str]] = []
    client = _Client()
    apis = DraApis(client, slices=False, retry=0.01,  # type: ignore[arg-type]
                   on_object=lambda kind, key, _obj: seen.append((kind, key)))  # fmt: skip

    async def main() -> None:
        task = asyncio.create_task(apis.run())
        await asyncio.wait_for(apis.synced.wait(), 5)  # readiness: not held back
        assert apis.not_served == {"deviceclasses", "resourceclaimtemplates"}
        while client.lists < 10:
            await asyncio.sleep(0.01)
        client.served = True
        while not seen:
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    with caplog.at_level(logging.INFO, logger="quartermaster.kube.dra"):
        asyncio.run(main())
    assert seen == [("DeviceClass", "gpu.example.com")]
    warned = [r for r in caplog.records if "is not served" in r.getMessage()]
    assert len(warned) == 2  # once per kind, however many checks
    assert any("resource.k8s.io/v1/deviceclasses is not served" in r.getMessage() for r in warned)
    assert any("is served now" in r.getMessage() for r in caplog.records)
