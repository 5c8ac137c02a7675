"""The dashboard in a real browser: Debian's headless Chromium driven by Playwright
(pointed at the system browser with ``executable_path``; no browser download), on the
realistic GPU organisation of ``manifests/examples/``.

Screenshots are kept in ``test-artifacts/`` (gitignored) for people to look at; with
``QM_WRITE_DOCS_SCREENSHOT=docs/images/dashboard.png`` the picture of the README is
written from the same page."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from playwright import async_api as playwright

from admission.kube.client import resources as k
from tests.support.kube_harness import (
    ROOT,
    Obj,
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
# Playwright is a test dependency (pyproject.toml); only the system browser may be absent
# (.ci/run installs it), and then only the browser test is skipped.
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")

EXAMPLES = ROOT / "manifests" / "examples"
SCREENSHOT_ENV = "QM_WRITE_DOCS_SCREENSHOT"
"""Set to a path (``docs/images/dashboard.png``) to write the page's picture there too."""


def example_objects() -> tuple[list[Obj], list[Obj]]:
    """manifests/examples/ as a user applies it: the organisation (namespaces, flavors,
    Cohorts, ClusterQueues, LocalQueues, priorities) and its sample Jobs, the Jobs
    without the uid and creationTimestamp the API server assigns."""
    setup: list[Obj] = []
    jobs: list[Obj] = []
    for path in sorted(EXAMPLES.glob("[0-6]*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            if doc["kind"] == "Job":
                for generated in ("uid", "creationTimestamp"):
                    doc["metadata"].pop(generated, None)
                jobs.append(doc)
            else:
                setup.append(doc)
    return setup, jobs


# What a person must be able to read, evaluated in the page (returns the offenders): no
# box clips or spills its text, no usage chip is cut off by its pane or overlaps another
# of its row, no two rows of a list overlap.
LAYOUT_PROBLEMS = """
() => {
  const problems = [];
  // every box that holds text (inline text is judged by its box), scroll panes aside
  for (const el of document.querySelectorAll("#tree-pane *, #detail-pane *")) {
    if (!el.textContent.trim() || el.classList.contains("vlist")) continue;
    if (getComputedStyle(el).display === "inline") continue;
    if (el.scrollWidth > el.clientWidth + 1)
      problems.push(`clipped: ${el.textContent.slice(0, 80)} (${el.scrollWidth} > ${el.clientWidth})`);
  }
  for (const row of document.querySelectorAll("#tree .row")) {
    const pane = row.closest(".vlist").getBoundingClientRect();
    const boxes = Array.from(row.querySelectorAll("[data-quantity]"), (b) => [b, b.getBoundingClientRect()]);
    for (const [b, r] of boxes) {
      if (r.left < pane.left - 1 || r.right > pane.left + row.closest(".vlist").clientWidth + 1)
        problems.push(`cut off: ${row.dataset.name} ${b.dataset.quantity}`);
    }
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
      const [a, ra] = boxes[i], [b, rb] = boxes[j];
      if (ra.left < rb.right - 1 && rb.left < ra.right - 1 && ra.top < rb.bottom - 1 && rb.top < ra.bottom - 1)
        problems.push(`overlap: ${row.dataset.name} ${a.dataset.quantity} / ${b.dataset.quantity}`);
    }
  }
  for (const list of document.querySelectorAll(".vlist")) {
    const rows = Array.from(list.querySelectorAll(".row"), (r) => r.getBoundingClientRect())
      .sort((a, b) => a.top - b.top);
    for (let i = 1; i < rows.length; i++)
      if (rows[i].top < rows[i - 1].bottom - 1) problems.push(`rows overlap in #${list.id}`);
  }
  return problems;
}
"""


# Resolves after the page has rendered two frames: the lists' ResizeObserver callbacks
# (which measure and place their rows) of the frame before have run by then.
SETTLED = """
() => document.fonts.ready.then(() => new Promise(
  (done) => requestAnimationFrame(() => requestAnimationFrame(() => done(true)))))
"""

H100_ROWS = sorted(["org", "production", "inference-prod", "training-prod", "research",
                   "llm-research", "vision-research"])  # fmt: skip
H100_CHIPS_IN_VIEW = """
() => {
  const pane = document.querySelector("#tree").getBoundingClientRect();
  return Array.from(document.querySelectorAll('#tree [data-quantity="h100/nvidia.com/gpu"]'))
    .filter((chip) => {
      const r = chip.getBoundingClientRect();
      return r.width > 0 && r.left >= pane.left && r.right <= pane.right
        && r.top >= pane.top && r.bottom <= pane.bottom;
    })
    .map((chip) => chip.closest(".row").dataset.name).sort();
}
"""


@needs_chromium
def test_the_page_reads_well_with_a_realistic_gpu_organisation(tmp_path: Path) -> None:
    """manifests/examples/ (H100, A100, MIG, a CPU pool; five ClusterQueues in three
    Cohorts): every usage chip, label, reason and message is shown whole, nothing
    overlaps, and an admission reaches the open page by server push."""
    ARTIFACTS.mkdir(exist_ok=True)
    setup, jobs = example_objects()

    async def main() -> None:
        async with stack(tmp_path, objects=setup, dashboard_port=0) as s:
            for job in jobs:
                await s.user.create(k.JOBS, job, namespace=job["metadata"]["namespace"])

            def settled() -> bool:
                wls = s.workloads()
                return len(wls) == len(jobs) and sum(map(admitted, wls)) == len(jobs) - 2

            await eventually(settled, what="six of the eight example Jobs admitted", timeout=120)
            await eventually(lambda: "dashboard" in s.service.ports, what="dashboard listens")
            url = f"http://127.0.0.1:{s.service.ports['dashboard']}/"
            async with playwright.async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True)
                page = await browser.new_page(viewport={"width": 1400, "height": 900})
                await page.goto(url)
                tree = page.locator("#tree")
                await page.locator('#tree .row[data-name="inference-prod"]').click()
                pending = page.locator("#pending .row", has_text="mig-batch-eval")
                await pending.wait_for()
                await page.wait_for_function("document.querySelectorAll('#admitted .row').length")
                await page.evaluate(SETTLED)
                problems = await page.evaluate(LAYOUT_PROBLEMS)
                await page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
                if os.environ.get(SCREENSHOT_ENV):
                    await page.screenshot(path=os.environ[SCREENSHOT_ENV], full_page=True)
                assert problems == []
                text = await pending.inner_text()
                assert "insufficient unused quota for nvidia.com/mig-1g.10gb" in text
                assert "production (10000)" in text  # the priority class and its value
                # llm-research's H100 GPUs: 32 in use of 16 nominal, 16 borrowed
                gpu = tree.locator(
                    '.row[data-name="llm-research"] [data-quantity="h100/nvidia.com/gpu"]'
                )
                assert "32 / 16 +16" in await gpu.inner_text()
                # the H100 GPU chip of every row with H100 quota is whole inside the pane
                assert await page.evaluate(H100_CHIPS_IN_VIEW) == H100_ROWS
                # on a narrow window the chips wrap instead of being cut or clipped
                await page.set_viewport_size({"width": 900, "height": 900})
                await page.wait_for_function(
                    "document.querySelector('#tree').clientWidth < 900"
                    " && document.querySelectorAll('#tree .row').length > 0"
                )
                await page.evaluate(SETTLED)
                narrow = await page.evaluate(LAYOUT_PROBLEMS)
                await page.screenshot(path=str(ARTIFACTS / "dashboard-narrow.png"), full_page=True)
                assert narrow == []
                await page.set_viewport_size({"width": 1400, "height": 900})

                # a new admission reaches the open page by server push (the page never
                # polls); how long it took is recorded, not asserted (the machine may be
                # loaded; the server pushes at most PUSH_MAX_INTERVAL after a change)
                version = await page.evaluate("document.body.dataset.version")
                wl = workload("vision-research", "small", queue="team-queue",
                              pod_sets=[("main", 1, "1")])  # fmt: skip
                await s.user.create(k.WORKLOADS, wl, namespace="vision-research")
                await eventually(
                    lambda: admitted(s.get("workloads", "small", "vision-research")),
                    what="small admitted", interval=0.005,
                )  # fmt: skip
                seen = time.monotonic()
                await page.wait_for_function(
                    "document.querySelector('#recent').innerText.includes('vision-research/small')"
                    ' && document.querySelector(\'#tree .row[data-name="vision-research"]'
                    " [data-quantity=\"h100/cpu\"]')?.innerText.includes('9 / 192')",
                    timeout=60_000,
                )
                elapsed = time.monotonic() - seen
                assert int(await page.evaluate("document.body.dataset.version")) > int(version)
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
