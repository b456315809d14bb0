"""Which vLLM releases the tool handles, derived from the built-in patch folders: the first one
a built-in covers, and the one from which every built-in's change is upstream (the
highest ``fixed_in``). Nothing here is written by hand, so a re-pin or a new built-in moves
the range with it."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from ..errors import UnsupportedRelease
from ..releases import Release, parse_version, public_version, release_of
from .model import Catalogue, Patch


def upstream_in(patch: Patch, version: str) -> bool:
    """The patch's change is in ``version`` itself (at or past its ``fixed_in``).

    The release a local, post or dev label belongs to decides: ``0.21.0+cpu`` and
    ``0.21.1.dev5+g12ab`` come after 0.21.0 and have every change 0.21.0 has. A pre-release or
    dev build of the fixed release itself (``0.32.0rc1``, ``0.32.0.dev5+g12ab``) comes before it
    and may predate the change: not upstream (pinned, transformed, or else ``unported``, never a
    guess)."""
    if not patch.is_upstream(version):
        return False
    return not (patch.fixed_in is not None and _before(version, patch.fixed_in))


def _before(version: str, release: Version) -> bool:
    """``version`` (its local label aside) sorts before ``release``: a pre-release or dev build
    of it."""
    try:
        return Version(public_version(version)) < release
    except InvalidVersion:
        return False


_FROM = (">=", "==", "~=")  # operators whose version starts the range


def _bounds(catalogue: Catalogue) -> tuple[Version, Version | None, tuple[tuple[str, str], ...]]:
    """From the catalogue's built-ins: the first release one covers, the highest ``fixed_in``
    (None when one has none), and each built-in's ``fixed_in``."""
    patches = [p for p in catalogue.patches if p.builtin]
    lowest = [
        v
        for p in patches
        for s in p.releases
        if s.operator in _FROM and (v := _exact(s.version)) is not None
    ]
    pinned = [Version(v) for p in patches for v in p.pinned_versions]
    first = min(lowest or pinned or [Version("0")])
    fixed = [p.fixed_in for p in patches]
    last = None if None in fixed or not fixed else max(f for f in fixed if f is not None)
    named = tuple((p.name, str(p.fixed_in)) for p in patches if p.fixed_in is not None)
    return first, last, named


def _exact(text: str) -> Version | None:
    """The version a specifier names, or None for a wildcard (``==0.15.*``)."""
    try:
        return Version(text)
    except InvalidVersion:
        return None


def first_patchable(catalogue: Catalogue) -> Version:
    """The first release a built-in covers (its ``releases``; else its first pin): the allow-list
    exists from there on."""
    return _bounds(catalogue)[0]


def upstream_from(catalogue: Catalogue) -> Version | None:
    """The first release every built-in's change is upstream in; None if one has no fixed_in."""
    return _bounds(catalogue)[1]


def supported_span(catalogue: Catalogue) -> str:
    """The releases the built-ins patch, in a few words: ``0.11.0 to 0.32.x``; where a built-in
    has no ``fixed_in`` (a family with no upstream EAGLE-3 in any release), up to the newest
    release pinned and later ones through the codemods."""
    first, last, _ = _bounds(catalogue)
    pinned = [Version(v) for p in catalogue.patches if p.builtin for v in p.pinned_versions]
    if last is None and pinned:
        newest = max(pinned)
        return f"{first} to {newest.major}.{newest.minor}.x pinned, later releases through the codemods"
    if last is None:
        return f"{first} and later"
    if last.micro == 0 and last.minor > 0:
        return f"{first} to {last.major}.{last.minor - 1}.x"
    return f"{first} up to (not including) {last}"


def supported_range(catalogue: Catalogue) -> str:
    """``supported_span`` and each built-in's ``fixed_in``: ``0.11.0 to 0.32.x, each patch below
    its fixed_in (...)``, naming the built-ins with no upstream EAGLE-3 in any release."""
    _, _, named = _bounds(catalogue)
    never = [p.name for p in catalogue.patches if p.builtin and p.fixed_in is None]
    span = supported_span(catalogue)
    by_release: dict[str, list[str]] = {}
    for name, fixed in named:
        by_release.setdefault(fixed, []).append(name)
    upstream = "; ".join(
        f"{', '.join(names)} upstream from {fixed}" for fixed, names in by_release.items()
    )
    if never:
        upstream = "; ".join(
            part
            for part in (upstream, f"no upstream EAGLE-3 in any release: {', '.join(never)}")
            if part
        )
    return f"{span}, each patch below its fixed_in ({upstream})" if upstream else span


def classify(catalogue: Catalogue, version: str) -> Release:
    """Upstream when every built-in that covers ``version`` has its change there; a release
    before the first pinned one (no EAGLE-3 allow-list to widen) is refused. The built-ins are
    the catalogue's (every catalogue holds them, whatever folders or selection it has)."""
    parse_version(version)
    if release_of(version) < first_patchable(catalogue):
        raise UnsupportedRelease(
            f"vLLM {version} is not supported: vllm-patcher patches "
            f"{supported_span(catalogue)}; upgrade vLLM to one of those releases "
            "(vllm-patcher list shows each patch's)"
        )
    builtins = [p for p in catalogue.patches if p.builtin and p.covers(version)]
    if builtins and all(upstream_in(p, version) for p in builtins):
        return Release.UPSTREAM
    return Release.PATCHABLE
