"""Fetching only what is needed: range requests on the real PyPI wheel, a local index stand-in
that does or does not answer ranges, RECORD checks, the index configuration, and ``--wheel FILE``
through the real command line. Wheels here are small but real: the pristine release files, with
the release's own METADATA and RECORD."""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from packaging.version import Version

from vllm_patcher import events
from vllm_patcher.catalogue.writer import write_pin
from vllm_patcher.errors import FetchError
from vllm_patcher.wheels import fetch, index, sources

from ..conftest import CATALOGUE, REPO, assert_refused, run_cli, scratch_tree, snapshot

SPEC = "vllm/config/speculative.py"
INDEX_VARS = (
    "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "UV_INDEX_URL", "UV_DEFAULT_INDEX",
)  # fmt: skip
DEAD_INDEX = "http://127.0.0.1:9/simple"  # nothing listens there: any network use fails


@functools.cache
def _pristine(version: str) -> Path:
    """The shared cache's pristine tree of ``version`` (read only), fetched on first use."""
    return sources.fetch_release(version, CATALOGUE.all_paths())


def build_wheel(
    folder: Path,
    version: str = "0.15.1",
    *,
    tamper: str | None = None,
    metadata_version: str | None = None,
    pad: int = 0,
) -> Path:
    """A vLLM wheel of the pristine files of ``version`` with its real METADATA and RECORD.
    ``tamper``: that member's bytes change after RECORD; ``pad``: large incompressible members
    before and after the sources (stand-ins for the compiled extensions a range fetch must skip;
    the one after keeps the sources out of the first request's tail)."""
    tree = _pristine(version)
    dist = f"vllm-{version}.dist-info"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"vllm-{version}-cp38-abi3-manylinux_2_31_x86_64.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        if pad:
            blob = random.Random(0).getrandbits(8 * pad).to_bytes(pad, "little")
            zf.writestr("vllm/_C.abi3.so", blob, compress_type=zipfile.ZIP_STORED)
        for rel in sorted(r for r in CATALOGUE.all_paths() if (tree / r).is_file()):
            data = (tree / rel).read_bytes()
            zf.writestr(rel, data + b"# tampered\n" if rel == tamper else data)
        if pad:
            blob = (
                random.Random(1)
                .getrandbits(8 * 2 * fetch.TAIL_BYTES)
                .to_bytes(2 * fetch.TAIL_BYTES, "little")
            )
            zf.writestr("vllm/_moe_C.abi3.so", blob, compress_type=zipfile.ZIP_STORED)
        meta = (tree / dist / "METADATA").read_text()
        if metadata_version:
            meta = meta.replace(f"Version: {version}\n", f"Version: {metadata_version}\n", 1)
        zf.writestr(f"{dist}/METADATA", meta)
        zf.writestr(f"{dist}/RECORD", (tree / dist / "RECORD").read_bytes())
    return path


class IndexStandIn(ThreadingHTTPServer):
    """A package index serving one wheel: a simple page (PEP 691 JSON or PEP 503 HTML) and the
    file, with or without range support. ``log`` keeps (path, status) of every request."""

    def __init__(self, wheel: Path, *, ranges: bool, html: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.wheel = wheel.read_bytes()
        self.filename = wheel.name
        self.ranges = ranges
        self.html = html
        self.log: list[tuple[str, int]] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: IndexStandIn

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.server.log.append((self.path, status))
        self.send_response(status)
        for key, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        s = self.server
        sha = hashlib.sha256(s.wheel).hexdigest()
        older = "vllm-0.15.0-cp38-abi3-manylinux_2_31_x86_64.whl"  # listed, never served
        if self.path == "/simple/vllm/":
            if s.html:
                body = (
                    f'<html><body><a href="/files/{older}">{older}</a>\n'
                    f'<a href="../../files/{s.filename}#sha256={sha}">{s.filename}</a>'
                    "</body></html>"
                ).encode()
                self._send(200, body, {"Content-Type": "text/html"})
                return
            files = [
                {"filename": older, "url": f"/files/{older}", "hashes": {}},
                {"filename": s.filename, "url": f"/files/{s.filename}", "hashes": {"sha256": sha}},
            ]
            body = json.dumps({"meta": {"api-version": "1.0"}, "name": "vllm", "files": files})
            self._send(200, body.encode(), {"Content-Type": index.JSON_ACCEPT})
            return
        if self.path != f"/files/{s.filename}":
            self._send(404, b"not found", {})
            return
        asked = self.headers.get("Range")
        if not s.ranges or not asked:
            self._send(200, s.wheel, {})
            return
        first, _, last = asked.removeprefix("bytes=").partition("-")
        size = len(s.wheel)
        if not first:
            start, end = max(0, size - int(last)), size - 1
        else:
            start, end = int(first), min(int(last) if last else size - 1, size - 1)
        headers = {"Content-Range": f"bytes {start}-{end}/{size}", "Accept-Ranges": "bytes"}
        self._send(206, s.wheel[start : end + 1], headers)


@pytest.fixture
def serve() -> Iterator[object]:
    servers: list[IndexStandIn] = []

    def start(wheel: Path, *, ranges: bool = True, html: bool = False) -> IndexStandIn:
        server = IndexStandIn(wheel, ranges=ranges, html=html)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def index_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No index configuration from this machine: each test says where the index is."""
    for name in INDEX_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    return monkeypatch


def _members(tree: Path) -> dict[str, bytes]:
    return {k: v for k, v in snapshot(tree).items() if k != ".complete"}


# --- the real package index ------------------------------------------------------------------------


def test_range_fetch_from_pypi_is_byte_identical_and_under_2_mb(
    tmp_path: Path, index_env: pytest.MonkeyPatch
) -> None:
    index_env.setenv("PIP_INDEX_URL", "https://pypi.org/simple")
    wanted = sorted((_pristine("0.15.1") / ".complete").read_text().split()[1:])
    stats = fetch.FetchStats()
    said: list[events.FetchEvent] = []
    tree = sources.fetch_release("0.15.1", wanted, cache=tmp_path, stats=stats, say=said.append)
    assert tree == sources.release_tree("0.15.1", tmp_path)
    assert _members(tree) == _members(_pristine("0.15.1"))  # every file and RECORD, METADATA
    assert stats.method == "range" and stats.url.startswith("https://files.pythonhosted.org/")
    assert "x86_64" in stats.url or "aarch64" not in stats.url
    assert 0 < stats.bytes < 2_000_000, stats
    assert stats.requests <= stats.members + 3, stats  # about one range per member, no more
    # both lines count the asked-for files the wheel has (the list may name files of other
    # releases, which 0.15.1 lacks), whatever list an earlier run left in the shared cache
    present = [m for m in wanted if (_pristine("0.15.1") / m).is_file()]
    assert len(present) > 0 and stats.members == len(present), (present, stats)
    fetching = [e for e in said if isinstance(e, events.Fetching)]
    fetched = [e for e in said if isinstance(e, events.Fetched)]
    assert len(fetching) == len(fetched) == 1, said
    assert fetching[0].files == fetched[0].files == len(present), said
    assert fetched[0].method == "range" and fetched[0].bytes == stats.bytes
    assert not (tmp_path / "wheels").exists()  # no wheel was downloaded


def test_the_index_lists_vllm_releases(index_env: pytest.MonkeyPatch) -> None:
    index_env.setenv("PIP_INDEX_URL", "https://pypi.org/simple")
    versions = sources.available_versions()
    assert {"0.11.0", "0.15.1", "0.17.1"} <= set(versions)
    assert versions == sorted(versions, key=Version)
    assert Version(sources.latest_version()) >= Version("0.20.0")


# --- a local index stand-in ----------------------------------------------------------------------


@pytest.mark.parametrize("html", [False, True], ids=["pep691-json", "pep503-html"])
def test_a_range_capable_server_is_read_by_ranges(
    tmp_path: Path, index_env: pytest.MonkeyPatch, serve, html: bool
) -> None:  # type: ignore[no-untyped-def]
    wheel = build_wheel(tmp_path / "dist", pad=4_000_000)
    server = serve(wheel, ranges=True, html=html)
    index_env.setenv("PIP_INDEX_URL", f"{server.url}/simple")
    stats = fetch.FetchStats()
    said: list[events.FetchEvent] = []
    cache = tmp_path / "cache"
    tree = sources.fetch_release("0.15.1", [SPEC], cache=cache, stats=stats, say=said.append)
    assert (tree / SPEC).read_bytes() == (_pristine("0.15.1") / SPEC).read_bytes()
    assert stats.method == "range"
    assert stats.bytes < wheel.stat().st_size / 4, stats  # the 4 MB member was never read
    ranges = [status for path, status in server.log if path.startswith("/files/")]
    assert len(ranges) >= 2 and set(ranges) == {206}, server.log  # the tail, then the member
    assert [type(e) for e in said] == [events.LookingUp, events.Fetching, events.Fetched], said
    # a tree made for fewer files is fetched again for the missing ones, by ranges too
    again = sources.fetch_release("0.15.1", [SPEC, "vllm/v1/spec_decode/eagle.py"], cache=cache)
    assert again == tree and (tree / "vllm/v1/spec_decode/eagle.py").is_file()
    assert (tree / ".complete").read_text().split()[1:] == [SPEC, "vllm/v1/spec_decode/eagle.py"]


def test_a_server_without_ranges_gets_one_whole_download(
    tmp_path: Path, index_env: pytest.MonkeyPatch, serve
) -> None:  # type: ignore[no-untyped-def]
    wheel = build_wheel(tmp_path / "dist")
    server = serve(wheel, ranges=False)
    index_env.setenv("PIP_INDEX_URL", f"{server.url}/simple")
    stats = fetch.FetchStats()
    said: list[events.FetchEvent] = []
    cache = tmp_path / "cache"
    tree = sources.fetch_release(
        "0.15.1", CATALOGUE.all_paths(), cache=cache, stats=stats, say=said.append
    )
    assert _members(tree) == {
        k: v for k, v in _members(_pristine("0.15.1")).items() if k in _members(tree)
    }
    shipped = {r for r in CATALOGUE.all_paths() if (_pristine("0.15.1") / r).is_file()}
    assert shipped and shipped <= set(_members(tree))  # 0.15.1 has no mimo_v2.py (0.21.0 on)
    assert stats.method == "full" and stats.bytes >= wheel.stat().st_size
    assert [type(e) for e in said] == [events.LookingUp, events.NoRanges, events.Fetched], said
    assert not list((cache / "wheels").iterdir())  # the whole wheel is not kept


@pytest.mark.parametrize("ranges", [True, False], ids=["ranges", "whole"])
def test_a_member_that_does_not_match_record_is_refused_and_nothing_is_cached(
    tmp_path: Path, index_env: pytest.MonkeyPatch, serve, ranges: bool
) -> None:  # type: ignore[no-untyped-def]
    server = serve(build_wheel(tmp_path / "dist", tamper=SPEC), ranges=ranges)
    index_env.setenv("PIP_INDEX_URL", f"{server.url}/simple")
    cache = tmp_path / "cache"
    with pytest.raises(FetchError, match="does not match the wheel's RECORD"):
        sources.fetch_release("0.15.1", [SPEC], cache=cache)
    left = sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*") if p.is_file())
    assert left == ["src/.lock-0.15.1"], left  # no tree, no staging folder, no wheel


def test_a_wheel_whose_metadata_names_another_version_is_refused(
    tmp_path: Path, index_env: pytest.MonkeyPatch, serve
) -> None:  # type: ignore[no-untyped-def]
    server = serve(build_wheel(tmp_path / "dist", metadata_version="0.15.2"))
    index_env.setenv("PIP_INDEX_URL", f"{server.url}/simple")
    with pytest.raises(FetchError, match="holds vLLM 0.15.2, not 0.15.1"):
        sources.fetch_release("0.15.1", [SPEC], cache=tmp_path / "cache")
    assert not sources.release_tree("0.15.1", tmp_path / "cache").exists()


def test_a_release_the_index_lacks_is_a_fetch_error(
    tmp_path: Path, index_env: pytest.MonkeyPatch, serve
) -> None:  # type: ignore[no-untyped-def]
    server = serve(build_wheel(tmp_path / "dist"))
    index_env.setenv("PIP_INDEX_URL", f"{server.url}/simple")
    with pytest.raises(FetchError, match=r"no wheel of vllm==0\.16\.0 on 127\.0\.0\.1"):
        sources.fetch_release("0.16.0", [SPEC], cache=tmp_path / "cache")
    assert index.available_versions() == ["0.15.0", "0.15.1"]


# --- which index -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "how", ["PIP_INDEX_URL", "pip.conf", "UV_INDEX_URL", "UV_DEFAULT_INDEX", "extra-after-dead"]
)
def test_the_configured_index_is_the_one_asked(
    tmp_path: Path, index_env: pytest.MonkeyPatch, serve, how: str
) -> None:  # type: ignore[no-untyped-def]
    server = serve(build_wheel(tmp_path / "dist"))
    url = f"{server.url}/simple"
    if how == "pip.conf":
        conf = tmp_path / "pip.conf"
        conf.write_text(f"[global]\nindex-url = {DEAD_INDEX}\n[download]\nindex-url = {url}\n")
        index_env.setenv("PIP_CONFIG_FILE", str(conf))
    elif how == "extra-after-dead":  # like pip, an index that does not answer is passed over
        index_env.setenv("PIP_INDEX_URL", DEAD_INDEX)
        index_env.setenv("PIP_EXTRA_INDEX_URL", url)
    else:
        index_env.setenv(how, url)
    tree = sources.fetch_release("0.15.1", [SPEC], cache=tmp_path / "cache")
    assert (tree / SPEC).read_bytes() == (_pristine("0.15.1") / SPEC).read_bytes()
    assert ("/simple/vllm/", 200) in server.log


def test_index_precedence_and_trust_settings(tmp_path: Path) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text(
        "[global]\nindex-url = https://conf.example/simple\n"
        "extra-index-url = https://extra.example/simple\n  https://more.example/simple\n"
        "cert = /conf/ca.pem\ntrusted-host = mirror.example\n"
    )
    base = {"PIP_CONFIG_FILE": str(conf), "HOME": str(tmp_path)}
    c = index.index_config(base)
    assert c.indexes == (
        "https://conf.example/simple",
        "https://extra.example/simple",
        "https://more.example/simple",
    )
    assert c.cert == "/conf/ca.pem"
    assert c.verify_for("https://mirror.example/x.whl") is False
    assert c.verify_for("https://files.example/x.whl") == "/conf/ca.pem"
    uv = {**base, "UV_INDEX_URL": "https://uv-old.example/simple"}
    assert index.index_config(uv).indexes[0] == "https://uv-old.example/simple"
    uv["UV_DEFAULT_INDEX"] = "https://uv.example/simple"
    assert index.index_config(uv).primary_from == "UV_DEFAULT_INDEX"
    both = {**uv, "PIP_INDEX_URL": "https://pip.example/simple", "PIP_CERT": "/env/ca.pem"}
    c = index.index_config(both)
    assert c.indexes[0] == "https://pip.example/simple" and c.cert == "/env/ca.pem"
    assert index.index_config({"PIP_CONFIG_FILE": os.devnull}).indexes == (index.PYPI_SIMPLE,)


# --- --wheel FILE through the command line -----------------------------------------------------


def _offline(tmp_path: Path) -> dict[str, str]:
    """A fresh cache and an index nothing answers: a given wheel must be all that is read."""
    return {
        "VLLM_PATCHER_CACHE": str(tmp_path / "cache"),
        "PIP_INDEX_URL": DEAD_INDEX,
        "PIP_CONFIG_FILE": os.devnull,
        "UV_INDEX_URL": DEAD_INDEX,
    }


def test_pin_from_a_wheel_writes_the_committed_pins_without_the_network(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "dist")
    out = tmp_path / "out"
    proc = run_cli("pin", "--wheel", str(wheel), "--out", str(out), env=_offline(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "vllm 0.15.1: written" in proc.stdout
    written = {p.relative_to(out) for p in out.rglob("*") if p.is_file()}
    assert written and all(p.parts[1] == "vllm-0.15.1" for p in written)
    for rel in written:
        assert (out / rel).read_bytes() == (REPO / "patches" / rel).read_bytes(), rel
    committed = {
        p.relative_to(REPO / "patches")
        for p in (REPO / "patches").glob("*/vllm-0.15.1/*")
        if (REPO / "patches" / p.parent.parent.name / "patch.toml").is_file()
    }
    coded = {p.name for p in CATALOGUE.patches if p.transforms}
    assert written == {p for p in committed if p.parts[0] in coded}


def test_pin_refuses_bad_wheels_and_no_release(tmp_path: Path) -> None:
    env = _offline(tmp_path)
    out = tmp_path / "out"
    not_zip = tmp_path / "vllm-0.15.1-py3-none-any.whl"
    not_zip.write_text("not a zip")
    other = tmp_path / "other-1.0-py3-none-any.whl"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("other-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: other\n")
        zf.writestr("other-1.0.dist-info/RECORD", "")
    renamed = tmp_path / "vllm-0.17.1-cp38-abi3-manylinux_2_31_x86_64.whl"
    renamed.write_bytes(build_wheel(tmp_path / "dist").read_bytes())
    tampered = build_wheel(tmp_path / "bad", tamper=SPEC)
    for wheel, says in (
        (tmp_path / "missing.whl", "no such file"),
        (not_zip, "not a zip file"),
        (other, "not a vLLM wheel"),
        (renamed, "the file name says vLLM 0.17.1 but its METADATA says 0.15.1"),
        (tampered, "does not match the wheel's RECORD"),
    ):
        assert_refused(run_cli("pin", "--wheel", str(wheel), "--out", str(out), env=env), 9, says)
        assert not out.exists()
    assert not sources.release_tree("0.15.1", tmp_path / "cache").exists()
    assert_refused(
        run_cli("pin", "--out", str(out), env=env),
        2,
        "pin needs VERSIONS (releases to pin) or --wheel FILE",
    )


def _site(tmp_path: Path, version: str = "0.15.1") -> Path:
    return scratch_tree(version, tmp_path / f"site-{version}")


def test_capture_and_import_read_the_installed_release_from_a_wheel(tmp_path: Path) -> None:
    env = _offline(tmp_path)
    # no built-ins: an edit of the allow-list file under unapplied built-ins is refused (exit 15),
    # and this test is about where the pristine bytes come from
    (tmp_path / "no-builtins").mkdir()
    (tmp_path / "no-builtins" / "series").write_text("")
    env["VLLM_PATCHER_PATCHES_DIR"] = str(tmp_path / "no-builtins")
    wheel = build_wheel(tmp_path / "dist")
    site, mine = _site(tmp_path), tmp_path / "mine"
    mine.mkdir()
    spec = site / SPEC
    spec.write_text(spec.read_text() + "\n# my edit\n")
    args = ("--target", str(site), "--patches", str(mine))
    # a wheel of another release, or a bad one: refused before anything is written
    other = build_wheel(tmp_path / "o", "0.15.0")
    assert_refused(
        run_cli(*args, "capture", "mine", "--wheel", str(other), env=env),
        2, "holds vLLM 0.15.0, but the installed release is 0.15.1",
    )  # fmt: skip
    bad = build_wheel(tmp_path / "bad", tamper=SPEC)
    assert_refused(run_cli(*args, "capture", "mine", "--wheel", str(bad), env=env), 9, "RECORD")
    assert not any(mine.iterdir())
    # without the wheel the pristine bytes would need the (dead) index
    assert_refused(run_cli(*args, "capture", "mine", env=env), 9, "127.0.0.1")
    proc = run_cli(*args, "capture", "mine", "--wheel", str(wheel), env=env)
    assert proc.returncode == 0, proc.stderr
    diff = (mine / "mine" / "vllm-0.15.1" / "patch.diff").read_text()
    added = [line for line in diff.splitlines() if line.startswith("+") and line != f"+++ b/{SPEC}"]
    assert added == ["+", "+# my edit"], diff  # the edit alone: the base is the wheel's bytes

    upstream = tmp_path / "upstream.diff"
    old = (_pristine("0.15.1") / SPEC).read_text().splitlines(True)
    new = old[:20] + ["# imported line\n"] + old[20:]
    body = "".join(difflib.unified_diff(old, new, f"a/{SPEC}", f"b/{SPEC}"))
    upstream.write_text(f"diff --git a/{SPEC} b/{SPEC}\n{body}")
    site2 = _site(tmp_path / "two")
    (tmp_path / "mine2").mkdir()
    args2 = ("--target", str(site2), "--patches", str(tmp_path / "mine2"), "import", "up")
    proc = run_cli(*args2, "--diff", str(upstream), "--wheel", str(wheel), env=env)
    assert proc.returncode == 0, proc.stderr
    assert (
        "+# imported line" in (tmp_path / "mine2" / "up" / "vllm-0.15.1" / "patch.diff").read_text()
    )


def test_port_reads_both_releases_from_wheels(tmp_path: Path) -> None:
    env = _offline(tmp_path)
    mine = tmp_path / "mine"
    folder = mine / "my-fix"
    folder.mkdir(parents=True)
    (folder / "patch.toml").write_text(
        'name = "my-fix"\nsummary = "a comment"\nreleases = ">=0.15.0,<0.16"\n'
    )
    before = (_pristine("0.15.1") / SPEC).read_text()
    # a patch stacked on the built-ins: its base is what they leave on 0.15.1
    lay_site = _site(tmp_path)
    run_cli("--target", str(lay_site), "apply", check=True, env=env)
    base = (lay_site / SPEC).read_text()
    assert base != before
    write_pin(folder / "vllm-0.15.1", "0.15.1", "my-fix", [(SPEC, base, base + "# my-fix\n")])
    w150 = build_wheel(tmp_path / "a", "0.15.0")
    w151 = build_wheel(tmp_path / "b", "0.15.1")
    args = ("--patches", str(mine), "port", "my-fix")
    assert_refused(run_cli(*args, "--wheel", str(w150), env=env), 9, "127.0.0.1")  # 0.15.1 needed
    proc = run_cli(*args, "--wheel", str(w150), "--wheel", str(w151), env=env)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"vllm 0\.15\.0\s+clean", proc.stdout), proc.stdout
    assert "+# my-fix" in (folder / "vllm-0.15.0" / "patch.diff").read_text()


def test_pin_fetches_from_the_index_with_no_pip_in_the_interpreter(tmp_path: Path) -> None:
    """The uv-made venv: no pip anywhere. pip is made unimportable for the tool's interpreter and
    every child it starts (a `pip` package that raises, first on PYTHONPATH); pin still fetches
    0.15.1 from the real PyPI by ranges and writes the committed pins."""
    blocker = tmp_path / "no-pip" / "pip"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'pip'\")\n")
    (blocker / "__main__.py").write_text("import pip\n")
    env = {
        "PYTHONPATH": f"{blocker.parent}{os.pathsep}{REPO}",
        "VLLM_PATCHER_CACHE": str(tmp_path / "cache"),
        "PIP_INDEX_URL": "https://pypi.org/simple",
    }
    for args in (["-c", "import pip"], ["-m", "pip", "--version"]):
        proc = subprocess.run(
            [sys.executable, *args], env={**os.environ, **env}, capture_output=True, text=True
        )
        assert proc.returncode != 0 and "No module named 'pip'" in proc.stderr, args
    out = tmp_path / "out"
    proc = run_cli("pin", "0.15.1", "--out", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    assert "(range)" in proc.stderr, proc.stderr  # the progress line names how it was fetched
    written = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert written
    for rel in written:
        assert (out / rel).read_bytes() == (REPO / "patches" / rel).read_bytes(), rel
