"""The README's promises a new user types first: its first code block (patch the venv you already
have) and the Dockerfile recipe (docs/deployment.md), run as written; every test the README and
docs/ cite exists; and every link between them lands on a file and heading that exist.

Only what cannot exist here is moved: the placeholders `/path/to/vllm-patcher` (a copy of this
checkout's committed files) and `/path/to/your-venv` (a hard-linked copy of the real vLLM 0.15.1
venv, so the shared one is never written), `~` (a fresh HOME), and the Dockerfile's `/opt` and
`/tmp` (folders under the test's own). Both install the tool with pip, so they need the package
index (click, libcst, ... are fetched like a user's install fetches them).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from ..conftest import (
    REPO,
    _make_pristine,
    checkout_copy,
    make_venv,
    touched_match_record,
    venv_site,
)
from ..models.model_files import ready_kimi_pair

README = (REPO / "README.md").read_text(encoding="utf-8")
# what a Kimi-K2.5 target needs on 0.15.1: the allow-list, DeepSeek's and Kimi-K2.5's
# SupportsEagle3, and the EAGLE proposer's image token
KIMI_FILES = {
    "vllm/config/speculative.py",
    "vllm/model_executor/models/deepseek_v2.py",
    "vllm/model_executor/models/kimi_k25.py",
    "vllm/v1/spec_decode/eagle.py",
}
DEPLOYMENT = (REPO / "docs" / "deployment.md").read_text(encoding="utf-8")  # the Dockerfile recipe
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def code_blocks(language: str, text: str = README) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.M | re.S)


def clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_PATCHER_", "PIP_"))}
    env.pop("VIRTUAL_ENV", None)
    env.update(HOME=str(home), PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def run_bash(script: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=1500,
        check=False,
    )


def test_the_first_code_block_patches_an_existing_venv_and_verifies_it(
    vllm_python: Path, tmp_path: Path
) -> None:
    block = code_blocks("bash")[0]
    assert "/path/to/your-venv apply --model /path/to/your-model" in block, block
    assert "verify" in block and "doctor --model" in block, block
    _make_pristine(vllm_python)  # the copy starts as pip left it, whatever ran before
    venv = tmp_path / "your-venv"
    subprocess.run(["cp", "-al", str(vllm_python.parent.parent), str(venv)], check=True)
    # the one file the tool writes in place: the copy gets a lock of its own, not the shared inode
    (venv_site(venv / "bin" / "python") / ".vllm-patcher" / "lock").unlink(missing_ok=True)
    repo = checkout_copy(tmp_path / "vllm-patcher")
    model, drafter = ready_kimi_pair(tmp_path / "models")
    script = (
        block.replace("/path/to/vllm-patcher", str(repo))
        .replace("/path/to/your-venv", str(venv))
        .replace("/path/to/your-model", str(model))
        .replace("/path/to/your-drafter", str(drafter))
    )
    home = tmp_path / "home"
    home.mkdir()
    try:
        proc = run_bash(script, clean_env(home), tmp_path)
        assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
        assert (home / ".vllm-patcher" / "bin" / "vllm-patcher").exists()  # `~` was the new HOME
        assert "verify: OK" in proc.stdout, proc.stdout
        assert "doctor: 0 problems" in proc.stdout, proc.stdout
        site = venv_site(venv / "bin" / "python")
        patched = {rel for rel, same in touched_match_record(site).items() if not same}
        assert patched == KIMI_FILES  # the Kimi-K2.5 target's patches, nothing else
        # the shared venv the copy was linked from still holds the installer's bytes
        assert all(touched_match_record(venv_site(vllm_python)).values())
    finally:
        _make_pristine(vllm_python)


def _image_python(root: Path) -> Path:
    """What an image's python3 with vLLM looks like to the tool: a venv holding the real 0.15.1
    files (the tool never imports vLLM; find_spec needs the package's __init__)."""
    make_venv(root, vllm=True)
    (venv_site(root / "bin" / "python") / "vllm" / "__init__.py").touch()
    return root / "bin"


def test_the_dockerfile_recipe_builds_the_wheel_and_patches_the_image_vllm(tmp_path: Path) -> None:
    build, dockerfile = (
        code_blocks("bash", DEPLOYMENT)[-1],
        code_blocks("dockerfile", DEPLOYMENT)[0],
    )
    assert "pip wheel" in build, build
    image_bin = _image_python(tmp_path / "image-python")
    context = tmp_path / "context"
    context.mkdir()
    repo = checkout_copy(tmp_path / "vllm-patcher")
    env = clean_env(tmp_path / "home")
    proc = run_bash(build.replace("/path/to/vllm-patcher", str(repo)), env, context)
    assert proc.returncode == 0, proc.stderr[-3000:]
    env["PATH"] = f"{image_bin}{os.pathsep}{env['PATH']}"  # inside the image, python3 is its own
    # COPY, then the RUN lines, with the image's /opt and /tmp moved under tmp_path
    copy_line, run = dockerfile.split("\nRUN ", 1)
    source, dest = copy_line.splitlines()[-1].split()[1:]
    assert source == "dist/vllm_patcher-*.whl" and dest == "/tmp/"
    image_tmp = tmp_path / "image-tmp"
    image_tmp.mkdir()
    (wheel,) = (context / "dist").glob("vllm_patcher-*.whl")
    shutil.copy2(wheel, image_tmp / wheel.name)
    script = run.replace("/tmp/", f"{image_tmp}/").replace("/opt/", f"{tmp_path}/opt/")
    proc = run_bash(script, env, context)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    site = venv_site(image_bin / "python")
    matches = touched_match_record(site)
    assert matches and not any(matches.values()), matches  # patched, every file
    assert (site / ".vllm-patcher" / "state.json").exists()


def test_every_test_and_test_path_the_readme_or_a_docs_page_cites_exists() -> None:
    """The Guarantees table (docs/guarantees.md) names the test that proves each row: a moved or
    renamed test must take its citation with it."""
    tests = REPO / "tests"
    source = "\n".join(p.read_text(encoding="utf-8") for p in tests.rglob("*.py"))
    text = "\n".join(p.read_text(encoding="utf-8") for p in PAGES)
    names = set(re.findall(r"`(test_[a-z0-9_]+)`", text))
    paths = set(re.findall(r"`(tests/[^`\s]+)`", text))
    assert names and paths
    assert not [n for n in sorted(names) if not re.search(rf"^(async )?def {n}\(", source, re.M)]
    assert not [p for p in sorted(paths) if not (REPO / p).exists()]


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lowercase, punctuation dropped, spaces to '-', repeats -1, -2."""
    anchors: set[str] = set()
    counts: dict[str, int] = {}
    for line in re.sub(r"^```.*?^```", "", text, flags=re.M | re.S).splitlines():
        if heading := re.match(r"#{1,6} (.*)", line):
            slug = re.sub(r"[^\w\- ]", "", heading[1].strip().lower()).replace(" ", "-")
            seen = counts.get(slug, 0)
            counts[slug] = seen + 1
            anchors.add(f"{slug}-{seen}" if seen else slug)
    return anchors


def test_every_link_in_the_readme_and_docs_lands_on_a_file_and_heading() -> None:
    """The reference moved from the README into docs/, one page per capability: a link left
    pointing at a section that moved, or at a heading renamed since, is found here."""
    broken = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto: not checked offline
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and anchor not in _anchors(dest.read_text(encoding="utf-8")):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
