"""What the catalogue does on one release: the verdict of every patch and, per file, the series
of steps that produce it (``layout``); the releases pinned; the reference a pin gives."""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Any, NamedTuple

from .model import Catalogue, FileChange, Patch, Pin, PinnedFile, version_key
from .support import upstream_in


def pinned_versions(catalogue: Catalogue) -> list[str]:
    """Every release at least one patch has a pinned diff for."""
    versions = {v for p in catalogue.patches for v in p.pinned_versions}
    return sorted(versions, key=version_key)


class Verdict(str, Enum):
    """What one patch means for one release, before any file is read."""

    APPLICABLE = "applicable"
    UPSTREAM = "upstream"  # the release is at or past the patch's fixed_in
    OUTSIDE = "outside"  # the release is outside the patch's releases specifier
    NO_FILES = "no-files"  # the release has none of the files the patch touches
    UNPORTED = "unported"  # in range, but no diff for this release (and no transform)


class Step(NamedTuple):
    """One patch's change to one file on one release: a pinned diff, a transform, or both."""

    patch: str
    path: str
    pinned: PinnedFile | None
    pin: Pin | None
    transform: FileChange | None


class Layout(NamedTuple):
    """The catalogue laid over one release: a verdict per patch and the series per file."""

    version: str
    catalogue: Catalogue
    verdicts: dict[str, Verdict]
    steps: dict[str, list[Step]]  # file -> steps in series order (selected or recorded patches)
    every_step: tuple[Step, ...] = ()  # every applicable patch's steps, selected or not

    def narrowed(self, catalogue: Catalogue, recorded: dict[str, list[str]]) -> Layout:
        """This layout with ``catalogue``'s selection (same patches) and the patches ``recorded``
        on each file, without laying the catalogue over the release again."""
        steps: dict[str, list[Step]] = {}
        for step in self.every_step:
            if catalogue.is_selected(step.patch) or step.patch in recorded.get(step.path, ()):
                steps.setdefault(step.path, []).append(step)
        return self._replace(catalogue=catalogue, steps=steps)

    def files_of(self, patch: str) -> list[str]:
        return [rel for rel, steps in self.steps.items() if any(s.patch == patch for s in steps)]

    @property
    def all_upstream(self) -> bool:
        return not self.steps and all(
            v in (Verdict.UPSTREAM, Verdict.OUTSIDE, Verdict.NO_FILES)
            for v in self.verdicts.values()
        )


def layout(
    catalogue: Catalogue,
    version: str,
    record: dict[str, str],
    recorded: dict[str, list[str]] | None = None,
) -> Layout:
    """Lay the catalogue over ``version``; ``recorded`` maps a file to the patches applied on it.

    A file's series holds the selected patches plus those already recorded on it (apply keeps
    them). A build's release decides what is upstream (``catalogue.support.upstream_in``).
    """
    verdicts: dict[str, Verdict] = {}
    every: list[Step] = []
    for p in catalogue.patches:
        if not p.covers(version):
            verdicts[p.name] = Verdict.OUTSIDE
            continue
        if upstream_in(p, version):
            verdicts[p.name] = Verdict.UPSTREAM
            continue
        pin = p.pin(version)
        by_path = {c.path: c for c in p.applicable_transforms(record, version)}
        mine: list[tuple[str, PinnedFile | None, FileChange | None]]
        if pin is not None:
            mine = [(rel, pin.files[rel], by_path.get(rel)) for rel in sorted(pin.files)]
        elif by_path:
            mine = [(rel, None, c) for rel, c in by_path.items()]
        elif p.transforms:
            verdicts[p.name] = Verdict.NO_FILES
            continue
        else:
            verdicts[p.name] = Verdict.UNPORTED
            continue
        verdicts[p.name] = Verdict.APPLICABLE
        every.extend(Step(p.name, rel, pinned, pin, change) for rel, pinned, change in mine)
    return Layout(version, catalogue, verdicts, {}, tuple(every)).narrowed(
        catalogue, recorded or {}
    )


def builds_on(
    catalogue: Catalogue, version: str, record: dict[str, str], names: Iterable[str]
) -> list[str]:
    """The patches the pinned diffs of ``names`` on ``version`` are stacked on, and those they
    are stacked on, in series order, less ``names``: per file, the chain of earlier pinned diffs
    that leads from the pristine bytes (``record``) to the bytes a diff was made on. A diff made
    on the pristine file builds on nothing."""
    wanted = list(dict.fromkeys(names))
    seen, found, todo = set(wanted), set(), list(wanted)
    while todo:
        patch = catalogue.get(todo.pop())
        pin = patch.pin(version) if patch is not None else None
        if patch is None or pin is None:
            continue
        for rel, made_on in pin.files.items():
            running, chain = record.get(rel), list[str]()
            for other in catalogue.patches:
                if other.name == patch.name:
                    break
                step = _pinned_step(other, version, rel)
                if step is not None and step.before == running:
                    running, chain = step.after, [*chain, other.name]
            if running != made_on.before:
                continue  # no chain of these pins leads there: nothing to name
            for name in chain:
                if name not in seen:
                    seen.add(name)
                    found.add(name)
                    todo.append(name)
    return [n for n in catalogue.names if n in found]


def _pinned_step(patch: Patch, version: str, rel: str) -> PinnedFile | None:
    if not patch.covers(version) or upstream_in(patch, version):
        return None
    pin = patch.pin(version)
    return pin.files.get(rel) if pin is not None else None


def builtin_paths(catalogue: Catalogue, version: str) -> list[str]:
    """The files a built-in patch of ``catalogue`` may touch on ``version``."""
    return catalogue.builtins().paths_for(version)


def pinned_reference(catalogue: Catalogue, version: str) -> tuple[dict[str, str], str]:
    """The pristine hashes the pins of ``version`` start from (each file's first pin in the
    series), for installs without a RECORD to judge by; and the release they were pinned for."""
    record: dict[str, str] = {}
    pinned_as = ""
    for p in catalogue.patches:
        pin = p.pin(version)
        if pin is None:
            continue
        pinned_as = pin.version
        for rel, pf in pin.files.items():
            record.setdefault(rel, pf.before)
    return record, pinned_as


def release_matrix(catalogue: Catalogue) -> list[dict[str, Any]]:
    """What apply does on every release a patch is pinned for, patch by patch: the rows of
    ``list`` (``upstream``, ``not-applicable``, ``pinned-diff``, ``transform``, ``unported``)."""
    return [release_row(catalogue, v, pinned=True) for v in pinned_versions(catalogue)]


def release_row(catalogue: Catalogue, version: str, pinned: bool | None = None) -> dict[str, Any]:
    """``list``'s row for one release (pinned or not): what apply does there, patch by patch."""
    lay = layout(catalogue, version, {})
    pinned_here = any(q.pin(version) for q in catalogue.patches if q.transforms)
    cells = {}
    for p in catalogue.patches:
        verdict = lay.verdicts[p.name]
        # what apply does there: a diff outside releases (or upstream) is not used
        if verdict is Verdict.UPSTREAM:
            cells[p.name] = "upstream"
        elif verdict is Verdict.OUTSIDE:
            cells[p.name] = "not-applicable"
        elif p.pin(version) is not None:
            cells[p.name] = "pinned-diff"
        elif p.transforms:  # a release the codemods were pinned for, without this change
            cells[p.name] = "not-applicable" if pinned_here else "transform"
        else:
            cells[p.name] = "unported"
    if pinned is None:
        pinned = version in pinned_versions(catalogue)
    return {"version": version, "pinned": pinned, "patches": cells}
