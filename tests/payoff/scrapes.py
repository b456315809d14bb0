"""Generated /metrics text and local HTTP servers for payoff's tests: what a vLLM server would
expose, shaped by hand to hold one defect at a time; and payoff's command line run on them."""

from __future__ import annotations

import http.server
import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def metrics(
    *,
    drafts: float = 0,
    draft_tokens: float | None = None,
    accepted: float | None = None,
    per_pos: tuple[float, ...] | None = (),
    generation: float = 0,
    first_tokens: float = 0,
    itl_sum: float = 0.0,
    itl_count: float = 0,
    running: float = 0,
    waiting: float = 0,
    model: str = "m",
    engine: str = "0",
    spec: bool = True,
) -> str:
    """One scrape; ``per_pos`` None leaves the per-position series out."""
    labels = f'engine="{engine}",model_name="{model}"'
    out = []
    if spec:
        k = len(per_pos or ())
        out += [
            f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafts}",
            f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} "
            f"{drafts * k if draft_tokens is None else draft_tokens}",
            f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} "
            f"{sum(per_pos or ()) if accepted is None else accepted}",
        ]
        out += [
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{i}"}} {v}'
            for i, v in enumerate(per_pos or ())
        ]
    out += [
        f"vllm:generation_tokens_total{{{labels}}} {generation}",
        f"vllm:time_to_first_token_seconds_count{{{labels}}} {first_tokens}",
        f"vllm:inter_token_latency_seconds_sum{{{labels}}} {itl_sum}",
        f"vllm:inter_token_latency_seconds_count{{{labels}}} {itl_count}",
        f"vllm:num_requests_running{{{labels}}} {running}",
        f"vllm:num_requests_waiting{{{labels}}} {waiting}",
        "",
    ]
    return "\n".join(out)


def decode(
    steps: float,
    step_s: float,
    per_pos: tuple[float, ...] = (),
    drafts: float = 0,
    requests: float = 10,
    **kw: object,
) -> str:
    """The counters after ``steps`` request-steps of ``step_s`` each (one token each, plus the
    accepted draft tokens), for ``requests`` requests."""
    accepted = sum(per_pos)
    return metrics(
        drafts=drafts,
        per_pos=per_pos,
        generation=steps + accepted + requests,
        first_tokens=requests,
        itl_sum=steps * step_s,
        itl_count=steps,
        **kw,  # type: ignore[arg-type]
    )


def save(path: Path, text: str, mtime: float) -> Path:
    path.write_text(text)
    os.utime(path, (mtime, mtime))
    return path


@contextmanager
def http_server(
    answer: Callable[[int], tuple[int, str, bytes]], on_post: Callable[[], None] | None = None
) -> Iterator[str]:
    """A local server whose n-th GET (from 0) is answered with ``answer(n)``: (status,
    content type, body); a POST runs ``on_post`` and gets no answer (a front end that takes
    requests and never answers). Yields its base URL."""
    count = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the http.server name)
            status, ctype, body = answer(count[0])
            count[0] += 1
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:  # noqa: N802
            if on_post is not None:
                on_post()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True  # a POST held by on_post does not hold the close
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def growing(n: int) -> tuple[int, str, bytes]:
    """A speculative server under load: each read holds 1,000 more drafts."""
    text = decode(
        steps=2000 * (n + 1), step_s=0.02, per_pos=(600 * (n + 1), 300 * (n + 1)),
        drafts=1000 * (n + 1), requests=10 * (n + 1),
    )  # fmt: skip
    return 200, "text/plain; version=0.0.4", text.encode()


def _scrape_text(
    drafts: str = "100",
    accepted: str = "60",
    itl_sum: str = "1.0",
    pos: str = "0",
    draft_tokens: str = "300",
) -> str:
    """One engine's scrape, each counter given as the text the exposition holds (NaN, +Inf)."""
    return "\n".join(
        [
            f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}',
            f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {draft_tokens}',
            f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}',
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="{pos}"}} 50',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 7',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 3',
            'vllm:generation_tokens_total{engine="0",model_name="m"} 1000',
            'vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 10',
            f'vllm:inter_token_latency_seconds_sum{{engine="0",model_name="m"}} {itl_sum}',
            'vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 500',
            "",
        ]
    )


def _payoff_json(*args: str) -> dict[str, Any]:
    """``payoff --json ARGS`` through the real command line: its answer, valid against the output
    schema, with the exit code under ``_exit``. The test helpers are imported here, not at the top:
    tests/load/test_bench.py's driver script imports this module outside pytest."""
    import jsonschema

    from ..conftest import REPO, run_cli

    schema = json.loads((REPO / "vllm_patcher" / "schema" / "output.schema.json").read_text())
    proc = run_cli("--json", "payoff", *args)
    assert "Traceback" not in proc.stderr, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    jsonschema.validate(data, schema)
    data["_exit"] = proc.returncode
    return data


def _pair(tmp: Path, name: str, first: str, second: str, t0: float = 1000.0) -> list[str]:
    """Two saved scrapes, ``first`` then ``second`` 10 s later: the paths, as arguments."""
    return [
        str(save(tmp / f"{name}1.txt", first, t0)),
        str(save(tmp / f"{name}2.txt", second, t0 + 10)),
    ]


def _with_baseline(tmp: Path, spec: tuple[str, str], base: tuple[str, str]) -> dict[str, Any]:
    """payoff's JSON answer on two saved scrapes of the server and two of the baseline."""
    s = _pair(tmp, "s", *spec)
    b = _pair(tmp, "b", *base)
    return _payoff_json("--metrics", *s, "--baseline", b[0], "--baseline", b[1])


def _no_advice_to_change_k(data: dict[str, Any]) -> None:
    text = " ".join(data.get("advice", []))
    assert "set num_speculative_tokens" not in text and "best_k" not in data, data
