"""rehearse's completions against servers that misbehave: a body that
trickles ends at the bound, a body cut short is 'failed a completion' (exit 22, log kept), not a
traceback."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from vllm_patcher.errors import ServerUnreachable
from vllm_patcher.rehearse import run
from vllm_patcher.rehearse.phases import new_progress
from vllm_patcher.serving.args import parse


def _serve(behaviour: str) -> Iterator[str]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    stop = threading.Event()

    def read_request(conn: socket.socket) -> None:
        """The whole request, body included: a close with unread bytes would send a reset
        (ECONNRESET at the client) rather than the end of a short body."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
             if line.lower().startswith(b"content-length:")), 0,
        )  # fmt: skip
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return
            body += chunk

    def handle(conn: socket.socket) -> None:
        with conn:
            read_request(conn)
            if behaviour == "cut":  # promises 200 bytes, sends 10, closes
                conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n{"choices"')
                conn.shutdown(socket.SHUT_WR)  # the end of the answer, read as such
            else:  # one byte every 0.2 s, for 20 s (a per-read timeout never fires)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                for _ in range(100):
                    if stop.is_set():
                        return
                    try:
                        conn.sendall(b" ")
                    except OSError:
                        return
                    time.sleep(0.2)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        srv.close()


@pytest.fixture
def trickling() -> Iterator[str]:
    yield from _serve("trickle")


@pytest.fixture
def cut() -> Iterator[str]:
    yield from _serve("cut")


def test_a_trickling_answer_ends_at_the_bound(
    trickling: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run, "COMPLETION_TIMEOUT_S", 1.5)
    started = time.monotonic()
    with pytest.raises(ServerUnreachable, match="not answered whole within 2 s"):
        run._complete(trickling, "m", 4, None)
    assert time.monotonic() - started < 10


def test_an_answer_cut_short_is_a_failed_completion_not_a_traceback(
    cut: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run, "AFTER_FAILURE_S", 0.2)
    log = tmp_path / "server.log"
    log.write_text("INFO Application startup complete.\n")
    plan = run.plan(parse(["/m"]), False, False, 60.0, None, "x")
    r = run.Rehearsal(plan, log, new_progress(), ready_s=1.0)
    srv = SimpleNamespace(
        url=cut,
        process=SimpleNamespace(poll=lambda: None),
        exit_note=lambda: ("was still running", None),
    )
    reader = run._LogReader(log, r.progress, time.monotonic(), lambda _: None)
    run._exercise(srv, r, reader, time.monotonic())  # type: ignore[arg-type]
    assert r.failure is not None and r.answered == 0
    assert r.failure.reason.startswith("the server was ready, then failed a completion")
    assert "IncompleteRead" in r.failure.reason
    assert r.outcome == "failed"
