"""The arguments a user gives ``vllm serve``, read just enough to start that server ourselves:
the model (first, or ``--model``), the speculative config (rewritten per k), and the host and
port (replaced: our servers listen on 127.0.0.1 and a free port)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import BadSetting

SPEC = "--speculative-config"
REPLACED = ("--host", "--port")  # ours: 127.0.0.1 and a free port
KEPT = ("--served-model-name", "--tokenizer", "--api-key")  # read, and given to the server too
VALUED = ("--model", SPEC, *REPLACED, *KEPT)
PIPELINE = "--pipeline-parallel-size"
ALIASES = {"-sc": SPEC, "-pp": PIPELINE}  # vLLM's short spellings (0.31: engine/arg_utils.py)
# the server would not answer plain HTTP on 127.0.0.1 and the port we give it
REFUSED = ("--uds", "--ssl-keyfile", "--ssl-certfile")


@dataclass(frozen=True)
class ServeArgs:
    model: str
    rest: tuple[str, ...]  # everything else, in the user's order
    speculative: dict[str, Any] | None = None
    served_name: str | None = None
    tokenizer: str | None = None
    replaced: tuple[str, ...] = field(default=())  # the user's --host/--port, not used
    api_key: str | None = None  # --api-key: the requests we send carry it

    def server_key(self) -> str | None:
        """The key the server will ask for: its --api-key, else VLLM_API_KEY, as vLLM reads it."""
        return self.api_key or os.environ.get("VLLM_API_KEY")

    def pipeline_size(self) -> int | None:
        """The ``--pipeline-parallel-size`` (``-pp``) given, the last one winning as in
        argparse; None when none is given or its value is not a whole number (vLLM refuses that
        itself)."""
        size: int | None = None
        rest = list(self.rest)
        for i, arg in enumerate(rest):
            name, value = option_name(arg, (PIPELINE,), shortest=len("--pip"))
            if name != PIPELINE:
                continue
            if value is None:
                value = rest[i + 1] if i + 1 < len(rest) else ""
            try:  # as argparse's int() reads it: "+2" and "1_0" too
                size = int(value)
            except ValueError:
                size = None
        return size

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


def option_name(
    arg: str, known: Sequence[str] = (*VALUED, *REFUSED), shortest: int = len("--abc")
) -> tuple[str, str | None]:
    """An option's name as vLLM reads it (``_`` for ``-``, its aliases, an unambiguous prefix of
    one of ``known`` from ``shortest`` characters: argparse's allow_abbrev) and its ``=`` value."""
    name, eq, given = arg.partition("=")
    value: str | None = given
    if not eq:
        name, value = arg, None
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
        matches = [k for k in known if k.startswith(name)]
        if name not in matches and len(matches) == 1 and len(name) >= shortest:
            name = matches[0]
    return ALIASES.get(name, name), value


def parse(argv: Sequence[str]) -> ServeArgs:
    """``MODEL [OPTIONS]`` or ``--model MODEL [OPTIONS]``, as ``vllm serve`` takes them."""
    args = list(argv)
    if not args:
        raise BadSetting("give the arguments of vllm serve after --, the model first")
    found: dict[str, str] = {}
    rest: list[str] = []
    model = None
    if args[0] == "serve" or args[:2] == ["vllm", "serve"]:
        raise BadSetting(
            "give the arguments after `vllm serve` (the model first), without the words "
            "`vllm serve` themselves"
        )
    if not args[0].startswith("-"):
        model = args.pop(0)
    i = 0
    while i < len(args):
        name, value = option_name(args[i])
        if name.startswith(SPEC + "."):
            raise BadSetting(
                f"{name}: give {SPEC} as one JSON object, so each k can be written into it"
            )
        if name in REFUSED:
            raise BadSetting(
                f"{name}: the servers started here answer plain HTTP on 127.0.0.1 and a port of "
                "their own; drop it for the rehearsal or the sweep"
            )
        if name in VALUED:
            if value is None:
                if i + 1 >= len(args):
                    raise BadSetting(f"{name} needs a value")
                value = args[i + 1]
                i += 1
            if name in KEPT:
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
        api_key=found.get("--api-key"),
        replaced=tuple(n for n in REPLACED if n in found),
    )
