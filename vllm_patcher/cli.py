"""Command line: parse options, call one function, render its result as text or JSON."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import click

from . import catalog, fileops, pinned
from . import status as status_mod
from . import target as target_mod
from .errors import EXIT_CHECK_FAILED, EXIT_INTERRUPTED, FileSystemError, PatcherError


@dataclass
class Options:
    python: str | None
    directory: str | None
    as_json: bool

    def target(self) -> target_mod.Target:
        return target_mod.locate(self.python, self.directory)


def _echo(message: str = "", *, err: bool = False, nl: bool = True) -> None:
    """Print, and survive a reader that went away (``| head``): once a change is committed, a
    closed pipe must not turn its exit code into a failure."""
    try:
        click.echo(message, err=err, nl=nl)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2 if err else 1)
        os.close(devnull)


def _emit_json(data: Any) -> None:
    _echo(json.dumps(data, indent=2))


def _fail(opts: Options | None, exc: PatcherError) -> NoReturn:
    if opts is not None and opts.as_json:
        _emit_json({"error": exc.message, "exit_code": exc.exit_code})
    _echo(f"vllm-patcher: error: {exc.message}", err=True)
    sys.exit(exc.exit_code)


class _Group(click.Group):
    """Turn anticipated failures into one line and a documented exit code, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PatcherError as exc:
            _fail(ctx.find_object(Options), exc)
        except KeyboardInterrupt:
            _echo(
                "vllm-patcher: error: interrupted; every file is as it was before this run",
                err=True,
            )
            sys.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:
            sys.exit(0)  # only reached outside _echo; nothing was being written
        except OSError as exc:
            _fail(ctx.find_object(Options), FileSystemError(fileops.os_error_message(None, exc)))


def _waiting(opts: Options) -> Any:
    if opts.as_json or not sys.stderr.isatty():
        return None
    return lambda message: _echo(f"... {message}", err=True)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--python", "python", metavar="PATH", help="Interpreter of the environment to patch.")
@click.option(
    "--target",
    "directory",
    metavar="DIR",
    help="site-packages directory to patch (no interpreter).",
)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.version_option(package_name="vllm-patcher")
@click.pass_context
def main(ctx: click.Context, python: str | None, directory: str | None, as_json: bool) -> None:
    """Apply, verify and revert the EAGLE-3 changes for DeepSeek-V3-family targets on vLLM 0.11-0.17."""
    if python and directory:
        raise click.UsageError("--python and --target are exclusive; pass one")
    ctx.obj = Options(python, directory, as_json)
    from .journal import lock_timeout

    lock_timeout()  # a bad VLLM_PATCHER_LOCK_TIMEOUT is a usage error for every command


def _status_lines(st: status_mod.Status) -> list[str]:
    lines = [
        f"vLLM {st.vllm_version} ({st.distribution}) at {st.location}"
        + f" ({st.shape} install, judged against {st.reference})",
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
        lines.append(f"  {p.name:<22} {p.state.value:<15} {method:<12} {files}")
        if p.detail and p.state not in (
            status_mod.PatchState.APPLIED,
            status_mod.PatchState.UPSTREAM,
        ):
            lines.append(f"      {p.detail}")
    return lines


@main.command()
@click.pass_obj
def status(opts: Options) -> None:
    """Show the vLLM release and the state of every patch (never waits for a running apply)."""
    st = status_mod.read_status(opts.target())
    if opts.as_json:
        _emit_json(st.to_dict())
    else:
        _echo("\n".join(_status_lines(st)))


@main.command()
@click.option("--dry-run", is_flag=True, help="Print the unified diff and write nothing.")
@click.option(
    "--strict", is_flag=True, help="Refuse unless a pinned diff matches this release exactly."
)
@click.pass_obj
def apply(opts: Options, dry_run: bool, strict: bool) -> None:
    """Apply every pending patch, all files or none."""
    from . import txn

    target = opts.target()
    result = txn.apply(target, dry_run=dry_run, strict=strict, on_wait=_waiting(opts))
    st = result.status
    assert st is not None
    methods = result.methods
    if opts.as_json:
        _emit_json(result.to_dict())
        return
    if dry_run:
        if result.diff:
            _echo(result.diff, nl=False)
        elif result.edits:
            _echo(f"would adopt {', '.join(result.adopted)} (already patched by hand)", err=True)
        else:
            _echo("nothing to apply", err=True)
        for note in result.notes:
            _echo(f"note: {note}", err=True)
        return
    for rel in result.recovered:
        _echo(f"recovered {rel} from an interrupted run")
    for note in result.notes:
        _echo(f"note: {note}")
    _echo(f"vLLM {st.vllm_version} at {st.location}")
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
        _echo(f"  {p.name:<22} {verb}" + (f" ({how})" if how else ""))
    if not result.edits:
        _echo("nothing to do")


@main.command()
@click.pass_obj
def verify(opts: Options) -> None:
    """Check every touched file compiles, imports and behaves, in the target's interpreter."""
    from .verify import TIERS
    from .verify import verify as run_verify

    target = opts.target()
    show = (
        (lambda tier: _echo(f"... {tier} tier", err=True))
        if sys.stderr.isatty() and not opts.as_json
        else None
    )
    report = run_verify(target, on_tier=show)
    if opts.as_json:
        _emit_json(report.to_dict())
    else:
        _echo(f"vLLM {report.vllm_version} at {report.location}")
        for tier in TIERS:
            result = report.tiers.get(tier, "not-run")
            checks = [c for c in report.checks if c.tier == tier]
            skipped = sum(c.skipped for c in checks)
            ran = len(checks) - skipped
            passed = sum(c.ok and not c.skipped for c in checks)
            counts = f" ({passed}/{ran})" if ran else ""
            if skipped:
                counts = f"{counts} ({skipped} not applicable)"
            _echo(f"  {tier:<10} {result}{counts}")
            for c in checks:
                if not c.ok:
                    _echo(f"      FAIL {c.name}: {c.detail}")
                elif c.skipped:
                    _echo(f"      n/a  {c.name}: {c.detail}")
        _echo("verify: OK" if report.ok else "verify: FAILED")
    if not report.ok:
        sys.exit(EXIT_CHECK_FAILED)


@main.command()
@click.option(
    "--force", is_flag=True, help="Restore pristine even over edits made after apply (kept aside)."
)
@click.pass_obj
def revert(opts: Options, force: bool) -> None:
    """Restore every touched file to the bytes pip installed."""
    from . import txn

    target = opts.target()
    result = txn.revert(target, force=force, on_wait=_waiting(opts))
    if opts.as_json:
        _emit_json(
            {
                "vllm_version": target.version,
                "location": str(target.site_packages),
                **result.to_dict(),
            }
        )
        return
    if not (result.restored or result.already_pristine or result.recovered):
        _echo("nothing applied; nothing to revert")
        return
    for rel in result.recovered:
        _echo(f"restored {rel} (an interrupted run had left it patched)")
    for rel in result.restored:
        _echo(f"restored {rel}")
    for rel, where in result.saved_edits.items():
        _echo(f"your edited {rel} was kept at {where}")
    for rel in result.already_pristine:
        _echo(f"{rel} was already pristine")


@main.command("list")
@click.pass_obj
def list_(opts: Options) -> None:
    """The catalogue: which patch applies to which release, pinned or not."""
    versions = pinned.pinned_versions()
    rows: list[dict[str, Any]] = []
    for version in versions:
        release = pinned.load(version)
        assert release is not None
        per_patch = {
            p.name: sorted(f.path for f in release.files.values() if f.patch == p.name)
            for p in catalog.PATCHES
        }
        rows.append(
            {
                "version": version,
                "pinned": True,
                "patches": {
                    n: ("pinned-diff" if fs else "not-applicable") for n, fs in per_patch.items()
                },
            }
        )
    if opts.as_json:
        _emit_json(
            {
                "patches": [
                    {"name": p.name, "summary": p.summary, "files": [c.path for c in p.changes]}
                    for p in catalog.PATCHES
                ],
                "releases": rows,
                "supported": catalog.SUPPORTED_RANGE,
            }
        )
        return
    for p in catalog.PATCHES:
        _echo(f"{p.name:<22} {p.summary}")
    _echo("")
    header = f"{'release':<10}" + "".join(f"{n:<24}" for n in catalog.PATCH_NAMES)
    _echo(header)
    for row in rows:
        _echo(
            f"{row['version']:<10}"
            + "".join(f"{row['patches'][n]:<24}" for n in catalog.PATCH_NAMES)
        )
    _echo(f"{'>=0.18.0':<10}" + "".join(f"{'upstream':<24}" for _ in catalog.PATCH_NAMES))
    _echo(f"{'<0.11.0':<10}refused (no EAGLE-3 allow-list to widen)")
    _echo("other 0.11-0.17 releases: libcst transform (apply --strict refuses)")


@main.command()
@click.argument("versions", nargs=-1, required=True)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="patches/ folder to write (default: the one this tool ships).",
)
@click.pass_obj
def pin(opts: Options, versions: tuple[str, ...], out_dir: Path | None) -> None:
    """Maintainer: fetch each release's wheel, run the transforms, write patches/vllm-VERSION/."""
    from .pin_generator import pin_release

    root = out_dir or pinned.patches_root()
    progress = (
        None if opts.as_json or not sys.stderr.isatty() else (lambda msg: _echo(msg, err=True))
    )
    results = [pin_release(v, root, progress=progress) for v in versions]
    if opts.as_json:
        _emit_json({"patches_dir": str(root), "releases": [r.__dict__ for r in results]})
        return
    for r in results:
        _echo(f"vllm {r.version}: {r.outcome}" + (f" ({', '.join(r.files)})" if r.files else ""))


@main.command()
@click.option("--model", "model_dir", required=True, metavar="DIR", help="Target model directory.")
@click.option("--drafter", "drafter_dir", required=True, metavar="DIR", help="EAGLE-3 drafter.")
@click.option(
    "--vllm-version",
    metavar="X.Y.Z",
    default=None,
    help="Judge for this vLLM release instead of the installed one (no vLLM needed).",
)
@click.option(
    "--fix",
    is_flag=True,
    help="Write the top-level aux-layer key the drafter needs (config.json backed up first).",
)
@click.pass_obj
def doctor(
    opts: Options, model_dir: str, drafter_dir: str, vllm_version: str | None, fix: bool
) -> None:
    """Preflight: check the drafter against the target for this vLLM release, before any load."""
    from . import doctor as doctor_mod
    from .errors import TargetNotFound

    if vllm_version is None:
        try:
            vllm_version = opts.target().version
        except TargetNotFound as exc:
            raise TargetNotFound(
                f"{exc.message}; or name the release with --vllm-version"
            ) from None
    report = doctor_mod.run(model_dir, drafter_dir, vllm_version, fix=fix)
    if opts.as_json:
        _emit_json(report.to_dict())
    else:
        t, aux = report.target, report.aux
        if report.fix is not None:
            _echo(
                f"wrote {doctor_mod.AUX_KEY}: {list(report.fix.ids)} to {report.fix.config} "
                f"(original kept as {report.fix.backup}); checked again:"
            )
        elif fix:
            _echo("--fix: nothing it can write; see the fixes below")
        _echo(
            f"vLLM {report.vllm_version}, target {t.path} ({t.model_type}, {t.num_layers} layers), "
            f"drafter {report.drafter.path}"
        )
        _echo(
            f"aux layers: vLLM {list(aux.vllm_ids)} (residual entering layer i) = SGLang/SpecForge "
            f"{list(aux.output_ids)} (output of layer i), from {aux.source}"
        )
        for f in report.findings:
            _echo(f"  {f.level:<8} {f.check:<13} {f.message}")
            if f.fix and f.level != doctor_mod.OK:
                _echo(f"  {'':<8} {'':<13} fix: {f.fix}")
        problems, warnings = len(report.problems), len(report.warnings)
        _echo(
            f"doctor: {problems} problem{'s' * (problems != 1)}, "
            f"{warnings} warning{'s' * (warnings != 1)}"
        )
    if not report.ok:
        sys.exit(EXIT_CHECK_FAILED)


@main.command("serve-args")
@click.option("--drafter", "drafter_dir", required=True, metavar="DIR", help="EAGLE-3 drafter.")
@click.option(
    "--num-speculative-tokens",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Draft tokens proposed per step.",
)
def serve_args(drafter_dir: str, num_speculative_tokens: int) -> None:
    """Print the JSON for vllm serve --speculative-config (needs no vLLM)."""
    from . import doctor as doctor_mod

    _echo(json.dumps(doctor_mod.speculative_config(drafter_dir, num_speculative_tokens)))


@main.group()
def cluster() -> None:
    """Status, apply or verify on every node of a running Ray cluster, through Ray."""


def _cluster_options(func: Any) -> Any:
    func = click.option(
        "--json", "as_json", is_flag=True, help="Print machine-readable JSON (like the top level)."
    )(func)
    func = click.option(
        "--timeout",
        type=click.FloatRange(min=1),
        default=600.0,
        show_default=True,
        help="Seconds to wait for every node's answer.",
    )(func)
    return click.option(
        "--address",
        default="auto",
        show_default=True,
        metavar="ADDR",
        help="Ray cluster address, as for ray.init (HOST:PORT of the head node, or auto).",
    )(func)


def _run_cluster(
    opts: Options, command: str, address: str, timeout: float, as_json: bool, strict: bool = False
) -> None:
    from . import cluster as cluster_mod

    if opts.directory:
        raise click.UsageError(
            "cluster works through an interpreter (--python); for a bare site-packages on a node "
            f"set {cluster_mod.SITE_ENV} in that node's environment"
        )
    opts.as_json = opts.as_json or as_json
    report = cluster_mod.run(
        command, opts.python or sys.executable, address, timeout=timeout, strict=strict
    )
    if opts.as_json:
        _emit_json(report.to_dict())
        if report.exit_code:
            sys.exit(report.exit_code)
        return
    code = "/".join(sorted({n.code for n in report.nodes if n.code})) or "-"
    _echo(
        f"Ray {report.ray_version} cluster at {report.address}: "
        f"{len(report.nodes)} node(s), tool code {code}"
    )
    names = catalog.PATCH_NAMES
    _echo(
        f"  {'node':<18} {'ip':<15} {'vLLM':<8} {'fingerprint':<40} "
        + "".join(f"{n:<22}" for n in names)
        + "result"
    )
    for n in report.nodes:
        if n.outcome != cluster_mod.ANSWERED:
            result = f"{n.outcome.upper()}: {n.error}"
        elif command == "apply":
            result = f"applied {len(n.changed)} file(s)" if n.changed else "nothing to do"
        elif command == "verify":
            skipped = [t for t, r in n.verify_tiers.items() if r == "skipped"]
            result = "verify OK" if n.verify_ok else "verify FAILED"
            result += f" ({', '.join(skipped)} skipped)" if skipped else ""
        else:
            result = "NOT OK" if n.problems else "ok"
        _echo(
            f"  {n.label:<18} {n.ip:<15} {n.vllm_version or '-':<8} {n.fingerprint or '-':<40} "
            + "".join(f"{n.patches.get(p, '-'):<22}" for p in names)
            + result
        )
        if n.location:
            _echo(f"      {n.location}")
    for note in report.notes:
        _echo(f"note: {note}")
    if report.ok:
        verified = ", verified on every node" if command == "verify" else ""
        _echo(
            f"verdict: OK: {len(report.nodes)} node(s), one fingerprint, "
            f"no patch pending or drifted{verified}"
        )
    else:
        bad = sum(bool(n.problems) for n in report.nodes)
        _echo(f"verdict: NOT OK ({bad} of {len(report.nodes)} node(s) not ready)")
        for problem in report.problems:
            _echo(f"  {problem}")
    if report.exit_code:
        sys.exit(report.exit_code)


@cluster.command("status")
@_cluster_options
@click.pass_obj
def cluster_status(opts: Options, address: str, timeout: float, as_json: bool) -> None:
    """Every node's patch states and fingerprint, and one verdict.

    Exit 0 only when every node answers with the same fingerprint and no patch is pending or
    drifted.
    """
    _run_cluster(opts, "status", address, timeout, as_json)


@cluster.command("apply")
@_cluster_options
@click.option(
    "--strict", is_flag=True, help="Refuse on a node unless a pinned diff matches exactly."
)
@click.pass_obj
def cluster_apply(opts: Options, address: str, timeout: float, as_json: bool, strict: bool) -> None:
    """Apply on every node: all files or none, per node.

    The table says which nodes were applied, which refused and why, and which were lost.
    """
    _run_cluster(opts, "apply", address, timeout, as_json, strict=strict)


@cluster.command("verify")
@_cluster_options
@click.pass_obj
def cluster_verify(opts: Options, address: str, timeout: float, as_json: bool) -> None:
    """Verify every node, each in its own interpreter.

    Every tier of verify; the import and behaviour tiers run in the node's own Python.
    """
    _run_cluster(opts, "verify", address, timeout, as_json)


__all__ = ["main"]
