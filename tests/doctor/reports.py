"""What doctor reports, read back: its JSON answer, and the findings of one check; doctor's
``check`` and ``run`` in-process with the built-ins (the catalogue of a command without
``--patches``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vllm_patcher import doctor

from ..conftest import CATALOGUE, run_cli


def check(
    model: str | Path, drafter: str | Path, version: str, **options: Any
) -> doctor.DoctorReport:
    return doctor.check(model, drafter, version, CATALOGUE, **options)


def run(
    model: str | Path, drafter: str | Path, version: str, **options: Any
) -> doctor.DoctorReport:
    return doctor.run(model, drafter, version, CATALOGUE, **options)


def doctor_json(*args: str) -> tuple[int, dict[str, Any]]:
    proc = run_cli("--json", "doctor", *args)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def by_check(report: doctor.DoctorReport | dict[str, Any], name: str) -> list[tuple[str, str]]:
    findings = report["findings"] if isinstance(report, dict) else report.to_dict()["findings"]
    assert isinstance(findings, list)
    return [(f["level"], f["message"]) for f in findings if f["check"] == name]
