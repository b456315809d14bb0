"""The recorded choice (``<site-packages>/.vllm-patcher/chosen.json``) under attack, on scratch
copies of vLLM 0.15.1's files (``--target``): a record the tool cannot read refuses before apply
or revert changes a byte (a FIFO never blocks it), a recorded patch this run does not know
refuses rather than being judged without, and a config whose model_type is not a string or an
empty ``--model`` is one line and a usage code."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ..conftest import LOCK_FILE, assert_refused, run_cli, snapshot

GRANITE = "vllm/model_executor/models/granite.py"


def _record(site: Path) -> Path:
    state = site / ".vllm-patcher"
    state.mkdir(exist_ok=True)
    return state / "chosen.json"


def _unchanged(site: Path, before: dict[str, bytes]) -> None:
    after = snapshot(site)
    assert after == before, sorted(set(after) ^ set(before)) or "bytes changed"


@pytest.mark.parametrize("kind", ["not-json", "folder", "fifo", "no-patches"])
def test_an_unreadable_record_refuses_apply_and_revert_before_any_file_changes(
    tree_copy, kind: str
) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    record = _record(site)
    if kind == "not-json":
        record.write_text("not json")
    elif kind == "folder":
        record.mkdir()
    elif kind == "fifo":
        os.mkfifo(record)
    else:
        record.write_text('{"patches": []}')
    before = snapshot(site) if kind != "fifo" else None
    target = ("--target", str(site))
    proc = run_cli(*target, "apply", "eagle3-granite", timeout=60)
    assert_refused(proc, 7, "chosen-patches record", str(record))
    if before is not None:
        _unchanged(site, before)
    assert_refused(run_cli(*target, "status", timeout=60), 7, "chosen-patches record")
    if kind == "folder":  # revert would forget it: refused before it restores anything
        assert_refused(run_cli(*target, "revert", timeout=60), 7, "not a regular file")


def test_a_recorded_patch_this_run_does_not_know_is_refused_not_dropped(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    _record(site).write_text(json.dumps({"patches": ["my-fix", "eagle3-granite"]}))
    proc = run_cli("--target", str(site), "status", "--check")
    assert_refused(proc, 7, "my-fix", "--patches DIR")


def test_a_model_type_that_is_not_a_string_and_an_empty_model_are_usage_errors(
    tree_copy, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    model = tmp_path / "model"
    model.mkdir()
    config = {"model_type": ["deepseek_v3"], "hidden_size": 8, "num_hidden_layers": 4}
    (model / "config.json").write_text(json.dumps({**config, "vocab_size": 16}))
    before = snapshot(site)
    target = ("--target", str(site))
    assert_refused(run_cli(*target, "apply", "--model", str(model)), 2, "no patch here is for")
    assert_refused(run_cli(*target, "apply", "--model", ""), 2, "--model needs")
    proc = run_cli(*target, "apply", "--model", str(model), "eagle3-granite")
    assert_refused(proc, 2, "not both")
    data = json.loads(run_cli(*target, "--json", "status", "--model", str(model)).stdout)
    assert (data["ok"], data["exit_code"]) == (False, 2) and "no patch here" in data["error"]
    _unchanged(site, before)


def test_apply_by_name_records_the_choice_and_a_later_status_judges_only_it(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    target = ("--target", str(site))
    proc = run_cli(*target, "apply", "eagle3-granite")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(_record(site).read_text())["patches"] == ["eagle3-granite"]
    data = json.loads(run_cli(*target, "--json", "status", "--check", check=True).stdout)
    states = {p["name"]: p["state"] for p in data["patches"]}
    assert states["eagle3-granite"] == "applied"
    assert states["eagle3-whitelist"] == states["eagle3-mistral"] == "not-chosen"
    text = run_cli(*target, "status", "--check", check=True).stdout.splitlines()
    assert text[-1] == "check: OK: 1 chosen patch applied, upstream or not needed here"
    assert (site / GRANITE).read_bytes() != b""
    assert run_cli(*target, "revert").returncode == 0
    assert not _record(site).exists() and (site / LOCK_FILE).exists()


def test_status_check_names_what_fails_in_its_last_line(tree_copy) -> None:  # type: ignore[no-untyped-def]
    site = tree_copy("0.15.1")
    target = ("--target", str(site))
    proc = run_cli(*target, "status", "--check", "eagle3-whitelist", "supports-eagle3")
    assert proc.returncode == 1, proc.stdout
    assert proc.stdout.splitlines()[-1] == (
        "check: FAILED: 2 of 2 chosen patches not ready "
        "(2 pending: eagle3-whitelist, supports-eagle3)"
    )
    every = run_cli(*target, "status", "--check").stdout.splitlines()[-1]
    assert every.startswith("check: FAILED: ") and " patches not ready (" in every


def test_apply_model_picks_a_family_upstream_never_did_and_only_its_files(
    tree_copy, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """On 0.34.0 (every backport upstream) a Gemma 3 multimodal target's config gets
    eagle3-gemma3 alone, both its model files; a GLM-4.5 one eagle3-glm4-moe alone."""
    site = tree_copy("0.34.0")
    target = ("--target", str(site))
    gemma = tmp_path / "gemma-3-27b-it"
    gemma.mkdir()
    (gemma / "config.json").write_text(json.dumps({
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
        "text_config": {"model_type": "gemma3_text"},
    }))  # fmt: skip
    glm = tmp_path / "GLM-4.6"
    glm.mkdir()
    (glm / "config.json").write_text(json.dumps({"model_type": "glm4_moe"}))
    before = snapshot(site)
    proc = run_cli(*target, "--json", "apply", "--model", str(gemma))
    assert proc.returncode == 0, proc.stderr
    assert sorted(json.loads(proc.stdout)["changed"]) == [
        "vllm/model_executor/models/gemma3.py",
        "vllm/model_executor/models/gemma3_mm.py",
    ]
    assert json.loads(_record(site).read_text())["patches"] == ["eagle3-gemma3"]
    run_cli(*target, "revert", check=True)
    proc = run_cli(*target, "--json", "apply", "--model", str(glm))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["changed"] == ["vllm/model_executor/models/glm4_moe.py"]
    run_cli(*target, "revert", check=True)
    after = snapshot(site)
    assert {k: v for k, v in after.items() if ".vllm-patcher" not in k} == before


def _own_patch_over_the_builtins(site: Path, mine: Path) -> tuple[str, ...]:
    """Every built-in applied, then a patch of the user's captured on top of them: its pinned
    diff is stacked on the whole series (no transform to run alone)."""
    mine.mkdir()
    args = ("--target", str(site), "--patches", str(mine))
    run_cli(*args, "apply", check=True)
    spec = site / "vllm/config/speculative.py"
    spec.write_text(spec.read_text() + "\n# my edit\n")
    run_cli(*args, "capture", "my-fix", "--summary", "mine", check=True)
    run_cli(*args, "apply", check=True)
    return args


def test_revert_model_refuses_before_any_change_what_it_could_not_apply_again(
    tree_copy, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The patches ``revert --model`` keeps are applied again over pristine files: where they
    cannot be (the user's patch is stacked on the model's), every file stays as it was. It had
    taken every patch out, then refused the second transaction with "nothing was patched"."""
    site = tree_copy("0.15.1")
    args = _own_patch_over_the_builtins(site, tmp_path / "mine")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"]})
    )
    before = snapshot(site)
    proc = run_cli(*args, "revert", "--model", str(model))
    assert_refused(proc, 13, "do not apply again without the model's", "nothing was reverted")
    _unchanged(site, before)
    # the folder not given: the user's patch is refused, not dropped
    proc = run_cli("--target", str(site), "revert", "--model", str(model))
    assert_refused(proc, 13, "my-fix applied here, but not among the patches given")
    _unchanged(site, before)


def test_revert_model_keeps_a_patch_captured_after_the_choice_was_recorded(
    tree_copy, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The breaker: a capture records its patch as applied, not chosen; revert --model kept only
    the recorded choice and dropped the capture, exit 0."""
    site = tree_copy("0.15.1")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"]})
    )
    mine = tmp_path / "mine"
    mine.mkdir()
    args = ("--target", str(site), "--patches", str(mine))
    run_cli(*args, "apply", check=True)
    run_cli(*args, "revert", "--model", str(model), check=True)  # records the choice kept
    eagle = site / "vllm/v1/spec_decode/eagle.py"
    eagle.write_text(eagle.read_text() + "# my fix\n")
    run_cli(*args, "capture", "my-fix", "--summary", "mine", check=True)
    proc = run_cli(*args, "revert", "--model", str(model), check=True)
    assert "my-fix" in proc.stdout.splitlines()[-1], proc.stdout  # applied again
    assert eagle.read_text().endswith("# my fix\n")
