"""Hugging Face repo ids for --model and --drafter, resolved from the local cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import vllm_patcher

from ..conftest import assert_refused, run_cli, snapshot, test_venv_python
from .model_files import LAYERS, drafter_weights, kimi_target, ready_kimi_pair, specforge_drafter

# --- Hugging Face repo ids, from the local cache ------------------------------------------------


class StandInHub:
    """A local stand-in for the Hugging Face Hub, serving the requests hf_hub_download makes:
    ``HEAD`` and ``GET {endpoint}/{repo}/resolve/{revision}/{file}``, answered with the headers it
    reads (``X-Repo-Commit``, ``ETag``, ``Content-Length``). Every request is logged."""

    def __init__(self, repos: dict[str, dict[str, bytes]]) -> None:
        import hashlib
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.requests: list[str] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def answer(self, body: bool) -> None:
                hub.requests.append(f"{self.command} {self.path}")
                parts = self.path.split("?")[0].strip("/").split("/")
                if len(parts) >= 5 and parts[2] == "resolve":
                    repo, name = "/".join(parts[:2]), "/".join(parts[4:])
                    data = repos.get(repo, {}).get(name)
                    if data is not None:
                        self.send_response(200)
                        commit = hashlib.sha1(repo.encode()).hexdigest()
                        self.send_header("X-Repo-Commit", commit)
                        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        if body:
                            self.wfile.write(data)
                        return
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_HEAD(self) -> None:  # noqa: N802 (http.server's naming)
                self.answer(body=False)

            def do_GET(self) -> None:  # noqa: N802
                self.answer(body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def hub_download(hf_home: Path, endpoint: str, repo: str, *files: str) -> None:
    """Put ``files`` of ``repo`` into the cache at ``hf_home`` with huggingface_hub's own
    hf_hub_download (this interpreter's), from the stand-in endpoint."""
    script = (
        "import sys\nfrom huggingface_hub import hf_hub_download\n"
        "for name in sys.argv[2:]:\n    hf_hub_download(sys.argv[1], name)\n"
    )
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_ENDPOINT": endpoint}
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("HF_HUB_CACHE", None)
    subprocess.run([sys.executable, "-c", script, repo, *files], env=env, check=True, timeout=300)


def hub_files(config_path: Path, weights: Path | None = None) -> dict[str, bytes]:
    files = {"config.json": config_path.read_bytes()}
    if weights is not None:
        files["model.safetensors"] = weights.read_bytes()
    return files


@pytest.fixture
def hf_cache(tmp_path: Path) -> Iterator[tuple[Path, StandInHub, dict[str, str]]]:
    """A Hugging Face cache (HF_HOME) holding moonshotai/Kimi-K2.5's config.json and a drafter's
    config and weights, put there by huggingface_hub's own downloads from a local stand-in hub.

    No test may reach the real Hugging Face Hub; the stand-in answers the same requests, so the
    cache layout is huggingface_hub's own, not one written by hand.
    """
    source = tmp_path / "source"
    target, drafter = ready_kimi_pair(source)
    hub = StandInHub(
        {
            "moonshotai/Kimi-K2.5": hub_files(target / "config.json"),
            "lab/Kimi-K2.5-eagle3": hub_files(
                drafter / "config.json", drafter / "model.safetensors"
            ),
        }
    )
    hf_home = tmp_path / "hf-home"
    hub_download(hf_home, hub.endpoint, "moonshotai/Kimi-K2.5", "config.json")
    hub_download(hf_home, hub.endpoint, "lab/Kimi-K2.5-eagle3", "config.json", "model.safetensors")
    hub.requests.clear()
    # the endpoint stays set and reachable: a request from doctor would show in hub.requests
    env = {"HF_HOME": str(hf_home), "HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": ""}
    try:
        yield hf_home, hub, env
    finally:
        hub.close()


def test_repo_ids_resolve_from_the_local_cache_offline(
    hf_cache: tuple[Path, StandInHub, dict[str, str]], tmp_path: Path
) -> None:
    """doctor and serve-args find both repo ids in the cache the stand-in hub filled, through
    huggingface_hub, without a single request to the hub."""
    hf_home, hub, env = hf_cache
    args = ("--model", "moonshotai/Kimi-K2.5", "--drafter", "lab/Kimi-K2.5-eagle3")
    proc = run_cli("--json", "doctor", *args, "--vllm-version", "0.15.1", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    snapshots = hf_home / "hub" / "models--moonshotai--Kimi-K2.5" / "snapshots"
    assert data["target"]["source"]["repo_id"] == "moonshotai/Kimi-K2.5"
    assert Path(data["target"]["path"]).parent == snapshots
    assert data["target"]["num_layers"] == LAYERS and data["target"]["model_type"] == "kimi_k25"
    assert data["drafter"]["source"]["repo_id"] == "lab/Kimi-K2.5-eagle3"
    assert data["drafter"]["weight_files"] == ["model.safetensors"]
    assert data["drafter"]["tensors"] == len(drafter_weights())
    assert data["aux_layers"]["source"] == "top-level"

    # serve-args hands vLLM the repo id, which vllm serve resolves the same way
    proc = run_cli("serve-args", *args, "--vllm-version", "0.15.1", env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        '{"method": "eagle3", "model": "lab/Kimi-K2.5-eagle3", "num_speculative_tokens": 3}\n'
    )
    # through another interpreter's huggingface_hub (--python), the same answer
    proc = run_cli("--python", sys.executable, "doctor", *args, "--vllm-version", "0.15.1", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"target moonshotai/Kimi-K2.5 ({snapshots}/" in proc.stdout
    assert hub.requests == []

    # HF_HUB_CACHE, as huggingface_hub reads it, wins over HF_HOME: an empty one has nothing
    proc = run_cli(
        "doctor", *args, "--vllm-version", "0.15.1",
        env={**env, "HF_HUB_CACHE": str(tmp_path / "empty-cache")},
    )  # fmt: skip
    assert_refused(proc, 11, f"not in the local cache {tmp_path / 'empty-cache'}")


def test_a_repo_id_not_in_the_cache_says_how_to_download_it(
    hf_cache: tuple[Path, StandInHub, dict[str, str]],
) -> None:
    hf_home, hub, env = hf_cache
    proc = run_cli(
        "doctor", "--model", "moonshotai/Kimi-K2-Instruct", "--drafter", "lab/Kimi-K2.5-eagle3",
        "--vllm-version", "0.15.1", env=env,
    )  # fmt: skip
    assert_refused(
        proc,
        11,
        "model moonshotai/Kimi-K2-Instruct is not a directory, and the Hugging Face repo "
        f"moonshotai/Kimi-K2-Instruct is not in the local cache {hf_home / 'hub'}",
        "download it with: hf download moonshotai/Kimi-K2-Instruct --include config.json",
    )
    proc = run_cli(
        "serve-args", "--model", "moonshotai/Kimi-K2.5", "--drafter", "lab/other-eagle3",
        "--vllm-version", "0.15.1", env=env,
    )  # fmt: skip
    assert_refused(proc, 11, "download it with: hf download lab/other-eagle3")
    assert proc.stdout == ""
    assert hub.requests == []  # offline: not even a look at the (reachable) hub


def test_an_existing_directory_wins_over_a_repo_id(
    hf_cache: tuple[Path, StandInHub, dict[str, str]], tmp_path: Path
) -> None:
    # a relative directory named like a repo id is the directory, as for vLLM and transformers
    work = tmp_path / "work"
    target, drafter = ready_kimi_pair(work / "moonshotai")
    _, hub, env = hf_cache
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_patcher", "--json", "doctor",
         "--model", "moonshotai/Kimi-K2.5", "--drafter", "moonshotai/drafter",
         "--vllm-version", "0.15.1"],
        capture_output=True, text=True, cwd=work, check=False, timeout=300,
        env={**os.environ, **env, "PYTHONPATH": str(Path(vllm_patcher.__file__).parent.parent)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["target"]["source"] == {
        "given": "moonshotai/Kimi-K2.5",
        "path": "moonshotai/Kimi-K2.5",
        "repo_id": None,
    }
    assert (work / data["drafter"]["path"]).resolve() == drafter.resolve()
    assert target.is_dir() and hub.requests == []


def test_a_path_that_is_not_a_repo_id_is_still_a_missing_directory(tmp_path: Path) -> None:
    proc = run_cli(
        "doctor", "--model", "./no/such/dir", "--drafter", str(specforge_drafter(tmp_path)),
        "--vllm-version", "0.15.1",
    )  # fmt: skip
    assert_refused(proc, 11, "model directory no/such/dir does not exist")


def test_a_repo_id_resolves_through_the_vllm_venvs_own_huggingface_hub(
    hf_cache: tuple[Path, StandInHub, dict[str, str]],
) -> None:
    """The real vLLM 0.15.1 venv, only read (its release, its huggingface_hub): what
    ``vllm-patcher --python VENV doctor`` does on a serving host, with no --vllm-version."""
    python = test_venv_python()
    hf_home, hub, env = hf_cache
    proc = run_cli(
        "--python", str(python), "--json", "doctor",
        "--model", "moonshotai/Kimi-K2.5", "--drafter", "lab/Kimi-K2.5-eagle3", env=env,
    )  # fmt: skip
    # the venv is pristine (never written here): its missing patches are the one problem, and
    # the fix names the repo id as given
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    (problem,) = [f for f in data["findings"] if f["level"] == "problem"]
    assert problem["check"] == "venv" and "eagle3-whitelist pending" in problem["message"]
    assert problem["fix"].endswith("apply --model moonshotai/Kimi-K2.5")
    assert data["vllm_version"] == "0.15.1"
    assert data["target"]["source"]["repo_id"] == "moonshotai/Kimi-K2.5"
    assert data["target"]["path"].startswith(str(hf_home / "hub" / "models--moonshotai--Kimi-K2.5"))
    assert hub.requests == []


def test_fix_never_edits_a_hugging_face_cache_entry(tmp_path: Path) -> None:
    """--fix on a drafter that is a cached repo id: refused with the way out, the cache unchanged
    (its config.json is huggingface_hub's link into the blob store)."""
    source = tmp_path / "source"
    target = kimi_target(source)
    drafter = specforge_drafter(source, nested=[2, 30, 58], weights=drafter_weights())
    hub = StandInHub(
        {
            "moonshotai/Kimi-K2.5": hub_files(target / "config.json"),
            "lab/needs-fix-eagle3": hub_files(
                drafter / "config.json", drafter / "model.safetensors"
            ),
        }
    )
    hf_home = tmp_path / "hf-home"
    try:
        hub_download(hf_home, hub.endpoint, "moonshotai/Kimi-K2.5", "config.json")
        hub_download(
            hf_home, hub.endpoint, "lab/needs-fix-eagle3", "config.json", "model.safetensors"
        )
        env = {"HF_HOME": str(hf_home), "HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": ""}
        args = ("--model", "moonshotai/Kimi-K2.5", "--drafter", "lab/needs-fix-eagle3")
        before = snapshot(hf_home)
        # without --fix, doctor names what --fix would write (there is something to fix)
        proc = run_cli("doctor", *args, "--vllm-version", "0.15.1", env=env)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        proc = run_cli("doctor", *args, "--vllm-version", "0.15.1", "--fix", env=env)
        assert_refused(
            proc, 2, "lab/needs-fix-eagle3 is a Hugging Face cache entry",
            "hf download lab/needs-fix-eagle3 --local-dir DIR",
        )  # fmt: skip
        assert snapshot(hf_home) == before
    finally:
        hub.close()
