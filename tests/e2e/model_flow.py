"""The model-first flow on a real vLLM venv, through the real command line: ``apply --model``
(or ``apply NAME...``) applies exactly what one target's family needs, then a bare ``verify`` and
``status --check`` judge that choice and pass, and ``revert`` brings every file back to its RECORD
hash. Shared by the 0.15.1 tests (tests/e2e/test_model_first.py) and the 0.17.1 ones
(tests/e2e/test_real_releases.py)."""

from __future__ import annotations

import json
from pathlib import Path

from ..conftest import run_cli, touched_match_record, venv_site
from ..models.model_files import deepseek_target, kimi_target, write_json

# what each family needs before 0.18.0 (the releases these venvs hold), written out by hand
NEEDS = {
    "kimi": {"eagle3-whitelist", "supports-eagle3", "kimi-k25-image-token"},
    "deepseek": {"eagle3-whitelist", "supports-eagle3"},
    "granite": {"eagle3-granite"},
}
# the names a user types for ``apply NAME...`` (what the family needs, as the docs list it)
NAMES = {
    "kimi": ("kimi-k25-image-token", "eagle3-whitelist", "supports-eagle3"),
    "deepseek": ("eagle3-whitelist", "supports-eagle3"),
    "granite": ("eagle3-granite",),
}


def granite_target(root: Path) -> Path:
    config = {
        "architectures": ["GraniteForCausalLM"],
        "model_type": "granite",
        "hidden_size": 4096,
        "num_hidden_layers": 40,
        "vocab_size": 49159,
    }
    return write_json(root / "granite-8b" / "config.json", config).parent


def target(family: str, root: Path) -> Path:
    return {"kimi": kimi_target, "deepseek": deepseek_target, "granite": granite_target}[family](
        root
    )


def applied(python: Path) -> set[str]:
    out = run_cli("--python", str(python), "--json", "status", check=True).stdout
    return {p["name"] for p in json.loads(out)["patches"] if p["state"] == "applied"}


def judged_and_reverted(python: Path, expected: set[str]) -> None:
    """After an apply of ``expected``: exactly those applied, a bare verify and status --check
    green on that choice, then revert RECORD-identical."""
    py = ("--python", str(python))
    assert applied(python) == expected
    verify = run_cli(*py, "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert verify.stdout.splitlines()[-1] == "verify: OK"
    assert "judging the patches chosen at apply" in verify.stderr
    check = run_cli(*py, "status", "--check")
    assert check.returncode == 0, check.stdout
    what = "patch" if len(expected) == 1 else "patches"
    assert check.stdout.splitlines()[-1].startswith(
        f"check: OK: {len(expected)} chosen {what} applied"
    ), check.stdout
    revert = run_cli(*py, "revert")
    assert revert.returncode == 0, revert.stderr
    assert all(touched_match_record(venv_site(python)).values())
    assert not (venv_site(python) / ".vllm-patcher" / "chosen.json").exists()


def model_first_round_trip(python: Path, family: str, root: Path, has_kimi: bool = True) -> None:
    """``apply --model`` of the family's target, then ``apply NAME...`` of its patches
    (``has_kimi``: the release ships kimi_k25.py, so Kimi-K2.5's image token applies)."""
    model = target(family, root)
    expected = NEEDS[family] - (set() if has_kimi else {"kimi-k25-image-token"})
    py = ("--python", str(python))
    try:
        proc = run_cli(*py, "apply", "--model", str(model))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "target's patches: " in proc.stderr
        judged_and_reverted(python, expected)
        proc = run_cli(*py, "apply", *NAMES[family])
        assert proc.returncode == 0, proc.stdout + proc.stderr
        judged_and_reverted(python, expected)
    finally:  # a failure above leaves the shared venv as the next test expects it
        run_cli(*py, "revert")
