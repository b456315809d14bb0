"""status, apply and revert without click: the commands a deploy runs on every start.

click and its imports are about a quarter of these commands' start-up, so their common forms
are read here and run at once. The bodies below are the commands themselves: the click
commands in ``patching`` call the same functions, and declare the same options.

``parse`` takes only the forms whose meaning is plain: the global options (``--python``,
``--target``, ``--patches`` with a value, ``--json``) before or after the command, the command's
own flags, and NAMES for apply. Anything else (``--help``, ``--version``, ``--``, an option it
does not know, a value that starts with ``-``, a flag given ``=value``) goes to click, which then
parses, explains and refuses as before. ``tests/cli/test_fast.py`` checks that this table is the
click declarations', and that both paths print and exit the same on the forms taken here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn

from ..errors import EXIT_CHECK_FAILED
from ..install import target as target_mod
from ..patching import status as status_mod
from ..patching.journal import left_in_place
from .base import (
    RUN,
    Options,
    check_names,
    chosen_line,
    echo,
    guard_streams,
    guarded,
    merge_after,
    report,
    root_options,
    waiting,
)

# The options these commands take, as root.py and patching.py declare them for click.
GLOBAL_VALUES = {"--python": "python", "--target": "directory", "--patches": "patches"}
GLOBAL_FLAG = "--json"
FLAGS = {"status": ("--check",), "apply": ("--dry-run", "--strict"), "revert": ("--force",)}
TAKES_NAMES = ("apply",)


class Globals:
    """The global options given in one place (before the command, or after it)."""

    def __init__(self) -> None:
        self.python: list[str] = []
        self.directory: list[str] = []
        self.patches: list[str] = []
        self.as_json = False


class Parsed:
    def __init__(
        self, command: str, before: Globals, after: Globals, flags: set[str], names: list[str]
    ) -> None:
        self.command = command
        self.before = before
        self.after = after
        self.flags = flags
        self.names = names


def parse(argv: list[str]) -> Parsed | None:
    """The command line of a plain status, apply or revert; None for anything else."""
    command: str | None = None
    before, after = Globals(), Globals()
    flags: set[str] = set()
    names: list[str] = []
    args = iter(argv)
    for arg in args:
        given = before if command is None else after
        if arg == "-":
            return None
        if not arg.startswith("-"):
            if command is None:
                if arg not in FLAGS:
                    return None
                command = arg
            elif command in TAKES_NAMES:
                names.append(arg)
            else:
                return None
            continue
        key, eq, value = arg.partition("=")
        if key in GLOBAL_VALUES:
            if not eq:
                value = next(args, None)  # type: ignore[assignment]
                if value is None:
                    return None
            if value.startswith("-"):
                return None
            if key == "--patches" and os.path.exists(value) and not os.access(value, os.R_OK):
                return None  # click's Path refuses an unreadable one: its usage error, not ours
            getattr(given, GLOBAL_VALUES[key]).append(value)
        elif eq:
            return None
        elif key == GLOBAL_FLAG:
            given.as_json = True
        elif command is not None and key in FLAGS[command]:
            flags.add(key)
        else:
            return None
    if command is None:
        return None
    return Parsed(command, before, after, flags, names)


def run(argv: list[str], parsed: Parsed) -> NoReturn:
    """Run a parsed command as click would: the same checks in the same order, the same exits."""
    RUN.argv = list(argv)
    RUN.command = parsed.command
    guard_streams()
    opts: Options | None = None

    def body() -> None:
        nonlocal opts
        b, a = parsed.before, parsed.after
        opts = root_options(
            tuple(b.python), tuple(b.directory), b.as_json, tuple(Path(p) for p in b.patches)
        )
        merge_after(
            opts,
            tuple(a.python),
            tuple(a.directory),
            a.as_json,
            tuple(Path(p) for p in a.patches),
        )
        if parsed.command == "status":
            status(opts, check="--check" in parsed.flags)
        elif parsed.command == "apply":
            apply(
                opts,
                dry_run="--dry-run" in parsed.flags,
                strict="--strict" in parsed.flags,
                names=tuple(parsed.names),
            )
        else:
            revert(opts, force="--force" in parsed.flags)

    guarded(lambda: opts, body)
    sys.exit(0)


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
    for p in st.patches:
        method = p.method or "-"
        files = ", ".join(p.files) if p.files else "-"
        origin = "" if p.origin == "built-in" else f"   [{p.origin}]"
        lines.append(f"  {p.name:<22} {p.state.value:<15} {method:<12} {files}{origin}")
        if p.detail and p.state not in (
            status_mod.PatchState.APPLIED,
            status_mod.PatchState.UPSTREAM,
        ):
            lines.append(f"      {p.detail}")
    return lines


def status(opts: Options, check: bool) -> None:
    target = opts.target()
    st = status_mod.read_status(target, opts.catalogue())
    code = EXIT_CHECK_FAILED if check and not st.ready else 0
    if opts.as_json:
        report(
            code,
            {
                **st.to_dict(),
                "chosen_by": target.chosen_by,
                "python": str(target.python) if target.python is not None else None,
            },
        )
    else:
        echo("\n".join(status_lines(st, target)))
    if code:
        sys.exit(code)


def apply(opts: Options, dry_run: bool, strict: bool, names: tuple[str, ...]) -> None:
    from ..patching import txn  # status never loads the transaction (plan, diffs)

    check_names(*names)
    target = opts.target()
    catalogue = opts.catalogue(names)
    if not (opts.as_json or dry_run):  # a dry run's stdout is the diff, and it changes nothing
        echo(chosen_line(target))
    result = txn.apply(
        target, catalogue, dry_run=dry_run, strict=strict, on_wait=waiting(opts, "apply")
    )
    st = result.status
    assert st is not None
    methods = result.methods
    if opts.as_json:
        report(0, result.to_dict())
        return
    if dry_run:
        if result.diff:
            echo(result.diff, nl=False)
        elif result.edits:
            echo(f"would adopt {', '.join(result.adopted)} (already patched by hand)", err=True)
        else:
            echo("nothing to apply", err=True)
        for note in result.notes:
            echo(f"note: {note}", err=True)
        return
    for rel in result.recovered:
        echo(f"recovered {rel} from an interrupted run")
    for note in result.notes:
        echo(f"note: {note}")
    echo(f"vLLM {st.vllm_version} at {st.location}")
    for p in st.patches:
        if p.name in methods:
            how = methods[p.name]
            verb = (
                "adopted (already patched by hand; now recorded)"
                if how == "adopted"
                else "applied now"
            )
            how = "pinned-diff" if how == "adopted" else how
        else:
            verb, how = p.state.value, p.method or ""
        echo(f"  {p.name:<22} {verb}" + (f" ({how})" if how else ""))
    if not result.edits:
        echo("nothing to do")


def revert(opts: Options, force: bool) -> None:
    from ..patching import txn  # status never loads the transaction (plan, diffs)

    target = opts.target()
    result = txn.revert(target, force=force, on_wait=waiting(opts, "revert"))
    if opts.as_json:
        report(
            0,
            {
                "vllm_version": target.version,
                "location": str(target.site_packages),
                **result.to_dict(),
            },
        )
        return
    if not (result.restored or result.already_pristine or result.recovered):
        echo("nothing applied; nothing to revert")
        return
    for rel in result.recovered:
        if rel in result.saved_edits:
            echo(f"restored {rel} (an interrupted run had left it, and it was edited since)")
        else:
            echo(f"restored {rel} (an interrupted run had left it patched)")
    for rel in result.restored:
        echo(f"restored {rel}")
    for rel, where in result.saved_edits.items():
        echo(f"your edited {rel} was kept at {where}")
    for rel in result.already_pristine:
        echo(f"{rel} was already pristine")
    echo(left_in_place(target.site_packages))
