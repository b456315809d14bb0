"""Apply and revert as transactions: all files change or none do, and nothing is lost.

One shape for both: take the lock, load the journal, recover what an interrupted run left,
survey (each file read once, bytes kept), judge, plan, then commit and return the final status,
computed from the bytes written rather than read again. Nothing is judged or planned outside the
lock, so a concurrent run can never make this one refuse or plan from stale bytes. Each input of
the plan is computed once: the catalogue laid over the release, the journal, the survey.

The steps live beside this module: ``files`` (safe writes and roll back), ``recovery`` (after an
interrupted or killed run), ``commit`` (the journal phases around the writes).
"""

from __future__ import annotations

from collections.abc import Callable

from .. import fileops
from ..catalogue import support
from ..catalogue.layout import layout
from ..catalogue.model import Catalogue
from ..diffs import pinned
from ..errors import LocallyModified, StateError
from ..install.target import Target
from . import chosen
from . import journal as journal_mod
from . import status as status_mod
from .commit import commit_apply, commit_revert
from .files import check_inside_package, check_record, read_pristine_copy, require_writable
from .journal import Journal
from .plan import FileEdit, plan_apply, plan_revert, run_steps
from .recovery import drop_copies_if_in_place, recover, restore_unrecorded, save_edits, tidy
from .states import Status, patch_method
from .survey import read_once, survey

# Plain classes (and named tuples in plan): no dataclass on apply's and revert's start-up path.


class ApplyResult:
    def __init__(
        self,
        edits: list[FileEdit],
        dry_run: bool,
        status: Status | None = None,
        recovered: list[str] | None = None,
        notes: list[str] | None = None,
    ) -> None:
        self.edits = edits
        self.dry_run = dry_run
        self.status = status
        self.recovered: list[str] = recovered or []
        self.notes: list[str] = notes or []

    @property
    def diff(self) -> str:
        """The unified diff of the edits (rendered on demand: difflib is not free on 60 KB files)."""
        return "".join(
            pinned.make_diff(e.path, e.before.decode("utf-8"), e.after.decode("utf-8"))
            for e in self.edits
            if not e.adopted
        )

    @property
    def methods(self) -> dict[str, str]:
        """Each patch this run wrote: how (``states.patch_method`` over the files it changed), or
        ``adopted`` when every file of it already held its bytes."""
        made: dict[str, list[str]] = {}
        for e in self.edits:
            for p in e.new_patches:
                made.setdefault(p, []).append("adopted" if e.adopted else e.method)
        return {
            p: patch_method(m for m in methods if m != "adopted") or "adopted"
            for p, methods in made.items()
        }

    @property
    def changed(self) -> list[str]:
        return [e.path for e in self.edits if not e.adopted]

    @property
    def adopted(self) -> list[str]:
        return [e.path for e in self.edits if e.adopted]

    def to_dict(self) -> dict[str, object]:
        st = self.status
        methods = self.methods
        data: dict[str, object] = {
            "vllm_version": st.vllm_version if st else None,
            "location": st.location if st else None,
            "dry_run": self.dry_run,
            "changed": [] if self.dry_run else self.changed,
            "adopted": [] if self.dry_run else self.adopted,
            "would_change": [e.path for e in self.edits] if self.dry_run else [],
            "recovered": self.recovered,
            "notes": self.notes,
            "fingerprint": st.fingerprint if st else None,
            "patches": [
                {
                    "name": p.name,
                    "state": p.state.value,
                    "method": methods.get(p.name, p.method),
                    "files": p.files,
                }
                for p in (st.patches if st else [])
            ],
        }
        if self.dry_run:
            data["diff"] = self.diff
        return data


class RevertResult:
    def __init__(
        self,
        restored: list[str] | None = None,
        saved_edits: dict[str, str] | None = None,
        already_pristine: list[str] | None = None,
        recovered: list[str] | None = None,
    ) -> None:
        self.restored: list[str] = restored or []
        self.saved_edits: dict[str, str] = saved_edits or {}
        self.already_pristine: list[str] = already_pristine or []
        self.recovered: list[str] = recovered or []

    def to_dict(self) -> dict[str, object]:
        return {
            "restored": self.restored,
            "recovered": self.recovered,
            "already_pristine": self.already_pristine,
            "saved_edits": self.saved_edits,
        }


def apply(
    target: Target,
    catalogue: Catalogue,
    *,
    dry_run: bool = False,
    strict: bool = False,
    on_wait: Callable[[str], None] | None = None,
) -> ApplyResult:
    """Bring the files of the selected patches to the end of their series, as one transaction,
    and return the edits and the status that leaves (with ``dry_run``, the edits it would make
    and the status as it is: nothing is written)."""
    support.classify(catalogue, target.version)  # refuses releases before the allow-list existed
    # Laid over the release once: every patch's layout depends on no journal, and the layout of
    # the selection is that one narrowed (below, once the journal is read under the lock).
    every = layout(catalogue.unselected(), target.version, target.record)
    root = target.site_packages
    if every.all_upstream and not journal_mod.state_file(root).exists():
        return ApplyResult(
            [],
            dry_run,
            status=status_mod.read_status_laid(target, catalogue, every),
            notes=[f"vLLM {target.version} already has every change"],
        )
    _refuse_unsafe_files(target, catalogue, dry_run)
    with journal_mod.locked(root, on_wait=on_wait, read_only=dry_run):
        contents: dict[str, bytes | None] = {}  # each file's bytes, read once
        journal, recovered = _load_recovering(target, contents, dry_run)
        lay = every.narrowed(catalogue, status_mod.recorded_files(journal))
        for rel in lay.steps:
            check_inside_package(target, rel)
        if not dry_run:
            tidy(target, journal, list(lay.steps))
        files = survey(target, journal, lay, contents, detect_upstream=False)
        fileops.fault_point("surveyed")
        notes: list[str] = []
        edits = plan_apply(
            target, journal, lay, files, contents, _pristine_copies(target, journal), strict, notes
        )
        fileops.fault_point("planned")
        if not dry_run and edits:
            journal = commit_apply(target, journal, edits)
            contents.update((e.path, e.after) for e in edits)
        final = status_mod.status_from_bytes(target, journal, every, contents)
        return ApplyResult(edits, dry_run, final, recovered, notes)


def _refuse_unsafe_files(target: Target, catalogue: Catalogue, dry_run: bool) -> None:
    """Before the lock: no file the patches may touch is a link out of the package, and (to
    write) every directory they live in is writable."""
    rels = [rel for rel in catalogue.paths_for(target.version) if rel in target.record]
    for rel in rels:
        check_inside_package(target, rel)
    if not dry_run:
        require_writable(target, rels)


def _load_recovering(
    target: Target, contents: dict[str, bytes | None], dry_run: bool
) -> tuple[Journal | None, list[str]]:
    """The journal, once an interrupted run's files are back to pristine (then there is none)
    and the files recovered; a dry run refuses to recover."""
    journal = journal_mod.load(target.site_packages)
    if journal is None or journal.finished:
        return journal, []
    if dry_run:
        raise StateError(
            f"an earlier run was interrupted; run `{target.command('apply')}` to recover first"
        )
    return None, recover(target, journal, contents)


def _pristine_copies(target: Target, journal: Journal | None) -> Callable[[str, str], bytes]:
    """How the plan reads a file's kept pristine bytes: checked against the journal's hashes."""

    def copy(rel: str, before: str) -> bytes:
        after = journal.files[rel].after if journal else None
        return read_pristine_copy(target, rel, before, after)

    return copy


def check_applies_over_pristine(target: Target, catalogue: Catalogue) -> None:
    """Refuse, before any file changes, a selection whose series would not run over the pristine
    bytes (what ``revert --model`` applies again once every file is back): the same steps the
    apply after it runs, over each file's kept pristine copy (its current bytes where no patch
    changed it), nothing written."""
    every = layout(catalogue.unselected(), target.version, target.record)
    journal = journal_mod.load(target.site_packages)
    copy = _pristine_copies(target, journal)
    notes: list[str] = []
    for rel, steps in every.narrowed(catalogue, {}).steps.items():
        ours = journal.files.get(rel) if journal is not None else None
        if ours is None and not target.path(rel).is_file():
            continue  # the apply itself names a missing file
        start = copy(rel, ours.before) if ours is not None else target.path(rel).read_bytes()
        run_steps(target, rel, steps, start, False, notes, set(), catalogue)


def revert(
    target: Target, *, force: bool = False, on_wait: Callable[[str], None] | None = None
) -> RevertResult:
    """Restore every file the journal names to its pristine bytes, as one transaction; with
    ``force``, over edits made after apply too (each kept under ``saved/`` first). Every file
    pristine, the recorded choice of patches (``chosen``) is forgotten too."""
    chosen.check_removable(target.site_packages)  # refused before any file changes
    result = _revert(target, force, on_wait)
    chosen.forget(target.site_packages)
    return result


def _revert(target: Target, force: bool, on_wait: Callable[[str], None] | None) -> RevertResult:
    root = target.site_packages
    journal_mod.check_state_dir(root)
    if not journal_mod.state_file(root).exists() and not journal_mod.pristine_dir(root).exists():
        return RevertResult()  # never applied here: no lock, no state folder created
    with journal_mod.locked(root, on_wait=on_wait):
        journal = journal_mod.load(root)
        if journal is None:  # copies no record names: a killed run's, or a lost state file's
            restored, saved = restore_unrecorded(target, force)
            tidy(target, None, [])
            return RevertResult(restored=restored, saved_edits=saved)
        tidy(target, journal, sorted(journal.files))
        for rel in journal.files:
            check_inside_package(target, rel)
        require_writable(target, list(journal.files))
        contents: dict[str, bytes | None] = {}
        if not journal.finished:
            kept: dict[str, str] = {}
            recovered = recover(target, journal, contents, force=force, kept=kept)
            return RevertResult(recovered=recovered, saved_edits=kept)
        for rel in journal.files:
            read_once(target, rel, contents)
        fileops.fault_point("surveyed")
        plan = plan_revert(
            journal,
            contents,
            lambda rel, before: read_pristine_copy(target, rel, before, journal.files[rel].after),
        )
        for rel in plan.already_pristine:  # pristine by the record: RECORD must agree
            check_record(target, rel, journal.files[rel].before, journal.files[rel].after)
        if plan.edited and not force:
            names = ", ".join(str(target.path(r)) for r in plan.edited)
            raise LocallyModified(
                f"{names} changed after vllm-patcher applied it; nothing was reverted; "
                f"run `{target.command('revert --force')}` to restore pristine and keep your copy"
            )
        fileops.fault_point("planned")
        result = RevertResult(already_pristine=plan.already_pristine)
        result.saved_edits = save_edits(target, plan.edited, contents)
        try:
            commit_revert(target, journal, plan)
        except BaseException:  # rolled back: the copies whose edits are back are not kept
            drop_copies_if_in_place(target, result.saved_edits, contents)
            raise
        result.restored = [e.path for e in plan.edits]
        return result
