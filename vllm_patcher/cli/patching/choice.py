"""Which patches a patching command works on: the names given (with what they need), the ones a
``--model`` needs, pyproject's ``select``, or what an earlier ``apply`` chose for this environment
(``patching.chosen``); with none of these, every patch."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import click

from ...catalogue.model import Catalogue
from ...catalogue.targets import family_of, pulled_in, with_needs
from ...errors import BadSetting, StateError, UnsupportedRelease
from ...install.target import Target
from ...patching import chosen as chosen_mod
from ..base import Options, check_names

MODEL_HELP = (
    "The target model you serve (a directory, or a Hugging Face repo id in the local cache; its "
    "config.json is read offline): only the patches its family needs on this release."
)


def model_option(f: Any) -> Any:
    return click.option("--model", "model", metavar="DIR|REPO", help=MODEL_HELP)(f)


class Selection(NamedTuple):
    catalogue: Catalogue  # the whole catalogue, the chosen patches selected (none: every one)
    choice: chosen_mod.Choice | None  # what this run chose (apply records it), or None
    source: str  # "names", "model", "pyproject", "recorded" or "every"
    pulled: dict[str, str]  # patch -> the named patch that needs it (added to the names)
    family: str | None = None  # the --model's family


def family_patches(opts: Options, model: str, catalogue: Catalogue) -> tuple[str, tuple[str, ...]]:
    """The family of the ``--model`` target and its patches (needs included): a usage error for
    a drafter or a model no patch here is for."""
    from ...models.configs import read_config
    from ...models.hub import locate_model
    from ...models.roles import described, looks_like_drafter

    source = locate_model(model, "model", opts.hub_python)
    config = read_config(Path(source.path), "model")
    if looks_like_drafter(config):
        raise BadSetting(
            f"--model {model} is an EAGLE-3 drafter ({described(config)}); give the target "
            "model it drafts for"
        )
    text = config.get("text_config")
    types = [config.get("model_type"), text.get("model_type") if isinstance(text, dict) else None]
    found = family_of([t for t in types if isinstance(t, str)], catalogue)
    if found is None:
        raise BadSetting(
            f"--model {model}: no patch here is for its model type ({described(config)}): "
            "vLLM serves EAGLE-3 for it on its own (Llama, Qwen2, Qwen3, ...) or not at all, "
            "and nothing here changes that; `vllm-patcher list` shows the families it patches, "
            "`doctor --model ... --drafter ...` checks your pair"
        )
    return found.name, found.patches


def select(
    opts: Options, target: Target, names: tuple[str, ...] = (), model: str | None = None
) -> Selection:
    check_names(*names)
    if model is not None and not model.strip():
        raise BadSetting("--model needs the target model's directory or repo id")
    if names and model is not None:
        raise BadSetting("give patch NAMES or --model, not both")
    from ...catalogue.folders import user_folders

    _, select_list = user_folders(opts.patch_dirs)
    whole = opts.whole()
    if model is not None:
        family, found = family_patches(opts, model, whole)
        patches = with_needs(whole, found)
        _refuse_uncovered(whole, patches, family, target.version)
        choice = chosen_mod.Choice(patches, (model,))
        return Selection(whole.select(patches), choice, "model", {}, family)
    if names:
        whole.select(names)  # an unknown name is refused by name, before needs are read
        # what a patch needs matters only where the patch itself does something
        active = [n for n in names if _needed(whole, n, target.version)]
        full = tuple(sorted({*names, *with_needs(whole, active)}, key=whole.order))
        choice = chosen_mod.Choice(full)
        return Selection(whole.select(full), choice, "names", pulled_in(whole, active))
    if select_list:
        return Selection(whole.select(select_list), None, "pyproject", {})
    recorded = chosen_mod.read(target.site_packages)
    if recorded is not None:
        unknown = [n for n in recorded.patches if n not in whole.names]
        if unknown:  # judging without them could call a venv ready that is not
            raise StateError(
                f"the patches chosen for this environment include {', '.join(unknown)}, which "
                "this run does not know: give their folder with --patches DIR (or revert to "
                "forget the choice)"
            )
        return Selection(whole.select(recorded.patches), None, "recorded", {})
    return Selection(whole, None, "every", {})


def _refuse_uncovered(
    catalogue: Catalogue, patches: tuple[str, ...], family: str, version: str
) -> None:
    """A release a patch of the family does not reach (before its first release: GLM-4.7-Flash
    before 0.15.0, Granite 4 before 0.17.0) cannot serve EAGLE-3 for that target, patched or not:
    never a green "not needed here"."""
    for name in patches:
        patch = catalogue.get(name)
        if patch is None or patch.covers(version) or patch.is_upstream(version):
            continue
        raise UnsupportedRelease(
            f"vLLM {version} cannot serve EAGLE-3 for a {family} target, and {name} does not "
            f"patch it (releases {patch.releases}); upgrade vLLM to a release it covers "
            "(vllm-patcher list shows them)"
        )


def _needed(catalogue: Catalogue, name: str, version: str) -> bool:
    patch = catalogue.get(name)
    return patch is not None and patch.covers(version) and not patch.is_upstream(version)


def said(sel: Selection) -> str | None:
    """The stderr line naming the chosen set, or None when every patch is judged."""
    chosen = [n for n in sel.catalogue.names if n in sel.catalogue.selected]
    if sel.source == "model":
        return f"--model: a {sel.family} target's patches: {', '.join(chosen)}"
    if sel.source == "recorded":
        return f"judging the patches chosen at apply: {', '.join(chosen)} (others: not chosen)"
    return None
