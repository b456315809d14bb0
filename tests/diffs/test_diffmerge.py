"""diffmerge on the real pristine sources of several releases (read from the wheel cache).

The 0.15.1 pinned diffs stand in for an upstream PR: applied fuzzily and merged three-way onto the
other releases, they must reproduce what those releases' own pins say wherever the code around
the change did not move, and must reject / conflict (never silently misplace) where it did.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_patcher import errors
from vllm_patcher.catalogue.folders import load_catalogue
from vllm_patcher.diffs import fuzzy as dfuzzy
from vllm_patcher.diffs import merge as dmerge
from vllm_patcher.diffs import pinned
from vllm_patcher.diffs import text as dtext
from vllm_patcher.diffs import upstream as dupstream
from vllm_patcher.errors import DiffShapeError
from vllm_patcher.install.record import file_hash
from vllm_patcher.wheels import sources

REPO = Path(__file__).resolve().parents[2]
SPEC = "vllm/config/speculative.py"
EAGLE = "vllm/v1/spec_decode/eagle.py"
DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"
KIMI = "vllm/model_executor/models/kimi_k25.py"
FILES_0151 = (SPEC, EAGLE, DEEPSEEK, KIMI)


def pristine(version: str, rel: str) -> str:
    # the release's own file, fetched from the package index into the cache on first use
    return (sources.fetch_release(version, [rel]) / rel).read_text(encoding="utf-8")


# the DeepSeek/Kimi codemods: one patch per file, which is what these merges are about
CODEMOD_PATCHES = [
    p
    for p in load_catalogue().patches
    if p.name in ("eagle3-whitelist", "kimi-k25-image-token", "supports-eagle3")
]


def manifest(version: str) -> dict[str, dict[str, str]]:
    """Before/after hashes of the codemod built-ins' files (each file has one of them)."""
    out: dict[str, dict[str, str]] = {}
    for patch in CODEMOD_PATCHES:
        data = (
            json.loads((patch.folder / f"vllm-{version}" / "manifest.json").read_text("utf-8"))
            if version in patch.pinned_versions
            else {"files": {}}
        )
        out.update(data["files"])
    return out


def _pinned_diff(name: str, version: str) -> Path:
    return REPO / "patches" / name / f"vllm-{version}" / "patch.diff"


def diffs_0151() -> dict[str, str]:
    """Every file diff pinned for 0.15.1, split out of its patch's multi-file diff."""
    out: dict[str, str] = {}
    for diff in (_pinned_diff(p.name, "0.15.1") for p in CODEMOD_PATCHES):
        kept, dropped = dupstream.split_upstream_diff(diff.read_text("utf-8"))
        assert dropped == []
        out.update(kept)
    assert sorted(out) == sorted(FILES_0151)
    return out


def patched_0151(rel: str) -> str:
    """The 0.15.1 pinned result, made by the strict applier (independent of apply_fuzzy)."""
    return pinned.apply_exact(pristine("0.15.1", rel), diffs_0151()[rel], rel)


def h(text: str) -> str:
    return file_hash(text.encode("utf-8"))


def resolve(text: str, keep: str) -> str:
    """Resolve every conflict block in ``text`` to one side: "ours" (first) or "theirs" (last)."""
    out: list[str] = []
    state = "plain"
    for line in dtext.split_lines(text):
        body = line.rstrip("\r\n")
        if body.startswith(dtext.MARK_START):
            state = "ours"
        elif body.startswith(dtext.MARK_BASE):
            state = "base"
        elif body == dtext.MARK_MID:
            state = "theirs"
        elif body.startswith(dtext.MARK_END):
            state = "plain"
        elif state == "plain" or state == keep:
            out.append(line)
    return "".join(out)


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    """(lines taken out, lines put in) going from ``before`` to ``after``, each sorted."""
    removed = sorted(
        line[1:]
        for line in pinned.make_diff("x", before, after).splitlines()[2:]
        if line.startswith("-")
    )
    added = sorted(
        line[1:]
        for line in pinned.make_diff("x", before, after).splitlines()[2:]
        if line.startswith("+")
    )
    return removed, added


# --- split_upstream_diff -------------------------------------------------------------------------

# The pinned 0.15.1 whitelist hunk, with the section header GitHub adds.
WHITELIST_HUNK = (
    _pinned_diff("eagle3-whitelist", "0.15.1")
    .read_text("utf-8")
    .split("\n", 2)[2]
    .replace(" @@\n", " @@ class SpeculativeConfig:\n", 1)
)

GITHUB_DIFF = f"""\
diff --git a/tests/v1/spec_decode/test_eagle.py b/tests/v1/spec_decode/test_eagle.py
index 3f2a1b0..9c8d7e6 100644
--- a/tests/v1/spec_decode/test_eagle.py
+++ b/tests/v1/spec_decode/test_eagle.py
@@ -10,3 +10,4 @@ import pytest
 a
 b
+c
 d
diff --git a/vllm/config/speculative.py b/vllm/config/speculative.py
index 1234567..89abcde 100644
--- a/vllm/config/speculative.py
+++ b/vllm/config/speculative.py
{WHITELIST_HUNK}diff --git a/docs/new.md b/docs/new.md
new file mode 100644
index 0000000..e69de29
--- /dev/null
+++ b/docs/new.md
@@ -0,0 +1 @@
+hello
diff --git a/tests/old_name.py b/tests/new_name.py
similarity index 100%
rename from tests/old_name.py
rename to tests/new_name.py
diff --git a/docs/logo.png b/docs/logo.png
index 0a1b2c3..4d5e6f7 100644
Binary files a/docs/logo.png and b/docs/logo.png differ
"""


def test_split_keeps_vllm_files_and_names_the_rest() -> None:
    kept, dropped = dupstream.split_upstream_diff(GITHUB_DIFF)
    assert list(kept) == [SPEC]
    assert dropped == [
        "tests/v1/spec_decode/test_eagle.py",
        "docs/new.md",
        "tests/new_name.py",
        "docs/logo.png",
    ]
    text = kept[SPEC]
    assert text.startswith(
        f"--- a/{SPEC}\n+++ b/{SPEC}\n@@ -669,7 +669,7 @@ class SpeculativeConfig:\n"
    )
    assert "index 1234567" not in text and "diff --git" not in text
    # The split diff is what the strict applier takes and it gives the 0.15.1 pin.
    result = pinned.apply_exact(pristine("0.15.1", SPEC), text, SPEC)
    assert h(result) == manifest("0.15.1")[SPEC]["after"]


def test_split_takes_diffs_without_prefixes_or_git_headers() -> None:
    plain = f"--- vllm/config/speculative.py\t2024-01-01\n+++ vllm/config/speculative.py\n{WHITELIST_HUNK}"
    kept, dropped = dupstream.split_upstream_diff(plain.rstrip("\n"))  # no final newline either
    assert list(kept) == [SPEC] and dropped == []
    assert kept[SPEC] == dupstream.split_upstream_diff(GITHUB_DIFF)[0][SPEC]


def _git_file(header: str, path: str = "vllm/model_executor/models/x.py") -> str:
    return f"diff --git a/{path} b/{path}\n" + header


@pytest.mark.parametrize(
    ("diff", "words"),
    [
        (
            _git_file(
                "new file mode 100644\nindex 0000000..1111111\n--- /dev/null\n"
                "+++ b/vllm/model_executor/models/x.py\n@@ -0,0 +1 @@\n+x = 1\n"
            ),
            "creates vllm/model_executor/models/x.py",
        ),
        (
            _git_file(
                "deleted file mode 100644\nindex 1111111..0000000\n"
                "--- a/vllm/model_executor/models/x.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x = 1\n"
            ),
            "deletes vllm/model_executor/models/x.py",
        ),
        (
            "diff --git a/vllm/a.py b/vllm/b.py\nsimilarity index 100%\n"
            "rename from vllm/a.py\nrename to vllm/b.py\n",
            "renames or copies vllm/a.py to vllm/b.py",
        ),
        (
            "diff --git a/tests/a.py b/vllm/a.py\nsimilarity index 100%\n"
            "rename from tests/a.py\nrename to vllm/a.py\n",
            "renames or copies tests/a.py to vllm/a.py",
        ),
        (
            "diff --git a/vllm/a.py b/tests/a.py\nsimilarity index 100%\n"
            "rename from vllm/a.py\nrename to tests/a.py\n",
            "renames or copies vllm/a.py to tests/a.py",
        ),
        (
            _git_file(
                "index 0a1b2c3..4d5e6f7 100644\n"
                "Binary files a/vllm/model_executor/models/x.py and "
                "b/vllm/model_executor/models/x.py differ\n"
            ),
            "binary file vllm/model_executor/models/x.py",
        ),
        (
            _git_file("old mode 100644\nnew mode 100755\n"),
            "mode (100644 -> 100755) of vllm/model_executor/models/x.py",
        ),
        (
            "--- a/vllm/../etc/passwd\n+++ b/vllm/../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n",
            "not a path inside vllm/",
        ),
        (
            f"--- a/{SPEC}\n+++ b/{SPEC}\n{WHITELIST_HUNK}--- a/{SPEC}\n+++ b/{SPEC}\n"
            f"{WHITELIST_HUNK}",
            "in two places",
        ),
    ],
    ids=[
        "new",
        "deleted",
        "rename",
        "rename-into",
        "rename-out",
        "binary",
        "mode",
        "traversal",
        "twice",
    ],
)
def test_split_refuses_anything_but_edits_inside_vllm(diff: str, words: str) -> None:
    with pytest.raises(DiffShapeError) as info:
        dupstream.split_upstream_diff(GITHUB_DIFF + diff)
    assert words in info.value.message
    assert "\n" not in info.value.message


@pytest.mark.parametrize(
    ("diff", "words"),
    [
        ("", "holds no file diff"),
        ("<html><body>404: Not Found</body></html>\n", "holds no file diff"),
        (f"--- a/{SPEC}\n+++ b/{SPEC}\n@@ -669,7 +669,7 @@\n a\n-b\n", "Hunk is shorter"),
        (f"--- a/{SPEC}\n+++ b/{SPEC}\n@@ -1,2 +1,2 @@\n a\n?b\n c\n", "Hunk diff line expected"),
    ],
    ids=["empty", "html", "short-hunk", "bad-line"],
)
def test_split_says_in_one_line_why_a_diff_does_not_parse(diff: str, words: str) -> None:
    with pytest.raises(DiffShapeError) as info:
        dupstream.split_upstream_diff(diff)
    assert words in info.value.message
    assert "\n" not in info.value.message
    assert info.value.exit_code == 16


def test_diff_shape_error_has_an_exit_code_of_its_own() -> None:
    others = {
        cls.exit_code
        for cls in vars(errors).values()
        if isinstance(cls, type)
        and issubclass(cls, errors.PatcherError)
        and cls not in (DiffShapeError, errors.PatcherError)
    }
    assert DiffShapeError.exit_code == 16
    assert DiffShapeError.exit_code not in others
    assert issubclass(DiffShapeError, errors.PatcherError)


# --- apply_fuzzy ---------------------------------------------------------------------------------


@pytest.mark.parametrize("rel", FILES_0151)
def test_fuzzy_apply_of_the_0151_pins_on_0151_gives_the_pinned_result(rel: str) -> None:
    source = pristine("0.15.1", rel)
    assert h(source) == manifest("0.15.1")[rel]["before"]
    result = dfuzzy.apply_fuzzy(source, diffs_0151()[rel])
    assert h(result.text) == manifest("0.15.1")[rel]["after"]
    assert result.text == patched_0151(rel)
    assert result.hunks and all(
        (o.status, o.offset, o.fuzz) == ("applied", 0, 0) for o in result.hunks
    )
    assert result.rejects == "" and result.conflict_text == result.text
    # Applied again, every hunk is found already there and nothing changes.
    again = dfuzzy.apply_fuzzy(result.text, diffs_0151()[rel])
    assert [o.status for o in again.hunks] == ["already-applied"] * len(result.hunks)
    assert again.text == result.text and again.rejects == ""


@pytest.mark.parametrize(
    ("version", "rel", "offsets", "fuzz"),
    [
        ("0.17.1", DEEPSEEK, [2, 90, 90, 90, 90, 90], [0] * 6),
        ("0.17.1", EAGLE, [169], [0]),
        ("0.13.0", DEEPSEEK, [5, 200, 200, 200, 200, 200], [2, 0, 0, 0, 0, 0]),
        ("0.12.0", SPEC, [-52], [0]),
    ],
)
def test_the_0151_diff_moves_onto_other_releases_as_their_own_pin(
    version: str, rel: str, offsets: list[int], fuzz: list[int]
) -> None:
    """Where only line numbers (and, on 0.13.0, one import line of context) moved, the 0.15.1 diff
    applied with offsets and fuzz gives byte for byte what that release's pin says."""
    result = dfuzzy.apply_fuzzy(pristine(version, rel), diffs_0151()[rel])
    assert [o.offset for o in result.hunks] == offsets
    assert [o.fuzz for o in result.hunks] == fuzz
    assert all(o.applied for o in result.hunks) and result.rejects == ""
    assert h(result.text) == manifest(version)[rel]["after"]


def test_fuzzy_on_0171_kimi_rejects_two_hunks_and_fuzzes_the_third() -> None:
    source = pristine("0.17.1", KIMI)
    result = dfuzzy.apply_fuzzy(source, diffs_0151()[KIMI], ours_label="installed (vllm 0.17.1)")
    assert [(o.status, o.fuzz) for o in result.hunks] == [
        ("rejected", 0),
        ("rejected", 0),
        ("applied", 2),
    ]
    assert [o.number for o in result.rejected] == [1, 2]
    # The applied hunk put its methods after the line it hangs them on, in 0.17.1 too.
    assert "    def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:\n" in result.text
    assert result.text.index("self.media_placeholder: int = ") < result.text.index(
        "def set_aux_hidden_state_layers"
    )
    # .rej: a file header and exactly the two rejected hunks, as the diff had them.
    assert result.rejects.startswith(f"--- a/{KIMI}\n+++ b/{KIMI}\n")
    assert re.findall(r"^@@ .*? @@", result.rejects, re.M) == [
        "@@ -33,7 +33,7 @@",
        "@@ -283,7 +283,7 @@",
    ]
    # conflict_text: both blocks, labelled, each holding what 0.17.1 has and what the hunk wants.
    ct = result.conflict_text
    assert ct.count("<<<<<<< installed (vllm 0.17.1)\n") == 2
    assert ">>>>>>> upstream diff hunk 1\n" in ct and ">>>>>>> upstream diff hunk 2\n" in ct
    assert len(dtext.conflict_marker_lines(ct)) == 6
    assert not dtext.conflict_marker_lines(result.text)
    block = ct[ct.index("<<<<<<<", ct.index("hunk 1")) :]
    assert (
        "    nn.Module, SupportsMultiModal, SupportsPP, SupportsQuant\n"
        in block.split("=======")[0]
    )
    assert (
        "class KimiK25ForConditionalGeneration(nn.Module, SupportsMultiModal, SupportsPP, "
        "SupportsEagle3):\n" in block.split("=======")[1]
    )
    # Taking the installed side of every block gives back `text`; the upstream side puts in
    # every line the rejected hunks add.
    assert resolve(ct, "ours") == result.text
    theirs = resolve(ct, "theirs")
    assert (
        "from vllm.model_executor.models.interfaces import SupportsMultiModal, SupportsPP, SupportsEagle3\n"
        in theirs
    )


def test_fuzzy_on_0160_whitelist_blocks_the_whole_rewritten_list() -> None:
    """0.16.0 spread the list over 15 lines: the conflict holds all of it, from context to context."""
    source = pristine("0.16.0", SPEC)
    result = dfuzzy.apply_fuzzy(source, diffs_0151()[SPEC])
    (outcome,) = result.hunks
    assert outcome.rejected and result.text == source
    installed = result.conflict_text.split("<<<<<<< installed\n", 1)[1].split("=======\n", 1)[0]
    lines = installed.splitlines()
    assert lines[0].strip() == 'f"{self.disable_by_batch_size=}"'
    assert lines[-1].strip() == "and self.target_model_config"
    assert '"hunyuan_vl",' in installed and "eagle3_target_supported = [" in installed
    assert source.count(installed) == 1
    assert outcome.line == source[: source.index(installed)].count("\n") + 1


def test_fuzzy_on_0180_finds_upstreams_own_eagle3_changes_already_there() -> None:
    """0.18.0 merged EAGLE-3 for DeepSeek upstream (reformatted): two hunks are already there
    verbatim, three conflict, and one still applies (its methods exist elsewhere: text cannot
    know that, so the caller must verify)."""
    result = dfuzzy.apply_fuzzy(pristine("0.18.0", DEEPSEEK), diffs_0151()[DEEPSEEK])
    assert [o.status for o in result.hunks] == [
        "rejected",
        "already-applied",
        "rejected",
        "already-applied",
        "rejected",
        "applied",
    ]
    eagle = dfuzzy.apply_fuzzy(pristine("0.18.0", EAGLE), diffs_0151()[EAGLE])
    assert [o.status for o in eagle.hunks] == ["already-applied"]
    assert eagle.text == pristine("0.18.0", EAGLE) and eagle.rejects == ""


def test_fuzz_levels_offsets_and_the_fuzz_limit() -> None:
    source = pristine("0.15.1", SPEC)
    diff = diffs_0151()[SPEC]
    wanted = patched_0151(SPEC)
    first = '                f"{self.disable_by_batch_size=}"\n'
    second = "            )\n"
    # One leading context line changed: fuzz 1. Two: fuzz 2. With max_fuzz=1: rejected.
    one = source.replace(first, '                f"changed"\n', 1)
    r1 = dfuzzy.apply_fuzzy(one, diff)
    assert [(o.status, o.fuzz, o.offset) for o in r1.hunks] == [("applied", 1, 0)]
    assert r1.text == wanted.replace(first, '                f"changed"\n', 1)
    two = one.replace('f"changed"\n' + second, 'f"changed"\n' + "            ]\n", 1)
    assert two != one
    r2 = dfuzzy.apply_fuzzy(two, diff)
    assert [(o.status, o.fuzz) for o in r2.hunks] == [("applied", 2)]
    assert "deepseek_v3" in r2.text
    r3 = dfuzzy.apply_fuzzy(two, diff, max_fuzz=1)
    assert [o.status for o in r3.hunks] == ["rejected"] and r3.text == two
    # Twelve lines inserted above: found 12 lines further down without fuzz.
    shifted = "# x\n" * 12 + source
    r4 = dfuzzy.apply_fuzzy(shifted, diff)
    assert [(o.offset, o.fuzz) for o in r4.hunks] == [(12, 0)]
    assert r4.text == "# x\n" * 12 + wanted


def test_a_hunk_whose_context_exists_nowhere_is_rejected_at_its_stated_line() -> None:
    source = pristine("0.15.1", SPEC)
    diff = (
        f"--- a/{SPEC}\n+++ b/{SPEC}\n"
        "@@ -10,3 +10,3 @@\n no such line one\n-no such line two\n+a replacement\n no such line three\n"
    )
    result = dfuzzy.apply_fuzzy(source, diff, max_fuzz=3)
    (outcome,) = result.hunks
    assert (outcome.status, outcome.line, outcome.offset) == ("rejected", 10, 0)
    assert result.text == source
    assert result.rejects == diff
    lines = dtext.split_lines(result.conflict_text)
    assert lines[9:14] == [
        "<<<<<<< installed\n",
        "=======\n",
        "no such line one\n",
        "a replacement\n",
        "no such line three\n",
    ]
    assert lines[14] == ">>>>>>> upstream diff hunk 1\n"
    assert dtext.conflict_marker_lines(result.conflict_text) == [10, 11, 15]
    assert resolve(result.conflict_text, "ours") == source


def test_a_moved_hunk_goes_to_the_nearest_match_and_later_wins_a_tie() -> None:
    block = ["ctx a\n", "old\n", "ctx b\n"]
    diff = "--- a/f\n+++ b/f\n@@ -11,3 +11,3 @@\n ctx a\n-old\n+new\n ctx b\n"

    def at(*starts: int) -> str:
        lines = ["x\n"] * 40
        for start in starts:
            lines[start : start + 3] = block
        return "".join(lines)

    # Stated at line 11 (index 10): copies 3 lines above and 5 below -> the one above.
    assert [o.offset for o in dfuzzy.apply_fuzzy(at(7, 15), diff).hunks] == [-3]
    # 4 above and 4 below -> GNU patch looks forward first.
    assert [o.offset for o in dfuzzy.apply_fuzzy(at(6, 14), diff).hunks] == [4]


def test_hunks_keep_their_order_and_never_overlap() -> None:
    source = "".join(f"line {i}\n" for i in range(1, 31))
    # Hunk 2's context only exists above hunk 1's lines: it may not go back there.
    diff = (
        "--- a/f\n+++ b/f\n"
        "@@ -20,3 +20,3 @@\n line 20\n-line 21\n+LINE 21\n line 22\n"
        "@@ -25,3 +25,3 @@\n line 5\n-line 6\n+LINE 6\n line 7\n"
    )
    result = dfuzzy.apply_fuzzy(source, diff, max_fuzz=0)
    assert [o.status for o in result.hunks] == ["applied", "rejected"]
    assert "LINE 21\n" in result.text and "LINE 6" not in result.text
    # Its conflict block goes below hunk 1, empty on the installed side.
    ct = result.conflict_text
    assert ct.index("LINE 21") < ct.index("<<<<<<< installed\n=======\nline 5\nLINE 6\nline 7\n")


def test_no_newline_at_end_of_file_both_ways() -> None:
    before, after = "a\nb\nc", "a\nb\nC\n"
    diff = "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n b\n-c\n\\ No newline at end of file\n+C\n"
    result = dfuzzy.apply_fuzzy(before, diff)
    assert result.text == after
    back = "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n b\n-C\n+c\n\\ No newline at end of file\n"
    assert dfuzzy.apply_fuzzy(after, back).text == before
    # A rejected hunk at the very end still leaves its markers on lines of their own.
    rejected = dfuzzy.apply_fuzzy("a\nb\nzz", back)
    assert rejected.rejected and rejected.text == "a\nb\nzz"
    assert rejected.conflict_text == (
        "<<<<<<< installed\na\nb\nzz\n=======\na\nb\nc\n>>>>>>> upstream diff hunk 1\n"
    )


def test_hunks_cut_by_the_file_edge_only_match_at_that_edge_as_in_gnu_patch() -> None:
    """Less context on one side means the diff met the start or end of the file there: such a
    hunk matches only at that end of the file until fuzz has used up the missing context."""
    before = "".join(f"l{i}\n" for i in range(1, 11))
    at_end = pinned.make_diff("f", before, before.replace("l10\n", "L10\n"))
    at_start = pinned.make_diff("f", before, "L0\n" + before)
    assert "@@ -7,4 +7,4 @@" in at_end and "@@ -1,3 +1,4 @@" in at_start
    # The file's end is where it was (lines added above): applies, 1 line further down.
    moved = dfuzzy.apply_fuzzy("l0\n" + before, at_end)
    assert [(o.status, o.offset, o.fuzz) for o in moved.hunks] == [("applied", 1, 0)]
    # The file goes on past the hunk: no longer its end, rejected up to fuzz 2; fuzz 3 drops
    # all the leading context and takes it.
    longer = before + "l11\n"
    assert [o.status for o in dfuzzy.apply_fuzzy(longer, at_end).hunks] == ["rejected"]
    taken = dfuzzy.apply_fuzzy(longer, at_end, max_fuzz=3)
    assert [(o.status, o.fuzz) for o in taken.hunks] == [("applied", 3)]
    assert taken.text == longer.replace("l10\n", "L10\n")
    # Same at the start: the file gained a line on top, so the insertion is not put mid-file.
    assert dfuzzy.apply_fuzzy(before + "l11\n", at_start).text == "L0\n" + before + "l11\n"
    assert [o.status for o in dfuzzy.apply_fuzzy("l0\n" + before, at_start).hunks] == ["rejected"]


def test_a_form_feed_is_not_a_line_break() -> None:
    diff = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\x0cb\n-c\n+C\n"
    assert dfuzzy.apply_fuzzy("a\x0cb\nc\n", diff).text == "a\x0cb\nC\n"
    merged = dmerge.merge_three("x\x0cy\n", "x\x0cZ\n", "x\x0cY\n")
    assert merged == dmerge.MergeResult(
        "<<<<<<< ours\nx\x0cY\n=======\nx\x0cZ\n>>>>>>> theirs\n", 1
    )


def test_crlf_files_keep_their_line_endings() -> None:
    source = "one\r\ntwo\r\nthree\r\n"
    diff = "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n one\r\n-two\r\n+TWO\r\n three\r\n"
    assert dfuzzy.apply_fuzzy(source, diff).text == "one\r\nTWO\r\nthree\r\n"
    rejected = dfuzzy.apply_fuzzy("uno\r\ndos\r\n", diff)
    assert rejected.conflict_text.startswith("<<<<<<< installed\r\n=======\r\none\r\n")


def test_apply_fuzzy_wants_exactly_one_file() -> None:
    two = diffs_0151()[SPEC] + diffs_0151()[EAGLE]
    with pytest.raises(DiffShapeError, match="one file's diff, got 2"):
        dfuzzy.apply_fuzzy(pristine("0.15.1", SPEC), two)
    with pytest.raises(DiffShapeError, match="holds no file diff"):
        dfuzzy.apply_fuzzy("x\n", "not a diff\n")


# --- merge_three ---------------------------------------------------------------------------------


@pytest.mark.parametrize("rel", [EAGLE, DEEPSEEK])
def test_port_0151_to_0171_merges_cleanly_to_the_0171_pin(rel: str) -> None:
    base, theirs, ours = pristine("0.15.1", rel), patched_0151(rel), pristine("0.17.1", rel)
    result = dmerge.merge_three(base, theirs, ours)
    assert result.conflicts == 0 and not dtext.conflict_marker_lines(result.text)
    assert h(result.text) == manifest("0.17.1")[rel]["after"]
    # ours plus exactly the patch's change: the same lines go out and come in.
    assert changed_lines(ours, result.text) == changed_lines(base, theirs)
    assert result.text == dfuzzy.apply_fuzzy(ours, diffs_0151()[rel]).text


@pytest.mark.parametrize(("rel", "conflicts"), [(SPEC, 1), (KIMI, 3)])
def test_port_0151_to_0171_conflicts_where_0171_rewrote_the_lines(rel: str, conflicts: int) -> None:
    base, theirs, ours = pristine("0.15.1", rel), patched_0151(rel), pristine("0.17.1", rel)
    labels = ("vllm 0.17.1", "vllm 0.15.1", "patched 0.15.1")
    result = dmerge.merge_three(base, theirs, ours, labels=labels)
    assert result.conflicts == conflicts
    assert result.text.count("<<<<<<< vllm 0.17.1\n") == conflicts
    assert result.text.count(">>>>>>> patched 0.15.1\n") == conflicts
    assert len(dtext.conflict_marker_lines(result.text)) == 3 * conflicts
    # Every line of ours survives when each conflict is resolved to ours' side.
    if rel == SPEC:
        assert resolve(result.text, "ours") == ours
    with_base = dmerge.merge_three(base, theirs, ours, labels=labels, show_base=True)
    assert with_base.conflicts == conflicts
    assert with_base.text.count("||||||| vllm 0.15.1\n") == conflicts
    assert len(dtext.conflict_marker_lines(with_base.text)) == 4 * conflicts


def test_a_crafted_conflict_on_the_whitelist_line() -> None:
    base, theirs = pristine("0.15.1", SPEC), patched_0151(SPEC)
    old = '        eagle3_target_supported = ["llama", "qwen", "minicpm", "gpt_oss"]\n'
    mine = '        eagle3_target_supported = ["llama", "qwen", "minicpm", "gpt_oss", "mistral"]\n'
    ours = "# a new first line\n" + base.replace(old, mine, 1)
    result = dmerge.merge_three(base, theirs, ours, labels=("ours", "base", "theirs"))
    assert result.conflicts == 1
    lines = dtext.split_lines(result.text)
    start = lines.index("<<<<<<< ours\n")
    new = next(x for x in dtext.split_lines(theirs) if "kimi_k25" in x)
    assert lines[start : start + 5] == [
        "<<<<<<< ours\n",
        mine,
        "=======\n",
        new,
        ">>>>>>> theirs\n",
    ]
    assert dtext.conflict_marker_lines(result.text) == [start + 1, start + 3, start + 5]
    assert lines[0] == "# a new first line\n"
    assert resolve(result.text, "ours") == ours
    assert resolve(result.text, "theirs") == "# a new first line\n" + theirs
    diff3 = dmerge.merge_three(base, theirs, ours, show_base=True)
    d3 = dtext.split_lines(diff3.text)
    s = d3.index("<<<<<<< ours\n")
    assert d3[s : s + 7] == [
        "<<<<<<< ours\n",
        mine,
        "||||||| base\n",
        old,
        "=======\n",
        new,
        ">>>>>>> theirs\n",
    ]


def test_merge_moves_lines_both_sides_agree_on_out_of_the_conflict() -> None:
    base = "a\nb\nc\n"
    ours = "a\nX\nsame\nY\nc\n"
    theirs = "a\nX\nsame\nZ\nc\n"
    result = dmerge.merge_three(base, theirs, ours)
    assert result.text == "a\nX\nsame\n<<<<<<< ours\nY\n=======\nZ\n>>>>>>> theirs\nc\n"
    shown = dmerge.merge_three(base, theirs, ours, show_base=True)
    assert "||||||| base\nb\n=======\nX\nsame\nZ\n" in shown.text


def test_merge_without_trailing_newlines_and_with_crlf() -> None:
    assert dmerge.merge_three("x\ny", "x\ny\nz", "w\nx\ny") == dmerge.MergeResult("w\nx\ny\nz", 0)
    clash = dmerge.merge_three("x\ny", "x\nY", "x\nZ")
    assert clash.text == "x\n<<<<<<< ours\nZ\n=======\nY\n>>>>>>> theirs\n"
    assert dtext.conflict_marker_lines(clash.text) == [2, 4, 6]
    crlf = dmerge.merge_three("a\r\nm\r\nb\r\n", "a\r\nm\r\nB\r\n", "A\r\nm\r\nb\r\n")
    assert crlf == dmerge.MergeResult("A\r\nm\r\nB\r\n", 0)
    crlf_clash = dmerge.merge_three("a\r\nb\r\n", "a\r\nB\r\n", "a\r\nC\r\n")
    assert crlf_clash.text == "a\r\n<<<<<<< ours\r\nC\r\n=======\r\nB\r\n>>>>>>> theirs\r\n"
    # A form feed is not a line break: the conflict takes the whole line.
    ff = dmerge.merge_three("p\x0cq\n", "p\x0cQ\n", "P\x0cq\n")
    assert ff == dmerge.MergeResult("<<<<<<< ours\nP\x0cq\n=======\np\x0cQ\n>>>>>>> theirs\n", 1)


def test_frequent_lines_still_anchor_the_merge_as_in_git() -> None:
    """Blank lines and closing brackets are over 1% of a long file; difflib's autojunk would stop
    them anchoring a match and turn this clean merge (git merge-file's answer) into a conflict."""
    base = "".join(f"value_{i} = {i}\n\n    )\n" for i in range(120))
    seg = "value_50 = 50\n\n    )\nvalue_51 = 51\n"
    ours = base.replace(seg, "value_50 = 'ours'\n\n    )\nvalue_51 = 'ours'\n")
    theirs = base.replace(seg, "value_50 = 50\n\n# theirs\n    )\nvalue_51 = 51\n")
    result = dmerge.merge_three(base, theirs, ours)
    assert result == dmerge.MergeResult(
        base.replace(seg, "value_50 = 'ours'\n\n# theirs\n    )\nvalue_51 = 'ours'\n"), 0
    )


def test_conflict_marker_lines_takes_only_whole_markers() -> None:
    text = (
        "<<<<<<< x\n=======\n>>>>>>> y\n||||||| z\n<<<<<<<\n======= not\n<<<<<<<<\n a\n=======\r\n"
    )
    assert dtext.conflict_marker_lines(text) == [1, 2, 3, 4, 5, 9]


# --- properties and cost -------------------------------------------------------------------------

lines_st = st.lists(
    st.sampled_from(["a\n", "b\n", "c\n", "\n", "def f():\n", "    pass\n"]), max_size=25
)


@settings(max_examples=80, deadline=None)
@given(before=lines_st, after=lines_st)
def test_a_diff_made_from_a_file_applies_to_it_exactly(before: list[str], after: list[str]) -> None:
    a, b = "".join(before) + "end\n", "".join(after) + "end\n"
    diff = pinned.make_diff("vllm/f.py", a, b)
    if not diff:
        return
    result = dfuzzy.apply_fuzzy(a, diff, max_fuzz=0)
    assert result.text == b
    assert all((o.status, o.offset) == ("applied", 0) for o in result.hunks)


@settings(max_examples=80, deadline=None)
@given(base=lines_st, other=lines_st, tail=st.sampled_from(["", "end", "end\r"]))
def test_merging_with_an_unchanged_side_gives_the_other_side(
    base: list[str], other: list[str], tail: str
) -> None:
    b, o = "".join(base) + tail, "".join(other)
    assert dmerge.merge_three(b, o, b) == dmerge.MergeResult(o, 0)
    assert dmerge.merge_three(b, b, o) == dmerge.MergeResult(o, 0)
    assert dmerge.merge_three(b, o, o) == dmerge.MergeResult(o, 0)


def test_importing_diffmerge_loads_neither_unidiff_nor_merge3() -> None:
    code = (
        "import sys, vllm_patcher.diffs.merge, vllm_patcher.diffs.fuzzy, vllm_patcher.diffs.upstream; "
        "print(sorted(m for m in ('unidiff', 'merge3', 'difflib') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == "[]"
