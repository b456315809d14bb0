"""``payoff bench``: the same load on a speculative server and on a plain one, at several
concurrencies (in ascending order), with vLLM's own benchmark client run in the target
interpreter, each ``--repeat`` times; per concurrency both measures (the per-token time ratio and
the output throughput ratio, from the client, and the per-token time ratio from each server's
/metrics difference), their spread over the repeats, that concurrency's own acceptance, and a
verdict only when every figure falls in one class (``judge``)."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BadSetting, NoDrafts, ServerUnreachable
from ..runtime import ScriptNotRun, ScriptStopped
from ..serving import client as load_client
from . import scrape
from .analysis import Analysis, analyse
from .judge import MARGIN, NOISE_CAP, PAYS, UNKNOWN, Judgement, judge, more_needed, spread
from .stall import WATCH_EVERY_S, Stall
from .window import Window, between

MEASURES = ("per-token time (client)", "throughput (client)", "per-token time (/metrics)")


@dataclass
class Run:
    """One run of the load on each server at one concurrency."""

    spec: dict[str, Any]  # the client's result file: output_throughput, mean_tpot_ms, ...
    base: dict[str, Any]
    window: Window  # the speculative server's /metrics difference over its run
    base_window: Window

    def figures(self) -> dict[str, float | None]:
        return dict(
            zip(
                MEASURES,
                (
                    _ratio(self.base.get("mean_tpot_ms"), self.spec.get("mean_tpot_ms")),
                    _ratio(self.spec.get("output_throughput"), self.base.get("output_throughput")),
                    _ratio(_per_token_s(self.base_window), _per_token_s(self.window)),
                ),
                strict=True,
            )
        )


def _ratio(top: Any, bottom: Any) -> float | None:
    if not isinstance(top, int | float) or not isinstance(bottom, int | float):
        return None
    return top / bottom if top > 0 and bottom > 0 else None


def _per_token_s(w: Window) -> float | None:
    return w.step_seconds / w.emitted if w.emitted > 0 and w.step_seconds > 0 else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


@dataclass
class Point:
    concurrency: int
    runs: list[Run]
    analysis: Analysis  # this concurrency's own windows: its acceptance
    prompts: int = 0
    noise: float = 0.0  # the baseline's own spread over its runs: break-even is at least this wide
    drift: str | None = None  # why the baseline's runs cannot stand for one host's speed

    def series(self) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {m: [] for m in MEASURES}
        for run in self.runs:
            for name, value in run.figures().items():
                if value is not None:
                    out[name].append(value)
        return out

    @property
    def speedup(self) -> float | None:
        return _mean(self.series()[MEASURES[0]])

    def failed_requests(self) -> tuple[int, int]:
        """(requests that failed, requests sent) over the runs, both servers: the client's
        ``failed``, or the prompts it sent less those it ``completed``."""
        return failures([r for run in self.runs for r in (run.spec, run.base)], self.prompts)

    @property
    def margin(self) -> float:
        """The break-even band's half width: 5%, or the baseline's own spread when wider."""
        return max(MARGIN, min(self.noise, NOISE_CAP))

    def foreign(self) -> str | None:
        """Why the two servers cannot be set against each other: they serve different models
        (their /metrics ``model_name``), or None."""
        spec = {run.window.model for run in self.runs if run.window.model}
        base = {run.base_window.model for run in self.runs if run.base_window.model}
        if spec and base and spec != base:
            return (
                f"the servers serve different models ({', '.join(sorted(spec))} with "
                f"speculation, {', '.join(sorted(base))} without): no speedup between them"
            )
        return None

    def judgement(self) -> Judgement:
        failed, sent = self.failed_requests()
        if failed:  # a server that answered some requests with errors is not measured
            return Judgement(
                UNKNOWN,
                f"{failed} of {sent} requests failed (the client's completed/failed): the "
                "figures are not those of the load asked for",
            )
        foreign = self.foreign()
        if foreign:
            return Judgement(UNKNOWN, foreign)
        if self.drift:
            return Judgement(UNKNOWN, self.drift)
        if self.noise > NOISE_CAP:  # break-even that wide would hide a 3x loss
            return Judgement(
                UNKNOWN,
                f"the baseline's own runs are {self.noise:.0%} apart (more than "
                f"{NOISE_CAP:.0%}): the host is too noisy to tell a speedup from it; measure on a "
                "quiet host, or with more prompts per run",
            )
        reset = [run for run in self.runs if run.window.reset or run.base_window.reset]
        if reset:  # a window since a restart is not the load's: its client figures may hold
            return Judgement(  # requests the dead server never finished either
                UNKNOWN,
                f"a server's counters went down during {len(reset)} of {len(self.runs)} "
                "run(s): it restarted under the load, so the figures are not one server's",
            )
        series = self.series()
        if not series[MEASURES[0]] and not series[MEASURES[1]]:
            return Judgement(
                UNKNOWN, "the benchmark client reported no per-token time or throughput"
            )
        judged = judge(series, self.margin)
        if judged.reason is None:
            return judged
        values = [v for vs in series.values() for v in vs]
        hint = (
            more_needed(values, self.prompts, self.margin)
            if len(self.runs) > 1
            else more_needed([], self.prompts, self.margin)
        )
        return Judgement(UNKNOWN, f"{judged.reason}; {hint}")

    def to_dict(self) -> dict[str, object]:
        series = self.series()
        judged = self.judgement()
        acceptance = self.analysis.to_dict()

        def mean_of(key: str, side: str) -> float | None:
            values = [
                v for run in self.runs if isinstance(v := getattr(run, side).get(key), int | float)
            ]
            return _r(_mean(values))

        return {
            "concurrency": self.concurrency,
            "verdict": judged.verdict,
            "unknown_reason": judged.reason,
            "repeats": len(self.runs),
            "margin": round(self.margin, 4),
            "speedup": _r(_mean(series[MEASURES[0]])),
            "speedup_spread": _spread(series[MEASURES[0]]),
            "throughput_ratio": _r(_mean(series[MEASURES[1]])),
            "throughput_ratio_spread": _spread(series[MEASURES[1]]),
            "metrics_speedup": _r(_mean(series[MEASURES[2]])),
            "metrics_speedup_spread": _spread(series[MEASURES[2]]),
            "throughput": mean_of("output_throughput", "spec"),
            "baseline_throughput": mean_of("output_throughput", "base"),
            "tpot_ms": mean_of("mean_tpot_ms", "spec"),
            "baseline_tpot_ms": mean_of("mean_tpot_ms", "base"),
            "acceptance_rate": acceptance["acceptance_rate"],
            "mean_acceptance_length": acceptance["mean_acceptance_length"],
            "per_position": acceptance["per_position"],
            "drafts": acceptance["drafts"],
        }


def _spread(values: list[float]) -> list[float] | None:
    return [round(min(values), 4), round(max(values), 4)] if values else None


@dataclass
class BenchResult:
    points: list[Point] = field(default_factory=list)
    repeat: int = 1

    def verdicts(self) -> list[tuple[int, str]]:
        return [(p.concurrency, p.judgement().verdict) for p in self.points]

    @property
    def pays_at(self) -> list[int]:
        return [c for c, v in self.verdicts() if v == PAYS]

    @property
    def stops_paying_above(self) -> int | None:
        """The highest concurrency that paid, when every one below it paid too and every one
        above it measured break-even or a loss (an unknown row above says nothing)."""
        rows = self.verdicts()
        paying = self.pays_at
        if not paying or len(paying) == len(rows):
            return None
        if [v for _, v in rows[: len(paying)]] != [PAYS] * len(paying):
            return None
        if any(v == UNKNOWN for _, v in rows[len(paying) :]):
            return None
        return paying[-1]

    def to_dict(self) -> dict[str, object]:
        return {
            "points": [p.to_dict() for p in self.points],
            "repeat": self.repeat,
            "pays_at": self.pays_at,
            "stops_paying_above": self.stops_paying_above,
        }


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


def client(
    python: str, argv: list[str], api_key: str | None = None, watch: Stall | None = None
) -> dict[str, Any]:
    """One run of vLLM's benchmark client; ``api_key``: the served ``--api-key``, which the client
    sends as its Bearer token (it reads ``OPENAI_API_KEY``, as ``vllm bench serve`` does);
    ``watch``: the loaded server's stall watch (the client is stopped when it names a stall)."""
    try:
        run = load_client.run(
            python, argv, api_key=api_key, watch=watch, watch_every_s=WATCH_EVERY_S
        )
    except ScriptStopped as exc:
        raise ServerUnreachable(exc.reason) from None
    except ScriptNotRun as exc:
        raise ServerUnreachable(f"vllm bench serve did not finish: {exc}") from None
    if run.returncode == 2 and "error:" in run.stderr:  # the client's own argument parser
        said = run.stderr_tail().split("error:", 1)[-1].strip()
        raise BadSetting(f"vllm bench serve refused its arguments: {said}")
    answer = run.answer or {"error": run.stderr_tail("vllm bench serve failed")}
    if "error" in answer:
        raise ServerUnreachable(str(answer["error"]).splitlines()[-1] or "vllm bench serve failed")
    try:
        result: dict[str, Any] = json.loads(Path(answer["result_file"]).read_text())
    except (OSError, ValueError) as exc:
        raise ServerUnreachable(f"cannot read vllm bench serve's result file: {exc}") from None
    return result


def merged(windows: list[Window]) -> Window:
    """The repeats' windows of one concurrency as one: their counts added."""
    first = windows[0]
    if len(windows) == 1:
        return first
    k = max(w.k for w in windows)

    def total(name: str) -> float:
        return float(sum(getattr(w, name) for w in windows))

    return dataclasses.replace(
        first,
        seconds=sum(w.seconds or 0.0 for w in windows) or None,
        k=k,
        per_pos=tuple(sum(w.per_pos[i] if i < w.k else 0.0 for w in windows) for i in range(k)),
        drafts=total("drafts"),
        draft_tokens=total("draft_tokens"),
        accepted=total("accepted"),
        generation_tokens=total("generation_tokens"),
        first_tokens=total("first_tokens"),
        step_seconds=total("step_seconds"),
        steps=total("steps"),
    )


def run(
    python: str,
    url: str,
    baseline_url: str,
    concurrencies: list[int],
    num_prompts: int,
    dataset: str,
    extra: tuple[str, ...] = (),
    progress: Callable[[str], None] | None = None,
    repeat: int = 1,
) -> BenchResult:
    """The load at each of ``concurrencies`` (above 0), ``repeat`` times (1 or more: the
    command line's options hold these rules, ``cli/options.py``)."""
    out = BenchResult(repeat=repeat)
    # a fresh client process for each run (serving.client says why not one for all)
    with tempfile.TemporaryDirectory(prefix="vllm-patcher-bench-") as tmp:
        for c in sorted(set(concurrencies)):  # ascending, whatever order they were given in
            runs = [
                _one_run(python, url, baseline_url, c, num_prompts, dataset, extra, tmp, r)
                for r in range(repeat)
            ]
            window = merged([r.window for r in runs])
            out.points.append(Point(c, runs, analyse(window), num_prompts, base_noise(runs)))
            if progress is not None:
                progress(f"payoff bench: concurrency {c} measured ({repeat} run(s))")
    return out


def failures(results: list[dict[str, Any]], prompts: int = 0) -> tuple[int, int]:
    """(requests that failed, requests sent) over vllm bench serve's results: the client's
    ``failed``, or the prompts it sent (``num_prompts``, else ``prompts``) less those it
    ``completed``."""
    failed = sent = 0
    for result in results:
        asked, done, bad = (result.get(n) for n in ("num_prompts", "completed", "failed"))
        n = asked if isinstance(asked, int) else prompts
        missing = n - done if isinstance(done, int) and n else 0
        failed += max(bad if isinstance(bad, int) else 0, missing)
        sent += n
    return failed, sent


def failed_note(results: list[dict[str, Any]]) -> str:
    """ ", but N of M requests failed (...)" when the client counted failures: the reason there
    were no drafts is then the requests (a prompt longer than --max-model-len answers 400), not
    the server; else ""."""
    failed, sent = failures(results)
    if not failed:
        return ""
    return (
        f", but {failed} of {sent or '?'} requests failed: the server refused them (its log "
        "says why; a prompt longer than --max-model-len is answered 400: set the client's "
        "--random-input-len and --random-output-len to fit)"
    )


def base_noise(runs: list[Run]) -> float:
    """The plain server's own spread over the repeats: no speedup inside it is told from 1.0x."""
    return noise([r.base for r in runs])


def noise(results: list[dict[str, Any]]) -> float:
    """How far apart one server's runs are (vllm bench serve's results): per-token time or
    throughput, the wider spread."""
    widest = 0.0
    for key in ("mean_tpot_ms", "output_throughput"):
        values = [float(v) for r in results if isinstance(v := r.get(key), int | float) and v > 0]
        widest = max(widest, spread(values))
    return widest


def _one_run(
    python: str,
    url: str,
    baseline_url: str,
    c: int,
    num_prompts: int,
    dataset: str,
    extra: tuple[str, ...],
    tmp: str,
    repeat: int,
) -> Run:
    results: dict[str, dict[str, Any]] = {}
    windows: dict[str, Window] = {}
    for side, base_url in (("spec", url), ("base", baseline_url)):
        before = scrape.fetch(base_url)
        argv = [
            "--base-url", base_url.rstrip("/"),
            "--dataset-name", dataset,
            "--num-prompts", str(num_prompts),
            "--max-concurrency", str(c),
            "--request-rate", "inf",
            "--ignore-eos",
            "--save-result",
            "--result-dir", tmp,
            "--result-filename", f"{side}-{c}-{repeat}.json",
            *extra,
        ]  # fmt: skip
        results[side] = client(python, argv, watch=Stall(base_url))
        windows[side] = between(before, scrape.fetch(base_url))
    if not windows["spec"].spec or windows["spec"].drafts <= 0:
        note = failed_note([results["spec"]])
        raise NoDrafts(
            f"{url} made no drafts under the benchmark"
            + (note or ": is it the speculative server?")
        )
    if windows["base"].spec and windows["base"].drafts > 0:
        raise BadSetting(
            f"the baseline {baseline_url} made drafts under the benchmark: give the same "
            "model served without --speculative-config"
        )
    return Run(results["spec"], results["base"], windows["spec"], windows["base"])
