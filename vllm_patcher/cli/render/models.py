"""What doctor and serve-args show, as text and as JSON."""

from __future__ import annotations

import json
from typing import Any

from ... import doctor as doctor_mod
from ...errors import EXIT_OK
from .. import outcomes
from ..base import Shown


def doctor(report: Any, fix: bool, note: str | None = None) -> Shown:
    """``note``: a last line saying what was not judged (the venv, under --vllm-version)."""
    code = outcomes.found("doctor", "ok" if report.ok else "problem")
    data = report.to_dict()
    data["venv_checked"] = note is None and any(f.check == "venv" for f in report.findings)
    lines = doctor_lines(report, fix)
    if note:  # before the summary, which stays the last line
        lines.insert(len(lines) - 1, note)
    return Shown(code, data, lines)


def serve_args_problems(report: Any) -> Shown:
    """doctor's problems, on stderr in both modes (stdout is vLLM's input, never a report)."""
    lines = []
    for f in report.problems:
        lines.append(f"vllm-patcher: problem: {f.check}: {f.message}")
        if f.fix:
            lines.append(f"vllm-patcher:   fix: {f.fix}")
    return Shown(outcomes.found("serve-args", "problem"), None, stderr=lines)


# Warnings serve-args repeats on stderr: vLLM's own faults (serve-args cannot see the serve flags
# that avoid them; rehearse can) and the causes of low acceptance a server would not show.
SERVE_ARGS_WARNS = (
    "known-failure", "flags", "positions", "trained-for", "capture", "d2t", "kv-page"
)  # fmt: skip


def serve_args_faults(report: Any) -> Shown:
    """The warnings doctor found that a server would not show, on stderr."""
    lines = []
    for f in report.findings:
        if f.check in SERVE_ARGS_WARNS and f.level == "warning":
            lines.append(f"vllm-patcher: warning: {f.check}: {f.message}")
            if f.fix:
                lines.append(f"vllm-patcher:   fix: {f.fix}")
    return Shown(EXIT_OK, None, stderr=lines)


def serve_args(config: dict[str, Any]) -> Shown:
    """The one line for vllm serve --speculative-config, with or without --json."""
    return Shown(EXIT_OK, None, [json.dumps(config)])


def doctor_lines(report: Any, fix: bool) -> list[str]:
    lines: list[str] = []
    if report.fix is not None:
        lines.append(f"--fix wrote to {report.fix.config} (original kept as {report.fix.backup}):")
        lines.extend(f"  {_written(value)}" for value in report.fix.values)
        lines.append("checked again:")
    elif fix:
        lines.append("--fix: nothing it can write; see the fixes below")
    t, d, aux = report.target, report.drafter, report.aux
    if t is not None and d is not None and aux is not None:
        lines.append(
            f"vLLM {report.vllm_version}, target {_model_name(report.model_source, t.path)} "
            f"({t.model_type}, {t.num_layers} layers), drafter {_model_name(report.drafter_source, d.path)}"
        )
        lines.append(
            f"aux layers: vLLM {list(aux.vllm_ids)} (residual entering layer i) = SGLang/SpecForge "
            f"{list(aux.output_ids)} (output of layer i), from {aux.source}"
        )
    else:
        lines.append(f"vLLM {report.vllm_version}")
    for f in report.findings:
        lines.append(f"  {f.level:<8} {f.check:<13} {f.message}")
        if f.fix and f.level != doctor_mod.OK:
            lines.append(f"  {'':<8} {'':<13} fix: {f.fix}")
    problems, warnings = len(report.problems), len(report.warnings)
    lines.append(
        f"doctor: {problems} problem{'s' * (problems != 1)}, "
        f"{warnings} warning{'s' * (warnings != 1)}"
    )
    return lines


def _written(value: Any) -> str:
    """One value --fix wrote, and whether it was known or guessed (and from what)."""
    how = "known, from" if value.basis == doctor_mod.KNOWN else "a GUESS, based on"
    return f"{value.key}: {json.dumps(value.value)} ({how} {value.based_on})"


def _model_name(source: Any, path: str) -> str:
    """A repo id as the user gave it, with the snapshot folder it was read from."""
    if source is not None and source.repo_id:
        return f"{source.repo_id} ({path})"
    return path
