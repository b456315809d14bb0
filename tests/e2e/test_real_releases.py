"""Real vLLM releases end to end through the real command line, from outside (`--python VENV`).

Which venvs:
- `make test`: the real vLLM 0.17.1 venv in ``VLLM_PATCHER_TEST_VENV_0171`` (default
  ``~/.cache/vllm-patcher/venv-0.17.1``). `make test` creates it (`make test-venv-0171`), so its
  absence is a failure, never a skip: those parameters carry the id ``required-venv-0.17.1``.
- `make test-releases`: exactly the venvs in ``VLLM_PATCHER_RELEASE_VENVS`` (``os.pathsep``
  separated), one release per run; each must exist too (the target just created it).

Each venv is brought back to pristine (every touched file equal to its RECORD hash) before and
after the session, like the ``vllm_python`` fixture does for 0.15.1.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from vllm_patcher.install.locate import locate
from vllm_patcher.patching.verify import probe_tiers
from vllm_patcher.wheels import sources

from ..conftest import (
    CATALOGUE,
    FAMILY_CAPTURE,
    GRANITE_CHECKS,
    MINIMAX_CHECKS,
    revert_force_keeps,
    run_cli,
    states_on,
    touched_match_record,
    venv_site,
)
from .model_flow import model_first_round_trip

PATCHES = CATALOGUE.names

TIERS = ("compile", "state", "import", "behaviour")
DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"
GRANITE = "vllm/model_executor/models/granite.py"
EAGLE = "vllm/v1/spec_decode/eagle.py"
IMAGE_TOKEN_CHECK = (
    "kimi-k25-image-token: EAGLE proposer reads Kimi-K2.5's image token from "
    "media_placeholder_token_id"
)


def _venv_params() -> list[object]:
    listed = [p for p in os.environ.get("VLLM_PATCHER_RELEASE_VENVS", "").split(os.pathsep) if p]
    if listed:
        return [pytest.param(Path(p), id=Path(p).name) for p in listed]
    required = os.environ.get("VLLM_PATCHER_TEST_VENV_0171") or str(
        sources.cache_root() / "venv-0.17.1"
    )
    return [pytest.param(Path(required), id="required-venv-0.17.1")]


def _version(python: Path) -> str:
    out = subprocess.run(
        [str(python), "-I", "-c", "import importlib.metadata as m; print(m.version('vllm'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def _make_pristine(python: Path, version: str) -> None:
    run_cli("--python", str(python), "revert", "--force")
    site = venv_site(python)
    if not all(touched_match_record(site).values()):
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall"]
            + [f"vllm=={version}"],
            check=True,
            capture_output=True,
        )
    assert all(touched_match_record(site).values()), f"{site} is not pristine"


class Venv:
    def __init__(self, python: Path) -> None:
        self.python = python
        self.version = _version(python)
        self.site = venv_site(python)
        self.has_kimi = (self.site / "vllm/model_executor/models/kimi_k25.py").exists()
        self.has_minimax = (self.site / "vllm/model_executor/models/minimax_m2.py").exists()

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run_cli("--python", str(self.python), *args, check=check)

    def verify(self) -> tuple[int, dict[str, object]]:
        proc = self.cli("--json", "verify", check=False)
        try:
            return proc.returncode, json.loads(proc.stdout)
        except ValueError as exc:
            raise AssertionError(f"verify printed no JSON\n{proc.stdout}\n{proc.stderr}") from exc


_SESSION: dict[Path, Venv] = {}


@pytest.fixture(scope="module", params=_venv_params())
def venv(request: pytest.FixtureRequest) -> Iterator[Venv]:
    root: Path = request.param
    python = root / "bin" / "python"
    if not python.exists():
        pytest.fail(
            f"no vLLM venv at {root}: `make test` creates it (make test-venv-0171), "
            "`make test-releases` creates each release's"
        )
    v = Venv(python)
    _make_pristine(python, v.version)
    yield v
    _make_pristine(python, v.version)


def failed_checks(report: dict[str, object], tier: str | None = None) -> dict[str, str]:
    checks = report["checks"]
    assert isinstance(checks, list)
    return {
        c["name"]: c["detail"]
        for c in checks
        if not c["ok"] and (tier is None or c["tier"] == tier)
    }


def test_apply_verify_status_revert_round_trip(venv: Venv) -> None:
    expected = {  # the first five by what the release ships, the families by their table
        **dict(zip(CATALOGUE.names, states_on(venv.version, "applied"), strict=True)),
        "eagle3-whitelist": "applied",
        "kimi-k25-image-token": "applied" if venv.has_kimi else "not-applicable",
        "supports-eagle3": "applied",
        "eagle3-minimax-m2": "applied" if venv.has_minimax else "not-applicable",
        "eagle3-granite": "applied",  # granite.py ships in every release from 0.11.0
    }
    before = json.loads(venv.cli("--json", "status").stdout)
    assert before["vllm_version"] == venv.version
    assert Path(before["location"]) == venv.site
    assert {p["name"]: p["state"] for p in before["patches"]} == {
        n: ("pending" if s == "applied" else s) for n, s in expected.items()
    }

    venv.cli("apply")
    assert not any(touched_match_record(venv.site).values())

    code, report = venv.verify()
    assert code == 0, failed_checks(report)
    assert report["tiers"] == dict.fromkeys(TIERS, "passed")
    names = {c["name"] for c in report["checks"]}  # type: ignore[attr-defined]
    wanted = {
        "supports-eagle3: supports_eagle3(DeepseekV3ForCausalLM)",
        "supports-eagle3: forward with aux layers returns (hidden, aux)",
        "eagle3-whitelist: SpeculativeConfig eagle3 accepts deepseek_v3",
        "eagle3-whitelist: SpeculativeConfig eagle3 rejects gpt2 (not on the list)",
    }
    kimi = {
        "supports-eagle3: supports_eagle3(KimiK25ForConditionalGeneration)",
        "supports-eagle3: KimiK25ForConditionalGeneration delegates EAGLE-3 methods",
        IMAGE_TOKEN_CHECK,
        "eagle3-whitelist: SpeculativeConfig eagle3 accepts kimi_k25",
    }
    # a release without Kimi-K2.5 shows its checks as not applicable, never as passed
    skipped = {c["name"] for c in report["checks"] if c["skipped"]}  # type: ignore[attr-defined]
    assert skipped == (set() if venv.has_kimi else kimi), skipped
    assert wanted | kimi <= names, (wanted | kimi) - names
    if venv.has_minimax:  # MiniMax-M2's checks ran and passed (code == 0 above)
        assert set(MINIMAX_CHECKS) <= names - skipped, set(MINIMAX_CHECKS) - names
    assert set(GRANITE_CHECKS) <= names - skipped, set(GRANITE_CHECKS) - names

    after = json.loads(venv.cli("--json", "status").stdout)
    assert {p["name"]: p["state"] for p in after["patches"]} == expected

    venv.cli("revert")
    assert all(touched_match_record(venv.site).values())
    assert not (venv.site / ".vllm-patcher" / "state.json").exists()
    final = json.loads(venv.cli("--json", "status").stdout)
    assert final["fingerprint"] == before["fingerprint"]


def test_verify_before_apply_is_red_for_what_is_missing(venv: Venv) -> None:
    code, report = venv.verify()
    assert code == 1
    assert report["tiers"]["state"] == "failed"
    assert report["fix"] == f"vllm-patcher --python {venv.python} apply"
    assert report["tiers"]["import"] == report["tiers"]["behaviour"] == "not-run"
    # verify stops there; the checks it spared, run anyway, fail on what is missing
    spared = probe_tiers(locate(str(venv.python), None, CATALOGUE), CATALOGUE)
    failed = {c.name: c.detail for c in spared if c.tier == "behaviour" and not c.ok}
    assert (
        "only supported" in failed["eagle3-whitelist: SpeculativeConfig eagle3 accepts deepseek_v3"]
    )
    assert "supports-eagle3: forward with aux layers returns (hidden, aux)" in failed
    assert "supports-eagle3: supports_eagle3(DeepseekV2ForCausalLM)" in failed
    if venv.has_minimax:  # red before apply: every MiniMax-M2 check fails on the pristine release
        assert set(MINIMAX_CHECKS) <= set(failed), set(MINIMAX_CHECKS) - set(failed)
        assert "minimax_m2" in failed[MINIMAX_CHECKS[2]], failed[MINIMAX_CHECKS[2]]
    # and every Granite check (the cached venvs are 0.11-0.17 releases, which have the allow-list)
    assert set(GRANITE_CHECKS) <= set(failed), set(GRANITE_CHECKS) - set(failed)
    assert "does not admit 'granite'" in failed[GRANITE_CHECKS[2]], failed[GRANITE_CHECKS[2]]
    if venv.has_kimi:
        # what the probe saw: a server never reaches the proposer, the allow-list refuses first
        detail = failed[IMAGE_TOKEN_CHECK]
        assert "SpeculativeConfig refused the kimi_k25 target" in detail, detail
        assert "only supported" in detail, detail


def _trailing_comma(text: str) -> str:
    # the seed's mistake: a trailing comma after SupportsEagle3 in an unparenthesised import
    line = next(
        t
        for t in text.splitlines(keepends=True)
        if t.startswith("from .interfaces import ") and t.rstrip().endswith("SupportsEagle3")
    )
    return text.replace(line, line.rstrip("\n") + ",\n", 1)


def _drop_base(text: str) -> str:
    header = re.search(r"^class DeepseekV2ForCausalLM\((.*?)\):", text, re.M | re.S)
    assert header, "class DeepseekV2ForCausalLM not found"
    bases = re.sub(r",\s*SupportsEagle3\b", "", header.group(1))
    assert bases != header.group(1), "SupportsEagle3 is not among the bases"
    return text[: header.start(1)] + bases + text[header.end(1) :]


def _disable_capture(text: str) -> str:
    old = "if idx in self.aux_hidden_state_layers:"
    assert text.count(old) == 1
    return text.replace(old, "if idx in ():")


def _alias_granite_capture(text: str) -> str:
    # the capture before the fix: the very tensor the next layer is given (generation A's form;
    # generation B passes the zero residual to the mixin)
    old = "aux_hidden_states.append(hidden_states + 0)"
    if old in text:
        return text.replace(old, "aux_hidden_states.append(hidden_states)")
    assert text.count("hidden_states, 0\n") + text.count("hidden_states, 0)") == 2, text
    return text.replace("hidden_states, 0\n", "hidden_states, None\n").replace(
        "hidden_states, 0)", "hidden_states, None)"
    )


def _drop_kimi_branch(text: str) -> str:
    branch = re.search(
        r'^ *elif self\.get_model_name\(target_model\) == "KimiK25ForConditionalGeneration":\n'
        r"(?: {16,}.*\n)+",
        text,
        re.M,
    )
    assert branch, "the Kimi-K2.5 branch is not in the patched eagle.py"
    return text[: branch.start()] + text[branch.end() :]


# name -> (file, edit, tier that must go red, check that must fail there, needs Kimi-K2.5)
BREAKS: dict[str, tuple[str, Callable[[str], str], str, str, bool]] = {
    "syntax-error": (DEEPSEEK, _trailing_comma, "compile", DEEPSEEK, False),
    "SupportsEagle3-removed": (
        DEEPSEEK,
        _drop_base,
        "behaviour",
        "supports-eagle3: supports_eagle3(DeepseekV2ForCausalLM)",
        False,
    ),
    "aux-capture-disabled": (
        DEEPSEEK,
        _disable_capture,
        "behaviour",
        "supports-eagle3: forward with aux layers returns (hidden, aux)",
        False,
    ),
    "image-token-branch-removed": (EAGLE, _drop_kimi_branch, "behaviour", IMAGE_TOKEN_CHECK, True),
    "granite-capture-aliased": (
        GRANITE,
        _alias_granite_capture,
        "behaviour",
        f"eagle3-granite: {FAMILY_CAPTURE}",
        False,
    ),
}


@pytest.mark.parametrize("name", list(BREAKS))
def test_planted_break_is_red_in_its_tier_and_revert_restores(venv: Venv, name: str) -> None:
    rel, edit, tier, check, needs_kimi = BREAKS[name]
    if needs_kimi and not venv.has_kimi:
        # not a pytest skip: on a release without Kimi-K2.5 there is no branch, and no check may
        # claim one (the image-token check says it does not apply)
        venv.cli("apply")
        code, report = venv.verify()
        assert code == 0, failed_checks(report)
        image = [c for c in report["checks"] if c["name"] == IMAGE_TOKEN_CHECK]  # type: ignore[attr-defined]
        assert [c["skipped"] for c in image] == [True], image
        venv.cli("revert")
        return
    venv.cli("apply")
    path = venv.site / rel
    path.write_text(edit(path.read_text()))

    code, report = venv.verify()
    assert code == 1
    assert report["tiers"][tier] == "failed", report["tiers"]
    failed = failed_checks(report, tier)
    assert check in failed, failed
    if tier == "compile":
        assert report["tiers"]["import"] == "not-run"
        line = next(
            i
            for i, t in enumerate(path.read_text().splitlines(), 1)
            if t.startswith("from .interfaces import ") and t.endswith("SupportsEagle3,")
        )
        assert f"{path}:{line}:" in failed[check]
    else:
        # the break is named by its own check and by nothing else
        assert report["tiers"]["import"] == "passed", failed_checks(report)
        assert failed[check]
    if name == "granite-capture-aliased":  # the crash's cause, named
        assert "is the very tensor GraniteModel passes into layer" in failed[check], failed
        assert "not a tensor of its own" in failed[check]
    if name == "image-token-branch-removed":
        detail = failed[check]
        assert "AttributeError" in detail and "image_token_index" in detail, detail
        assert f"{EAGLE}:" in detail, detail
        assert set(failed) == {check}, failed

    # the edit is ours to undo: revert --force sets it aside and restores the installer's bytes
    # (green after a clean apply is test_apply_verify_status_revert_round_trip)
    revert_force_keeps(venv.python, venv.site, rel)


@pytest.mark.parametrize("family", ["kimi", "deepseek", "granite"])
def test_the_model_first_flow_applies_exactly_the_familys_patches(
    venv: Venv, tmp_path: Path, family: str
) -> None:
    """``apply --model`` and ``apply NAME...`` (tests/e2e/model_flow.py), then a bare verify and
    status --check green on that choice, revert RECORD-identical."""
    model_first_round_trip(venv.python, family, tmp_path, venv.has_kimi)


def test_a_glm5_apply_by_name_pulls_in_deepseeks_capture(venv: Venv) -> None:
    """GLM-5's class is DeepSeek's: before 0.18.0 its allow-list entry alone would admit a model
    whose class lacks SupportsEagle3; apply by name pulls supports-eagle3 in and says so."""
    py = ("--python", str(venv.python))
    if not CATALOGUE.get("eagle3-glm-moe-dsa").covers(venv.version):  # type: ignore[union-attr]
        # a release without GLM-5 (before 0.16.0): the patch is not needed and pulls in nothing
        proc = run_cli(*py, "apply", "eagle3-glm-moe-dsa")
        try:
            assert proc.returncode == 0 and "also applying" not in proc.stderr, proc.stderr
            assert "eagle3-glm-moe-dsa: not needed on vLLM" in proc.stdout, proc.stdout
        finally:
            run_cli(*py, "revert", check=True)
        return
    try:
        proc = run_cli(*py, "apply", "eagle3-glm-moe-dsa")
        assert proc.returncode == 0, proc.stderr
        assert "also applying supports-eagle3: eagle3-glm-moe-dsa needs it" in proc.stderr
        out = run_cli(*py, "--json", "status", check=True).stdout
        states = {p["name"]: p["state"] for p in json.loads(out)["patches"]}
        assert states["eagle3-glm-moe-dsa"] == states["supports-eagle3"] == "applied"
        assert run_cli(*py, "verify").returncode == 0
    finally:
        run_cli(*py, "revert", check=True)
