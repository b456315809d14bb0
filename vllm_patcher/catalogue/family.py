"""A model family's EAGLE-3 backport as data: the ``[family]`` table of a built-in ``patch.toml``.

One description drives everything the family needs: the allow-list entry (``model_types``,
admitted exactly, through 0.21.x), the codemod that makes each model file EAGLE-3-capable
(``transforms/eagle3_family.py``) and the two behaviour checks every family gets from the check
library (``verify``)::

    [family]
    name = "Granite"                    # as users say it
    model_types = ["granite"]           # hf_text_config.model_type, each admitted exactly
    needs = ["supports-eagle3"]         # other built-ins its EAGLE-3 needs (GLM-5: DeepSeek's class)
    allow_list = false                  # the list admits it in every release ("qwen"): no change
    target = { kv_lora_rank = 64 }      # more config.json keys the tiny target needs (checks)

    [[family.model]]
    file = "vllm/model_executor/models/granite.py"
    causal_lm = "GraniteForCausalLM"    # the class the model runner gets
    model = "GraniteModel"              # the inner model whose forward captures
    capture = "hidden"                  # "stream" (default): hidden_states + residual;
                                        # "hidden": the layer adds its own residual
    index = "relative"                  # "relative" (default, upstream's): idx from 0 on the stage;
                                        # "absolute": enumerate(..., start=self.start_layer)
    inner = "model"                     # the causal LM's attribute holding the inner model
                                        # (a path through a VL wrapper: "language_model.model")
    model_file = "vllm/.../gemma3.py"   # the inner model lives in (and is rewritten by) another
                                        # entry's file: here only the causal LM is rewritten
    interface = false                   # the causal LM inherits SupportsEagle3 and its methods
                                        # from another entry's class: only the model is rewritten
    config = { embedding_multiplier = 3.0 }   # what the forward reads from config (checks)
    rewrite = false                     # checked, not rewritten (a class that already captures)
    releases = ">=0.11.1"               # the releases this entry describes (default: all); two
                                        # entries of one file describe a class renamed between them

An allow-list-only family's classes already capture (they inherit ``LlamaForCausalLM``): only
``SpeculativeConfig`` blocks them, and its ``[[family.model]]`` entries say ``rewrite = false``
(the checks still drive them). ``model`` is looked up in the file's module, then in
``llama.py`` (``LlamaModel`` behind ``Phi3ForCausalLM``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from keyword import iskeyword
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from ..errors import PatchFolderError
from ..releases import release_of

CAPTURES = ("stream", "hidden")
FAMILY_KEYS = {"name", "model_types", "model", "needs", "allow_list", "target"}
MODEL_KEYS = {
    "file", "causal_lm", "model", "capture", "index", "inner", "config", "rewrite", "releases",
    "interface", "model_file",
}  # fmt: skip
MODEL_TYPE = re.compile(r"[a-z0-9_]+")  # written into vLLM's source as a string literal
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a class or attribute name
ATTRIBUTES = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")  # inner's path
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 .+-]*")  # as users say it; one line, in a comment
INDEXES = ("relative", "absolute")
ALLOW_LIST_FILE = "vllm/config/speculative.py"


@dataclass(frozen=True)
class FamilyModel:
    """One model file of a family and the parameters its codemod and checks need."""

    file: str
    causal_lm: str
    model: str
    capture: str = "stream"
    index: str = "relative"
    inner: str = "model"
    config: tuple[tuple[str, Any], ...] = ()
    rewrite: bool = True
    releases: str = ""  # a version specifier; empty: every release of the patch
    interface: bool = True  # False: the causal LM inherits SupportsEagle3 (not rewritten)
    model_file: str = ""  # the inner model's file when another entry's (a multimodal wrapper)

    @property
    def owns_model(self) -> bool:
        """The inner model class is in this entry's file (rewritten here)."""
        return self.model_file in ("", self.file)

    def on(self, version: str | None) -> bool:
        """Whether this entry describes ``version`` (a pre-release or local build counts as its
        release; no version: every entry)."""
        if not self.releases or version is None:
            return True
        return SpecifierSet(self.releases).contains(release_of(version), prereleases=True)


@dataclass(frozen=True)
class Family:
    name: str
    model_types: tuple[str, ...]
    models: tuple[FamilyModel, ...] = field(default=())
    needs: tuple[str, ...] = ()
    allow_list: bool = True  # False: every release's list already admits its model types
    target: tuple[tuple[str, Any], ...] = ()

    def as_json(self, version: str | None = None) -> dict[str, Any]:
        """What the probe's free checks read (``checklib.eagle3.family_checks``): the entries
        that describe ``version``."""
        return {
            "name": self.name,
            "model_types": list(self.model_types),
            "target": dict(self.target),
            "models": [
                {
                    "module": _module(m.file),
                    "model_module": _module(m.model_file or m.file),
                    "causal_lm": m.causal_lm,
                    "model": m.model,
                    "capture": m.capture,
                    "inner": m.inner,
                    "config": dict(m.config),
                    "rewrite": m.rewrite,
                }
                for m in self.models
                if m.on(version)
            ],
        }


def _plain(value: Any) -> bool:
    """A value a config.json can hold as TOML gives it (no dates, no tables)."""
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return isinstance(value, (str, int, float, bool))


def _module(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def _text(raw: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = raw.get(key, default)
    if not isinstance(value, str) or not value:
        raise PatchFolderError(f"{where}: [family] needs {key} as a non-empty string")
    return value


def _choice(raw: dict[str, Any], key: str, choices: tuple[str, ...], where: str) -> str:
    value = _text(raw, key, where, choices[0])
    if value not in choices:
        raise PatchFolderError(f"{where}: {key} = {value!r}; use one of {', '.join(choices)}")
    return value


def _unknown(raw: dict[str, Any], keys: set[str], table: str, where: str) -> None:
    unknown = sorted(set(raw) - keys)
    if unknown:
        raise PatchFolderError(f"{where}: unknown key {unknown[0]!r} in {table}")


def _model(m: dict[str, Any], where: str) -> FamilyModel:
    """One ``[[family.model]]`` entry, checked."""
    _unknown(m, MODEL_KEYS, "[[family.model]]", where)
    config = m.get("config", {})
    if not isinstance(config, dict) or not all(_plain(v) for v in config.values()):
        raise PatchFolderError(
            f"{where}: a [[family.model]] config must be a table of strings, numbers, booleans "
            "or lists"
        )
    flags = {key: m.get(key, True) for key in ("rewrite", "interface")}
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise PatchFolderError(f"{where}: a [[family.model]] {key} must be true or false")
    file = _file(m, "file", where)
    model_file = _file(m, "model_file", where) if "model_file" in m else ""
    names = {k: _text(m, k, where, "model" if k == "inner" else None) for k in
             ("causal_lm", "model", "inner")}  # fmt: skip
    for key, value in names.items():
        keyword = any(iskeyword(part) for part in value.split("."))
        if keyword or not (ATTRIBUTES if key == "inner" else IDENTIFIER).fullmatch(value):
            raise PatchFolderError(f"{where}: [[family.model]] {key} = {value!r} is not a name")
    return FamilyModel(
        file=file,
        causal_lm=names["causal_lm"],
        model=names["model"],
        capture=_choice(m, "capture", CAPTURES, where),
        index=_choice(m, "index", INDEXES, where),
        inner=names["inner"],
        config=tuple(sorted(config.items())),
        rewrite=flags["rewrite"],
        releases=_releases(m, where),
        interface=flags["interface"],
        model_file=model_file,
    )


def _file(m: dict[str, Any], key: str, where: str) -> str:
    file = _text(m, key, where)
    if not (file.startswith("vllm/") and file.endswith(".py") and ".." not in file.split("/")):
        raise PatchFolderError(
            f"{where}: [[family.model]] {key} = {file!r}; name a vllm/....py file of the release"
        )
    return file


def _releases(m: dict[str, Any], where: str) -> str:
    value = m.get("releases", "")
    try:
        SpecifierSet(value) if isinstance(value, str) else None
    except InvalidSpecifier:
        value = None
    if not isinstance(value, str):
        raise PatchFolderError(
            f"{where}: a [[family.model]] releases = {m.get('releases')!r}; give a version "
            'specifier such as ">=0.11.1"'
        )
    return value


def read_family(raw: object, where: str) -> Family:
    """The ``[family]`` table of a patch.toml, checked; a PatchFolderError names what is wrong."""
    if not isinstance(raw, dict):
        raise PatchFolderError(f"{where}: [family] must be a table")
    _unknown(raw, FAMILY_KEYS, "[family]", where)
    types = raw.get("model_types")
    if not (isinstance(types, list) and types and all(isinstance(t, str) and t for t in types)):
        raise PatchFolderError(f"{where}: [family] needs model_types, a list of model_type names")
    bad = [t for t in types if not MODEL_TYPE.fullmatch(t)]
    if bad or len(set(types)) != len(types):
        raise PatchFolderError(
            f"{where}: [family] model_types {types!r}: each a distinct model_type name "
            "(lower-case letters, digits, _)"
        )
    name = _text(raw, "name", where)
    if not NAME.fullmatch(name):
        raise PatchFolderError(
            f"{where}: [family] name = {name!r}; one line of letters, digits, spaces, . + -"
        )
    models = raw.get("model", [])
    if not isinstance(models, list) or not all(isinstance(m, dict) for m in models):
        raise PatchFolderError(f"{where}: [[family.model]] must be an array of tables")
    out = [_model(m, where) for m in models]
    files = {m.file for m in out}
    for m in out:
        if m.model_file and (m.model_file == m.file or m.model_file not in files):
            raise PatchFolderError(
                f"{where}: [[family.model]] model_file = {m.model_file!r}; name another entry's "
                "file, the one whose codemod rewrites the inner model"
            )
    needs = raw.get("needs", [])
    if not (isinstance(needs, list) and all(isinstance(n, str) and n for n in needs)):
        raise PatchFolderError(f"{where}: [family] needs must be a list of patch names")
    allow = raw.get("allow_list", True)
    if not isinstance(allow, bool):
        raise PatchFolderError(f"{where}: [family] allow_list must be true or false")
    target = raw.get("target", {})
    if not isinstance(target, dict) or not all(_plain(v) for v in target.values()):
        raise PatchFolderError(
            f"{where}: [family] target must be a table of strings, numbers, booleans or lists"
        )
    return Family(
        name,
        tuple(types),
        tuple(out),
        tuple(needs),
        allow,
        tuple(sorted(target.items())),
    )
