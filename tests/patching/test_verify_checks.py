"""Behaviour checks as data: the probe's check runner, and the built-in check files on real vLLM.

The runner tests drive the real ``scripts/probe.py`` through ``verify.run_probe`` in this interpreter (no
vLLM needed: ``modules`` is empty or names a stand-in package) on check files written to tmp_path.

The built-in check files run on the real vLLM 0.15.1 venv (``VLLM_PATCHER_TEST_VENV``, default
``~/.cache/vllm-patcher/venv-0.15.1``) without writing to it: a session fixture copies its
``vllm/`` package into two overlays under a tmp dir (every file copied except the compiled ``*.so``
extensions, which are symlinked), one brought to the pristine bytes and one to the patched bytes
with the repository's pinned 0.15.1 diffs (checked against the manifest's hashes either way, so
the venv's own state does not matter). The venv's interpreter runs the probe with the overlay
first on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from vllm_patcher import releases
from vllm_patcher.catalogue.folders import load_catalogue
from vllm_patcher.catalogue.layout import layout
from vllm_patcher.intarget import scripts
from vllm_patcher.patching import verify
from vllm_patcher.wheels import sources

from ..conftest import (
    CATALOGUE,
    FAMILY_ALLOW,
    FAMILY_CAPTURE,
    FAMILY_SUPPORTS,
    GRANITE_CHECKS,
    MINIMAX_CHECKS,
    family_checks,
    record_of,
    run_cli,
    test_venv_python,
    touched_files,
    touched_match_record,
    venv_site,
)

VERSION = "0.15.1"
SPEC = "vllm/config/speculative.py"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def line_of(path: Path, fragment: str) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines(), 1) if fragment in t)


def run(checks: list[tuple[str, Path]], modules: list[str] | None = None) -> list[verify.Check]:
    return verify.run_probe(Path(sys.executable), modules or [], checks, "9.9.9")


def by_name(results: list[verify.Check]) -> dict[str, verify.Check]:
    return {c.name: c for c in results}


# --- the runner, on synthetic check files -----------------------------------------------------


def test_each_check_runs_in_definition_order_named_by_its_docstring(tmp_path: Path) -> None:
    path = write(
        tmp_path / "demo" / "checks" / "demo.py",
        '''
        """A synthetic check file."""
        import os
        from os.path import join as check_imported  # not defined here: never called


        def helper(ctx):
            raise AssertionError("helpers are not checks")


        def check_zeta(ctx):
            """zeta passes

            More docstring, not part of the name.
            """
            with open(os.path.join(ctx.workdir, "version"), "w") as fh:
                fh.write(ctx.version)
            return "a short detail"


        def check_alpha(ctx):
            raise ValueError("boom happened")


        def check_verdict(ctx):
            """an assertion of the check's own"""
            got = 2
            if got != 3:
                raise AssertionError(f"got {got}, expected 3")


        def check_bare_assert(ctx):
            assert 1 + 1 == 3


        def check_not_here(ctx):
            """not applicable here"""
            ctx.skip("this release has no such file")
            raise AssertionError("ctx.skip returned")


        def check_skip_survives_except_exception(ctx):
            """except Exception does not swallow a skip"""
            try:
                ctx.skip("still skipped")
            except Exception:
                raise AssertionError("the skip was caught as an Exception") from None


        def check_with_context(ctx):
            """a failure raised from a cause"""
            try:
                {}["key"]
            except KeyError as exc:
                raise AssertionError("looking up the key") from exc


        def check_exits(ctx):
            raise SystemExit(3)


        def check_last(ctx):
            """runs after the failures, sharing the file's workdir"""
            with open(os.path.join(ctx.workdir, "version")) as fh:
                return fh.read()


        check_not_a_function = 3
        ''',
    )
    results = run([("demo", path)])
    assert [(c.tier, c.name) for c in results] == [
        ("behaviour", "demo: zeta passes"),
        ("behaviour", "demo: check_alpha"),
        ("behaviour", "demo: an assertion of the check's own"),
        ("behaviour", "demo: check_bare_assert"),
        ("behaviour", "demo: not applicable here"),
        ("behaviour", "demo: except Exception does not swallow a skip"),
        ("behaviour", "demo: a failure raised from a cause"),
        ("behaviour", "demo: check_exits"),
        ("behaviour", "demo: runs after the failures, sharing the file's workdir"),
    ]
    got = by_name(results)
    zeta = got["demo: zeta passes"]
    assert (zeta.ok, zeta.skipped, zeta.detail) == (True, False, "a short detail")

    alpha = got["demo: check_alpha"]
    assert not alpha.ok and not alpha.skipped
    line = line_of(path, 'raise ValueError("boom happened")')
    assert alpha.detail.startswith(
        f"ValueError: boom happened at {path}:{line} in check_alpha (`raise ValueError("
    ), alpha.detail

    # the check's verdict: its message and the line in demo/checks/demo.py
    line = line_of(path, 'raise AssertionError(f"got {got}, expected 3")')
    verdict = got["demo: an assertion of the check's own"]
    assert verdict.detail == f"got 2, expected 3 at demo/checks/demo.py:{line}", verdict.detail
    line = line_of(path, "assert 1 + 1 == 3")
    bare = got["demo: check_bare_assert"]
    assert bare.detail == (
        f"AssertionError at {path}:{line} in check_bare_assert (`assert 1 + 1 == 3`)"
    ), bare.detail

    for name, reason in (
        ("demo: not applicable here", "this release has no such file"),
        ("demo: except Exception does not swallow a skip", "still skipped"),
    ):
        assert (got[name].ok, got[name].skipped, got[name].detail) == (True, True, reason)

    context = got["demo: a failure raised from a cause"]
    assert not context.ok
    line = line_of(path, '{}["key"]')
    assert context.detail.startswith(
        f"looking up the key: KeyError: 'key' at {path}:{line} in check_with_context"
    ), context.detail

    exits = got["demo: check_exits"]
    assert not exits.ok and exits.detail.startswith("SystemExit: 3 at "), exits.detail

    last = got["demo: runs after the failures, sharing the file's workdir"]
    assert (last.ok, last.detail) == (True, "9.9.9")


def test_a_check_imports_the_check_library_where_vllm_patcher_is_not_installed(
    tmp_path: Path,
) -> None:
    """The probe makes ``vllm_patcher_checklib`` importable in any target interpreter: here the
    base interpreter of this venv, run isolated, which has no vllm_patcher."""
    base = Path(getattr(sys, "_base_executable", sys.executable))
    gone = subprocess.run([str(base), "-I", "-c", "import vllm_patcher"], capture_output=True)
    assert gone.returncode != 0, f"{base} has vllm_patcher: the test proves nothing there"
    path = write(
        tmp_path / "p" / "checks" / "uses_library.py",
        """
        import os

        from vllm_patcher_checklib import checkpoints


        def check_library(ctx):
            \"\"\"a tiny checkpoint from the check library\"\"\"
            folder = checkpoints.folder(ctx, "drafter", checkpoints.DRAFTER_CONFIG)
            return " ".join(sorted(os.listdir(folder)))
        """,
    )
    results = verify.run_probe(base, [], [("p", path)], "9.9.9")
    assert [(c.name, c.ok, c.detail) for c in results] == [
        ("p: a tiny checkpoint from the check library", True, "config.json")
    ]


def test_a_check_file_that_does_not_import_is_one_failed_check_and_the_rest_still_run(
    tmp_path: Path,
) -> None:
    missing = write(
        tmp_path / "p" / "checks" / "a_missing.py",
        """
        import no_such_module_for_vllm_patcher


        def check_never(ctx):
            pass
        """,
    )
    broken = write(
        tmp_path / "p" / "checks" / "b_broken.py",
        """
        def check_fine(ctx):
            pass

        def check_broken(ctx)
            pass
        """,
    )
    good = write(
        tmp_path / "p" / "checks" / "c_good.py",
        '''
        def check_good(ctx):
            """still runs"""
        ''',
    )
    results = run([("p", missing), ("p", broken), ("p", good)])
    assert [(c.name, c.ok) for c in results] == [
        ("p: checks/a_missing.py", False),
        ("p: checks/b_broken.py", False),
        ("p: still runs", True),
    ]
    assert results[0].detail.startswith("the check file does not load: ModuleNotFoundError: ")
    assert "no_such_module_for_vllm_patcher" in results[0].detail
    assert results[0].detail.endswith(
        f"{missing}:1 in <module> (`import no_such_module_for_vllm_patcher`)"
    )
    assert results[1].detail.startswith("the check file does not load: SyntaxError: ")
    assert results[1].detail.endswith(f" at {broken}:{line_of(broken, 'def check_broken')}")


def test_each_check_file_has_its_own_workdir_removed_after_all_checks(tmp_path: Path) -> None:
    first = write(
        tmp_path / "one" / "checks" / "first.py",
        """
        import os


        def check_write(ctx):
            open(os.path.join(ctx.workdir, "mine"), "w").close()
            return ctx.workdir
        """,
    )
    second = write(
        tmp_path / "two" / "checks" / "second.py",
        """
        import os


        def check_private(ctx):
            assert os.listdir(ctx.workdir) == [], os.listdir(ctx.workdir)
            return ctx.workdir
        """,
    )
    results = run([("one", first), ("two", second)])
    assert all(c.ok for c in results), results
    workdirs = [Path(c.detail) for c in results]
    assert workdirs[0] != workdirs[1]
    assert not any(w.exists() for w in workdirs)
    assert not workdirs[0].parent.exists()


def test_ctx_upstream_is_the_tool_s_verdict_for_the_check_s_own_patch(tmp_path: Path) -> None:
    path = write(
        tmp_path / "p" / "checks" / "c.py",
        """
        def check_upstream(ctx):
            return str(ctx.upstream)
        """,
    )
    checks = [("p", path), ("q", path)]
    results = verify.run_probe(Path(sys.executable), [], checks, "9.9.9", frozenset({"p"}))
    assert [c.detail for c in results] == ["True", "False"], results
    # the verdict the tool passes: a release candidate of a patch's fixed_in is not upstream
    # (the patch applies to it), the release itself is; one owner, not a version rule per check
    kimi = "kimi-k25-image-token"
    upstream = {
        v: layout(CATALOGUE, v, {}).verdicts[kimi].name == "UPSTREAM"
        for v in ("0.18.0rc1", "0.18.0")
    }
    assert upstream == {"0.18.0rc1": False, "0.18.0": True}, upstream


def test_ctx_allow_list_is_the_tool_s_verdict_which_matches_the_release_s_code(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path / "p" / "checks" / "c.py",
        """
        def check_allow_list(ctx):
            return str(ctx.allow_list)
        """,
    )
    details = [
        verify.run_probe(Path(sys.executable), [], [("p", path)], "9.9.9", allow_list=given)[0]
        for given in (True, False)
    ]
    assert [(c.ok, c.detail) for c in details] == [(True, "True"), (True, "False")], details
    # the verdict the tool passes, read against SpeculativeConfig's own code on either side of
    # the release that dropped the allow-list: one owner, not a rule per check file
    for version in ("0.21.0", str(releases.LIST_GONE_FROM)):
        source = (sources.fetch_release(version, [SPEC]) / SPEC).read_text()
        listed = "eagle3_target_supported" in source or "aux_hidden_states_supported" in source
        assert releases.has_allow_list(version) == listed, version


def test_a_monkeypatch_left_on_vllm_fails_its_check_and_is_put_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a stand-in `vllm` package: the runner watches the attributes of vllm's modules
    write(
        tmp_path / "fake" / "vllm" / "__init__.py",
        """
        def original():
            return "original"


        REGISTRY = object()
        calls = 0
        """,
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))
    path = write(
        tmp_path / "p" / "checks" / "patches.py",
        '''
        import vllm


        def check_leaves_a_patch(ctx):
            """leaves a patch behind"""
            vllm.original = lambda: "patched"


        def check_undoes_its_patch(ctx):
            """undoes its patch"""
            saved = vllm.REGISTRY
            vllm.REGISTRY = None
            try:
                pass
            finally:
                vllm.REGISTRY = saved


        def check_sees_the_original(ctx):
            """sees the original again"""
            assert vllm.original() == "original", vllm.original()


        def check_plain_data(ctx):
            """plain data that changes is no monkeypatch"""
            vllm.calls += 1
        ''',
    )
    results = run([("p", path)], modules=["vllm"])
    assert [(c.tier, c.name, c.ok) for c in results] == [
        ("import", "vllm", True),
        ("behaviour", "p: leaves a patch behind", False),
        ("behaviour", "p: undoes its patch", True),
        ("behaviour", "p: sees the original again", True),
        ("behaviour", "p: plain data that changes is no monkeypatch", True),
    ]
    assert results[1].detail == (
        "left vllm.original replaced (put back; a check must undo its monkeypatches)"
    )


def test_no_check_runs_when_an_import_failed(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = write(
        tmp_path / "p" / "checks" / "marker.py",
        f"""
        def check_marks(ctx):
            open({str(marker)!r}, "w").close()
        """,
    )
    results = run([("p", path)], modules=["json", "no_such_module_for_vllm_patcher"])
    assert [(c.tier, c.name, c.ok) for c in results] == [
        ("import", "json", True),
        ("import", "no_such_module_for_vllm_patcher", False),
        ("behaviour", "behaviour checks", False),
    ]
    assert results[2].detail == "not run: an import failed"
    assert not marker.exists()


@pytest.fixture
def probe_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """scripts/probe.py's import tier, called in this process on modules written to tmp_path:
    ``probe_imports(modules)`` -> (ok, not judged, the recorded checks)."""
    from vllm_patcher.intarget.scripts import probe

    monkeypatch.syspath_prepend(str(tmp_path))
    for name, text in {
        "vpt_changed": "import vpt_missing_package_xyz\n",  # a patch's own broken import
        "vpt_wrapper": "import vpt_unchanged\n",  # the release's own import chain
        "vpt_unchanged": "import vpt_missing_package_xyz\n",
        "vpt_typo": "import vllm_patcher_no_such_submodule_xyz.child\n",
    }.items():
        (tmp_path / f"{name}.py").write_text(text)

    def run(modules: list[str]) -> tuple[bool, dict[str, str], list[dict[str, object]]]:
        monkeypatch.setattr(probe, "CHECKS", [])
        ok, unloadable = probe.check_imports(modules)
        return ok, unloadable, probe.CHECKS

    return run


def test_a_package_an_unchanged_file_needs_is_not_judged_but_a_patch_s_own_import_fails(
    probe_imports,  # type: ignore[no-untyped-def]
) -> None:
    """The CPU build lacks torchvision, which gemma3_mm needs through transformers: that module
    is not judged. The same missing package imported by a file a patch changed, a module that is
    not there at all, or a missing name under an installed top-level package is a failure."""
    ok, unloadable, checks = probe_imports(["vpt_wrapper"])
    assert ok and unloadable == {"vpt_wrapper": "vpt_missing_package_xyz"}
    assert checks[0]["skipped"] and "not judged" in str(checks[0]["detail"])
    for modules in (["vpt_changed"], ["vpt_wrapper", "vpt_unchanged"], ["vpt_no_such_module"]):
        ok, unloadable, checks = probe_imports(modules)
        assert not ok and unloadable == {}, (modules, checks)
        assert not checks[-1]["ok"] and not checks[-1].get("skipped"), checks


def test_check_files_are_each_patchs_checks_folder_sorted(tmp_path: Path) -> None:
    for rel in ("b/checks/z.py", "b/checks/a.py", "b/checks/notes.txt", "a/checks/m.py"):
        write(tmp_path / rel, "")
    for name in ("a", "b", "c"):
        write(tmp_path / name / "patch.toml", f'name = "{name}"\nreleases = ">=0.11"\n')
    write(tmp_path / "series", "b\na\nc\n")
    os.environ["VLLM_PATCHER_PATCHES_DIR"] = str(tmp_path)
    try:
        cat = load_catalogue()
    finally:
        del os.environ["VLLM_PATCHER_PATCHES_DIR"]
    # a patch without any diff for the release is unported: its checks do not run
    assert verify.check_files(layout(cat, VERSION, {})) == []
    shipped = verify.check_files(layout(CATALOGUE, VERSION, {}))
    # every built-in pinned for 0.15.1, or upstream there, runs checks (a family backport: the
    # family's own first)
    runs = {
        p.name
        for p in CATALOGUE.patches
        if p.pin(VERSION) or (p.covers(VERSION) and p.is_upstream(VERSION))
    }
    assert {c[0] for c in shipped} == runs
    assert [c[1].name for c in shipped if c[0] == "supports-eagle3"] == sorted(
        c[1].name for c in shipped if c[0] == "supports-eagle3"
    )
    families = [c for c in shipped if len(c) > 2]
    assert families and all(c[1] == verify.FAMILY_CHECKS for c in families)
    assert {c[0] for c in families} == {
        p.name for p in CATALOGUE.patches if p.family is not None and p.name in runs
    }


def test_the_import_tier_imports_each_touched_file_as_its_module() -> None:
    assert verify.module_name("vllm/config/speculative.py") == "vllm.config.speculative"
    assert verify.module_name("vllm/v1/__init__.py") == "vllm.v1"
    assert [verify.module_name(rel) for rel in CATALOGUE.all_paths()] == [
        "vllm.config.speculative",
        "vllm.model_executor.models.deepseek_v2",
        "vllm.model_executor.models.ernie45_moe",
        "vllm.model_executor.models.exaone4",
        "vllm.model_executor.models.gemma2",
        "vllm.model_executor.models.gemma3",
        "vllm.model_executor.models.gemma3_mm",
        "vllm.model_executor.models.glm4_moe",
        "vllm.model_executor.models.glm4_moe_lite",
        "vllm.model_executor.models.granite",
        "vllm.model_executor.models.granitemoe",
        "vllm.model_executor.models.granitemoehybrid",
        "vllm.model_executor.models.granitemoeshared",
        "vllm.model_executor.models.hunyuan_v1",
        "vllm.model_executor.models.internlm2",
        "vllm.model_executor.models.kimi_k25",
        "vllm.model_executor.models.mimo_v2",
        "vllm.model_executor.models.mimo_v2_flash",
        "vllm.model_executor.models.minimax_m2",
        "vllm.model_executor.models.mixtral",
        "vllm.model_executor.models.nemotron_h",
        "vllm.model_executor.models.qwen2_moe",
        "vllm.model_executor.models.qwen3_moe",
        "vllm.model_executor.models.qwen3_next",
        "vllm.model_executor.models.qwen3_vl",
        "vllm.model_executor.models.qwen3_vl_moe",
        "vllm.v1.spec_decode.eagle",
    ]


# --- the built-in check files, on the real vLLM 0.15.1 ------------------------------------------


def _overlay(site: Path, dest: Path, patched: bool) -> Path:
    """``site``'s vllm/ and dist-info under ``dest`` (``*.so`` symlinked), with every touched file
    put back to the release's own bytes, then patched by the tool itself (``--target``) if asked."""

    def copy(src: str, dst: str) -> None:
        if src.endswith(".so"):
            os.symlink(os.path.realpath(src), dst)
        else:
            shutil.copy2(src, dst)

    shutil.copytree(
        site / "vllm",
        dest / "vllm",
        copy_function=copy,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    info = f"vllm-{VERSION}.dist-info"
    shutil.copytree(site / info, dest / info)
    pristine = sources.fetch_release(
        VERSION, CATALOGUE.all_paths()
    )  # the shared venv may be patched right now
    for rel in touched_files(record_of(dest), VERSION):
        shutil.copyfile(pristine / rel, dest / rel)
    assert all(touched_match_record(dest).values())
    if patched:
        run_cli("--target", str(dest), "apply", check=True)
        assert not any(touched_match_record(dest).values())
    return dest


@pytest.fixture(scope="session")
def overlays(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    python = test_venv_python()
    if not python.exists():
        pytest.fail(f"no vLLM venv at {python}; `make test` creates it (make test-venv)")
    site = venv_site(python)
    root = tmp_path_factory.mktemp("overlays")
    made = {"patched": _overlay(site, root / "patched", patched=True)}
    yield made
    shutil.rmtree(root, ignore_errors=True)


WHERE = '''
import os

import vllm
from vllm.model_executor.models import registry


def check_where(ctx):
    """the vLLM under test"""
    return f"{vllm.__file__} {ctx.version}"


def check_inspection(ctx):
    """where vLLM inspects a model class"""
    return "this process" if registry._run_in_subprocess(os.getpid) == os.getpid() else "another"
'''


def probe_overlay(
    overlay: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, verify.Check]:
    """The built-in checks (and one naming the vLLM they ran on) in the venv's interpreter."""
    rels = touched_files(record_of(overlay), VERSION)
    modules = [verify.module_name(rel) for rel in rels]
    checks = verify.check_files(layout(CATALOGUE, VERSION, record_of(overlay)))
    checks.append(("overlay", write(tmp_path / "overlay" / "checks" / "where.py", WHERE)))
    env = verify.probe_env()
    env["PYTHONPATH"] = str(overlay)
    probe = scripts.path("probe")
    proc = subprocess.run(
        [
            str(test_venv_python()),
            str(probe),
            verify.probe_request(modules, checks, allow_list=releases.has_allow_list(VERSION)),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    results = [
        verify.Check(c["tier"], c["name"], c["ok"], c["detail"], c.get("skipped", False))
        for c in data["checks"]
    ]
    got = by_name(results)
    assert len(got) == len(results), "two checks share a name"
    where = got.pop("overlay: the vLLM under test")
    assert where.detail == f"{overlay / 'vllm' / '__init__.py'} {VERSION}", where.detail
    # vLLM's registry would start one interpreter per model class (5-6 s each, nine a verify on
    # a tree whose bytes just changed); the probe, which never touches CUDA, inspects in place
    inspected = got.pop("overlay: where vLLM inspects a model class")
    assert (inspected.ok, inspected.detail) == (True, "this process"), inspected
    assert {c.name for c in results if c.tier == "import"} == set(modules)
    assert all(c.ok for c in results if c.tier == "import"), results
    return {n: c for n, c in got.items() if c.tier == "behaviour"}


BUILT_IN = {
    "eagle3-whitelist: SpeculativeConfig eagle3 accepts deepseek_v3",
    "eagle3-whitelist: SpeculativeConfig eagle3 accepts kimi_k25",
    "eagle3-whitelist: SpeculativeConfig eagle3 rejects gpt2 (not on the list)",
    "kimi-k25-image-token: EAGLE proposer reads Kimi-K2.5's image token from "
    "media_placeholder_token_id",
    "supports-eagle3: default aux layers for 61 layers",
    "supports-eagle3: set_aux_hidden_state_layers reaches DeepseekV2Model",
    "supports-eagle3: KimiK25ForConditionalGeneration delegates EAGLE-3 methods",
    "supports-eagle3: forward without aux layers returns the plain tensor",
    "supports-eagle3: forward with aux layers returns (hidden, aux)",
    "supports-eagle3: aux states equal the residual stream entering the requested layers",
    "supports-eagle3: final hidden state unchanged by aux capture",
    "supports-eagle3: pipeline stage from layer 2 captures absolute layers 2 and 4",
    "supports-eagle3: supports_eagle3(DeepseekV2ForCausalLM)",
    "supports-eagle3: supports_eagle3(DeepseekV3ForCausalLM)",
    "supports-eagle3: supports_eagle3(KimiK25ForConditionalGeneration)",
    *MINIMAX_CHECKS,
    *GRANITE_CHECKS,
    *family_checks(VERSION),
    "eagle3-qwen3-vl: EAGLE proposer reads Qwen3-VL's image token from image_token_id",
}
IMAGE_TOKEN = (
    "kimi-k25-image-token: EAGLE proposer reads Kimi-K2.5's image token from "
    "media_placeholder_token_id"
)


def test_built_in_checks_are_red_on_pristine_0151(pristine_probe: list[verify.Check]) -> None:
    """verify's own probe of the pristine shared venv (``pristine_probe``, run once a session:
    its import alone is about 35 s); the overlay mechanism is proven by the green test."""
    assert all(c.ok for c in pristine_probe if c.tier == "import"), pristine_probe
    got = {c.name: c for c in pristine_probe if c.tier == "behaviour"}
    assert len(got) == len([c for c in pristine_probe if c.tier == "behaviour"])
    assert set(got) == BUILT_IN
    assert not any(c.skipped for c in got.values())  # 0.15.1 ships Kimi-K2.5
    passed = {n for n, c in got.items() if c.ok}
    # what the patches do not change holds on pristine too: the allow-list-only families'
    # classes already capture (Llama's), and 0.15.1's list admits qwen3_next through "qwen"
    captured_already = {
        f"{p.name}: {check}"
        for p in CATALOGUE.patches
        if p.family is not None and p.pin(VERSION) and not any(m.rewrite for m in p.family.models)
        for check in (FAMILY_SUPPORTS, FAMILY_CAPTURE)
    }
    assert len(captured_already) == 10  # mistral, phi3, ernie4_5, internlm3, glm
    assert passed == {
        "eagle3-whitelist: SpeculativeConfig eagle3 rejects gpt2 (not on the list)",
        "supports-eagle3: forward without aux layers returns the plain tensor",
        f"eagle3-qwen3-next: {FAMILY_ALLOW}",
        f"eagle3-qwen2-moe: {FAMILY_ALLOW}",  # "qwen" admits qwen2_moe too
        *captured_already,
        # Qwen3-MoE (from 0.11.1) and Qwen3-VL (0.12.0; its MoE language model 0.15.0) are
        # upstream in 0.15.1: their checks hold on the release's own code
        *(
            f"{p}: {c}"
            for p in ("eagle3-qwen3-moe", "eagle3-qwen3-vl")
            for c in (FAMILY_SUPPORTS, FAMILY_CAPTURE, FAMILY_ALLOW)
        ),  # fmt: skip
        # ... and 0.15.1's proposer names both Qwen3-VL classes itself
        "eagle3-qwen3-vl: EAGLE proposer reads Qwen3-VL's image token from image_token_id",
    }
    accept = got["eagle3-whitelist: SpeculativeConfig eagle3 accepts deepseek_v3"].detail
    assert "rejected: " in accept and "only supported for" in accept, accept
    # a server never reaches the proposer: the allow-list refuses first
    detail = got[IMAGE_TOKEN].detail
    assert "SpeculativeConfig refused the kimi_k25 target" in detail, detail
    assert "only supported" in detail, detail
    missing = got["supports-eagle3: default aux layers for 61 layers"].detail
    assert "AttributeError" in missing and "get_eagle3_aux_hidden_state_layers" in missing
    forward = got["supports-eagle3: forward with aux layers returns (hidden, aux)"].detail
    assert "the aux capture in DeepseekV2Model.forward is missing" in forward, forward
    # raised in the check library, shown as the verdict of the check that called it
    patch = CATALOGUE.get("eagle3-granite")
    assert patch is not None
    granite = patch.folder / "checks" / "granite_eagle3.py"
    line = line_of(granite, "eagle3.implements_supports_eagle3(_granite(), GRANITE)")
    supports = got[GRANITE_CHECKS[0]].detail
    assert supports == (
        "GraniteForCausalLM does not implement SupportsEagle3; the model runner refuses EAGLE-3 "
        f"for Granite targets at eagle3-granite/checks/granite_eagle3.py:{line}"
    ), supports


def test_built_in_checks_are_green_on_patched_0151(
    overlays: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = probe_overlay(overlays["patched"], tmp_path, monkeypatch)
    assert set(got) == BUILT_IN
    assert {n: c.detail for n, c in got.items() if not c.ok or c.skipped} == {}
    aux = "supports-eagle3: aux states equal the residual stream entering the requested layers"
    assert got[aux].detail == "layers 0, 3, 5"  # a patched release captures layer 0 too
    assert got[IMAGE_TOKEN].detail == "image_token_index 163605"
