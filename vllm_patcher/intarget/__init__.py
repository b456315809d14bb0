"""Everything that runs inside another interpreter (the user's vLLM venv, a Ray driver):
``scripts``, the files the tool runs there (each answers one JSON
line), and ``checklib``, the check library the probe script makes importable there as
``vllm_patcher_checklib`` for the patches' behaviour checks. They import standard library,
torch and vLLM only, never the rest of the tool (but the Ray driver, which runs the tool on each
node); the tool imports the scripts for their paths (and runs ``where_vllm``'s reader in its own
process too), never the check library (the layout test holds both)."""
