"""The package index: which indexes to ask (pip's files and variables, uv's variables), and what
each one's simple API (PEP 691 JSON, else PEP 503 HTML) lists for vLLM: the wheel of one exact
release for this platform, and the releases there are. ``fetch`` then reads the wheel's members.

Only the standard library is imported here at module level: ``requests`` is imported by the
functions that go to the network, so commands that never fetch never pay for it.
"""

from __future__ import annotations

import configparser
import os
import platform
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urljoin, urlsplit

from .. import __version__
from ..errors import FetchError
from ..events import FetchEvent, LookingUp
from .members import PROJECT, FetchStats, short_error, version_of_filename

if TYPE_CHECKING:
    import requests

PYPI_SIMPLE = "https://pypi.org/simple"


JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"


# JSON first; HTML (PEP 503) from an index that does not speak PEP 691.
ACCEPT = f"{JSON_ACCEPT}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"


TIMEOUT = (15.0, 60.0)  # connect, read (seconds)


@dataclass(frozen=True)
class IndexConfig:
    """Where to look for vLLM's wheels, and how to trust the connection."""

    indexes: tuple[str, ...]  # the primary index first, then the extra ones
    primary_from: str  # where the primary came from, for messages
    cert: str | None = None
    trusted_hosts: frozenset[str] = frozenset()

    def verify_for(self, url: str) -> bool | str:
        parts = urlsplit(url)
        if parts.hostname in self.trusted_hosts or parts.netloc in self.trusted_hosts:
            return False
        return self.cert or True


def _pip_config_files(env: Mapping[str, str]) -> list[Path]:
    """pip's configuration files, in the order pip reads them (a later file wins)."""
    given = env.get("PIP_CONFIG_FILE")
    if given == os.devnull:
        return []  # pip: PIP_CONFIG_FILE=/dev/null turns every configuration file off
    home = Path(env.get("HOME") or Path.home())
    xdg_dirs = env.get("XDG_CONFIG_DIRS") or "/etc/xdg"
    files = [Path(d) / "pip" / "pip.conf" for d in reversed(xdg_dirs.split(":")) if d]
    files.append(Path("/etc/pip.conf"))
    files.append(home / ".pip" / "pip.conf")
    files.append(Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "pip" / "pip.conf")
    files.append(Path(sys.prefix) / "pip.conf")  # the running venv's own, as pip reads it
    if given:
        files.append(Path(given))
    return files


def _pip_config(env: Mapping[str, str]) -> dict[str, str]:
    """The ``global`` then ``download`` sections of pip's files, later files winning."""
    parser = configparser.RawConfigParser()
    values: dict[str, str] = {}
    for path in _pip_config_files(env):
        try:
            parser.read(path, encoding="utf-8")
        except (OSError, configparser.Error, UnicodeDecodeError):
            continue  # pip would refuse to run; we just do without that file
        for section in ("global", "download"):
            if parser.has_section(section):
                for key, value in parser.items(section):
                    values[key.replace("_", "-")] = value
    return values


def index_config(environ: Mapping[str, str] | None = None) -> IndexConfig:
    """The index to ask, as pip (or uv, when its variables are set) would.

    Primary index: ``PIP_INDEX_URL``, else ``UV_DEFAULT_INDEX``, else ``UV_INDEX_URL``, else
    ``index-url`` from pip's files, else PyPI. Extra indexes: ``PIP_EXTRA_INDEX_URL``, else
    ``extra-index-url`` from pip's files. ``PIP_CERT`` / ``cert`` and ``PIP_TRUSTED_HOST`` /
    ``trusted-host`` likewise. Proxies come from the usual variables through requests.
    """
    env = os.environ if environ is None else environ
    conf = _pip_config(env)
    primary, source = PYPI_SIMPLE, "PyPI, the default"
    for name, value in (
        ("PIP_INDEX_URL", env.get("PIP_INDEX_URL")),
        ("UV_DEFAULT_INDEX", env.get("UV_DEFAULT_INDEX")),
        ("UV_INDEX_URL", env.get("UV_INDEX_URL")),
        ("index-url in pip.conf", conf.get("index-url")),
    ):
        if value and value.strip():
            primary, source = value.strip(), name
            break
    extra = env.get("PIP_EXTRA_INDEX_URL") or conf.get("extra-index-url") or ""
    trusted = env.get("PIP_TRUSTED_HOST") or conf.get("trusted-host") or ""
    indexes = [primary] + [u for u in extra.split() if u != primary]
    return IndexConfig(
        indexes=tuple(dict.fromkeys(indexes)),
        primary_from=source,
        cert=env.get("PIP_CERT") or conf.get("cert") or None,
        trusted_hosts=frozenset(trusted.split()),
    )


@dataclass(frozen=True)
class WheelLink:
    filename: str
    url: str
    sha256: str | None = None
    yanked: bool = False
    size: int | None = None


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            found = dict(attrs)
            if found.get("href"):
                self.links.append((found["href"] or "", found))


def _parse_html(text: str, base: str) -> list[WheelLink]:
    parser = _Anchors()
    parser.feed(text)
    out = []
    for href, attrs in parser.links:
        url = urljoin(base, href)
        path, _, fragment = url.partition("#")
        sha = fragment[len("sha256=") :] if fragment.startswith("sha256=") else None
        name = unquote(path.rsplit("/", 1)[-1])
        out.append(WheelLink(name, path, sha, "data-yanked" in attrs))
    return out


def _parse_json(data: dict[str, Any], base: str) -> list[WheelLink]:
    out = []
    for f in data.get("files", []):
        if not isinstance(f, dict) or "filename" not in f or "url" not in f:
            continue
        hashes = f.get("hashes") or {}
        out.append(
            WheelLink(
                str(f["filename"]),
                urljoin(base, str(f["url"])),
                hashes.get("sha256") if isinstance(hashes, dict) else None,
                bool(f.get("yanked")),
                f.get("size") if isinstance(f.get("size"), int) else None,
            )
        )
    return out


def index_session() -> requests.Session:
    import requests

    session = requests.Session()
    session.headers["User-Agent"] = f"vllm-patcher/{__version__}"
    return session


def _project_files(
    index: str, config: IndexConfig, session: requests.Session, stats: FetchStats
) -> list[WheelLink]:
    """Every file of the vllm project one index lists (empty when it has no such project)."""
    page = index.rstrip("/") + f"/{PROJECT}/"
    if page.startswith("file:"):
        return _local_project_files(Path(unquote(urlsplit(page).path)))
    import requests

    try:
        resp = session.get(
            page, headers={"Accept": ACCEPT}, timeout=TIMEOUT, verify=config.verify_for(page)
        )
    except requests.RequestException as exc:
        raise FetchError(
            f"could not reach the package index {host_of(page)}: {short_error(exc)}"
        ) from None
    stats.requests += 1
    stats.bytes += len(resp.content)
    if resp.status_code == 404:
        return []
    if resp.status_code >= 400:
        raise FetchError(
            f"the package index {host_of(page)} answered {resp.status_code} for {page}"
        )
    if resp.headers.get("Content-Type", "").split(";")[0].strip() == JSON_ACCEPT:
        try:
            return _parse_json(resp.json(), resp.url)
        except ValueError:
            raise FetchError(f"the package index {host_of(page)} sent malformed JSON") from None
    return _parse_html(resp.text, resp.url)


def _local_project_files(folder: Path) -> list[WheelLink]:
    """A file:// index: its project folder's index.html, or else the files in that folder."""
    if (folder / "index.html").is_file():
        return _parse_html((folder / "index.html").read_text("utf-8"), folder.as_uri() + "/")
    if not folder.is_dir():
        return []  # pip too passes over a local index without the project
    return [WheelLink(p.name, p.as_uri()) for p in sorted(folder.iterdir()) if p.is_file()]


def _platform_rank(filename: str) -> int:
    """0 for a wheel built for this machine, 1 for a pure one, 2 for any other (same .py files)."""
    tag = filename[: -len(".whl")].rsplit("-", 1)[-1]
    machine = platform.machine().lower()
    system = "linux" if sys.platform.startswith("linux") else sys.platform
    if tag == "any":
        return 1
    return 0 if machine in tag and system in tag else 2


def find_wheel(
    version: str,
    config: IndexConfig,
    session: requests.Session,
    stats: FetchStats,
    say: Callable[[FetchEvent], None] | None = None,
) -> WheelLink:
    """The wheel of exactly ``version`` from the first index that has one."""
    from packaging.version import InvalidVersion, Version

    try:
        wanted = Version(version)
    except InvalidVersion:
        raise FetchError(f"{version!r} is not a version") from None
    unreachable: list[FetchError] = []
    for index in config.indexes:
        if say:
            say(LookingUp(version, host_of(index)))
        try:
            files = _project_files(index, config, session, stats)
        except FetchError as exc:  # like pip: an index that fails is passed over, not fatal
            unreachable.append(exc)
            continue
        wheels = [
            f
            for f in files
            if f.filename.endswith(".whl")
            and (v := version_of_filename(f.filename)) is not None
            and Version(v) == wanted
        ]
        if wheels:
            return min(wheels, key=lambda w: (w.yanked, _platform_rank(w.filename), w.filename))
    if unreachable:
        raise unreachable[0]
    where = ", ".join(host_of(i) for i in config.indexes)
    raise FetchError(
        f"no wheel of vllm=={version} on {where} (index from {config.primary_from}; "
        f"set PIP_INDEX_URL or index-url in pip.conf to use another)"
    )


def available_versions(config: IndexConfig | None = None) -> list[str]:
    """Every vLLM release the configured indexes list (not yanked), oldest first."""
    from packaging.version import Version

    config = config or index_config()
    stats = FetchStats()
    found: set[str] = set()
    unreachable: list[FetchError] = []
    with index_session() as session:
        for index in config.indexes:
            try:
                files = _project_files(index, config, session, stats)
            except FetchError as exc:
                unreachable.append(exc)
                continue
            for f in files:
                v = version_of_filename(f.filename)
                if v is not None and not f.yanked:
                    found.add(v)
    if not found and unreachable:
        raise unreachable[0]
    if not found:
        raise FetchError(
            f"the package index ({', '.join(host_of(i) for i in config.indexes)}) lists no vLLM "
            "release"
        )
    return sorted(found, key=Version)


def latest_version(config: IndexConfig | None = None) -> str:
    """The newest final vLLM release on the configured indexes."""
    from packaging.version import Version

    finals = [v for v in available_versions(config) if not Version(v).is_prerelease]
    if not finals:
        raise FetchError("the package index lists no final vLLM release")
    return finals[-1]


def host_of(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme == "file":
        return parts.path
    return parts.hostname or url  # never the user:password part of an index URL
