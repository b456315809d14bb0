"""The processes a server started, followed by their parent links in /proc (Linux), so that one
which left the server's process group (``setsid``: a new session) is still stopped with it.

A process is known by its pid and its start time (the 22nd field of /proc/PID/stat), so a pid the
kernel gave to someone else after ours ended is never signalled. Elsewhere (no /proc) nothing is
followed and the process group alone is stopped.
"""

from __future__ import annotations

import contextlib
import os
import signal

Known = dict[int, str]  # pid -> start time


def _stat(pid: int | str) -> list[str] | None:
    """The fields after the command name: [0] state, [1] ppid, [2] pgid, [19] start time."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def descendants(root: int) -> Known:
    """Every live process under ``root`` by parent links, ``root`` left out."""
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return {}
    children: dict[int, list[tuple[int, str]]] = {}
    for entry in entries:
        fields = _stat(entry)
        if fields is None or len(fields) < 20 or fields[0] == "Z":
            continue
        children.setdefault(int(fields[1]), []).append((int(entry), fields[19]))
    found: Known = {}
    todo = [root]
    while todo:
        for pid, start in children.get(todo.pop(), []):
            if pid not in found:
                found[pid] = start
                todo.append(pid)
    return found


def group_alive(pgid: int) -> bool:
    """Whether a process of the group ``pgid`` still runs. A zombie does not count: it is dead,
    waiting for its parent to reap it (without /proc, any member counts)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):  # none left, or the id is another user's
        return False
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:  # no /proc to tell zombies apart: the group is still there
        return True
    for entry in entries:
        fields = _stat(entry)
        if fields is not None and len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def outside(known: Known, pgid: int) -> Known:
    """The known processes still running as themselves, outside the group ``pgid``."""
    out: Known = {}
    for pid, start in known.items():
        fields = _stat(pid)
        mine = fields is not None and len(fields) >= 20 and fields[19] == start
        if mine and fields is not None and fields[0] != "Z" and int(fields[2]) != pgid:
            out[pid] = start
    return out


def signal_all(known: Known, sig: signal.Signals) -> None:
    for pid in known:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
