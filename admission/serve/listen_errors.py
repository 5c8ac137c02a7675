"""A server that cannot bind its address, said in one line: which server, where, why."""

from __future__ import annotations

import errno
import os


class ListenError(OSError):
    """A server could not bind its address: which server, where, and why."""

    def __init__(self, what: str, host: str, port: int, err: OSError) -> None:
        reason = os.strerror(err.errno) if err.errno else str(err)
        super().__init__(err.errno, f"cannot listen on {host}:{port} ({what}): {reason}")


_LISTEN_ERRNOS = {errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL}


def listen_problem(err: OSError) -> str | None:
    """The one-line message for a failure to bind (ours or aiohttp's), else None."""
    if isinstance(err, ListenError):
        return err.strerror
    if err.errno in _LISTEN_ERRNOS:
        return f"cannot listen: {err}"
    return None
