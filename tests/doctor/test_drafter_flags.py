"""doctor's ``flags`` check: the drafter flags each vLLM release reads, derived
again here from the pristine ``llama_eagle3.py`` of every release 0.11.0-0.34.0 (the wheel is the
truth), and the findings on drafters written with each flag where it is and is not read."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from packaging.version import Version

from vllm_patcher.doctor import OK, PROBLEM, WARNING
from vllm_patcher.doctor.flags import FLAGS, LAST_READ, NESTED, TOP, check_flags
from vllm_patcher.wheels import sources

from ..models.model_files import kimi_target, specforge_drafter
from .reports import by_check, doctor_json

DRAFTER_CLASS = "vllm/model_executor/models/llama_eagle3.py"
RELEASES = [
    "0.11.0",
    "0.11.1",
    "0.11.2",
    "0.12.0",
    "0.13.0",
    "0.14.0",
    "0.14.1",
    "0.15.0",
    "0.15.1",
    "0.16.0",
    "0.17.0",
    "0.17.1",
    "0.18.0",
    "0.18.1",
    "0.19.0",
    "0.19.1",
    "0.20.0",
    "0.20.1",
    "0.20.2",
    "0.21.0",
    "0.22.0",
    "0.22.1",
    "0.23.0",
    "0.24.0",
    "0.25.0",
    "0.25.1",
    "0.26.0",
    "0.27.0",
    "0.27.1",
    "0.28.0",
    "0.29.0",
    "0.30.0",
    "0.31.0",
    "0.32.0",
    "0.34.0",
]


def _const(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_config(node: ast.AST) -> bool:
    """``config`` or ``self.config``: the drafter's hf_config."""
    return (isinstance(node, ast.Name) and node.id == "config") or (
        isinstance(node, ast.Attribute) and node.attr == "config"
    )


def _is_eagle(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "eagle_config"


def reads(source: str) -> set[tuple[str, str]]:
    """(key, where) for every drafter-config key the source reads: ``getattr(config, K, ...)`` and
    ``hasattr(self.config, K)`` at the top level; ``eagle_config.get(K)``, ``eagle_config[K]`` and
    ``K in eagle_config`` under eagle_config."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2:
            key = _const(node.args[1])
            if node.func.id in ("getattr", "hasattr") and key and _is_config(node.args[0]):
                found.add((key, TOP))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            key = _const(node.args[0])
            if node.func.attr == "get" and key and _is_eagle(node.func.value):
                found.add((key, NESTED))
        elif isinstance(node, ast.Subscript) and _is_eagle(node.value):
            key = _const(node.slice)
            if key:
                found.add((key, NESTED))
        elif isinstance(node, ast.Compare) and any(isinstance(o, ast.In) for o in node.ops):
            key = _const(node.left)
            if key and any(_is_eagle(c) for c in node.comparators):
                found.add((key, NESTED))
    return found


@pytest.fixture(scope="module")
def drafter_sources() -> dict[str, str]:
    # a cache of its own: the pristine trees the patch tests share are not re-extracted under them
    cache = sources.cache_root() / "drafter-class"
    return {
        v: (sources.fetch_release(v, [DRAFTER_CLASS], cache=cache) / DRAFTER_CLASS).read_text()
        for v in RELEASES
    }


def test_the_flag_table_is_what_each_release_s_drafter_class_reads(
    drafter_sources: dict[str, str],
) -> None:
    assert Version(RELEASES[-1]) == LAST_READ
    for flag in FLAGS:
        for where in (TOP, NESTED):
            reading = [v for v in RELEASES if (flag.key, where) in reads(drafter_sources[v])]
            first = flag.read_from(where)
            if first is None:
                assert reading == [], (flag.key, where, reading)
            else:  # read from its first release on, in every release after it
                assert reading == [v for v in RELEASES if Version(v) >= first], (flag.key, where)


def test_the_reader_sees_a_key_read_either_way() -> None:
    source = (
        'x = getattr(self.config, "a", 1)\nif "b" in eagle_config: y = eagle_config["c"]\n'
        'z = eagle_config.get("d", getattr(config, "e", False))\nhasattr(self.config, "f")\n'
        'getattr(other, "g")\n'
    )
    assert reads(source) == {
        ("a", TOP), ("b", NESTED), ("c", NESTED), ("d", NESTED), ("e", TOP), ("f", TOP),
    }  # fmt: skip


@pytest.mark.parametrize(
    ("config", "release", "level", "fix"),
    [
        # the flag where no release reads it: a problem everywhere, moved under eagle_config
        ({"use_aux_hidden_state": False}, "0.32.0", PROBLEM, '"eagle_config": {"use_aux'),
        # ... and before any release reads it anywhere: moved, and served with the first one
        ({"use_aux_hidden_state": False}, "0.11.2", PROBLEM, "and serve with vLLM 0.12.0"),
        # under eagle_config, read from 0.12.0 on
        ({"eagle_config": {"use_aux_hidden_state": False}}, "0.11.2", PROBLEM, "0.12.0 or newer"),
        ({"eagle_config": {"use_aux_hidden_state": False}}, "0.12.0", OK, None),
        # top-level from 0.18.0, nested from 0.22.0: the earliest that reads it, moved if need be
        ({"norm_before_fc": True}, "0.17.1", WARNING, "serve with vLLM 0.18.0"),
        ({"norm_before_fc": True}, "0.18.0", OK, None),
        ({"eagle_config": {"norm_before_fc": True}}, "0.17.1", WARNING, "the top level"),
        ({"eagle_config": {"norm_before_fc": True}}, "0.21.0", WARNING, "move it to the top level"),
        ({"eagle_config": {"norm_before_residual": True}}, "0.32.0", WARNING, "the top level"),
        ({"fc_norm": True, "norm_output": True}, "0.21.0", WARNING, "0.22.0 or newer"),
        ({"num_aux_hidden_states": 4}, "0.15.1", WARNING, "0.22.0 or newer"),
        ({"attention_bias": True}, "0.15.1", WARNING, "0.16.0 or newer"),
        # a nested copy no release reads, of a key read at the top level
        ({"eagle_config": {"target_hidden_size": 7168}}, "0.32.0", WARNING, "the top level"),
        # vLLM tests a switch as a truth value: the string "false" switches it on
        ({"eagle_config": {"use_aux_hidden_state": "false"}}, "0.22.0", PROBLEM, "JSON true"),
        ({"norm_before_fc": "false"}, "0.22.0", WARNING, "JSON true or false"),
        # null or [] mean the default to vLLM: nothing asked
        ({"norm_before_fc": None, "attention_bias": []}, "0.15.1", None, None),
        # set twice to different values: which one the release reads
        ({"fc_norm": True, "eagle_config": {"fc_norm": False}}, "0.22.0", WARNING, "keep one"),
        ({"num_aux_hidden_states": "3"}, "0.22.0", PROBLEM, "number of aux layers"),
        # an eagle_config vLLM cannot look keys up in
        ({"eagle_config": ["x"]}, "0.22.0", PROBLEM, "make eagle_config an object"),
        ({"eagle_config": "use_aux_hidden_state"}, "0.12.0", PROBLEM, "an object"),
    ],
)
def test_a_flag_the_release_does_not_read_is_named_with_where_it_is_read(
    config: dict[str, object], release: str, level: str | None, fix: str | None
) -> None:
    findings = check_flags(config, release)
    assert {f.level for f in findings} == ({level} if level else set()), findings
    if fix is not None:
        assert all(fix in (f.fix or "") for f in findings if f.level != OK), findings
        assert all(release in f.message for f in findings), findings


def test_flags_at_their_defaults_ask_for_nothing_and_speculators_configs_are_not_judged() -> None:
    defaults = {"use_aux_hidden_state": True, "norm_output": False, "num_aux_hidden_states": 3}
    assert check_flags(defaults, "0.11.0") == []
    assert check_flags({"use_aux_hidden_state": False, "speculators_config": {}}, "0.32.0") == []


def test_doctor_names_the_flag_and_passes_the_drafter_that_puts_it_where_vllm_reads_it(
    tmp_path: Path,
) -> None:
    target = kimi_target(tmp_path)
    found = {}
    for name, extra in (
        ("top", {"use_aux_hidden_state": False}),
        ("nested", {"eagle_config": {"use_aux_hidden_state": False}}),
    ):
        drafter = specforge_drafter(
            tmp_path, name, eagle_aux_hidden_state_layer_ids=[3, 31, 59], **extra
        )
        code, report = doctor_json(
            "--model", str(target), "--drafter", str(drafter), "--vllm-version", "0.15.1"
        )
        found[name] = (code, [level for level, _ in by_check(report, "flags")])
    assert found == {"top": (1, [PROBLEM]), "nested": (0, [OK])}, found


def _first(cell: str) -> str | None:
    """ "0.18.0 and newer" -> "0.18.0"; "never read" -> None."""
    return None if cell.startswith("never") else cell.split()[0]


def test_the_readme_s_flag_table_says_what_the_tool_reads() -> None:
    from vllm_patcher.doctor.rules import READS_NESTED_FROM, READS_TOP_LEVEL_FROM

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Drafter flags each release reads", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:-1] for line in section.splitlines() if line.startswith("| `")]
    table = {
        key.strip(" `"): (_first(top.strip()), _first(nested.strip()))
        for keys, top, nested in rows
        for key in keys.split(",")
    }
    expected = {
        f.key: (
            None if f.top is None else str(f.top),
            None if f.nested is None else str(f.nested),
        )
        for f in FLAGS
    }
    expected["eagle_aux_hidden_state_layer_ids"] = (
        str(READS_TOP_LEVEL_FROM),
        str(READS_NESTED_FROM),
    )
    assert table == expected


@pytest.mark.parametrize(
    ("fc_layers", "config", "release", "expected"),
    [
        (4, {"num_aux_hidden_states": 4}, "0.22.0", [OK]),  # read: the fc takes 4 x hidden
        (3, {"num_aux_hidden_states": 4}, "0.22.0", [PROBLEM]),  # read, and the fc does not fit
        (4, {}, "0.22.0", [PROBLEM]),  # nothing says 4: vLLM builds it for 3
        (4, {"num_aux_hidden_states": 4}, "0.21.0", [PROBLEM]),  # not read before 0.22.0
        (3, {"num_aux_hidden_states": 4}, "0.21.0", [OK]),  # not read: 3, which the fc takes
    ],
)
def test_the_fc_is_judged_for_as_many_aux_layers_as_the_release_builds_it_for(
    tmp_path: Path, fc_layers: int, config: dict[str, object], release: str, expected: list[str]
) -> None:
    from ..models.model_files import HIDDEN, drafter_weights

    drafter = specforge_drafter(
        tmp_path, weights=drafter_weights(fc_in=fc_layers * HIDDEN),
        eagle_aux_hidden_state_layer_ids=[3, 31, 59], **config,
    )  # fmt: skip
    _, report = doctor_json(
        "--model", str(kimi_target(tmp_path)), "--drafter", str(drafter), "--vllm-version", release
    )
    found = by_check(report, "fc-weight")
    assert [level for level, _ in found] == expected, found
    if expected == [PROBLEM] and fc_layers == 4:
        [fc] = [f for f in report["findings"] if f["check"] == "fc-weight"]
        assert '"num_aux_hidden_states": 4' in fc["fix"], fc
