"""Where this interpreter's vLLM is, without importing it: every vllm distribution on its path, in
path order, and where ``import vllm`` would load the package from. Run in the target interpreter
as ``python -I where_vllm.py NAME...`` (the distribution names); the tool's own interpreter imports
``gather`` instead."""

from __future__ import annotations

import json
import sys
from typing import Any


def gather(names: list[str]) -> dict[str, Any]:
    import importlib.util
    import os
    from importlib import metadata

    dists = []
    for name in names:
        for dist in metadata.distributions(name=name):
            path = getattr(dist, "_path", None)
            if path is None:
                record = [f for f in (dist.files or []) if f.name == "RECORD"]
                path = dist.locate_file(record[0]).parent if record else None
            if path is None:
                continue
            dists.append(
                {
                    "name": dist.metadata["Name"],
                    "version": dist.version,
                    "path": os.path.abspath(str(path)),
                }
            )
    package_dir = None
    spec_error = None
    try:
        spec = importlib.util.find_spec("vllm")
    except Exception as exc:  # a broken editable finder or .pth: report it, do not crash
        spec, spec_error = None, f"{type(exc).__name__}: {exc}"
    if spec is not None and spec.origin and os.path.basename(spec.origin) == "__init__.py":
        package_dir = os.path.dirname(os.path.abspath(spec.origin))
    return {"dists": dists, "package_dir": package_dir, "spec_error": spec_error}


if __name__ == "__main__":
    print(json.dumps(gather(sys.argv[1:])))
