"""The arguments a user gives ``vllm serve``, read just enough to start that server ourselves:
the model (first, or ``--model``), the speculative config (rewritten per k), and the host and
port (replaced: our servers listen on 127.0.0.1 and a free port)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import BadSetting

SPEC = "--speculative-config"
REPLACED = ("--host", "--port")  # ours: 127.0.0.1 and a free port
VALUED = ("--model", SPEC, *REPLACED, "--served-model-name", "--tokenizer")


@dataclass(frozen=True)
class ServeArgs:
    model: str
    rest: tuple[str, ...]  # everything else, in the user's order
    speculative: dict[str, Any] | None = None
    served_name: str | None = None
    tokenizer: str | None = None
    replaced: tuple[str, ...] = field(default=())  # the user's --host/--port, not used

    def with_k(self, k: int) -> list[str]:
        """The arguments after the model for ``k`` draft tokens (0: without speculation)."""
        if k == 0:
            return list(self.rest)
        if self.speculative is None:
            raise BadSetting(
                f'k = {k} needs the drafter: give vllm serve\'s {SPEC} \'{{"method": "eagle3", '
                '"model": DRAFTER, ...}\' after --'
            )
        spec = {**self.speculative, "num_speculative_tokens": k}
        return [*self.rest, SPEC, json.dumps(spec)]


def _split(arg: str) -> tuple[str, str | None]:
    name, eq, value = arg.partition("=")
    return (name, value) if eq else (arg, None)


def parse(argv: Sequence[str]) -> ServeArgs:
    """``MODEL [OPTIONS]`` or ``--model MODEL [OPTIONS]``, as ``vllm serve`` takes them."""
    args = list(argv)
    if not args:
        raise BadSetting("give the arguments of vllm serve after --, the model first")
    found: dict[str, str] = {}
    rest: list[str] = []
    model = None
    if not args[0].startswith("-"):
        model = args.pop(0)
    i = 0
    while i < len(args):
        name, value = _split(args[i])
        if name.startswith(SPEC + "."):
            raise BadSetting(
                f"{name}: give {SPEC} as one JSON object, so each k can be written into it"
            )
        if name in VALUED:
            if value is None:
                if i + 1 >= len(args):
                    raise BadSetting(f"{name} needs a value")
                value = args[i + 1]
                i += 1
            if name in ("--served-model-name", "--tokenizer"):
                rest += [name, value]
            found[name] = value
        else:
            rest.append(args[i])
        i += 1
    model = model or found.get("--model")
    if not model:
        raise BadSetting("give the model first after --, as vllm serve takes it")
    speculative = None
    if SPEC in found:
        try:
            speculative = json.loads(found[SPEC])
        except ValueError as exc:
            raise BadSetting(f"{SPEC} is not JSON: {exc}") from None
        if not isinstance(speculative, dict):
            raise BadSetting(f"{SPEC} must be a JSON object")
    return ServeArgs(
        model=model,
        rest=tuple(rest),
        speculative=speculative,
        served_name=found.get("--served-model-name"),
        tokenizer=found.get("--tokenizer"),
        replaced=tuple(n for n in REPLACED if n in found),
    )
