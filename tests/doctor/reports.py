"""What doctor reports, read back: its JSON answer, and the findings of one check."""

from __future__ import annotations

import json
from typing import Any

from vllm_patcher import doctor

from ..conftest import run_cli


def doctor_json(*args: str) -> tuple[int, dict[str, Any]]:
    proc = run_cli("--json", "doctor", *args)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def by_check(report: doctor.DoctorReport | dict[str, Any], name: str) -> list[tuple[str, str]]:
    findings = report["findings"] if isinstance(report, dict) else report.to_dict()["findings"]
    assert isinstance(findings, list)
    return [(f["level"], f["message"]) for f in findings if f["check"] == name]
