"""Every exit code the tool uses, and the expected failures mapped to them (docs/commands.md
lists them).

A ``PatcherError`` is a failure we anticipated: the CLI prints its message on one line and exits
with its code. Codes from 3 up leave every file as it was.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_CHECK_FAILED = 1  # verify found a failing check, doctor a problem, status --check not ready
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # Ctrl-C: rolled back, as the shell reports a SIGINT


class PatcherError(Exception):
    """A failure we anticipated: the CLI prints ``message`` on one line and exits ``exit_code``."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadSetting(PatcherError):
    """An option or environment variable has a value the tool cannot use."""

    exit_code = EXIT_USAGE


class TargetNotFound(PatcherError):
    """No vLLM where we were told to look, or no way to tell its pristine files apart."""

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


class StrictRefusal(PatcherError):
    """``apply --strict``: no pinned diff matches this release exactly."""

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


class ServeRefused(PatcherError):
    """serve-args: doctor found a problem, so there is no --speculative-config to print."""

    exit_code = EXIT_CHECK_FAILED


class ModelFilesError(PatcherError):
    """doctor / serve-args: a model or drafter folder, config.json or weights header is unreadable."""

    exit_code = 11


class ClusterError(PatcherError):
    """No Ray in the target environment, no cluster at the address, or a node lost mid-run."""

    exit_code = 12


class DiffShapeError(PatcherError):
    """Exit code 16: a diff to import or port does not parse, or asks for more than editing text.

    A patch may only edit existing text files under ``vllm/``: a diff that adds, deletes, renames,
    copies or changes the mode of a file there, or carries a binary change, is refused whole.
    """

    exit_code = 16


class FileSystemError(PatcherError):
    """An operating-system error we did not foresee more precisely (mapped by fileops)."""

    exit_code = 6


class OutputLost(FileSystemError):
    """Standard output could not be written (a full disk behind ``>``, an I/O error)."""


class PatchFolderError(PatcherError):
    """A patch folder is malformed: bad patch.toml, a name clash, a path outside vllm/, a link,
    or a manifest that does not match its diff."""

    exit_code = 13


class PatchUnavailable(PatcherError):
    """A patch asked for by name has no diff for the installed release (port it first)."""

    exit_code = 14


class CaptureRefused(PatcherError):
    """capture found nothing to capture, or a change it cannot turn into a patch (a new, deleted
    or binary file, or an edit that cannot be told apart from an applied patch)."""

    exit_code = 15


class PortConflict(PatcherError):
    """port or import left conflicts to resolve by hand (or refused to continue while conflict
    markers remain); the releases that merged cleanly were written."""

    exit_code = 17


class ServerUnreachable(PatcherError):
    """payoff: the server's /metrics cannot be read (down, wrong URL, not a vLLM server), or a
    saved scrape or log file cannot be read as one."""

    exit_code = 18


class NoVllmMetrics(ServerUnreachable):
    """What answered has no ``vllm:`` metrics: not a vLLM server, or one started with
    ``--disable-log-stats`` (which a rehearsal reports as speculation it could not count)."""


class NoSpeculation(PatcherError):
    """payoff: the server exports no speculative-decoding counters (no --speculative-config, or
    --disable-log-stats)."""

    exit_code = 19


class NoDrafts(PatcherError):
    """payoff: the window holds no drafts (no traffic, or a window too short to see one)."""

    exit_code = 20


# payoff sweep: the report is printed, then this code when a server of one k or more did not
# start (each is named in the report with its exit and its log; the other k ran)
EXIT_SERVER_NOT_STARTED = 21


class SweepInterrupted(PatcherError):
    """payoff sweep: Ctrl-C (or SIGTERM, SIGHUP) during a sweep; every server it started is
    stopped, its process group included."""

    exit_code = EXIT_INTERRUPTED


# rehearse: the report is printed, then one of these (a refusal of vLLM's own argument parser
# exits 2, EXIT_USAGE, as `vllm serve` does)
EXIT_NO_DEVICE = 24  # rehearse: the venv's vLLM finds no device it can run on; no server started


class NoDevice(PatcherError):
    """The target's vLLM detects no device it can run on (vLLM's own platform detection)."""

    exit_code = EXIT_NO_DEVICE


EXIT_REHEARSAL_FAILED = 22  # the server did not become ready, or failed a completion: cause named
EXIT_REHEARSAL_NO_DRAFTS = 23  # ready and answering, but --speculative-config drafted nothing


class BenchInterrupted(PatcherError):
    """payoff bench: Ctrl-C, SIGTERM or SIGHUP during a run; the load client's process group is
    stopped, so neither server is left under load."""

    exit_code = EXIT_INTERRUPTED


class RehearsalInterrupted(PatcherError):
    """rehearse: Ctrl-C (or SIGTERM, SIGHUP) while the server started or answered; its process
    group is stopped and the rehearsal's own files removed."""

    exit_code = EXIT_INTERRUPTED
