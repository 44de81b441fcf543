"""Which process owns a run, and whether that process is gone.

A run record names its owner. :func:`process_owner` builds an owner that says where
its process runs: ``"<hostname>:<pid>:<random hex>@<pid namespace>"``. A process on the
same host and in the same pid namespace can then tell at once that the owner's process
is gone (:func:`owner_gone`: its pid no longer runs), instead of waiting for its
heartbeat to grow stale. Any other owner (another host or container, a library's
``"<hostname>:<pid>:<hex>"`` owner, a pid that runs again) is never judged gone here:
its heartbeat decides, as before.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from functools import cache

__all__ = ["default_owner", "owner_gone", "process_owner"]

_OWNER = re.compile(r"^(?P<host>.*):(?P<pid>\d+):[0-9a-f]+@(?P<space>\d+)$")


@cache
def _pid_space() -> str | None:
    """This process's pid namespace (its inode), where pids are comparable; None if unknown."""
    try:
        link = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return None
    digits = re.sub(r"\D", "", link)
    return digits or None


def default_owner() -> str:
    """Return a process-unique run owner: ``"<hostname>:<pid>:<random hex>"``."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def process_owner() -> str:
    """An owner for this process's runs that :func:`owner_gone` can judge on this host."""
    owner = default_owner()
    space = _pid_space()
    return owner if space is None else f"{owner}@{space}"


def owner_gone(owner: str | None) -> bool:
    """Whether ``owner``'s process is surely gone: same host and pid namespace, pid not running.

    False whenever that cannot be told (the module docstring), and for this process.
    """
    match = _OWNER.match(owner or "")
    if match is None or match["space"] != _pid_space() or match["host"] != socket.gethostname():
        return False
    pid = int(match["pid"])
    return pid != os.getpid() and not _running(pid)


def _running(pid: int) -> bool:
    """Whether ``pid`` names a process that still runs (a zombie, killed but not yet
    reaped by its parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's: it exists
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            state = stat.read().rpartition(")")[2].split()[:1]
    except OSError:
        return True  # no /proc: the signal said it exists
    return state not in (["Z"], ["X"])
