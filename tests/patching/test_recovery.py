"""vllm_patcher/patching/recovery.py: the copies ``revert --force`` keeps of edits under saved/,
through the real command line: a folder of their own per run (never over a copy kept earlier),
never through a link, and none left behind by a forced revert that failed."""

from __future__ import annotations

import json
from pathlib import Path

from ..conftest import assert_refused, run_cli, snapshot


def test_revert_force_never_overwrites_an_edit_it_kept_earlier_in_the_same_second(
    tree_copy,
) -> None:  # type: ignore[no-untyped-def]
    """saved/ is named by the second: an earlier copy of that second (and of the next two
    minutes, whatever the clock says when revert runs) keeps its bytes, the new one goes beside."""
    import time

    site = tree_copy("0.15.1")
    rel = "vllm/config/speculative.py"
    saved = site / ".vllm-patcher" / "saved"
    now = time.time()
    earlier = {}
    for i in range(120):
        copy = saved / time.strftime("%Y%m%dT%H%M%S", time.localtime(now + i)) / rel
        copy.parent.mkdir(parents=True)
        copy.write_bytes(b"an edit kept by an earlier revert --force %d\n" % i)
        earlier[copy] = copy.read_bytes()
    run_cli("--target", str(site), "apply", check=True)
    edited = site / rel
    edited.write_text(edited.read_text() + "# tuned by hand\n")
    mine = edited.read_bytes()
    forced = run_cli("--target", str(site), "--json", "revert", "--force", check=True)
    kept = Path(json.loads(forced.stdout)["saved_edits"][rel])
    assert kept.read_bytes() == mine and kept not in earlier
    assert {c: c.read_bytes() for c in earlier} == earlier
    # the run met a taken name (it ran within the two minutes) and went beside it
    stamp = kept.parents[len(Path(rel).parts) - 1].name
    assert stamp.endswith("-2") and (saved / stamp[:-2] / rel) in earlier, kept


def test_a_saved_folder_that_is_a_link_is_never_written_through(tree_copy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """saved/ linked elsewhere (or into the package itself): revert --force refuses and changes
    nothing, like a linked state folder."""
    for i, aim in enumerate((tmp_path / "elsewhere", Path("../vllm"))):
        site = tree_copy("0.15.1").rename(tmp_path / f"case-{i}")
        run_cli("--target", str(site), "apply", check=True)
        edited = site / "vllm/config/speculative.py"
        edited.write_text(edited.read_text() + "# tuned by hand\n")
        if aim.is_absolute():
            aim.mkdir()
        (site / ".vllm-patcher" / "saved").symlink_to(aim)
        before = snapshot(site)
        proc = run_cli("--target", str(site), "revert", "--force")
        assert_refused(proc, 5, "saved", "link")
        assert snapshot(site) == before
        if aim.is_absolute():
            assert not any(aim.iterdir())


def test_a_forced_revert_that_fails_while_keeping_the_copies_leaves_no_folder(tree_copy) -> None:  # type: ignore[no-untyped-def]
    """A full disk at each write of a forced revert of two edited files: exit 6, every file as
    it was, and no saved/<stamp> folder left half-filled (each attempt would add one)."""
    site = tree_copy("0.15.1")
    run_cli("--target", str(site), "apply", check=True)
    for rel in ("vllm/config/speculative.py", "vllm/v1/spec_decode/eagle.py"):
        (site / rel).write_bytes((site / rel).read_bytes() + b"# tuned by hand\n")
    before = snapshot(site)
    saved = site / ".vllm-patcher" / "saved"
    for n in (1, 2):  # the first copy's write, then the second's
        proc = run_cli(
            "--target",
            str(site),
            "revert",
            "--force",
            env={"VLLM_PATCHER_FAULT": f"enospc@write#{n}"},
        )
        assert_refused(proc, 6, "no space left")
        assert snapshot(site) == before
        assert not saved.exists() or not any(saved.iterdir()), list(saved.iterdir())


def test_revert_with_its_state_record_lost_restores_the_files_from_the_copies_record_vouches_for(
    tree_copy,
) -> None:  # type: ignore[no-untyped-def]
    """state.json deleted while the files stay patched: no record tells the patches from edits,
    so revert refuses (exit 5) and ``revert --force`` puts back each kept pristine copy that the
    installer's RECORD vouches for, each current file kept under saved/ first (an edit of the
    user's among them survives). It had said "nothing to revert" and deleted the copies, the one
    way back. A copy RECORD does not vouch for, or one that is a link, is refused, nothing
    changed."""
    site = tree_copy("0.15.1")
    pristine = snapshot(site)
    run_cli("--target", str(site), "apply", check=True)
    state = site / ".vllm-patcher"
    (state / "state.json").unlink()
    copies = state / "pristine"
    kept = sorted(p for p in copies.rglob("*") if p.is_file())
    assert kept  # the way back is there
    # one copy tampered with: RECORD cannot vouch for it, so nothing moves
    first = kept[0]
    good = first.read_bytes()
    first.write_bytes(good + b"# not pip's\n")
    before = snapshot(site)
    assert_refused(run_cli("--target", str(site), "revert", "--force"), 7, "RECORD does not vouch")
    assert snapshot(site) == before
    first.write_bytes(good)
    # a copy that is a link (its bytes RECORD's): refused too
    second = kept[1]
    moved = second.with_name(second.name + ".real")
    second.rename(moved)
    second.symlink_to(moved)
    before = snapshot(site)
    assert_refused(run_cli("--target", str(site), "revert", "--force"), 7, "is a link")
    assert snapshot(site) == before
    second.unlink()
    moved.rename(second)
    # an edit of the user's on a patched file: no record tells it from the patch
    gemma = site / "vllm/model_executor/models/gemma2.py"
    mine = gemma.read_bytes() + b"# my edit\n"
    gemma.write_bytes(mine)
    before = snapshot(site)
    assert_refused(run_cli("--target", str(site), "revert"), 5, "revert --force")
    assert snapshot(site) == before
    proc = run_cli("--target", str(site), "revert", "--force", check=True)
    assert "nothing to revert" not in proc.stdout, proc.stdout
    after = {k: v for k, v in snapshot(site).items() if not k.startswith(".vllm-patcher")}
    assert after == pristine
    assert not any(p.is_file() for p in copies.rglob("*"))  # restored, then tidied
    kept_edit = list((state / "saved").rglob("gemma2.py"))
    assert len(kept_edit) == 1 and kept_edit[0].read_bytes() == mine, proc.stdout


def test_an_apply_after_the_state_record_was_lost_keeps_the_copies_revert_restores_from(
    tree_copy, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """apply tidies away copies no record names (a killed run's); the copy of a file that differs
    from it, which RECORD vouches for, is the way back of a lost record and stays for revert."""
    site = tree_copy("0.15.1")
    pristine = snapshot(site)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"]})
    )
    args = ("--target", str(site))
    run_cli(*args, "apply", "--model", str(model), check=True)
    (site / ".vllm-patcher" / "state.json").unlink()
    granite = site / "vllm/model_executor/models/granite.py"  # no patch applied to it yet
    granite.write_text(granite.read_text() + "# an edit\n")
    again = run_cli(*args, "apply", "eagle3-granite")  # tidies, then refuses the edited file
    assert again.returncode == 5, again.stderr
    assert (site / ".vllm-patcher/pristine/vllm/config/speculative.py").is_file()
    proc = run_cli(*args, "revert", "--force", check=True)
    assert "restored vllm/config/speculative.py" in proc.stdout, proc.stdout
    after = {k: v for k, v in snapshot(site).items() if not k.startswith(".vllm-patcher")}
    assert {k for k in after if after[k] != pristine.get(k)} == {str(granite.relative_to(site))}


def test_a_pristine_folder_that_is_a_link_is_never_read_or_written_through(
    tree_copy, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The breaker: with .vllm-patcher/pristine a link to a folder elsewhere, apply wrote its
    copies there and revert deleted them there."""
    site = tree_copy("0.15.1")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine")
    (site / ".vllm-patcher").mkdir()
    (site / ".vllm-patcher" / "pristine").symlink_to(elsewhere)
    before = snapshot(site)
    for command in ("apply", "revert"):
        assert_refused(run_cli("--target", str(site), command), 5, "not a folder of its own")
    assert snapshot(site) == before and [p.name for p in elsewhere.iterdir()] == ["keep.txt"]
