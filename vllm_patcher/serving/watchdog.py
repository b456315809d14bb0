"""A server's watchdog: a small process of the tool's own interpreter (standard library and
``process_tree`` only, nothing else imported) that stops the server's process group when the tool is
gone, however it went.

The parent-death signal a server gets (``runtime.die_with_parent``) is SIGTERM, which a wedged
server ignores; and a tool killed while it stops a server (SIGTERM, then ``timeout -k``'s,
systemd's or a CI cancel's SIGKILL a few seconds later, inside the stop's own grace) never sends
the SIGKILL that would have followed. The watchdog runs in a session of its own (a signal to the
tool's process group or terminal does not reach it), reads its orders on a pipe whose writing end
only the tool holds: ``group PGID`` (the server's group), ``follow PID START`` (a descendant that
left the group, ``process_tree.Known``), ``done`` (the tool stopped the group itself: nothing to do).
When the pipe closes without ``done`` (the tool ended, whatever ended it) or its parent changes,
it sends SIGTERM to the group and to the descendants that left it (those it was told of, and
those it finds under the group's leader then), and SIGKILL to what is left after ``grace_s``;
then it ends.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import process_tree

LOOK_S = 1.0  # how often the watchdog checks its parent, between orders
RELEASE_S = 5.0  # how long the tool waits for a released watchdog to end before killing it
# the watchdog's command: this package imported from where the tool's own copy lies
BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from vllm_patcher.serving.watchdog import main; sys.exit(main(sys.argv[2:]))"
)


class Watchdog:
    """The tool's end of one watchdog: orders written to its pipe (a watchdog that ended, or
    could not start, leaves the tool's own stop as the only one: never an error)."""

    def __init__(self, proc: subprocess.Popen[bytes] | None) -> None:
        self.proc = proc
        self.told: set[int] = set()

    def _say(self, line: str) -> None:
        if self.proc is None or self.proc.stdin is None:
            return
        with contextlib.suppress(OSError, ValueError):  # it ended: the tool stops the group
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()

    def guard(self, pgid: int) -> None:
        """Stop the group ``pgid`` when the tool is gone."""
        self._say(f"group {pgid}")

    def follow(self, known: process_tree.Known) -> None:
        """Stop these descendants too (those not told of before)."""
        for pid, start in known.items():
            if pid not in self.told:
                self.told.add(pid)
                self._say(f"follow {pid} {start}")

    def release(self) -> None:
        """The tool stopped the group itself: the watchdog ends without a signal."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            assert proc.stdin is not None
            proc.stdin.write(b"done\n")
            proc.stdin.close()
        try:
            proc.wait(timeout=RELEASE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start(grace_s: float) -> Watchdog:
    """A watchdog that waits for its orders; ``grace_s``: between its SIGTERM and its SIGKILL."""
    root = Path(__file__).resolve().parents[2]  # the folder this vllm_patcher is imported from
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-c", BOOT, str(root), str(grace_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # out of the tool's group and terminal: it must outlive both
        )
    except OSError:
        return Watchdog(None)
    return Watchdog(proc)


# --- the watchdog's own side -----------------------------------------------------------------


def main(argv: list[str]) -> int:
    grace_s = float(argv[0])
    for sig in (signal.SIGINT, signal.SIGHUP):  # the tool's Ctrl-C or hangup is the tool's
        signal.signal(sig, signal.SIG_IGN)
    parent = os.getppid()
    group: int | None = None
    known: process_tree.Known = {}
    pending = b""
    while True:
        ready, _, _ = select.select([0], [], [], LOOK_S)
        if not ready:
            if os.getppid() != parent:  # the tool is gone, though its pipe is not closed
                break
            continue
        data = os.read(0, 4096)
        if not data:  # the pipe closed: the tool is gone
            break
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            order = line.decode(errors="replace").split()
            if order == ["done"]:
                return 0
            if len(order) == 2 and order[0] == "group":
                group = int(order[1])
            elif len(order) == 3 and order[0] == "follow":
                known[int(order[1])] = order[2]
    if group is not None:
        stop(group, known, grace_s)
    return 0


def stop(pgid: int, known: process_tree.Known, grace_s: float) -> None:
    """SIGTERM to the group ``pgid`` and to the descendants that left it, SIGKILL to what is left
    after ``grace_s``."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, 0)  # the group is still there: its leader's id is no one else's
        known = {**known, **process_tree.descendants(pgid)}
    _signal(pgid, process_tree.outside(known, pgid), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not process_tree.group_alive(pgid) and not process_tree.outside(known, pgid):
            return
        time.sleep(0.2)
    _signal(pgid, process_tree.outside(known, pgid), signal.SIGKILL)


def _signal(pgid: int, outside: process_tree.Known, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    process_tree.signal_all(outside, sig)
