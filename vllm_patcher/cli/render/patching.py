"""What status, apply, revert, verify and list show, as text and as JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...catalogue import support
from ...catalogue.model import Catalogue
from ...errors import EXIT_OK
from ...install import target as target_mod
from ...patching import status as status_mod
from ...patching.states import READY
from .. import outcomes
from ..base import Shown, chosen_line

if (
    TYPE_CHECKING
):  # typing only: the transaction and verify are loaded by the commands that run them
    from ...patching.journal import LeftInPlace
    from ...patching.txn import ApplyResult, RevertResult
    from ...patching.verify import VerifyReport


def status(
    st: status_mod.Status,
    target: target_mod.Target,
    check: bool,
    catalogue: Catalogue | None = None,
) -> Shown:
    data = {
        **st.to_dict(),
        "chosen_by": target.chosen_by,
        "python": str(target.python) if target.python is not None else None,
    }
    lines = status_lines(st, target)
    if check:
        lines.append(check_line(st, catalogue))
    return Shown(outcomes.status(st.ready, check), data, ["\n".join(lines)])


def check_line(st: status_mod.Status, catalogue: Catalogue | None) -> str:
    """status --check's last line: what passes, or which patches fail and how."""
    judged = [p for p in st.patches if p.state is not status_mod.PatchState.NOT_CHOSEN]
    chosen = catalogue is not None and bool(catalogue.selected)
    what = ("chosen " if chosen else "") + ("patch" if len(judged) == 1 else "patches")
    if st.in_progress:
        return "check: not ready: another vllm-patcher run is changing these files right now"
    failing = [p for p in judged if p.state not in READY]
    if not failing:
        return f"check: OK: {len(judged)} {what} applied, upstream or not needed here"
    by_state: dict[str, list[str]] = {}
    for p in failing:
        by_state.setdefault(p.state.value, []).append(p.name)
    parts = "; ".join(f"{len(v)} {k}: {', '.join(v)}" for k, v in by_state.items())
    return f"check: FAILED: {len(failing)} of {len(judged)} {what} not ready ({parts})"


def status_lines(st: status_mod.Status, target: target_mod.Target | None = None) -> list[str]:
    lines = [
        f"vLLM {st.vllm_version} ({st.distribution}) at {st.location}"
        + f" ({st.shape} install, judged against {st.reference})",
        *([chosen_line(target)] if target is not None else []),
        f"release: {st.release}   fingerprint: {st.fingerprint}",
    ]
    if st.in_progress:
        lines.append(
            "another vllm-patcher run is changing this environment right now; "
            "run status again when it is done"
        )
    elif st.interrupted:
        lines.append(
            f"an earlier {st.interrupted} run was interrupted; run apply or revert to recover"
        )
    others = [p.name for p in st.patches if p.state is status_mod.PatchState.NOT_CHOSEN]
    for p in st.patches:
        if p.state is status_mod.PatchState.NOT_CHOSEN:
            continue
        method = p.method or "-"
        files = ", ".join(p.files) if p.files else "-"
        origin = "" if p.origin == "built-in" else f"   [{p.origin}]"
        lines.append(f"  {p.name:<23} {p.state.value:<15} {method:<12} {files}{origin}")
        if p.detail and p.state not in (
            status_mod.PatchState.APPLIED,
            status_mod.PatchState.UPSTREAM,
        ):
            lines.append(f"      {p.detail}")
    if others:
        lines.append(f"  not chosen (not judged): {', '.join(others)}")
    return lines


def apply(result: ApplyResult, dry_run: bool, catalogue: Catalogue | None = None) -> Shown:
    """``catalogue``: the run's, its chosen patches selected (none selected: every patch)."""
    chosen = catalogue.is_selected if catalogue is not None else (lambda name: True)
    if dry_run:  # a dry run's stdout is the diff; what else it says goes to stderr
        text = [result.diff.removesuffix("\n")] if result.diff else []
        if result.diff:
            notes = []
        elif result.edits:
            notes = [f"would adopt {', '.join(result.adopted)} (already patched by hand)"]
        else:
            notes = ["nothing to apply"]
        notes += [f"note: {note}" for note in result.notes]
        return Shown(EXIT_OK, result.to_dict(), text, notes)
    st = result.status
    assert st is not None
    lines = [f"recovered {rel} from an interrupted run" for rel in result.recovered]
    lines += [f"note: {note}" for note in result.notes]
    lines.append(f"vLLM {st.vllm_version} at {st.location}")
    unneeded = []
    for p in st.patches:
        if p.name in result.methods:
            how = result.methods[p.name]
            verb = (
                "adopted (already patched by hand; now recorded)"
                if how == "adopted"
                else "applied now"
            )
            how = "pinned-diff" if how == "adopted" else how
        elif p.state is status_mod.PatchState.NOT_CHOSEN or (
            not chosen(p.name) and p.state is not status_mod.PatchState.APPLIED
        ):
            verb, how = "not chosen", ""
        else:
            verb, how = p.state.value, p.method or ""
            if catalogue is not None and catalogue.selected and p.state in _UNNEEDED:
                unneeded.append(f"{p.name}: not needed on vLLM {st.vllm_version}: {p.detail}")
        lines.append(f"  {p.name:<23} {verb}" + (f" ({how})" if how else ""))
    if not result.edits:
        lines.append("nothing to do")
    return Shown(EXIT_OK, result.to_dict(), lines + unneeded)


_UNNEEDED = (status_mod.PatchState.UPSTREAM, status_mod.PatchState.NOT_APPLICABLE)


def left_in_place(left: LeftInPlace) -> str:
    if left.copies:
        return (
            f"left in place: {left.folder} (the lock file, and in saved/ the copies of your edits "
            "that revert --force kept); move them out, then remove it with rm -r once no "
            "vllm-patcher run is active"
        )
    return (
        f"left in place: {left.folder} (only the lock file now); remove it with rm -r once no "
        "vllm-patcher run is active"
    )


def revert(result: RevertResult, target: target_mod.Target, left: LeftInPlace) -> Shown:
    data = {
        "vllm_version": target.version,
        "location": str(target.site_packages),
        **result.to_dict(),
    }
    if not (result.restored or result.already_pristine or result.recovered):
        return Shown(EXIT_OK, data, ["nothing applied; nothing to revert"])
    lines = []
    for rel in result.recovered:
        if rel in result.saved_edits:
            lines.append(
                f"restored {rel} (an interrupted run had left it, and it was edited since)"
            )
        else:
            lines.append(f"restored {rel} (an interrupted run had left it patched)")
    lines += [f"restored {rel}" for rel in result.restored]
    lines += [f"your edited {rel} was kept at {where}" for rel, where in result.saved_edits.items()]
    lines += [f"{rel} was already pristine" for rel in result.already_pristine]
    lines.append(left_in_place(left))
    return Shown(EXIT_OK, data, lines)


def reapplied(shown: Shown, again: list[str]) -> Shown:
    """revert --model's report: the revert's, then the patches applied again."""
    data = {**(shown.data or {}), "applied_again": again}
    lines = [line for line in shown.text if not line.startswith("left in place")]
    lines.append(f"applied again (chosen for another model here): {', '.join(again)}")
    return Shown(shown.code, data, lines)


def verify(report: VerifyReport, tiers: tuple[str, ...], busy: str) -> Shown:
    """``tiers``: verify's tiers in order; ``busy``: why the import tier did not run when
    another run holds the environment."""
    lines = [f"vLLM {report.vllm_version} at {report.location}"]
    for tier in tiers:
        result = report.tiers.get(tier, "not-run")
        checks = [c for c in report.checks if c.tier == tier]
        skipped = sum(c.skipped for c in checks)
        ran = len(checks) - skipped
        passed = sum(c.ok and not c.skipped for c in checks)
        counts = f" ({passed}/{ran})" if ran else ""
        if skipped:
            counts = f"{counts} ({skipped} not applicable)"
        why = f" ({report.not_run[tier]})" if tier in report.not_run else ""
        lines.append(f"  {tier:<10} {result}{counts}{why}")
        for c in checks:
            if not c.ok:
                lines.append(f"      FAIL {c.name}: {c.detail}")
            elif c.skipped:
                lines.append(f"      n/a  {c.name}: {c.detail}")
    unproven = [t for t in tiers if report.tiers.get(t) == "skipped"]
    if report.ok and unproven:  # say what was proven: --target has no interpreter to import
        proven = [t for t in tiers if report.tiers.get(t) == "passed"]
        lines.append(
            f"verify: OK for the {' and '.join(proven)} tiers only; {' and '.join(unproven)} "
            f"not run ({report.not_run.get(unproven[0], 'skipped')}): verify with --python "
            "and the interpreter that will serve proves the patches load"
        )
    elif report.ok:
        lines.append("verify: OK")
    elif report.tiers.get("import") == "not-run" and report.tiers.get("state") == "failed":
        if report.not_run.get("import") == busy:
            lines.append(f"verify: FAILED: stopped after the state tier; {busy}")
        else:
            then = f"run `{report.fix}` first" if report.fix else "fix what the state tier names"
            lines.append(f"verify: FAILED: stopped after the state tier; {then}, then verify again")
    else:
        lines.append(
            "verify: FAILED" + (f"; `{report.fix}` fixes the state tier" if report.fix else "")
        )
    code = outcomes.found("verify", "passed" if report.ok else "failed")
    return Shown(code, report.to_dict(), lines)


def terminal_width() -> int:
    """The width ``list`` folds its text to: $COLUMNS, else the terminal's, else 100."""
    import shutil

    return max(60, shutil.get_terminal_size((100, 24)).columns)


def _ranges(rows: list[dict[str, Any]], name: str) -> list[str]:
    """One patch's cells over the releases, consecutive equal ones folded into a range."""
    runs: list[list[Any]] = []  # [first, last, cell]
    for row in rows:
        cell = row["patches"][name]
        if runs and runs[-1][2] == cell:
            runs[-1][1] = row["version"]
        else:
            runs.append([row["version"], row["version"], cell])
    return [f"{a}-{b} {cell}" if a != b else f"{a} {cell}" for a, b, cell in runs]


def _fold_items(head: str, items: list[str], width: int) -> list[str]:
    """``items`` joined by "; " after ``head`` (24 columns), a line broken only between items."""
    lines, line = [], f"{head:<24}"
    for i, item in enumerate(items):
        part = item + (";" if i < len(items) - 1 else "")
        if len(line) > 24 and len(line) + 1 + len(part) > width:
            lines.append(line)
            line = " " * 24 + part
        else:
            line = line + ("" if len(line) == 24 or line.endswith(" ") else " ") + part
    return [*lines, line]


def list_(
    catalogue: Catalogue,
    rows: list[dict[str, Any]],
    installed: target_mod.Target | None,
    width: int = 100,
) -> Shown:
    """The catalogue and what apply does on the releases of ``rows`` (every pinned release, or
    one), folded to ``width`` columns; the installed release marked."""
    import textwrap

    patches = [
        {
            "name": p.name,
            "origin": p.origin,
            "summary": p.summary,
            "releases": str(p.releases),
            "fixed_in": str(p.fixed_in) if p.fixed_in else None,
            "pinned_versions": list(p.pinned_versions),
            "files": p.all_paths(),
        }
        for p in catalogue.patches
    ]
    data: dict[str, Any] = {
        "patches": patches,
        "releases": rows,
        "supported": support.supported_range(catalogue),
    }
    if installed is not None:
        data["installed"] = {
            "vllm_version": installed.version,
            "site_packages": str(installed.site_packages),
        }

    def fold(head: str, text: str) -> list[str]:
        return textwrap.wrap(
            text,
            width,
            initial_indent=f"{head:<24}",
            subsequent_indent=" " * 24,
            break_on_hyphens=False,
            break_long_words=False,
        ) or [head]

    lines = []
    for p in catalogue.patches:
        if p.fixed_in:
            fixed = f", upstream from {p.fixed_in}"
        elif p.builtin and p.family is not None:
            fixed = ", no upstream EAGLE-3 in any release"
        else:
            fixed = ""
        lines += fold(p.name, p.summary)
        lines += fold("", f"releases {p.releases or 'any'}{fixed}; from {p.origin}")
    lines.append("")
    if len(rows) == 1:
        row = rows[0]
        mark = "*" if installed is not None and row["version"] == installed.version else ""
        pinned = "" if row["pinned"] else " (no pin for it: the codemods, where a patch has one)"
        lines.append(f"what apply does on vLLM {row['version']}{mark}{pinned}:")
        lines += [f"  {name:<23} {row['patches'][name]}" for name in catalogue.names]
    else:
        lines.append("what apply does, release by release (the pinned releases):")
        for name in catalogue.names:
            lines += _fold_items(f"  {name}", _ranges(rows, name), width)
        if installed is not None:
            lines.append(f"installed: vLLM {installed.version}*")
    if installed is not None:
        lines.append(f"* installed at {installed.site_packages} ({chosen_line(installed)})")
    lines += textwrap.wrap(
        f"before {support.first_patchable(catalogue)}: refused (no EAGLE-3 allow-list to widen); "
        "other releases in range: libcst transforms for the built-ins that have one (apply "
        "--strict refuses), the others unported there; list --vllm-version X shows one release",
        width,
        break_on_hyphens=False,
    )
    return Shown(EXIT_OK, data, lines)
