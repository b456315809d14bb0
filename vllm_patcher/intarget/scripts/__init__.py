"""Scripts the tool runs in another interpreter (the target's vLLM venv), as files: each needs only
the standard library and what that venv has, prints one JSON answer as its last line, and is
run as ``python [-I] FILE ARGS`` (``runtime.run_script``); this folder holds nothing else, so the
script's own directory on that interpreter's ``sys.path`` shadows no module.

``where_vllm`` every vllm distribution on the path and where ``import vllm`` loads from, without
importing it (this interpreter imports it as a module); ``hub_snapshot`` a Hugging Face repo id's
snapshot in the local cache, offline, through that venv's huggingface_hub; ``bench_client``
vLLM's own ``vllm bench serve`` with its results file, the one script that answers many requests,
one per stdin line, each with one JSON line (started and asked by ``serving.client``, not
``runtime.run_script``); ``probe`` verify's import and behaviour tiers (it makes the check library,
``intarget/checklib/``, importable to the patches' check files); ``ray_driver`` the Ray driver of
``vllm-patcher cluster`` (the tool itself is shipped to the nodes); ``device`` the device vLLM
detects (rehearse asks before it starts a server)."""

from pathlib import Path

HERE = Path(__file__).resolve().parent


def path(name: str) -> Path:
    """The file of the script ``name`` (``"where_vllm"``)."""
    return HERE / f"{name}.py"
