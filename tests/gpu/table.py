"""The GPU proof's reading and reporting (``tests/gpu/proof.py``), kept apart so CI tests them:
the engine's own exception line out of a traceback, a rehearsal's outcome out of its JSON, a
patch's state out of ``status --json``, and the tables docs/gpu-proof.md carries."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

# vLLM's own hint lines that follow a CUDA error; the first line of the message is the cause
_HINT = re.compile(r"^(Search for|CUDA kernel errors|For debugging|Compile with)")


def cause_line(error: str) -> str:
    """The first line of an exception message that says what happened (not torch's hints)."""
    for line in error.strip().splitlines():
        line = line.strip()
        if line and not _HINT.match(line):
            return line[:160]
    return " ".join(error.split())[:160]


def rehearsal(returncode: int, stdout: str) -> str:
    """``ready in N s, D drafts``, or ``exit C [row]: <the engine's own line> during <activity>``,
    from ``rehearse --json``."""
    try:
        doc = json.loads(stdout)
    except json.JSONDecodeError:
        return f"exit {returncode}: no JSON report"
    data = doc if isinstance(doc, dict) else {}
    if returncode == 0:
        return f"ready in {data.get('ready_s')} s, {data.get('drafts')} drafts"
    cause = data.get("cause") if isinstance(data.get("cause"), dict) else {}
    failure = data.get("failure") if isinstance(data.get("failure"), dict) else {}
    said = (
        data.get("engine_said")
        or cause.get("cause")
        or failure.get("reason")
        or data.get("outcome")
        or "?"
    )
    where = f" during {data['died_in']}" if data.get("died_in") else ""
    key = f" [{cause['key']}]" if cause.get("key") else ""
    return f"exit {returncode}{key}: {cause_line(str(said))}{where}"


def _find(doc: Any, name: str) -> Mapping[str, Any] | None:
    if isinstance(doc, Mapping):
        if doc.get("name") == name and "state" in doc:
            return doc
        children: Iterable[Any] = doc.values()
    elif isinstance(doc, list):
        children = doc
    else:
        return None
    for child in children:
        found = _find(child, name)
        if found is not None:
            return found
    return None


def patch_state(stdout: str, name: str) -> str:
    """The state ``status --json`` gives patch ``name``; ``unknown`` when it says none."""
    try:
        found = _find(json.loads(stdout), name)
    except json.JSONDecodeError:
        return "unknown"
    state = found.get("state") if found else None
    return str(state) if state else "unknown"


def verify_line(stdout: str) -> str:
    """``N/M behaviour checks OK`` from ``verify --json``, and the first check that failed."""
    try:
        doc = json.loads(stdout)
    except json.JSONDecodeError:
        return "no JSON report"
    found = doc.get("checks") if isinstance(doc, dict) else None
    checks = [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []
    ran = [c for c in checks if c.get("tier") == "behaviour" and not c.get("skipped")]
    text = f"{sum(bool(c.get('ok')) for c in ran)}/{len(ran)} behaviour checks OK"
    failed = [c for c in checks if not c.get("ok") and not c.get("skipped")]
    if failed:
        text += f"; failed: {failed[0].get('name')}: {cause_line(str(failed[0].get('detail')))}"
    return text


def _cell(value: Any) -> str:
    return " ".join(str(value).split()).replace("|", "\\|")


def render(rows: list[dict[str, Any]], day: str, device: str = "one GPU") -> str:
    """The proof as one Markdown table, dated, on ``device`` (as the driver read it); a row that
    failed says FAIL."""
    out = [
        f"GPU proof of {day} (`python3 -m tests.gpu.proof`, {device}):",
        "",
        "| vLLM | patch | step | graphs | result | s |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        mark = "" if r["ok"] else "FAIL: "
        seconds = "" if r.get("seconds") is None else f"{r['seconds']:.0f}"
        cells = [_cell(r[k]) for k in ("release", "patch", "step", "mode")]
        out.append(f"| {' | '.join(cells)} | {mark}{_cell(r['result'])} | {seconds} |")
    return "\n".join(out) + "\n"


# What vLLM says when it turns a Granite target's EAGLE-3 drafter away by the check the patch lifts:
# the allow-list (0.11.0-0.21.0), or the SupportsEagle3 interface (0.22.0 on)
REFUSALS = ("eagle3 is only supported for", "does not support EAGLE3", "EAGLE3 interface")


def refused(error: str) -> bool:
    """The engine refused by that check, not for any other reason (an import error, no memory)."""
    return any(said in error for said in REFUSALS)
