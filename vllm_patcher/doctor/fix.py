"""doctor --fix: write the top-level aux-layer key the drafter needs (config.json backed up
first), then check again."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from ..catalogue.model import Catalogue
from ..errors import BadSetting, NotWritable
from ..fileops import atomic_write
from ..findings import WARNING, Finding
from ..models.configs import AUX_KEY
from .checks import check
from .doctor_report import AppliedFix, DoctorReport, WrittenValue
from .rules import GUESSED


def _backup(path: Path, data: bytes) -> Path:
    n = 0
    while True:
        candidate = path.with_name(f"{path.name}.bak" + (f".{n}" if n else ""))
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            n += 1
            continue
        except OSError as exc:
            raise NotWritable(f"cannot back up {path} to {candidate}: {exc.strerror}") from None
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        return candidate


def _indent_of(text: str) -> str | None:
    for line in text.splitlines()[1:]:
        stripped = line.lstrip(" \t")
        if stripped.startswith('"'):
            return line[: len(line) - len(stripped)] or None
    return None


def write_aux_layer_ids(drafter_dir: str | Path, ids: tuple[int, ...]) -> Path:
    """Set the top-level aux-layer key in the drafter's config.json; return the backup's path.

    The original is copied byte for byte first; other keys keep their values and order, and the
    file is replaced atomically so a concurrent reader never sees half a config.
    """
    path = Path(drafter_dir) / "config.json"
    original = path.read_bytes()
    text = original.decode("utf-8")
    data = json.loads(text)
    data[AUX_KEY] = list(ids)
    rendered = json.dumps(data, indent=_indent_of(text), ensure_ascii=text.isascii())
    if text.endswith("\n"):
        rendered += "\n"
    backup = _backup(path, original)
    atomic_write(path, rendered.encode("utf-8"), mode=path.stat().st_mode & 0o777)
    return backup


def run(
    model_dir: str | Path,
    drafter_dir: str | Path,
    vllm_version: str,
    catalogue: Catalogue,
    fix: bool = False,
    python: Callable[[], str] | None = None,
    served_len: int | None = None,
    pipeline: int | None = None,
    tensor: int | None = None,
) -> DoctorReport:
    """check(); with ``fix``, write the top-level key it calls for, then check again."""
    report = check(
        model_dir, drafter_dir, vllm_version, catalogue, python, served_len, pipeline, tensor
    )
    plan = report.aux
    if not fix or plan is None or plan.write_ids is None or report.drafter is None:
        return report
    source = report.drafter_source
    if source is not None and source.repo_id is not None:
        # the snapshot's config.json links into huggingface_hub's blob store: never edit the cache
        raise BadSetting(
            f"--fix writes the drafter's config.json, and {source.repo_id} is a Hugging Face "
            f"cache entry; copy it to a directory (hf download {source.repo_id} --local-dir DIR) "
            "and pass --drafter DIR"
        )
    ids = plan.write_ids
    written = WrittenValue(
        AUX_KEY, list(ids), plan.write_basis or GUESSED, plan.write_based_on or ""
    )
    backup = write_aux_layer_ids(report.drafter.path, ids)
    after = check(
        model_dir, drafter_dir, vllm_version, catalogue, python, served_len, pipeline, tensor
    )
    after.fix = AppliedFix(str(report.drafter.config_path), str(backup), ids, (written,))
    if written.basis == GUESSED:
        # the config now states a value nobody knew: keep saying so until a person confirms it
        after.findings.append(
            Finding(
                "fix",
                WARNING,
                f"--fix wrote {written.key}: {json.dumps(written.value)} as a GUESS, based on "
                f"{written.based_on}",
                f"check it against the drafter's training setup, or restore {backup}",
            )
        )
    return after
