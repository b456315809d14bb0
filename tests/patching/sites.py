"""What several tests of the patching modules share: the files a scratch tree holds, RECORD
rewritten as a vendor's rebuilt wheel would, and the patch states status reports."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
from pathlib import Path

from ..conftest import CATALOGUE, run_cli

SPEC = "vllm/config/speculative.py"
LOAD = "vllm/config/load.py"
# config/load.py is no built-in's file: every scratch tree here asks for it by name
FILES = [*CATALOGUE.all_paths(), LOAD]


def _rewrite_record(site: Path, rel: str, data: bytes) -> None:
    """Make ``rel`` hold ``data`` and RECORD agree, as a vendor's rebuilt wheel would."""
    (site / rel).write_bytes(data)
    record = next(site.glob("vllm-*.dist-info")) / "RECORD"
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    rows = list(csv.reader(io.StringIO(record.read_text())))
    for row in rows:
        if row and row[0] == rel:
            row[1], row[2] = f"sha256={digest}", str(len(data))
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    record.write_text(out.getvalue())


def _states(site: Path) -> set[str]:
    st = json.loads(run_cli("--target", str(site), "--json", "status", check=True).stdout)
    return {p["state"] for p in st["patches"]}
