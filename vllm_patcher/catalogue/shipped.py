"""What the built-in pins say about vLLM's own files: the first release a file is in (a model
family's file arrives there). Read from the manifests, so no release is written twice."""

from __future__ import annotations

from packaging.version import Version

from .model import Catalogue


def first_release_with(catalogue: Catalogue, path: str) -> Version | None:
    """The earliest release whose pinned diff of a built-in patch touches ``path`` (a file a
    built-in rewrites is in every release from its first pin on); None if no pin touches it."""
    found = [
        Version(version)
        for patch in catalogue.patches
        if patch.builtin
        for version in patch.pinned_versions
        if (pin := patch.pin(version)) is not None and path in pin.files
    ]
    return min(found, default=None)
