"""The dashboard in a real browser: Debian's headless Chromium driven by Playwright
(pointed at the system browser with ``executable_path``; no browser download).

Screenshots are kept in ``test-artifacts/`` (gitignored) for people to look at."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from admission.kube import client as k
from tests.kube_harness import (
    ROOT,
    admitted,
    cluster_queue,
    eventually,
    flavor,
    local_queue,
    namespace,
    stack,
    workload,
)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = ROOT / "test-artifacts"
playwright = pytest.importorskip("playwright.async_api")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")

OBJECTS = [
    namespace("team-a"),
    flavor("a100"),
    cluster_queue("research", {"a100": {"cpu": 4}}, cohort="org", borrowing_limit="0"),
    cluster_queue("prod", {"a100": {"cpu": 2}}, cohort="org"),
    local_queue("team-a", "lq", "research"),
]


def test_the_page_shows_usage_and_reasons_and_updates_within_a_second(tmp_path: Path) -> None:
    ARTIFACTS.mkdir(exist_ok=True)

    async def main() -> None:
        async with stack(tmp_path, objects=OBJECTS, dashboard_port=0) as s:
            for name, cpu in (("running", "3"), ("too-big", "5")):
                wl = workload("team-a", name, queue="lq", pod_sets=[("main", 1, cpu)])
                await s.user.create(k.WORKLOADS, wl, namespace="team-a")
            await eventually(
                lambda: admitted(s.get("workloads", "running", "team-a")), what="running admitted"
            )
            await eventually(lambda: "dashboard" in s.service.ports, what="dashboard listens")
            url = f"http://127.0.0.1:{s.service.ports['dashboard']}/"
            async with playwright.async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True)
                page = await browser.new_page(viewport={"width": 1400, "height": 900})
                await page.goto(url)
                tree = page.locator("#tree")
                # the ClusterQueue's usage against nominal, in the cohort tree
                await page.wait_for_function(
                    "document.querySelector('#tree').innerText.includes('a100/cpu 3/4')"
                )
                assert "org" in await tree.inner_text()
                await page.locator("#tree .row.cq", has_text="research").click()
                pending = page.locator("#pending .row", has_text="team-a/too-big")
                await pending.wait_for()
                text = await pending.inner_text()
                assert "ExceedsMaxQuota" in text and "cpu" in text  # the reason, in numbers
                await page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)

                # a new admission: the page shows it within a second (server push)
                version = await page.evaluate("document.body.dataset.version")
                wl = workload("team-a", "small", queue="lq", pod_sets=[("main", 1, "1")])
                await s.user.create(k.WORKLOADS, wl, namespace="team-a")
                await eventually(
                    lambda: admitted(s.get("workloads", "small", "team-a")), what="small admitted",
                    interval=0.005,
                )  # fmt: skip
                seen = time.monotonic()
                await page.wait_for_function(
                    "document.querySelector('#tree').innerText.includes('a100/cpu 4/4')"
                    " && document.querySelector('#recent').innerText.includes('team-a/small')",
                    timeout=1000,
                )
                elapsed = time.monotonic() - seen
                assert int(await page.evaluate("document.body.dataset.version")) > int(version)
                await page.screenshot(path=str(ARTIFACTS / "dashboard-after-admission.png"),
                                      full_page=True)  # fmt: skip
                (ARTIFACTS / "dashboard-update-seconds.txt").write_text(f"{elapsed:.3f}\n")
                await browser.close()

    asyncio.run(main())


def test_the_api_pages_a_large_queue_and_aggregates_by_cohort(tmp_path: Path) -> None:
    """The page's data at scale comes from bounded pages and Cohort rows."""
    cqs = [cluster_queue(f"cq-{i:03d}", {"a100": {"cpu": 0}}, cohort=f"co-{i % 10}")
           for i in range(60)]  # fmt: skip

    async def main() -> None:
        async with stack(
            tmp_path,
            objects=[
                namespace("team-a"),
                flavor("a100"),
                *cqs,
                local_queue("team-a", "lq", "cq-000"),
            ],
            dashboard_port=0,
        ) as s:
            await asyncio.gather(*(
                s.user.create(k.WORKLOADS, workload("team-a", f"w{i:03d}", queue="lq",
                                                    pod_sets=[("main", 1, "1")]), namespace="team-a")
                for i in range(300)
            ))  # fmt: skip
            await eventually(lambda: "dashboard" in s.service.ports, what="dashboard listens")
            base = f"http://127.0.0.1:{s.service.ports['dashboard']}"

            def get(path: str) -> Any:
                with urllib.request.urlopen(base + path, timeout=10) as resp:
                    return json.loads(resp.read())

            async def all_pending() -> Any:
                body = await asyncio.to_thread(get, "/api/summary")
                return body if body["pending"] == 300 else None

            summary = await eventually(all_pending, what="300 pending")
            cohorts = {n["name"]: n for n in summary["nodes"] if n["kind"] == "Cohort"}
            assert len(cohorts) == 10 and cohorts["co-0"]["pending"] == 300
            assert sum(1 for n in summary["nodes"] if n["kind"] == "ClusterQueue") == 60
            page = await asyncio.to_thread(get, "/api/pending?cq=cq-000&offset=250&limit=100")
            assert page["total"] == 300 and len(page["items"]) == 50
            assert [i["positionInClusterQueue"] for i in page["items"]] == list(range(250, 300))
            big = await asyncio.to_thread(get, "/api/pending?cq=cq-000&limit=100000")
            assert len(big["items"]) == 300

    asyncio.run(main())
