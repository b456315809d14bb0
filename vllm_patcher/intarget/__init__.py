"""Everything that runs inside another interpreter (the user's vLLM venv, a Ray driver), never
in the tool's own process: ``scripts``, the files the tool runs there (each answers one JSON
line), and ``checklib``, the check library the probe script makes importable there as
``vllm_patcher_checklib`` for the patches' behaviour checks. Standard library, torch and vLLM
only; the layout test keeps the rest of the package from importing either at run time."""
