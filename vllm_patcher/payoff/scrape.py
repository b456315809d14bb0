"""One reading of a vLLM server's counters: ``/metrics`` text parsed with prometheus_client.

Counters are summed over the ``engine`` label (one series per data-parallel rank). The text may
come from the server (``GET BASE/metrics``), from a saved file, in the classic format
(``vllm:..._total``) or OpenMetrics (``vllm_..._total``), in single- or multi-process mode.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import NoVllmMetrics, ServerUnreachable

TIMEOUT = 10.0  # seconds for one GET of /metrics, the whole answer
MAX_BYTES = 64 * 2**20  # a vLLM server's /metrics is a few hundred kB
MAX_K = 64  # draft positions: vLLM's suffix decoding defaults to 24

SPEC = "spec_decode_num_"  # the four speculative-decoding counters share this stem


@dataclass(frozen=True)
class Reading:
    """Cumulative values since the server's metrics were created (summed over engines)."""

    source: str
    at: float  # when it was read (Unix time): the scrape, or the saved file's modification time
    spec: bool  # the server exports the speculative-decoding counters
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: tuple[float, ...] = ()  # position 0 .. k-1
    generation_tokens: float = 0.0
    first_tokens: float = 0.0  # time_to_first_token_seconds_count: one per request
    step_seconds: float = 0.0  # inter_token_latency_seconds_sum: one sample per request-step
    steps: float = 0.0  # inter_token_latency_seconds_count
    request_tpot_sum: float = 0.0  # request_time_per_output_token_seconds
    request_tpot_count: float = 0.0
    running: float = 0.0  # num_requests_running (a gauge: the batch now)
    waiting: float = 0.0  # num_requests_waiting (a gauge: queued, not yet scheduled)
    prompt_tokens: float = 0.0  # prompt_tokens_total: prefill done
    created: float | None = None  # the earliest spec counter's _created (single-process mode)
    model: str = ""
    engines: tuple[str, ...] = field(default_factory=tuple)

    @property
    def k(self) -> int:
        return len(self.per_pos)


def _key(name: str) -> str | None:
    """``vllm:spec_decode_num_drafts_total`` (or ``vllm_...``) -> ``spec_decode_num_drafts_total``."""
    for prefix in ("vllm:", "vllm_"):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return None


FIELDS = {  # Reading's summed counters and gauges, by the series (less "vllm:") each is read from
    "drafts": f"{SPEC}drafts_total",
    "draft_tokens": f"{SPEC}draft_tokens_total",
    "accepted": f"{SPEC}accepted_tokens_total",
    "generation_tokens": "generation_tokens_total",
    "first_tokens": "time_to_first_token_seconds_count",
    "step_seconds": "inter_token_latency_seconds_sum",
    "steps": "inter_token_latency_seconds_count",
    "request_tpot_sum": "request_time_per_output_token_seconds_sum",
    "request_tpot_count": "request_time_per_output_token_seconds_count",
    "running": "num_requests_running",
    "waiting": "num_requests_waiting",
    "prompt_tokens": "prompt_tokens_total",
}


def parse(text: str, source: str, at: float) -> Reading:
    """A reading from Prometheus exposition text; ServerUnreachable when it is none."""
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    created: list[float] = []
    engines: set[str] = set()
    models: set[str] = set()
    seen_vllm = False
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = _key(sample.name)
                if key is None:
                    continue
                seen_vllm = True
                if not math.isfinite(sample.value) or sample.value < 0:
                    raise ServerUnreachable(
                        f"{source}: {sample.name} is {sample.value}, which no vLLM counter can "
                        "be; is this a vLLM server's /metrics, unedited?"
                    )
                if "engine" in sample.labels:
                    engines.add(sample.labels["engine"])
                if sample.labels.get("model_name"):
                    models.add(sample.labels["model_name"])
                if key == f"{SPEC}accepted_tokens_per_pos_total":
                    pos = int(sample.labels.get("position", "0"))
                    if not 0 <= pos < MAX_K:
                        raise ServerUnreachable(
                            f"{source}: position label {pos} is not a draft position "
                            f"(0 to {MAX_K - 1})"
                        )
                    per_pos[pos] = per_pos.get(pos, 0.0) + sample.value
                elif key.startswith(SPEC) and key.endswith("_created"):
                    created.append(sample.value)
                else:
                    sums[key] = sums.get(key, 0.0) + sample.value
    except (ValueError, TypeError, KeyError, IndexError):
        raise ServerUnreachable(not_metrics(source, text)) from None
    if not seen_vllm:
        raise NoVllmMetrics(f"{source} has no vllm: metrics; is it a vLLM server's /metrics?")
    if len(models) > 1:
        raise ServerUnreachable(
            f"{source} holds the counters of more than one model ({', '.join(sorted(models))}); "
            "a vLLM server serves one: give one server's /metrics"
        )
    spec = f"{SPEC}drafts_total" in sums
    k = max(per_pos) + 1 if per_pos else 0
    counts = tuple(per_pos.get(i, 0.0) for i in range(k))
    problem = impossible(
        sums.get(f"{SPEC}drafts_total", 0.0),
        sums.get(f"{SPEC}draft_tokens_total", 0.0),
        sums.get(f"{SPEC}accepted_tokens_total", 0.0),
        counts,
        sorted(per_pos) == list(range(k)),
    )
    if problem:
        raise ServerUnreachable(f"{source}: {problem}: these are not one vLLM server's counters")
    return Reading(
        source=source,
        at=at,
        spec=spec,
        per_pos=counts,
        created=min(created) if created else None,
        model=next(iter(models), ""),
        engines=tuple(sorted(engines)),
        **{field: sums.get(series, 0.0) for field, series in FIELDS.items()},
    )


def impossible(
    drafts: float,
    draft_tokens: float,
    accepted: float,
    per_pos: tuple[float, ...],
    every_position: bool = True,
) -> str | None:
    """What no vLLM server's counters (or their difference over a window) can hold, or None.

    A count at position i is a prefix count (drafts whose first i+1 tokens were accepted), so it
    never grows with i; each draft has at most k tokens; accepted tokens are drafted ones."""
    if accepted > draft_tokens:
        return "more tokens accepted than drafted"
    if any(v > drafts for v in per_pos) or any(
        b > a for a, b in zip(per_pos, per_pos[1:], strict=False)
    ):
        return (
            "a draft position counted more often than the one before it (or than there were drafts)"
        )
    if drafts > 0 and not per_pos:
        return (
            "speculative-decoding counters with no per-position series "
            "(spec_decode_num_accepted_tokens_per_pos_total)"
        )
    if not every_position or draft_tokens > drafts * len(per_pos) * (1 + 1e-9):
        return (
            f"position labels up to {len(per_pos) - 1} but {draft_tokens / max(drafts, 1):.2f} "
            "draft tokens per draft: a position series is missing"
        )
    return None


def not_metrics(source: str, text: str) -> str:
    """Why a body is not metrics, described (never pasted: it may be HTML or binary)."""
    head = text.lstrip()[:512]
    if "\ufffd" in head or "\x00" in head or head.startswith("\x1f"):
        what = "binary or compressed data, not metrics text"
    elif head.startswith("<"):
        what = "an HTML or XML page, not metrics text"
    else:
        what = "text that is not Prometheus metrics"
    return (
        f"{source} holds {what}; give the server's base URL or a file saved from its /metrics "
        "(curl -s URL/metrics > FILE)"
    )


def is_url(value: str) -> bool:
    """The one test of "a server, not a saved file": an http(s) URL."""
    return value.startswith(("http://", "https://"))


def metrics_url(base: str) -> str:
    base = base.rstrip("/")
    return base if base.endswith("/metrics") else f"{base}/metrics"


def fetch(base: str, timeout: float = TIMEOUT) -> Reading:
    """GET the server's /metrics now (the exact path, which always answers the classic text).

    The whole answer, headers included, must arrive within ``timeout``: the socket's own timeout
    is per read, so a server that drips one byte at a time would meet it for ever. The request
    runs in a worker thread and is given up at the deadline."""
    import threading

    url = metrics_url(base)
    if not is_url(url):
        raise ServerUnreachable(f"{base} is not an http(s) URL; give the server's base URL")
    got: list[str | BaseException] = []

    def work() -> None:
        try:
            got.append(_get(url, timeout))
        except BaseException as exc:  # noqa: BLE001 (handed to the caller's thread)
            got.append(exc)

    worker = threading.Thread(target=work, name="payoff-fetch", daemon=True)
    worker.start()
    worker.join(timeout)
    if not got:
        raise ServerUnreachable(
            f"{url} sent no whole answer in {timeout:.0f} s; is it a vLLM server's /metrics?"
        )
    if isinstance(got[0], BaseException):
        raise got[0]
    return parse(got[0], url, time.time())


def _get(url: str, timeout: float) -> str:
    import http.client
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:  # noqa: S310 (http only)
            chunks: list[bytes] = []
            size = 0
            while chunk := answer.read1(65536):  # what has arrived: a trickle meets the deadline
                size += len(chunk)
                if size > MAX_BYTES or time.monotonic() > deadline:
                    raise ServerUnreachable(
                        f"{url} sent more than {MAX_BYTES >> 20} MB or took longer than "
                        f"{timeout:.0f} s; is it a vLLM server's /metrics?"
                    )
                chunks.append(chunk)
            return b"".join(chunks).decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        raise ServerUnreachable(f"{url} answered HTTP {exc.code}; is it a vLLM server?") from None
    except http.client.HTTPException as exc:
        raise ServerUnreachable(
            f"{url} did not answer as an HTTP server does ({type(exc).__name__}); is the URL right?"
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ServerUnreachable(
            f"cannot read {url}: {reason}; is the server up and the URL right?"
        ) from None


def read_file(path: Path) -> Reading:
    """A saved scrape (``curl -s BASE/metrics > FILE``); its time is the file's mtime."""
    import stat

    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_BYTES:
            raise ServerUnreachable(
                f"{path} is not a saved scrape (not a regular file, or over {MAX_BYTES >> 20} MB)"
            )
        data = path.read_bytes()
    except OSError as exc:
        raise ServerUnreachable(f"cannot read the metrics file {path}: {exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ServerUnreachable(not_metrics(str(path), "\x00")) from None
    at = info.st_mtime
    return parse(text, str(path), at)
