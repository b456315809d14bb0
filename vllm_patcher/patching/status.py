"""What state each patch is in on one target: the file states ``survey`` judged, turned into
patch states (``judge``, which reads nothing), and ``read_status``, the read-only entry point
that takes no lock a writer has to wait for.
"""

from __future__ import annotations

from ..catalogue import support
from ..catalogue.layout import Layout, Verdict, layout
from ..catalogue.model import Catalogue
from ..install.record import file_hash
from ..install.target import Target
from ..releases import Release, base_version
from . import journal as journal_mod
from .states import BLOCKING, FileState, FileStatus, PatchStatus, fingerprint, patch_method

# What read_status returns, importable from here too (the CLI renders them).
from .states import PatchState as PatchState
from .states import Status as Status
from .survey import read_once, survey


def _patch_state(files: list[FileStatus]) -> tuple[PatchState, str | None, str]:
    if not files:
        return (
            PatchState.NOT_APPLICABLE,
            None,
            "this release has none of the files this patch touches",
        )
    states = {f.state for f in files}
    bad = [f for f in files if f.state in (*BLOCKING, FileState.REINSTALLED)]
    if bad:
        return PatchState.DRIFTED, None, "; ".join(f.detail for f in bad)
    method = patch_method(f.method for f in files)
    if FileState.APPLIED in states and states <= {FileState.APPLIED, FileState.UPSTREAM}:
        # a file the codemod finds nothing to do in (a family's allow-list on a release
        # without one) has the change it would make: the patch is whole
        return PatchState.APPLIED, method, ""
    if FileState.OUTDATED in states and states <= {
        FileState.APPLIED,
        FileState.OUTDATED,
        FileState.PENDING,
        FileState.UPSTREAM,
    }:
        stale = "; ".join(dict.fromkeys(f.detail for f in files if f.state is FileState.OUTDATED))
        return PatchState.OUTDATED, method, stale
    if states == {FileState.UPSTREAM}:
        return PatchState.UPSTREAM, None, ""
    if states <= {FileState.PENDING, FileState.UPSTREAM}:
        return PatchState.PENDING, method, ""
    if states == {FileState.UNRECORDED}:
        return PatchState.UNRECORDED, method, "; ".join(f.detail for f in files)
    return PatchState.DRIFTED, method, "only part of this patch is applied"


NOT_CHOSEN = "not chosen for this run or this environment"


def judge(
    target: Target,
    journal: journal_mod.Journal | None,
    lay: Layout,
    files: list[FileStatus],
    in_progress: bool = False,
) -> Status:
    """Patch states from file states and the layout's verdicts: no file is read here."""
    patches = []
    unfinished = journal is not None and not journal.finished
    names = list(lay.catalogue.names)
    if journal is not None:
        names += [n for n in journal.patches if n not in names]
        names += [n for f in journal.files.values() for n in f.patches if n not in names]
    for name in dict.fromkeys(names):
        patch = lay.catalogue.get(name)
        mine = [f for f in files if f.patch == name]
        verdict = lay.verdicts.get(name)
        if not mine and patch is not None and not lay.catalogue.is_selected(name):
            state, method, detail = PatchState.NOT_CHOSEN, None, NOT_CHOSEN
        elif mine or verdict in (None, Verdict.APPLICABLE):
            state, method, detail = _patch_state(mine)
        elif verdict is Verdict.UPSTREAM:
            assert patch is not None
            state, method, detail = PatchState.UPSTREAM, None, f"vLLM has it from {patch.fixed_in}"
        elif verdict is Verdict.UNPORTED:
            assert patch is not None
            state, method = PatchState.UNPORTED, None
            fix = patch.unported_fix(target.version)
            why = (
                f"its conflicts for {base_version(target.version)} are waiting to be resolved"
                if fix.endswith("--continue`")
                else "no diff for this release"
            )
            detail = f"{why}; {fix}"
        else:
            assert patch is not None
            state, method = PatchState.NOT_APPLICABLE, None
            detail = (
                f"vLLM {target.version} is outside its releases ({patch.releases})"
                if verdict is Verdict.OUTSIDE
                else "this release has none of the files this patch touches"
            )
        quiet = (PatchState.NOT_APPLICABLE, PatchState.UPSTREAM, PatchState.NOT_CHOSEN)
        if state not in quiet and in_progress:
            detail = "another vllm-patcher run is changing these files right now"
        elif state not in quiet and unfinished:
            assert journal is not None
            detail = (
                f"an earlier {journal.phase.value[:-3]} was interrupted; "
                "run apply or revert to recover"
            )
        origin = patch.origin if patch is not None else "recorded (its folder was not given)"
        patches.append(
            PatchStatus(
                name, state, method, list(dict.fromkeys(f.path for f in mine)), detail, origin
            )
        )
    hashes = {f.path: f.current for f in files}
    applied = sorted(p.name for p in patches if p.state is PatchState.APPLIED)
    return Status(
        vllm_version=target.version,
        location=str(target.site_packages),
        distribution=target.distribution,
        release=(
            Release.UPSTREAM if lay.all_upstream and journal is None else Release.PATCHABLE
        ).value,
        patches=patches,
        files=files,
        fingerprint=fingerprint(target.version, hashes, applied),
        interrupted=journal.phase.value if unfinished and journal is not None else None,
        in_progress=in_progress,
        shape=target.shape,
        reference=target.reference,
    )


def read_status(target: Target, catalogue: Catalogue) -> Status:
    """The status of ``target``, without ever waiting for the lock.

    While another run holds the lock, the files are read as they are and the result says
    ``in_progress``; otherwise a shared lock keeps runs from starting halfway through the reading.
    """
    support.classify(catalogue, target.version)  # refuses releases before the allow-list existed
    every = layout(catalogue.unselected(), target.version, target.record)
    return read_status_laid(target, catalogue, every)


def read_status_laid(target: Target, catalogue: Catalogue, every: Layout) -> Status:
    """:func:`read_status` with the catalogue already laid over the release (``every``: the
    layout of every patch, which no journal changes); the release is not classified again."""
    root = target.site_packages
    had_lock = journal_mod.lock_file(root).exists()
    with journal_mod.observed(root) as busy:
        journal = journal_mod.load(root)
        lay = every.narrowed(catalogue, recorded_files(journal))
        files = survey(target, journal, lay, {})
        upstream = lay.all_upstream and journal is None
        hashes = _hash_upstream_files(target, catalogue) if upstream else {}
    if not busy and not had_lock:
        # no lock file when we started: a first run may have begun while we read
        with journal_mod.observed(root) as busy_now:
            busy = busy_now
    st = judge(target, journal, lay, files, in_progress=busy)
    if upstream:
        st.fingerprint = fingerprint(target.version, hashes, [])
    return st


def status_from_bytes(
    target: Target,
    journal: journal_mod.Journal | None,
    every: Layout,
    contents: dict[str, bytes | None],
) -> Status:
    """The status of every patch from bytes already read (``contents``), reading only a file
    not there: apply's final status, from the bytes it wrote rather than read again."""
    files = survey(target, journal, every, contents)
    return judge(target, journal, every, files)


def recorded_files(journal: journal_mod.Journal | None) -> dict[str, list[str]]:
    return {rel: list(fr.patches) for rel, fr in journal.files.items()} if journal else {}


def _hash_upstream_files(target: Target, catalogue: Catalogue) -> dict[str, str | None]:
    """On a release with everything upstream, the fingerprint covers every file a patch names."""
    hashes: dict[str, str | None] = {}
    contents: dict[str, bytes | None] = {}
    for rel in catalogue.paths_for(target.version):
        if rel in target.record:
            data = read_once(target, rel, contents)
            hashes[rel] = file_hash(data) if data is not None else None
    return hashes
