"""The drafter flags each vLLM release reads (issue 38, item 2), and the drafter config that asks
for behaviour its release does not implement.

An EAGLE-3 drafter's ``config.json`` may carry flags that change what its layers compute. vLLM's
drafter class (``Eagle3LlamaForCausalLM`` in ``model_executor/models/llama_eagle3.py``) reads each
one at the top level of the config, under ``eagle_config``, or not at all, and from a given
release on. A flag it does not read is silently dropped: the drafter loads, runs and is rarely
accepted. ``FLAGS`` is the one owner of those facts, read from the wheels of 0.11.0 to 0.34.0
(``tests/doctor/test_drafter_flags.py`` derives them again from each release's pristine
``llama_eagle3.py``); a release newer than the last one read is taken to read what it read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from ..findings import OK, PROBLEM, WARNING, Finding
from .rules import release_version

TOP, NESTED = "top-level", "eagle_config"
LAST_READ = Version("0.34.0")  # the newest release whose drafter class these facts come from


@dataclass(frozen=True)
class Flag:
    key: str
    default: object  # what the drafter class assumes when the flag is absent
    top: Version | None  # first release reading the top-level key (None: no release does)
    nested: Version | None  # first release reading it under eagle_config (None: none does)
    ignored: str  # what happens where the flag is not read
    level: str = WARNING

    def read_from(self, where: str) -> Version | None:
        return self.top if where == TOP else self.nested


def _v(text: str) -> Version:
    return Version(text)


FLAGS = (
    Flag(
        "use_aux_hidden_state",
        True,
        None,
        _v("0.12.0"),
        "vLLM feeds the drafter three aux layers through an fc it was not trained to use (the "
        "drafter reads the target's last hidden state): nearly every draft is wrong",
        PROBLEM,
    ),
    Flag(
        "norm_before_residual",
        False,
        _v("0.11.0"),
        None,
        "the drafter's layer adds its residual without the norm it was trained with",
    ),
    Flag(
        "norm_before_fc",
        False,
        _v("0.18.0"),
        _v("0.22.0"),
        "the aux layers reach the fc without the norm the drafter was trained with",
    ),
    Flag(
        "fc_norm",
        False,
        _v("0.22.0"),
        None,
        "each aux layer reaches the fc without its own norm",
    ),
    Flag(
        "norm_output",
        False,
        _v("0.22.0"),
        None,
        "the drafter's output skips the final norm it was trained with",
    ),
    Flag(
        "num_aux_hidden_states",
        3,
        _v("0.22.0"),
        None,
        "vLLM builds the fc for three aux layers (the checkpoint's fc does not fit)",
    ),
    Flag(
        "attention_bias",
        False,
        _v("0.16.0"),
        None,
        "the drafter's attention runs without its biases",
    ),
    Flag("target_hidden_size", None, _v("0.11.0"), None, "the fc takes the drafter's width"),
    Flag("draft_vocab_size", None, _v("0.11.0"), None, "the draft vocabulary is the full one"),
)


def _declared(config: dict[str, Any], key: str) -> dict[str, object]:
    """Where the config states ``key`` and what it says there."""
    found: dict[str, object] = {}
    if key in config:
        found[TOP] = config[key]
    eagle = config.get("eagle_config")
    if isinstance(eagle, dict) and key in eagle:
        found[NESTED] = eagle[key]
    return found


def _reads(flag: Flag, where: str, release: Version) -> bool:
    first = flag.read_from(where)
    return first is not None and release >= first


def _fix(flag: Flag, where: str, value: object, release: Version) -> str:
    """Move it where this release reads it, else serve with the first release that does."""
    other = NESTED if where == TOP else TOP
    shown = json.dumps(value)
    if _reads(flag, other, release):
        spot = f'"eagle_config": {{"{flag.key}": {shown}}}' if other == NESTED else flag.key
        return f"move it to {spot} in the drafter's config.json, where vLLM {release} reads it"
    firsts = [v for v in (flag.top, flag.nested) if v is not None and v > release]
    if firsts:
        return f"serve with vLLM {min(firsts)} or newer, the first release that reads it"
    return "no vLLM release reads it: use a drafter trained without it"


def check_flags(config: dict[str, Any], vllm_version: str) -> list[Finding]:
    """A finding for each flag that asks for non-default behaviour the release does not read; an
    ok line naming the flags it does read, when any is set. A config in the speculators format
    (``speculators_config``) is converted by vLLM with its own defaults: not judged here."""
    if "speculators_config" in config:
        return []
    release = release_version(vllm_version)
    out: list[Finding] = []
    honoured = []
    for flag in FLAGS:
        declared = _declared(config, flag.key)
        # vLLM's own order where it reads both: the nested value wins
        where = NESTED if NESTED in declared else TOP if TOP in declared else None
        if where is None or flag.default is None or declared[where] == flag.default:
            if where is not None and flag.default is None and _reads(flag, where, release):
                honoured.append(flag.key)
            continue
        value = declared[where]
        if _reads(flag, where, release):
            honoured.append(flag.key)
            continue
        other = NESTED if where == TOP else TOP
        also = other in declared and declared[other] == value and _reads(flag, other, release)
        if also:
            honoured.append(flag.key)
            continue
        newer = " (read from the wheels up to 0.34.0)" if release > LAST_READ else ""
        out.append(
            Finding(
                "flags",
                flag.level,
                f"the drafter's config sets {flag.key} = {json.dumps(value)} ({where}), which vLLM "
                f"{vllm_version} does not read there{newer}: {flag.ignored}",
                _fix(flag, where, value, release),
            )
        )
    if not out and honoured:
        out.append(
            Finding(
                "flags",
                OK,
                f"drafter flags read by vLLM {vllm_version}: {', '.join(honoured)}",
            )
        )
    return out
