"""The check library: what the behaviour checks of several patches share, written once.

A check file runs in the target's interpreter, where vllm_patcher may not be installed, so it
cannot import this package by its own name. ``scripts/probe.py`` makes it importable there under a fixed
name before it loads any check file, built-in or from a user's patch folder::

    from vllm_patcher_checklib import checkpoints, eagle3

- ``eagle3``: "family X implements EAGLE-3", called by each family backport's check with its
  own names (``implements_supports_eagle3``, ``forward_captures_aux``); the stand-in decoder
  layers; the EAGLE-3 allow-list of ``SpeculativeConfig`` (``skip_without_allow_list``, which
  reads the tool's verdict ``ctx.allow_list``, ``speculative_config``, ``refusal``); the one skip
  where a release has no Kimi-K2.5 model (``skip_without_kimi_k25``).
- ``backport``: not a library but the check file every family backport runs (``verify`` adds
  it with the patch's ``[family]`` table as ``ctx.family``): SupportsEagle3, the capture is the
  residual stream, the allow-list entry is exact.
- ``proposer``: the release's own ``EagleProposer.load_model`` for a multimodal target, driven
  up to the branch that gives the drafter the target's image token (Kimi-K2.5, Qwen3-VL).
- ``checkpoints``: tiny config-only checkpoints (a ``config.json``, no weights) and ``folder``,
  which writes one under ``ctx.workdir``; ``private_remote_code_cache`` for those whose config
  class arrives through ``auto_map``.

Like the checks, these modules use only the standard library, torch and the vLLM under test, and
raise ``AssertionError`` with a plain-words message for a finding: the probe reports it as the
calling check's verdict, at the check file's line that called the library.
"""
