"""Release facts have one owner: the patch folders. What the package metadata, the exit codes'
docstrings and the install checks say must agree with them."""

from __future__ import annotations

import csv
import io
import re
import shutil
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from vllm_patcher import errors
from vllm_patcher.catalogue.support import first_patchable

from ..conftest import (
    CATALOGUE,
    REPO,
    UNPINNED,
    assert_refused,
    builtins_without_forward_ports,
    run_cli,
    scratch_tree,
    snapshot,
)

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

SPEC = "vllm/config/speculative.py"


def _last_patched_release_bound() -> Version:
    """The first release no built-in is pinned for: every built-in is upstream there (each
    fixed_in), or, where a family has no upstream EAGLE-3 in any release, the minor release
    after the newest pin (later ones go through the codemods, unproven until pinned)."""
    bounds = [p.fixed_in for p in CATALOGUE.patches]
    if all(b is not None for b in bounds):
        return max(b for b in bounds if b is not None)
    newest = max(Version(v) for p in CATALOGUE.patches for v in p.pinned_versions)
    return Version(f"{newest.major}.{newest.minor + 1}.0")


def test_the_target_extra_admits_exactly_the_releases_the_built_ins_patch() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (target,) = project["optional-dependencies"]["target"]
    spec = Requirement(target).specifier
    FIRST_PATCHABLE = first_patchable(CATALOGUE)
    assert spec.contains(str(FIRST_PATCHABLE))
    assert not spec.contains(str(Version(f"0.{FIRST_PATCHABLE.minor - 1}.99")))
    newest = _last_patched_release_bound()
    assert not spec.contains(str(newest)), (target, newest)
    below = max(v for p in CATALOGUE.patches for v in map(Version, p.pinned_versions))
    assert spec.contains(str(below)), (target, below)
    # the one-line description names the families and no stale release range
    assert "0.11-0.17" not in project["description"]
    assert "MiniMax-M2" in project["description"]


def test_every_error_docstring_names_its_own_exit_code() -> None:
    for cls in vars(errors).values():
        if isinstance(cls, type) and issubclass(cls, errors.PatcherError) and cls.__doc__:
            said = re.match(r"Exit code (\d+)", cls.__doc__)
            if said:
                assert int(said.group(1)) == cls.exit_code, cls.__name__


def _drop_from_record(site: Path, rel: str) -> None:
    record = next(site.glob("vllm-*.dist-info")) / "RECORD"
    rows = [r for r in csv.reader(io.StringIO(record.read_text())) if r and r[0] != rel]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    record.write_text(out.getvalue())


def test_a_record_without_the_allow_list_file_is_refused_where_a_patch_still_rewrites_it(
    tree_copy,  # type: ignore[no-untyped-def]
) -> None:
    """0.18.1: the DeepSeek/Kimi patches are upstream, but eagle3-minimax-m2 still rewrites the
    allow-list there, so a RECORD without it is no reference (not a green `not-applicable`)."""
    site = tree_copy("0.18.1")
    _drop_from_record(site, SPEC)
    before = snapshot(site)
    assert_refused(run_cli("--target", str(site), "status", "--check"), 3, SPEC)
    assert snapshot(site) == before


def test_a_source_tree_of_a_release_a_built_in_still_patches_is_not_judged_as_needing_nothing(
    tmp_path: Path,
) -> None:
    """A checkout between releases (0.25.2): eagle3-granite still patches 0.25.x, so without a
    pinned manifest nothing tells its pristine files from edited ones. It is refused, not
    judged "none needed" (which one hand-written "upstream from 0.18.0" used to say)."""
    package = tmp_path / "checkout" / "vllm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "_version.py").write_text('__version__ = version = "0.25.2"\n')
    import subprocess
    import sysconfig

    venv = tmp_path / "venv"  # a venv that imports the checkout through a .pth line
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)})
    (Path(purelib) / "checkout.pth").write_text(f"{package.parent}\n")
    before = snapshot(tmp_path / "checkout")
    for command in ("status", "apply"):
        proc = run_cli("--python", str(venv / "bin" / "python"), command)
        assert_refused(proc, 3, "0.25.2", "no pinned manifest")
    assert snapshot(tmp_path / "checkout") == before


def test_the_supported_range_follows_the_built_ins_fixed_in(tmp_path: Path) -> None:
    """The range `list` and every refusal print is read from the patch folders: moving the
    last two built-ins' fixed_in (eagle3-granite's, eagle3-granitemoe's) moves it, with no second
    place to edit."""
    copy = builtins_without_forward_ports(tmp_path)
    for patch in ("eagle3-granite", "eagle3-granitemoe"):
        toml = copy / patch / "patch.toml"
        toml.write_text(re.sub(r'(?m)^fixed_in = ".*"$', 'fixed_in = "0.26.0"', toml.read_text()))
        for name in [d.name for d in (copy / patch).glob("vllm-*")]:
            if Version(name.removeprefix("vllm-")) >= Version("0.26.0"):
                shutil.rmtree(copy / patch / name)
    env = {"VLLM_PATCHER_PATCHES_DIR": str(copy)}
    import json

    shipped = json.loads(run_cli("list", "--json", check=True).stdout)["supported"]
    moved = json.loads(run_cli("list", "--json", env=env, check=True).stdout)["supported"]
    newest = max(Version(v) for p in CATALOGUE.patches for v in p.pinned_versions)
    assert shipped.startswith(
        f"0.11.0 to {newest.major}.{newest.minor}.x pinned, later releases through the codemods,"
    ), shipped
    assert "eagle3-granite upstream from 0.32.0" in shipped
    assert "eagle3-granitemoe upstream from 0.33.0" in shipped
    never = [p.name for p in CATALOGUE.patches if p.fixed_in is None]
    assert shipped.endswith(f"no upstream EAGLE-3 in any release: {', '.join(never)})"), shipped
    assert moved.startswith("0.11.0 to 0.25.x,"), moved
    assert "eagle3-granitemoe upstream from 0.26.0" in moved


def _relabel(site: Path, version: str) -> None:
    """Make a tree say it is ``version`` (its dist-info folder and METADATA), files unchanged."""
    (dist,) = site.glob("vllm-*.dist-info")
    meta = dist / "METADATA"
    meta.write_text(re.sub(r"(?m)^Version: .*$", f"Version: {version}", meta.read_text()))
    dist.rename(site / f"vllm-{version}.dist-info")


def test_a_pre_release_of_the_release_that_fixed_a_patch_is_not_taken_for_upstream(
    tree_copy,  # type: ignore[no-untyped-def]
) -> None:
    """0.32.0rc1 and 0.32.0.dev5 come before 0.32.0 and may predate the Granite change (here:
    0.31.0's files, without it). Not `upstream` and not green: eagle3-granite is `pending`, its
    family codemod (no pin for a pre-release) makes the change at apply."""
    import json

    for version in ("0.32.0rc1", "0.32.0.dev5+g1234abc"):
        site = tree_copy("0.31.0")
        _relabel(site, version)
        proc = run_cli("--target", str(site), "--json", "status", "--check")
        assert proc.returncode == 1, (version, proc.stdout, proc.stderr)
        data = json.loads(proc.stdout)
        states = {p["name"]: p["state"] for p in data["patches"]}
        assert data["release"] == "patchable", data
        assert states["eagle3-granite"] == "pending", states
        # and what it says to do leads somewhere: apply, not a port "to 0.32.0" that would find
        # the change already there
        applied = run_cli("--target", str(site), "--json", "apply")
        assert applied.returncode == 0, (version, applied.stdout, applied.stderr)
        after = json.loads(run_cli("--target", str(site), "--json", "status").stdout)
        states = {p["name"]: p["state"] for p in after["patches"]}
        assert states["eagle3-granite"] == "applied", states
        shutil.rmtree(site)


def test_a_wildcard_releases_specifier_in_a_built_in_is_read_not_a_traceback(
    tmp_path: Path,
) -> None:
    import json

    copy = builtins_without_forward_ports(tmp_path)
    toml = copy / "eagle3-granite" / "patch.toml"
    toml.write_text(toml.read_text().replace('releases = ">=0.11.0"', 'releases = "==0.*"'))
    proc = run_cli("list", "--json", env={"VLLM_PATCHER_PATCHES_DIR": str(copy)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["supported"].startswith("0.11.0 to 0.32.x,")


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        ('model_types = ["granite"]', "model_types = ['gr\"anite']"),
        ('name = "Granite"', 'name = "Gran\\nite"'),
        ('file = "vllm/model_executor/models/granite.py"', 'file = "../../evil.py"'),
        ('capture = "hidden"', 'capure = "hidden"'),
        ('causal_lm = "GraniteForCausalLM"', 'causal_lm = "Granite ForCausalLM"'),
        (
            'causal_lm = "GraniteForCausalLM"',
            'causal_lm = "GraniteForCausalLM"\nreleases = ">=0.x"',
        ),
        ('causal_lm = "GraniteForCausalLM"', 'causal_lm = "GraniteForCausalLM"\nreleases = 11'),
    ],
)
def test_a_bad_family_table_is_one_line_and_exit_13(tmp_path: Path, edit: str, said: str) -> None:
    """A [family] table the codemod would write into vLLM's source as it stands (a quote in a
    model type, a newline in the name), a file outside vllm/, a misspelt key, a class name that
    is not one: refused when the catalogue loads, before any file is read or written."""
    copy = builtins_without_forward_ports(tmp_path)
    toml = copy / "eagle3-granite" / "patch.toml"
    text = toml.read_text()
    assert edit in text
    toml.write_text(text.replace(edit, said))
    proc = run_cli("list", env={"VLLM_PATCHER_PATCHES_DIR": str(copy)})
    assert proc.returncode == 13, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "eagle3-granite/patch.toml" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (
            'model_file = "vllm/model_executor/models/gemma3.py"',
            'model_file = "vllm/model_executor/models/nope.py"',
        ),
        (
            'model_file = "vllm/model_executor/models/gemma3.py"',
            'model_file = "vllm/model_executor/models/gemma3_mm.py"',
        ),
        ('inner = "language_model.model"', 'inner = "language_model.None"'),
        (
            'model_types = ["gemma3_text"]',
            'model_types = ["gemma3_text"]\ntarget = { d = 1979-05-27 }',
        ),
        ("config = { normalizer = 2.0 }", "config = { normalizer = { a = 1 } }"),
    ],
)
def test_a_wrapper_entry_must_name_another_entry_s_file_and_plain_values(
    tmp_path: Path, edit: str, said: str
) -> None:
    """``model_file`` names the file of another entry (the one that rewrites the inner model);
    ``inner`` is no Python keyword; ``target`` and ``config`` hold what a config.json holds."""
    copy = tmp_path / "patches"
    shutil.copytree(REPO / "patches", copy)
    toml = copy / "eagle3-gemma3" / "patch.toml"
    text = toml.read_text()
    assert edit in text
    toml.write_text(text.replace(edit, said, 1))
    proc = run_cli("list", env={"VLLM_PATCHER_PATCHES_DIR": str(copy)})
    assert proc.returncode == 13, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "eagle3-gemma3/patch.toml" in proc.stderr, proc.stderr


def test_hunyuan_and_nemotron_h_0_11_0_loops_keep_their_own_index(tmp_path: Path) -> None:
    """HunYuan 0.11.0 loops ``for i in range(self.start_layer, self.end_layer)`` with
    ``layer = self.layers[i]`` and names its causal LM base ``HunYuanV1Base`` (an entry of its
    own, ``releases = "<0.11.1"``); Nemotron-H 0.11.0 loops ``enumerate(self.layers)``: the
    codemod captures before each requested layer by the loop's own ``i`` and the pins agree."""
    import json

    site = scratch_tree("0.11.0", tmp_path / "site")
    proc = run_cli("--target", str(site), "--json", "apply", "eagle3-hunyuan", "eagle3-nemotron-h",
                   env=UNPINNED)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    hunyuan = (site / "vllm/model_executor/models/hunyuan_v1.py").read_text()
    assert (
        "for i in range(self.start_layer, self.end_layer):\n            if i in self.aux_hidden_state_layers:"
        in hunyuan
    )
    assert (
        "class HunYuanV1Base(\n    nn.Module, SupportsLoRA, SupportsPP, MixtureOfExperts, SupportsEagle3\n)"
        in hunyuan
    )
    nemotron = (site / "vllm/model_executor/models/nemotron_h.py").read_text()
    assert (
        "for i, layer in enumerate(self.layers):\n            if i in self.aux_hidden_state_layers:"
        in nemotron
    )
    for rel in (
        "vllm/model_executor/models/hunyuan_v1.py",
        "vllm/model_executor/models/nemotron_h.py",
    ):
        compile((site / rel).read_text(), rel, "exec")
    pinned = tmp_path / "pinned"
    shutil.copytree(scratch_tree("0.11.0", tmp_path / "pristine"), pinned)
    run_cli("--target", str(pinned), "apply", "eagle3-hunyuan", "eagle3-nemotron-h", check=True)
    for rel in (
        "vllm/model_executor/models/hunyuan_v1.py",
        "vllm/model_executor/models/nemotron_h.py",
    ):
        assert (pinned / rel).read_text() == (site / rel).read_text(), rel
    status = json.loads(run_cli("--target", str(pinned), "--json", "status").stdout)
    states = {p["name"]: p["state"] for p in status["patches"]}
    assert states["eagle3-hunyuan"] == states["eagle3-nemotron-h"] == "applied", states


def test_no_pep604_annotation_is_evaluated_on_0_11_0(tmp_path: Path) -> None:
    """vLLM 0.11.0 allows Python 3.9, where ``X | Y`` in a def's annotation raises at import:
    every 0.11.0 file the built-ins patch (pinned or by the codemods) writes ``Union`` instead,
    unless the file postpones its annotations. (The release's own qwen3_vl.py has one already, in
    ``_calculate_timestamps``: only the annotations a patch adds are judged.)"""
    import ast

    def pep604(source: str) -> set[str]:
        tree = ast.parse(source)
        if any(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in tree.body):
            return set()
        out = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                anns = [node.returns, *(a.annotation for a in node.args.args)]
                if any(a is not None and any(
                    isinstance(b, ast.BinOp) and isinstance(b.op, ast.BitOr) for b in ast.walk(a)
                ) for a in anns):  # fmt: skip
                    out.add(node.name)
        return out

    pristine = scratch_tree("0.11.0", tmp_path / "pristine")
    for env in ({}, UNPINNED):
        site = scratch_tree("0.11.0", tmp_path / f"site-{len(env)}")
        run_cli("--target", str(site), "apply", env=env, check=True)
        written = [
            p for p in sorted((site / "vllm").rglob("*.py"))
            if p.read_bytes() != (pristine / p.relative_to(site)).read_bytes()
        ]  # fmt: skip
        assert len(written) >= 10, written  # the run patched what 0.11.0 needs
        for path in written:
            own = pep604((pristine / path.relative_to(site)).read_text())
            added = pep604(path.read_text()) - own
            assert not added, (path.relative_to(site), added, env)


@pytest.mark.parametrize(
    ("sources_of", "label"),
    [
        ("0.21.0", "0.21.0+cpu"),
        ("0.21.0", "0.21.0rc1"),
        ("0.21.0", "0.21.1.dev5+g1234abc"),
        ("0.18.0", "0.18.0+cpu"),
        ("0.19.1", "0.19.1+cpu"),
    ],
)
def test_a_local_or_pre_release_build_is_judged_by_the_release_it_belongs_to(
    tree_copy,  # type: ignore[no-untyped-def]
    sources_of: str,
    label: str,
) -> None:
    """A build labelled after a patch's fixed_in has its change (its files are that release's):
    upstream, and apply leaves its files alone. It used to be handed to the codemods, which
    refused 0.20's rewritten load_model (so apply refused every patch) and gave Qwen3-VL's
    language models a second EagleModelMixin base."""
    import json

    site = tree_copy(sources_of)
    _relabel(site, label)
    st = json.loads(run_cli("--target", str(site), "--json", "status", check=True).stdout)
    states = {p["name"]: p["state"] for p in st["patches"]}
    assert states["kimi-k25-image-token"] == states["eagle3-qwen3-vl"] == "upstream", states
    assert states["eagle3-granite"] == "pending", states
    before = snapshot(site)
    applied = run_cli("--target", str(site), "--json", "apply")
    assert applied.returncode == 0, (label, applied.stdout, applied.stderr)
    after = snapshot(site)
    for rel in (
        "vllm/v1/spec_decode/eagle.py",
        "vllm/model_executor/models/qwen3_vl.py",
        "vllm/model_executor/models/qwen3_vl_moe.py",
    ):
        assert after[rel] == before[rel], rel
    assert (
        after["vllm/model_executor/models/granite.py"]
        != before["vllm/model_executor/models/granite.py"]
    )


def test_a_release_newer_than_every_pin_gets_the_forward_ports_model_files_only(
    tmp_path: Path,
) -> None:
    """0.34.0's files labelled 0.35.0 (no pin, no allow-list): the families with no upstream
    EAGLE-3 anywhere are pending by their codemods on their model files alone, apply --strict
    names a model file, and apply then revert gives the bytes back."""
    import json

    site = scratch_tree("0.34.0", tmp_path / "site")
    _relabel(site, "0.35.0")
    before = snapshot(site)
    st = json.loads(run_cli("--target", str(site), "--json", "status", check=True).stdout)
    forward = {p.name for p in CATALOGUE.patches if p.fixed_in is None}
    files = {p["name"]: p["files"] for p in st["patches"] if p["name"] in forward}
    assert set(files) == forward
    assert all(f and SPEC not in f for f in files.values()), files
    strict = run_cli("--target", str(site), "apply", "--strict")
    assert strict.returncode == 7 and "vllm/model_executor/models/" in strict.stderr
    assert snapshot(site) == before
    run_cli("--target", str(site), "apply", check=True)
    run_cli("--target", str(site), "revert", check=True)
    after = snapshot(site)
    assert {k: v for k, v in after.items() if ".vllm-patcher" not in k} == before
