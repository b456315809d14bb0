"""Render what a vLLM server would expose, with that release's own metric classes (run in a
venv with vLLM): ``python render_metrics.py JSON``.

JSON: ``{"scenarios": [NAME, ...], "out": DIR, "metrics_py": FILE or null}``. ``metrics_py`` is a
release's own ``vllm/v1/spec_decode/metrics.py`` to load instead of the installed one (its imports,
``SpeculativeConfig`` for annotations and ``init_logger``, resolve in the installed vLLM). Writes
``DIR/NAME/first.txt`` and ``second.txt`` (two scrapes; one for ``spec_off`` and ``reset``;
``log.txt`` for ``log``) and prints one JSON line: per scenario, what was observed between the
scrapes, summed over engines.

Scenarios: ``two_engines`` (data parallel, two ``engine`` labels), ``multiprocess``
(``PROMETHEUS_MULTIPROC_DIR``: what a server with several API processes renders), ``reset`` (the
second scrape from a fresh process: a restart), ``minus_one`` (0.11-0.14 count -1 accepted for a
step with no sampled token), ``spec_off`` (no speculative config), ``log`` (SpecDecodingLogging's
line).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

K = 3
# per engine, per scrape: drafts as (drafted, accepted)
STEPS = {
    0: [[(3, 2), (3, 0), (1, 1)], [(3, 3), (3, 1)]],
    1: [[(3, 3)], [(2, 1), (3, 0), (3, 2)]],
}


def _module(metrics_py: str | None):  # type: ignore[no-untyped-def]
    if metrics_py is None:
        import vllm.v1.spec_decode.metrics as module

        return module
    spec = importlib.util.spec_from_file_location("release_spec_decode_metrics", metrics_py)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _observe(module, prom, engine: int, drafts) -> None:  # type: ignore[no-untyped-def]
    stats = module.SpecDecodingStats.new(K)
    for drafted, accepted in drafts:
        stats.observe_draft(drafted, accepted)
    prom.observe(stats, engine)


def _expected(scrape: int, engines=(0, 1)) -> dict[str, object]:  # type: ignore[no-untyped-def]
    drafts = [d for e in engines for d in STEPS[e][scrape]]
    per_pos = [sum(1 for _, a in drafts if a > i) for i in range(K)]
    return {
        "drafts": len(drafts),
        "draft_tokens": sum(d for d, _ in drafts),
        "accepted_tokens": sum(a for _, a in drafts),
        "per_pos": per_pos,
    }


def _clear(prometheus_client) -> None:  # type: ignore[no-untyped-def]
    """A fresh default registry: each scenario is a server of its own."""
    registry = prometheus_client.REGISTRY
    for collector in list(registry._collector_to_names):
        registry.unregister(collector)


def scenario(name: str, out: Path, module, prometheus_client) -> dict[str, object]:  # type: ignore[no-untyped-def]
    out.mkdir(parents=True, exist_ok=True)
    _clear(prometheus_client)
    config = SimpleNamespace(num_speculative_tokens=K)
    labels = ["model_name", "engine"]
    engines = {0: ["tiny", "0"], 1: ["tiny", "1"]}

    def render() -> bytes:
        if name == "multiprocess":
            from prometheus_client import multiprocess

            registry = prometheus_client.CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return bytes(prometheus_client.generate_latest(registry))
        return bytes(prometheus_client.generate_latest())

    # a vLLM gauge every server has, whatever its speculative config
    running = prometheus_client.Gauge(
        "vllm:num_requests_running", "Number of requests in model execution batches.",
        labelnames=labels, multiprocess_mode="livesum",
    )  # fmt: skip
    running.labels("tiny", "0").set(2)
    if name == "spec_off":
        module.SpecDecodingProm(None, labels, engines)
        (out / "first.txt").write_bytes(render())
        return {}
    if name == "log":
        log = module.SpecDecodingLogging()
        for e in (0, 1):
            stats = module.SpecDecodingStats.new(K)
            for drafted, accepted in STEPS[e][0]:
                stats.observe_draft(drafted, accepted)
            log.observe(stats)
        lines: list[str] = []
        log.log(
            log_fn=lambda fmt, *a: lines.append("INFO 12-01 09:00:00 [metrics.py:1] " + fmt % a)
        )
        (out / "log.txt").write_text("\n".join(lines) + "\n")
        return _expected(0)
    prom = module.SpecDecodingProm(config, labels, engines)
    if name == "minus_one":
        _observe(module, prom, 0, [(3, 2)])
        (out / "first.txt").write_bytes(render())
        _observe(module, prom, 0, [(3, 2), (3, -1)])  # one step: the -1 lowers accepted
        (out / "second.txt").write_bytes(render())
        return {"drafts": 2, "draft_tokens": 6, "accepted_tokens": 1, "per_pos": [1, 1, 0]}
    for e in (0, 1):
        _observe(module, prom, e, STEPS[e][0] * (6 if name == "reset" else 1))
    (out / "first.txt").write_bytes(render())
    if name == "reset":  # a long-running server's scrape; the test pairs it with a restarted one
        return {}
    for e in (0, 1):
        _observe(module, prom, e, STEPS[e][1])
    (out / "second.txt").write_bytes(render())
    return _expected(1)


def main() -> int:
    args = json.loads(sys.argv[1])
    if "multiprocess" in args["scenarios"]:  # before prometheus_client picks its value class
        assert args["scenarios"] == ["multiprocess"], "multiprocess mode needs a process of its own"
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="prom-")
    import prometheus_client

    module = _module(args.get("metrics_py"))
    out = Path(args["out"])
    print(
        json.dumps({n: scenario(n, out / n, module, prometheus_client) for n in args["scenarios"]})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
