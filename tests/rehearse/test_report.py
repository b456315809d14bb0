"""The outcome, its exit code and its words: exit 0 only when the server answered and drafts were
counted (or no speculation was asked for, which is said), never acceptance."""

from __future__ import annotations

from pathlib import Path

from vllm_patcher.cli import outcomes
from vllm_patcher.cli.render import rehearsal as report
from vllm_patcher.payoff import scrape
from vllm_patcher.rehearse import failures, run
from vllm_patcher.serving import server
from vllm_patcher.serving.args import parse

from ..payoff.scrapes import metrics

SPEC = '{"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}'
LOGS = Path(__file__).parent / "logs"


def _rehearsal(speculative: bool, text: str | None, answered: int = 3) -> run.Rehearsal:
    args = ["/m", "--speculative-config", SPEC] if speculative else ["/m"]
    r = run.Rehearsal(run.plan(parse(args), False, False, 60), Path("/tmp/x.log"))
    r.ready_s, r.total_s, r.answered = 30.0, 34.0, answered
    if text is not None:
        r.reading = scrape.parse(text, "test", 0.0)
    return r


def test_drafts_counted_is_the_only_speculative_success_and_acceptance_is_not_judged() -> None:
    ready = _rehearsal(True, metrics(drafts=5, per_pos=(0, 0, 0), generation=20))
    assert (ready.outcome, outcomes.of_rehearsal(ready)) == ("ready", 0)
    said = "\n".join(report.lines(ready))
    assert "5 drafts, 15 draft tokens" in said and "random weights it means nothing" in said
    none = _rehearsal(True, metrics(drafts=0, per_pos=(0, 0, 0), generation=20))
    assert (none.outcome, outcomes.of_rehearsal(none)) == ("no-drafts", 23)
    hidden = _rehearsal(True, metrics(spec=False, generation=20))  # --disable-log-stats
    assert (hidden.outcome, outcomes.of_rehearsal(hidden)) == ("no-drafts", 23)
    assert "no speculative-decoding counters" in "\n".join(report.lines(hidden))


def test_no_speculative_config_succeeds_and_says_speculation_was_not_rehearsed() -> None:
    plain = _rehearsal(False, metrics(spec=False, generation=20))
    assert (plain.outcome, outcomes.of_rehearsal(plain)) == ("no-speculation", 0)
    assert "speculation was not rehearsed" in "\n".join(report.lines(plain))
    # drafted through a spelling the rehearsal did not read (-sc): counted, so it ran
    other = _rehearsal(False, metrics(drafts=4, per_pos=(1,), generation=20))
    assert other.outcome == "ready"


def test_failures_exit_22_or_vllms_usage_2_and_an_unknown_one_shows_the_log() -> None:
    log = LOGS / "granite-refusal-0.31.0.log"
    lines = log.read_text().splitlines()
    r = _rehearsal(True, None, answered=0)
    r.ready_s = None
    r.failure = server.StartFailure("the server exited with code 1 before it was ready", 1, log, ())
    r.cause = failures.classify(lines, "GraniteForCausalLM")
    assert (r.outcome, outcomes.of_rehearsal(r)) == ("failed", 22)
    said = report.lines(r)
    assert any(
        line.startswith("fix: vllm-patcher apply (the patch eagle3-granite") for line in said
    )
    r.cause = failures.classify((LOGS / "usage-0.31.0.log").read_text().splitlines())
    assert outcomes.of_rehearsal(r) == 2
    r.cause = None
    r.failure = server.StartFailure("the server was not ready within 60 s", None, log, ("a", "b"))
    assert (r.outcome, outcomes.of_rehearsal(r)) == ("not-ready", 22)
    said = report.lines(r)
    assert "cause not recognised: the server was not ready within 60 s" in said
    assert "    b" in said and f"log: {r.log}" in said


def test_a_timeout_is_named_with_its_fix_and_the_fix_of_a_refusal_names_the_users_venv() -> None:
    r = _rehearsal(True, None, answered=0)
    r.ready_s = None
    log = LOGS / "granite-refusal-0.31.0.log"
    r.failure = server.StartFailure("the server was not ready within 5 s", None, log, ())
    r.cause = failures.not_ready(5, ["arguments parsed", "model built"])
    said = report.lines(r)
    assert (r.outcome, outcomes.of_rehearsal(r)) == ("not-ready", 22)
    assert "cause: the server was not ready within 5 s (the last step reached: model built)" in said
    assert any(line.startswith("fix: give it longer: raise --ready-timeout") for line in said)
    assert not any(line.startswith(("cause not recognised", "vLLM said")) for line in said)
    venv = "vllm-patcher --python /srv/venv/bin/python apply"
    cause = failures.classify(log.read_text().splitlines(), "GraniteForCausalLM", venv)
    assert cause is not None and cause.fix.startswith(f"{venv} (the patch eagle3-granite")


def test_the_json_counts_are_integers_and_the_opening_names_what_was_replaced() -> None:
    from vllm_patcher.cli.render import rehearse as render

    r = _rehearsal(True, metrics(drafts=5, per_pos=(0, 0, 0), generation=20))
    r.progress.kv_cache_tokens = "232,960"
    data = run.to_dict(r)
    assert (data["kv_cache_tokens"], data["drafts"], data["draft_tokens"]) == (232960, 5, 15)
    assert all(isinstance(data[k], int) for k in ("kv_cache_tokens", "drafts", "draft_tokens"))
    plan = run.plan(parse(["/m", "--port", "9", "--load-format", "auto"]), False, False, 60)
    opening = render.opening(plan)
    assert opening[0].startswith("vllm serve /m with --load-format dummy")
    assert [line.split(" (")[0] for line in opening[1:]] == [
        "ignored: --port",
        "ignored: --load-format auto",
    ]


def test_a_server_that_hides_its_counters_is_speculation_not_counted_not_a_failure() -> None:
    """--disable-log-stats: /metrics has no vllm: lines at all; the drafter was asked for, so
    exit 23 (speculation not shown to run), and without one exit 0."""
    hidden = _rehearsal(True, None)
    assert (hidden.outcome, outcomes.of_rehearsal(hidden)) == ("no-drafts", 23)
    assert "no speculative-decoding counters" in "\n".join(report.lines(hidden))
    plain = _rehearsal(False, None)
    assert (plain.outcome, outcomes.of_rehearsal(plain)) == ("no-speculation", 0)
