"""Deferred warnings (a quota edit's impact what-if), computed off the event loop.

The event loop that answers Job and Pod reviews (and, in ``serve``, renews the
leader's Lease) must never run the engine to quiescence: with 20k pending workloads
that takes seconds. :class:`OffLoopRunner` runs a handler's
:class:`~webhooks.review.Deferred` elsewhere and waits for it at most ``deadline``
seconds; past that (or when it fails) the edit is answered with one warning saying
the impact was not computed and why.

Two ways to run it:

* ``"process"`` (the default where ``os.fork`` exists): the loop forks; the child's
  memory *is* the snapshot (copy-on-write, nothing is copied or pickled on the loop),
  it takes the job's snapshot and runs it, writes the lines to a pipe and exits. The
  parent reads the pipe from the loop and SIGKILLs the child at the deadline. The
  engine's pure-Python work never holds the parent's GIL, so reviews do not wait.
  The child touches (and so copies) the pages of the model it reads; it lives at
  most ``deadline`` seconds.
* ``"thread"``: the job's snapshot is taken on the loop (dict copies and a shallow
  copy per workload), the job runs in one worker thread and stops itself between
  scheduling cycles once the deadline passes. The worker holds the GIL while it
  runs, so reviews answered meanwhile are slower (``python -m bench webhook-impact``
  measures both).

Either way the job's state is taken while no scheduling cycle runs: ``serve`` runs its
cycles in a worker thread, changing the cache the what-if reads, so the runner first
waits for the one running now (``quiet``: the controller's ``cache_ready``) and then
forks or takes the snapshot without yielding to the loop, where cycles start. A child
forked during a cycle would compute on a half-committed cache, and could wait forever
on a lock the cycle's thread held at the fork.

At most one deferred job runs at a time (one forked child, one worker thread). Quota
edits that arrive together (``kubectl apply -f DIR``, whose next request may come
before the previous child has exited) wait their turn in arrival order, each within
its own review's deadline: an edit is answered without its impact only when that
deadline passes, with a warning that says how many edits were computed ahead of it.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import pickle
import signal
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from webhooks.review import Deferred

log = logging.getLogger("quartermaster.webhooks")

MODES = ("process", "thread")


def default_mode() -> str:
    return "process" if hasattr(os, "fork") else "thread"


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if len(text) > 200:
        text = text[:197] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def run_inline(deferred: Deferred) -> list[str]:
    """Compute ``deferred`` here and now (no deadline): ``process_review``'s path."""
    try:
        return list(deferred.snapshot()(None))
    except Exception as exc:  # noqa: BLE001 - warnings are advisory, never block an edit
        log.warning("deferred warnings failed: %s", _describe(exc))
        return deferred.failed(f"it failed ({_describe(exc)})")


class OffLoopRunner:
    """Runs deferred warnings off the event loop, one at a time in arrival order, each
    within ``deadline`` seconds of its review's arrival."""

    def __init__(
        self,
        deadline: float,
        mode: str | None = None,
        *,
        quiet: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``quiet``: returns once no scheduling cycle changes the model (None: nothing
        else changes it while the loop runs this code)."""
        if deadline <= 0:
            raise ValueError("deadline must be > 0")
        mode = mode or default_mode()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if mode == "process" and not hasattr(os, "fork"):
            raise ValueError("mode 'process' needs os.fork")
        self.deadline = deadline
        self.mode = mode
        self._quiet = quiet
        self._turn = asyncio.Lock()  # held from a job's start until its child or thread is done
        self._waiting = 0
        self._executor: ThreadPoolExecutor | None = None
        self.completed = 0
        self.not_computed = 0

    def _late(self) -> str:
        return (
            f"the what-if did not finish within the {self.deadline:g} s deadline "
            "(webhook.impactDeadline); plan --what-if computes it offline"
        )

    def _not_started(self, ahead: int) -> str:
        return (
            f"the what-if did not start within the {self.deadline:g} s deadline "
            f"(webhook.impactDeadline): the impact of {ahead} earlier quota edit(s) was "
            "being computed first; plan --what-if computes it offline"
        )

    async def run(self, deferred: Deferred) -> list[str]:
        """The deferred lines, or one "not computed" line; never waits past the deadline."""
        warm = getattr(deferred, "warm", None)
        if warm is not None:
            warm()  # imports the job needs, once in this process rather than in every child
        until = time.monotonic() + self.deadline
        ahead = self._waiting + self._turn.locked()
        self._waiting += 1
        try:
            async with asyncio.timeout(self.deadline):
                await self._turn.acquire()
        except TimeoutError:
            self.not_computed += 1
            return deferred.failed(self._not_started(ahead))
        finally:
            self._waiting -= 1
        # the turn is ours until the job's child is reaped or its thread returns
        if self._quiet is not None:
            try:
                async with asyncio.timeout(until - time.monotonic()):
                    await self._quiet()  # from here to the fork or snapshot: no await
            except TimeoutError:
                self._release()
                self.not_computed += 1
                return deferred.failed(self._late())
            except BaseException:
                self._release()
                raise
        try:
            if self.mode == "process":
                lines = await self._forked(deferred, until)
            else:
                lines = await self._threaded(deferred, until)
        except TimeoutError:
            self.not_computed += 1
            return deferred.failed(self._late())
        except Exception as exc:  # noqa: BLE001 - warnings are advisory, never block an edit
            self.not_computed += 1
            why = str(exc) if isinstance(exc, _ChildFailed) else _describe(exc)
            log.warning("deferred warnings failed: %s", why)
            return deferred.failed(f"it failed ({why})")
        self.completed += 1
        return lines

    def _release(self) -> None:
        """The running job's child or thread is done: the next edit's job may start."""
        if self._turn.locked():
            self._turn.release()

    # -- thread ----------------------------------------------------------------------

    async def _threaded(self, deferred: Deferred, until: float) -> list[str]:
        try:
            job = deferred.snapshot()  # on the loop: the state as of this review
        except BaseException:
            self._release()
            raise
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="webhook-what-if")
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self._executor, job, until)

        def done(_f: asyncio.Future[Any]) -> None:
            self._release()
            if not _f.cancelled():
                _f.exception()  # retrieved: a late failure is not "never retrieved"

        fut.add_done_callback(done)
        remaining = until - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        return list(await asyncio.wait_for(asyncio.shield(fut), remaining))

    # -- process (fork) --------------------------------------------------------------

    async def _forked(self, deferred: Deferred, until: float) -> list[str]:
        loop = asyncio.get_running_loop()
        try:
            r, w = os.pipe()
            try:
                pid = os.fork()
            except BaseException:
                os.close(r)
                os.close(w)
                raise
        except BaseException:
            self._release()
            raise
        if pid == 0:  # pragma: no cover - the child; coverage cannot follow it
            _child(deferred, until, r, w)
        os.close(w)
        chunks: list[bytes] = []
        eof: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            try:
                data = os.read(r, 1 << 16)
            except OSError as exc:
                if not eof.done():
                    eof.set_exception(exc)
                return
            if data:
                chunks.append(data)
            elif not eof.done():
                eof.set_result(None)

        loop.add_reader(r, readable)
        try:
            remaining = until - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            await asyncio.wait_for(eof, remaining)
        except BaseException:
            _kill(pid)
            raise
        finally:
            loop.remove_reader(r)
            os.close(r)
            reaped = loop.run_in_executor(None, _reap, pid)
            reaped.add_done_callback(lambda _f: self._release())
        status, payload = pickle.loads(b"".join(chunks)) if chunks else ("error", "no answer")
        if status == "ok":
            return list(payload)
        if status == "late":
            raise TimeoutError
        raise _ChildFailed(payload)


class _ChildFailed(Exception):
    """The job failed in the child; the message already names the exception."""


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    """Wait for the child (in a worker thread); the next job starts once it is gone."""
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _child(deferred: Deferred, until: float, r: int, w: int) -> None:  # pragma: no cover
    """In the forked child: run the job, write (status, payload) to ``w``, exit."""
    code = 0
    try:
        os.close(r)
        gc.freeze()  # the parent's objects stay out of this child's collections (fewer copied pages)
        try:
            result: tuple[str, Any] = ("ok", list(deferred.snapshot()(until)))
        except TimeoutError:
            result = ("late", None)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            result = ("error", _describe(exc))
        data = pickle.dumps(result)
        view = memoryview(data)
        while view:
            n = os.write(w, view)
            view = view[n:]
    except BaseException:  # noqa: BLE001 - nothing may escape into the parent's code
        code = 1
    finally:
        os._exit(code)
