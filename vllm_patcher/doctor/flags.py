"""The drafter flags each vLLM release reads , and the drafter config that asks
for behaviour its release does not implement.

An EAGLE-3 drafter's ``config.json`` may carry flags that change what its layers compute. vLLM's
drafter class (``Eagle3LlamaForCausalLM`` in ``model_executor/models/llama_eagle3.py``) reads each
one at the top level of the config, under ``eagle_config``, or not at all, and from a given
release on; where it reads both, the one under ``eagle_config`` wins. It tests each switch as a
truth value (``if flag:``), so the string ``"false"`` switches it on. A flag it does not read is
silently dropped: the drafter loads, runs and is rarely accepted. ``FLAGS`` is the one owner of
those facts, read from the wheels of 0.11.0 to 0.34.0 (``tests/doctor/test_drafter_flags.py``
derives them again from each release's pristine ``llama_eagle3.py``); a release newer than the
last one read is taken to read what it read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from ..findings import OK, PROBLEM, WARNING, Finding
from ..models.configs import AUX_KEY
from .rules import release_version
from .upgrade import Upgrade

TOP, NESTED = "top-level", "eagle_config"
FIRST_READ = Version("0.11.0")  # the oldest release read (older ones: doctor's release check)
LAST_READ = Version("0.34.0")  # the newest release whose drafter class these facts come from
EAGLE_CONFIG_READ_FROM = Version("0.12.0")  # the first release whose drafter reads eagle_config
# from 0.22.0 the fc takes num_aux_hidden_states aux layers (else as many as the nested ids name)
AUX_COUNT_READ_FROM = Version("0.22.0")
DEFAULT_AUX_COUNT = 3


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

    @property
    def switch(self) -> bool:
        return isinstance(self.default, bool)


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
    Flag("fc_norm", False, _v("0.22.0"), None, "each aux layer reaches the fc without its norm"),
    Flag(
        "norm_output",
        False,
        _v("0.22.0"),
        None,
        "the drafter's output skips the final norm it was trained with",
    ),
    Flag(
        "num_aux_hidden_states",
        DEFAULT_AUX_COUNT,
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


def _meaning(flag: Flag, value: object) -> object:
    """What vLLM makes of the value: a switch is a truth value, a count a whole number."""
    if flag.switch:
        return bool(value)
    return value


def _asks(flag: Flag, value: object) -> bool:
    """The value asks for something other than the class's default."""
    return flag.default is not None and _meaning(flag, value) != flag.default


def _show(value: object) -> str:
    return json.dumps(value)


def _spot(flag: Flag, where: str, value: object) -> str:
    pair = f'"{flag.key}": {_show(value)}'
    return f'"eagle_config": {{{pair}}}' if where == NESTED else f"the top level ({pair})"


def _fix(
    flag: Flag, where: str, value: object, release: Version, shown: str, upgrade: Upgrade
) -> str:
    """Move it where this release reads it; else the earliest (place, release) that reads it."""
    other = NESTED if where == TOP else TOP
    if _reads(flag, other, release):
        return (
            f"move it to {_spot(flag, other, value)} in the drafter's config.json, where vLLM "
            f"{shown} reads it"
        )
    later = sorted(
        (first, place)
        for place in (TOP, NESTED)
        if (first := flag.read_from(place)) is not None and first > release
    )
    if not later:
        return "no vLLM release reads it: use a drafter trained without it"
    first, place = later[0]
    move = "" if place == where else f"move it to {_spot(flag, place, value)} and "
    to = upgrade.to(first)
    if to > first:
        return f"{move}serve with vLLM {to} or newer{upgrade.note(first)}, which reads it there"
    return f"{move}serve with vLLM {first} or newer, the first release that reads it there"


def check_flags(
    config: dict[str, Any], vllm_version: str, upgrade: Upgrade | None = None
) -> list[Finding]:
    """A finding for each flag that asks for non-default behaviour the release does not read, is
    set twice to different values, or is a string where vLLM tests a truth value; an ok line
    naming the flags it does read, when any is set. A config in the speculators format
    (``speculators_config``) is converted by vLLM with its own defaults: not judged here.
    ``upgrade``: the run's (the release a fix names is the run's, when higher)."""
    release = release_version(vllm_version)
    if "speculators_config" in config or release < FIRST_READ:
        return []
    shown = vllm_version if release <= LAST_READ else f"{LAST_READ} (the last release read)"
    out: list[Finding] = []
    eagle = config.get("eagle_config")
    if eagle is not None and not isinstance(eagle, dict) and release >= EAGLE_CONFIG_READ_FROM:
        out.append(
            Finding(
                "flags",
                PROBLEM,
                f"the drafter's eagle_config is {_show(eagle)}, not an object: vLLM "
                f"{vllm_version} looks keys up in it and fails while it builds the drafter",
                'make eagle_config an object ({"use_aux_hidden_state": ...}) or remove it',
            )
        )
    honoured = []
    for flag in FLAGS:
        declared = _declared(config, flag.key)
        if not declared:
            continue
        out += _strings(flag, declared, vllm_version)
        read = [w for w in (NESTED, TOP) if w in declared and _reads(flag, w, release)]
        meanings = {_show(_meaning(flag, v)) for v in declared.values()}
        if len(meanings) > 1:  # set twice, to different values: say which one the release uses
            used = f"reads the {read[0]} one" if read else "reads neither"
            out.append(
                Finding(
                    "flags",
                    WARNING,
                    f"the drafter's config sets {flag.key} twice, to different values ("
                    + ", ".join(f"{w} {_show(v)}" for w, v in declared.items())
                    + f"): vLLM {vllm_version} {used}",
                    f"keep one {flag.key}, the value the drafter was trained with",
                )
            )
            continue
        where, value = next(iter(declared.items()))
        if read:
            if flag.default is not None or _positive(value):
                honoured.append(flag.key)
            continue
        if flag.default is None or _asks(flag, value):
            out.append(
                Finding(
                    "flags",
                    flag.level,
                    f"the drafter's config sets {flag.key} = {_show(value)} ({where}), which vLLM "
                    f"{shown} does not read there: {flag.ignored}",
                    _fix(flag, where, value, release, shown, upgrade or Upgrade()),
                )
            )
    if not out and honoured:
        out.append(
            Finding(
                "flags", OK, f"drafter flags read by vLLM {vllm_version}: {', '.join(honoured)}"
            )
        )
    return out


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _strings(flag: Flag, declared: dict[str, object], vllm_version: str) -> list[Finding]:
    """A switch written as a string, or a count that is not a whole number: vLLM reads it other
    than the author meant."""
    out = []
    for where, value in declared.items():
        if flag.switch and isinstance(value, str):
            out.append(
                Finding(
                    "flags",
                    flag.level,
                    f"the drafter's {flag.key} is the string {_show(value)} ({where}): vLLM "
                    f"{vllm_version} tests it as a truth value, so it means {_show(bool(value))}",
                    "write it as JSON true or false, without quotes",
                )
            )
        elif flag.key == "num_aux_hidden_states" and not _positive(value):
            out.append(
                Finding(
                    "flags",
                    PROBLEM,
                    f"the drafter's num_aux_hidden_states is {_show(value)} ({where}), not a "
                    f"whole number of layers: vLLM {vllm_version} cannot size the fc with it",
                    "write the number of aux layers the drafter takes, e.g. 3",
                )
            )
    return out


def aux_count(config: dict[str, Any], vllm_version: str) -> int:
    """How many aux layers the release builds the drafter's fc for: three before 0.22.0; from it,
    ``num_aux_hidden_states``, else as many as the nested aux-layer ids name, else three."""
    if release_version(vllm_version) < AUX_COUNT_READ_FROM:
        return DEFAULT_AUX_COUNT
    stated = config.get("num_aux_hidden_states")
    if isinstance(stated, int) and _positive(stated):
        return stated
    eagle = config.get("eagle_config")
    ids = eagle.get(AUX_KEY) if isinstance(eagle, dict) else None
    return len(ids) if isinstance(ids, list) and ids else DEFAULT_AUX_COUNT
