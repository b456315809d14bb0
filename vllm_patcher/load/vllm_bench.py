"""vLLM's benchmark client (``vllm bench serve``) as a load sees it: its arguments checked by its
own parser before a model is loaded (``check_client_args``), the arguments of one load run
(``load_argv``; a server's warm-up is ``WARM_UP_PROMPTS`` of them), and one run, its result file
read (``client``). ``serving.client`` starts the client's process in the target interpreter; what
its answers mean is said here."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from ..errors import BadSetting, ServerUnreachable
from ..runtime import ScriptNotRun, ScriptStopped
from ..serving import client as load_client
from ..serving.args import option_name
from .stall import WATCH_EVERY_S, Stall

# the first requests a server answers pay one-off costs (its kernels and caches are made then):
# payoff bench and payoff sweep send each server this many before any measured run, at the highest
# concurrency they measure, and measure nothing of it
WARM_UP_PROMPTS = 4
# the client arguments ``load_argv`` sets for every run (``--host`` and ``--port`` with them: its
# ``--base-url`` wins over both): a user's copy after them would silently override them
LOAD_SETS = frozenset(
    {
        "--base-url", "--host", "--port", "--max-concurrency", "--num-prompts", "--request-rate",
        "--dataset-name", "--save-result", "--result-dir", "--result-filename",
    }
)  # fmt: skip


def set_by_the_load(extra: tuple[str, ...]) -> str | None:
    """The first of ``extra`` (a user's client arguments) that names an option of ``LOAD_SETS``,
    read as the client's parser reads it (both spellings, an unambiguous prefix: --num-p), as
    given (its ``=value`` left out); None when none does."""
    for given in extra:
        name, _ = option_name(given, tuple(LOAD_SETS), shortest=len("--ab"))
        if name in LOAD_SETS:
            return given.split("=", 1)[0]
    return None


def load_argv(
    url: str,
    concurrency: int,
    prompts: int,
    dataset: str,
    result_dir: str,
    result_file: str,
    extra: tuple[str, ...],
) -> list[str]:
    """One run's arguments: ``prompts`` requests, ``concurrency`` at a time, sent at once and
    each generating its full length, the result saved to ``result_dir``/``result_file``;
    ``extra`` (the user's own client arguments) last."""
    return [
        "--base-url", url,
        "--dataset-name", dataset,
        "--num-prompts", str(prompts),
        "--max-concurrency", str(concurrency),
        "--request-rate", "inf",
        "--ignore-eos",
        "--save-result",
        "--result-dir", result_dir,
        "--result-filename", result_file,
        *extra,
    ]  # fmt: skip


def check_client_args(python: str, argv: list[str]) -> None:
    """Parse ``argv`` with vllm bench serve's own parser, running nothing: a usage error (exit 2)
    before a model is loaded rather than after."""
    try:
        run = load_client.check(python, argv)
    except ScriptNotRun as exc:
        raise ServerUnreachable(f"vllm bench serve could not be asked: {exc}") from None
    if run.returncode == 2 and "error:" in run.stderr:
        said = run.stderr_tail().split("error:", 1)[-1].strip()
        raise BadSetting(f"vllm bench serve refused its arguments: {said}")
    if not (run.answer or {}).get("parsed"):
        said = str((run.answer or {}).get("error") or run.stderr_tail("no answer"))
        raise ServerUnreachable(f"vllm bench serve could not be asked: {said.splitlines()[-1]}")


def _look(python: str, watch: Stall) -> str | None:
    """One look of the stall watch: the server's gauges, and the client's own requests out."""
    return watch(load_client.requests_out(python, watch.url))


def client(
    python: str, argv: list[str], api_key: str | None = None, watch: Stall | None = None
) -> dict[str, Any]:
    """One run of vLLM's benchmark client; ``api_key``: the served ``--api-key``, which the client
    sends as its Bearer token (it reads ``OPENAI_API_KEY``, as ``vllm bench serve`` does);
    ``watch``: the loaded server's stall watch, told the client's own requests out to it at each
    look (the client is stopped when it names a stall)."""
    look = None if watch is None else functools.partial(_look, python, watch)
    try:
        run = load_client.run(
            python, argv, api_key=api_key, watch=look, watch_every_s=WATCH_EVERY_S
        )
    except ScriptStopped as exc:
        raise ServerUnreachable(exc.reason) from None
    except ScriptNotRun as exc:
        raise ServerUnreachable(f"vllm bench serve did not finish: {exc}") from None
    if run.returncode == 2 and "error:" in run.stderr:  # the client's own argument parser
        said = run.stderr_tail().split("error:", 1)[-1].strip()
        raise BadSetting(f"vllm bench serve refused its arguments: {said}")
    if run.answer is None and run.returncode is not None and run.returncode < 0:
        # the client itself was killed (the OOM killer, a signal): its last line is a progress bar
        raise ServerUnreachable(f"vllm bench serve's client was killed by signal {-run.returncode}")
    answer = run.answer or {"error": run.stderr_tail("vllm bench serve failed")}
    if "error" in answer:
        raise ServerUnreachable(str(answer["error"]).splitlines()[-1] or "vllm bench serve failed")
    try:
        result: dict[str, Any] = json.loads(Path(answer["result_file"]).read_text())
    except (OSError, ValueError) as exc:
        raise ServerUnreachable(f"cannot read vllm bench serve's result file: {exc}") from None
    return result
