"""Run a patch's behaviour-check file the way the probe will: a throwaway driver for notes.

    PYTHONPATH=/tmp/minimax/overlay-0.15.1 ~/.cache/vllm-patcher/venv-0.15.1/bin/python \
        notes/run_check.py patches/eagle3-minimax-m2/checks/minimax_eagle3.py

Loads the file as a module, calls every top-level ``check_*`` function in definition order with a
``ctx`` (``version``, a private ``workdir`` removed afterwards, ``skip(reason)``), and prints
PASS / FAIL / SKIP per check with the raised message, then ``N passed, N failed``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import inspect
import shutil
import sys
import tempfile
import time


class Skipped(Exception):
    pass


class Ctx:
    def __init__(self, version: str, workdir: str) -> None:
        self.version = version
        self.workdir = workdir

    def skip(self, reason: str) -> None:
        raise Skipped(reason)


def main(path: str) -> int:
    import vllm

    version = importlib.metadata.version("vllm")
    print(f"vllm {version} from {vllm.__file__}")
    spec = importlib.util.spec_from_file_location("vllm_patcher_check", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    checks = [
        fn
        for name, fn in vars(module).items()
        if name.startswith("check_") and inspect.isfunction(fn) and fn.__module__ == module.__name__
    ]
    passed = failed = skipped = 0
    for fn in checks:
        workdir = tempfile.mkdtemp(prefix="minimax-check-")
        start = time.monotonic()
        try:
            fn(Ctx(version, workdir))
        except Skipped as exc:
            skipped += 1
            print(f"SKIP {fn.__name__}: {exc}")
        except BaseException as exc:  # noqa: BLE001 - the message is the finding
            failed += 1
            print(f"FAIL {fn.__name__}: {type(exc).__name__}: {exc}")
        else:
            passed += 1
            print(f"PASS {fn.__name__} ({time.monotonic() - start:.1f} s)")
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
