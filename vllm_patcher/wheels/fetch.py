"""Get the few members of a vLLM release wheel the tool needs, not the whole 500 MB wheel.

Order of work: find the wheel of that exact version on the index (``index``), then read
the wheel's central directory and the wanted members by HTTP range requests (``remotezip``). A
server that refuses ranges gets one plain streamed download instead. Every member is checked
against the wheel's own RECORD, and the wheel's METADATA must name the version asked for, before
anything is written; the caller stages and renames, so a failed check leaves the cache as it was.

Only the standard library is imported here at module level: ``requests`` and ``remotezip`` are
imported by the functions that go to the network, so commands that never fetch never pay for them.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from ..errors import FetchError
from ..events import Fetched, FetchEvent, Fetching, NoRanges

if TYPE_CHECKING:
    import requests
from .index import (
    TIMEOUT,
    IndexConfig,
    WheelLink,
    find_wheel,
    host_of,
    index_config,
    index_session,
)
from .members import FetchStats, extract_checked, short_error

# The first range request reads the wheel's last bytes: enough for the central directory and the
# dist-info members stored just before it (vLLM 0.15.1: 1,829 members, the last 285 kB), so
# METADATA and RECORD come with it and each wanted file is then one more request.
TAIL_BYTES = 384 * 1024


def fetch_members(
    version: str,
    members: Iterable[str],
    dest: Path,
    scratch: Path,
    *,
    say: Callable[[FetchEvent], None] | None = None,
    stats: FetchStats | None = None,
    config: IndexConfig | None = None,
) -> FetchStats:
    """Write ``members`` of the vllm==``version`` wheel under ``dest`` (see extract_checked):
    by range requests, or one whole download into ``scratch`` when the server refuses ranges."""
    stats = stats if stats is not None else FetchStats()
    start = time.monotonic()
    members = sorted(set(members))
    config = config or index_config()
    try:
        with index_session() as session:
            link = find_wheel(version, config, session, stats, say)
            stats.url = link.url
            where = link.filename
            if link.url.startswith("file:"):
                stats.method = "local"
                path = Path(unquote(urlsplit(link.url).path))
                try:
                    with zipfile.ZipFile(path) as zf:
                        extract_checked(zf, version, members, dest, where, stats)
                except (zipfile.BadZipFile, OSError) as exc:
                    raise FetchError(f"cannot read {path}: {short_error(exc)}") from None
                return stats
            if not _fetch_by_ranges(link, version, members, dest, config, session, stats, say):
                _fetch_whole(link, version, members, dest, scratch, config, session, stats)
    finally:
        stats.seconds = time.monotonic() - start
    if say:
        say(Fetched(stats.members, version, stats.bytes, stats.requests, stats.seconds,
                    stats.method))  # fmt: skip
    return stats


def _fetch_by_ranges(
    link: WheelLink,
    version: str,
    members: list[str],
    dest: Path,
    config: IndexConfig,
    session: requests.Session,
    stats: FetchStats,
    say: Callable[[FetchEvent], None] | None,
) -> bool:
    """False when the server does not do range requests (nothing was written then)."""
    import requests
    from remotezip import RangeNotSupported, RemoteFetcher, RemoteZip, RemoteZipError

    class CountingFetcher(RemoteFetcher):  # type: ignore[misc]
        """remotezip's fetcher, counting requests and bytes, and closing a refused response
        at once instead of letting the whole wheel stream in."""

        def _request(self, kwargs: dict[str, Any]) -> tuple[Any, str]:
            res = session.get(self._url, stream=True, **kwargs)
            stats.requests += 1
            if res.status_code == 200 or "Content-Range" not in res.headers:
                res.close()
                res.raise_for_status()
                raise RangeNotSupported("the server does not answer range requests")
            res.raise_for_status()
            stats.bytes += int(res.headers.get("Content-Length") or 0)
            return res.raw, res.headers["Content-Range"]

    host = host_of(link.url)
    try:
        with RemoteZip(
            link.url,
            initial_buffer_size=TAIL_BYTES,
            session=session,
            fetcher=CountingFetcher,
            timeout=TIMEOUT,
            verify=config.verify_for(link.url),
        ) as zf:
            names = set(zf.namelist())
            asked = [m for m in members if m in names]
            dist = [
                n
                for n in names
                if n.count("/") == 1 and n.endswith((".dist-info/RECORD", ".dist-info/METADATA"))
            ]
            size = sum(zf.getinfo(n).compress_size for n in asked + dist)
            if say:
                say(Fetching(len(asked), version, size, host))
            stats.method = "range"
            extract_checked(zf, version, members, dest, link.filename, stats)
    except RangeNotSupported:
        if say:
            say(NoRanges(host, link.size))
        return False
    except zipfile.BadZipFile as exc:
        raise FetchError(
            f"{link.filename} from {host} is not a readable wheel: {short_error(exc)}"
        ) from None
    except (RemoteZipError, requests.RequestException, OSError) as exc:
        raise FetchError(
            f"could not fetch {link.filename} from {host}: {short_error(exc)}"
        ) from None
    return True


def _fetch_whole(
    link: WheelLink,
    version: str,
    members: list[str],
    dest: Path,
    scratch: Path,
    config: IndexConfig,
    session: requests.Session,
    stats: FetchStats,
) -> None:
    """One plain GET of the whole wheel into ``scratch`` (no pip needed), checked against the
    index's sha256 when it gives one, then read like a wheel on disk and deleted."""
    import requests

    stats.method = "full"
    host = host_of(link.url)
    scratch.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=".download-", suffix=".whl", dir=scratch)
    path = Path(name)
    digest = hashlib.sha256()
    try:
        try:
            with (
                os.fdopen(fd, "wb") as out,
                session.get(
                    link.url, stream=True, timeout=TIMEOUT, verify=config.verify_for(link.url)
                ) as resp,
            ):
                stats.requests += 1
                resp.raise_for_status()
                for chunk in resp.iter_content(1 << 20):
                    out.write(chunk)
                    digest.update(chunk)
                    stats.bytes += len(chunk)
        except requests.RequestException as exc:
            raise FetchError(
                f"could not download {link.filename} from {host}: {short_error(exc)}"
            ) from None
        if link.sha256 and digest.hexdigest() != link.sha256.lower():
            raise FetchError(
                f"{link.filename} from {host} does not match the index's sha256; nothing was written"
            )
        try:
            with zipfile.ZipFile(path) as zf:
                extract_checked(zf, version, members, dest, link.filename, stats)
        except zipfile.BadZipFile as exc:
            raise FetchError(
                f"{link.filename} from {host} is not a wheel: {short_error(exc)}"
            ) from None
    finally:
        path.unlink(missing_ok=True)
