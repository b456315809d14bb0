"""``payoff bench``: the same load on a speculative server and on a plain one, at several
concurrencies, with vLLM's own benchmark client run in the target interpreter; per concurrency
the throughput, the per-token time, the speedup and the acceptance (from each server's /metrics
before and after), and the concurrency above which speculation stops paying."""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BadSetting, NoDrafts, ServerUnreachable
from . import scrape
from .analysis import Analysis, analyse, verdict
from .window import between

CLIENT = Path(__file__).with_name("bench_client.py")
TIMEOUT = 3600.0  # one benchmark run


@dataclass
class Point:
    concurrency: int
    spec: dict[str, Any]  # the client's result file: output_throughput, mean_tpot_ms, ...
    base: dict[str, Any]
    analysis: Analysis

    @property
    def speedup(self) -> float | None:
        spec, base = self.spec.get("mean_tpot_ms"), self.base.get("mean_tpot_ms")
        return base / spec if spec and base else None

    def to_dict(self) -> dict[str, object]:
        s = self.speedup
        acceptance = self.analysis.to_dict()
        return {
            "concurrency": self.concurrency,
            "speedup": None if s is None else round(s, 4),
            "verdict": None if s is None else verdict(s),
            "throughput": self.spec.get("output_throughput"),
            "baseline_throughput": self.base.get("output_throughput"),
            "tpot_ms": self.spec.get("mean_tpot_ms"),
            "baseline_tpot_ms": self.base.get("mean_tpot_ms"),
            "acceptance_rate": acceptance["acceptance_rate"],
            "mean_acceptance_length": acceptance["mean_acceptance_length"],
            "per_position": acceptance["per_position"],
        }


@dataclass
class BenchResult:
    points: list[Point] = field(default_factory=list)

    @property
    def stops_paying_above(self) -> int | None:
        """The last concurrency that still paid, when a higher one did not."""
        last_paying = None
        for p in self.points:
            if p.speedup is not None and p.speedup >= 1.05:
                last_paying = p.concurrency
            elif last_paying is not None:
                return last_paying
        return None

    @property
    def pays_at(self) -> list[int]:
        return [p.concurrency for p in self.points if p.speedup is not None and p.speedup >= 1.05]

    def to_dict(self) -> dict[str, object]:
        return {
            "points": [p.to_dict() for p in self.points],
            "pays_at": self.pays_at,
            "stops_paying_above": self.stops_paying_above,
        }


def _client(python: str, argv: list[str]) -> dict[str, Any]:
    from ..runtime import ScriptNotRun, run_script

    try:
        # not isolated: the client reads HF_* and VLLM_* settings as vllm bench serve would
        run = run_script(python, [str(CLIENT), json.dumps(argv)], timeout=TIMEOUT, isolated=False)
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


def run(
    python: str,
    url: str,
    baseline_url: str,
    concurrencies: list[int],
    num_prompts: int,
    dataset: str,
    extra: tuple[str, ...] = (),
    progress: bool = True,
) -> BenchResult:
    if not concurrencies or any(c < 1 for c in concurrencies):
        raise BadSetting("--concurrency takes positive integers, e.g. 1,4,16")
    out = BenchResult()
    with tempfile.TemporaryDirectory(prefix="vllm-patcher-bench-") as tmp:
        for c in concurrencies:
            results = {}
            windows = {}
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
                    "--result-filename", f"{side}-{c}.json",
                    *extra,
                ]  # fmt: skip
                results[side] = _client(python, argv)
                windows[side] = between(before, scrape.fetch(base_url))
            if not windows["spec"].spec or windows["spec"].drafts <= 0:
                raise NoDrafts(
                    f"{url} made no drafts under the benchmark: is it the speculative server?"
                )
            if windows["base"].spec and windows["base"].drafts > 0:
                raise BadSetting(
                    f"the baseline {baseline_url} made drafts under the benchmark: give the same "
                    "model served without --speculative-config"
                )
            out.points.append(Point(c, results["spec"], results["base"], analyse(windows["spec"])))
            if progress:
                print(f"payoff bench: concurrency {c} measured", file=sys.stderr, flush=True)
    return out


def lines(result: BenchResult) -> list[str]:
    out = [
        "concurrency  speedup  verdict     tok/s spec  tok/s base  tpot ms spec/base  acceptance"
    ]
    for p in result.points:
        d = p.to_dict()
        out.append(
            f"{p.concurrency:>11}  {d['speedup'] or 0:>6.2f}x  {d['verdict'] or '-':<10}  "
            f"{d['throughput'] or 0:>10.1f}  {d['baseline_throughput'] or 0:>10.1f}  "
            f"{d['tpot_ms'] or 0:>7.2f} / {d['baseline_tpot_ms'] or 0:<7.2f}  "
            f"{(d['acceptance_rate'] or 0):.1%}"
        )
    above = result.stops_paying_above
    if above is not None:
        out.append(f"speculation stops paying above concurrency {above}")
    elif any(p.speedup is None for p in result.points):
        out.append("the benchmark client reported no per-token time for some concurrencies")
    elif all(p.speedup is not None and p.speedup >= 1.05 for p in result.points):
        out.append("speculation pays at every concurrency measured")
    else:
        out.append("speculation does not pay at the concurrencies measured")
    return out
