"""``python -m bench.kueue_runner``: the runner's ``main.go`` -- start the recorder and
the controller on their watches, run the generator, wait for the recorder's stop
condition, print one JSON summary.

The summary is :meth:`.recorder.Recorder.summary`'s, plus ``stopEpoch`` (wall clock at
the stop condition, for the caller's wall time), the epochs of generation's end and of
the first and last admission and finish the runner saw (the stack's timeline says
where a run's wall time went), and the runner's request counts and CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import ssl
import sys
import time
from typing import Any

import aiohttp
import yaml

from .api import Api
from .controller import WORKERS, Reconciler
from .generator import generate
from .recorder import Recorder

Obj = dict[str, Any]


async def run(url: str, config: Obj, *, token: str | None, ca_file: str | None,
              timeout: float) -> Obj:  # fmt: skip
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    ctx: ssl.SSLContext | bool = False
    if url.startswith("https"):
        ctx = ssl.create_default_context(cafile=ca_file) if ca_file else False
    connector = aiohttp.TCPConnector(limit=256, ssl=ctx)
    started = time.time()
    async with aiohttp.ClientSession(headers=headers, connector=connector) as http:
        api = Api(http, url)
        recorder = Recorder()
        reconciler = Reconciler(api, recorder)
        tasks = [
            asyncio.create_task(api.watch("workloads", reconciler.on_event)),
            asyncio.create_task(api.watch("clusterqueues", lambda _k, cq: recorder.record_cq(cq))),
            asyncio.create_task(recorder.ticker()),
            *(asyncio.create_task(reconciler.worker()) for _ in range(WORKERS)),
        ]
        gen_error: BaseException | None = None
        try:
            await generate(api, config, on_created=recorder.note_created)
        except BaseException as err:  # noqa: BLE001 - reported below
            gen_error = err
        recorder.generation_done = True
        generated = time.time()
        recorder.check()
        timed_out = False
        if gen_error is None:
            try:
                await asyncio.wait_for(recorder.stopped.wait(), timeout=timeout)
            except TimeoutError:
                timed_out = True
                recorder.stop_epoch = time.time()
        for t in tasks:
            t.cancel()
        for t in reconciler.timers.values():
            t.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*tasks, return_exceptions=True)
    if gen_error is not None:
        raise gen_error
    return {
        **recorder.summary(),
        "startEpoch": started,
        "generatedEpoch": generated,
        "stopEpoch": recorder.stop_epoch,
        "firstAdmissionEpoch": recorder.first_admission_epoch,
        "lastAdmissionEpoch": recorder.last_admission_epoch,
        "lastFinishEpoch": recorder.last_finish_epoch,
        "timedOut": timed_out,
        "workloads": len(recorder.wls),
        "runnerRequests": api.requests,
        "runnerCpuSeconds": round(time.process_time(), 3),
        "runnerErrors": api.errors,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kueue_runner")
    p.add_argument("--url", required=True)
    p.add_argument("--config", required=True, help="Kueue's generator config (YAML)")
    p.add_argument("--token", default=None)
    p.add_argument("--ca-file", default=None)
    p.add_argument("--timeout", type=float, default=3600.0, help="maximum record time (s)")
    args = p.parse_args(argv)
    with open(args.config, encoding="utf-8") as f:
        config = yaml.safe_load(f)
    result = asyncio.run(
        run(args.url, config, token=args.token, ca_file=args.ca_file, timeout=args.timeout)
    )
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
