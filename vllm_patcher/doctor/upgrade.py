"""The release a doctor run sends the user to.

Several findings of one run may each need a newer vLLM: the first release apply patches for the
target, the release that has the target's model file, the first that reads the top-level
aux-layer key, the first that reads a drafter flag where the config sets it, the first that sizes
the fc from the config. An upgrade to the lowest of them leaves the others standing, so every fix
of the run names the highest (``check`` judges twice when they differ): the lowest release that
meets all of them. A fix that offers an upgrade only beside another remedy (``kv_page``) is not a
need and is not counted."""

from __future__ import annotations

from packaging.version import Version

RAISED = "the lowest release that meets every finding here that needs a newer vLLM"


class Upgrade:
    """The releases the fixes of one run need (``needed``), and the one they name: ``floor``,
    the highest of them, once known."""

    def __init__(self, floor: Version | None = None) -> None:
        self.floor = floor
        self.needed: list[Version] = []

    def to(self, release: Version) -> Version:
        """The release a fix that needs ``release`` names: it, or the run's higher floor."""
        self.needed.append(release)
        if self.floor is not None and self.floor > release:
            return self.floor
        return release

    def why(self, release: Version) -> str | None:
        """Why a fix that needs ``release`` names a higher one; None where it does not."""
        return RAISED if self.floor is not None and self.floor > release else None

    def note(self, release: Version) -> str:
        """``why`` in parentheses, to follow the release; empty where there is nothing to say."""
        why = self.why(release)
        return f" ({why})" if why else ""

    @property
    def highest(self) -> Version | None:
        """The release every fix must name when they named more than one; else None."""
        return max(self.needed) if len(set(self.needed)) > 1 else None
