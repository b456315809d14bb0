"""Expected failures, each with the exit code the CLI maps it to (documented in the README)."""

from __future__ import annotations


class PatcherError(Exception):
    """A failure we anticipated: the CLI prints ``message`` on one line and exits ``exit_code``."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadSetting(PatcherError):
    """An option or environment variable has a value the tool cannot use."""

    exit_code = 2


class TargetNotFound(PatcherError):
    """No vLLM distribution where we were told to look, or the interpreter does not exist."""

    exit_code = 3


class UnsupportedRelease(PatcherError):
    """The installed vLLM is older than the first release these patches know."""

    exit_code = 4


class LocallyModified(PatcherError):
    """A file the patches touch differs from what the installer wrote (RECORD) or from our record."""

    exit_code = 5


class NotWritable(PatcherError):
    """The target cannot be written (read-only directory, permissions, full disk)."""

    exit_code = 6


class StateError(PatcherError):
    """The tool's state record or a pinned manifest does not match the files it describes."""

    exit_code = 7


class LockTimeout(PatcherError):
    """Another vllm-patcher holds the lock on this environment for too long."""

    exit_code = 8


class FetchError(PatcherError):
    """A release wheel could not be downloaded or read (maintainer commands only)."""

    exit_code = 9


class PatchShapeError(PatcherError):
    """The source does not have the shape a transform expects, so it refuses to guess."""

    exit_code = 10
