"""A rehearsal's outcome for a person: the steps reached with their times, the classes vLLM
resolved, whether speculation ran, or the failure's cause and fix (the log's last lines and
its path when no row of the table names it)."""

from __future__ import annotations

from ...rehearse.phases import LABEL
from ...rehearse.run import Rehearsal

RANDOM = "acceptance not judged: with random weights it means nothing"


def _steps(r: Rehearsal) -> str:
    seen = r.progress.seen_at
    out = []
    for key in r.progress.reached():
        at = seen.get(key)
        out.append(f"{LABEL[key]} {at:.0f} s" if at is not None else LABEL[key])
    return ", ".join(out) or "none"


def _classes(r: Rehearsal) -> str | None:
    target, drafter = r.progress.target_class, r.progress.drafter_class
    if target is None:
        return None
    return f"target {target}" + (f", drafter {drafter}" if drafter else "") + " (as vLLM resolved)"


def lines(r: Rehearsal) -> list[str]:
    out = [f"ignored: {note}" for note in r.plan.ignored]
    classes = _classes(r)
    if r.failure is None:
        out.append(f"ready after {r.ready_s or 0:.0f} s; steps: {_steps(r)}")
        if classes:
            out.append(classes)
        if r.progress.kv_cache_tokens:
            out.append(f"KV cache: {r.progress.kv_cache_tokens} tokens")
        out.append(f"{r.answered} completions answered")
        out += _speculation(r)
        out.append(
            f"rehearsal: {r.total_s:.0f} s in all, {r.total_s - (r.ready_s or 0):.0f} s beyond "
            "the server's start (dummy weights: the checkpoint was not read)"
        )
        if r.log_kept:
            out.append(f"log: {r.log}")
        return out
    stopped = r.progress.stopped_before()
    where = f"stopped before {LABEL[stopped]}" if stopped else "after every step"
    out.append(f"failed after {r.total_s:.0f} s ({where}); steps: {_steps(r)}")
    if classes:
        out.append(classes)
    if r.died_in:
        out.append(f"died during: {r.died_in}")
    if r.engine_said:
        out.append(f"vLLM raised: {r.engine_said}")
    if r.cause is not None:
        out.append(f"cause: {r.cause.cause}")
        out.append(f"fix: {r.cause.fix}")
        if r.cause.evidence and not (r.engine_said and r.engine_said in r.cause.evidence):
            out.append(f"vLLM said: {r.cause.evidence}")
    else:
        sig = r.failure.signal_name
        out.append(f"cause not recognised: {r.failure.reason}" + (f" ({sig})" if sig else ""))
        if r.failure.tail:
            out.append("the log's last lines:")
            out += [f"    {line}" for line in r.failure.tail[-15:]]
        else:
            out.append("the log is empty")
    out.append(f"log: {r.log}")
    return out


def _speculation(r: Rehearsal) -> list[str]:
    reading = r.reading
    if r.outcome == "no-speculation":
        return ["no --speculative-config: speculation was not rehearsed"]
    if reading is None or not reading.spec:
        return [
            "speculation not counted: /metrics has no speculative-decoding counters (is "
            "--disable-log-stats given?), so the rehearsal cannot show the drafter ran"
        ]
    if reading.drafts <= 0:
        return ["speculation did not run: no drafts were counted"]
    drafter = " (the drafter's own weights)" if r.plan.real_drafter else ""
    return [
        f"speculation ran{drafter}: {reading.drafts:.0f} drafts, {reading.draft_tokens:.0f} "
        f"draft tokens counted; {RANDOM}"
    ]
