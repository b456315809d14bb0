"""Each transform on the real pristine sources of every pinned release."""

from __future__ import annotations

import difflib
from pathlib import Path

import libcst as cst
import pytest

from vllm_patcher.errors import PatchShapeError
from vllm_patcher.transforms import allow_list, codemod, image_token_kimi, supports_eagle3

from ..conftest import CATALOGUE, DEEPSEEK_RELEASES, KIMI_RELEASES

SPEC = "vllm/config/speculative.py"
EAGLE = "vllm/v1/spec_decode/eagle.py"
DEEPSEEK = "vllm/model_executor/models/deepseek_v2.py"
KIMI = "vllm/model_executor/models/kimi_k25.py"


def removed_lines(before: str, after: str) -> list[str]:
    """Original lines that the rewrite replaced or deleted (everything else is byte-identical)."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    out: list[str] = []
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            out.extend(a[i1:i2])
    return out


def read(trees: dict[str, Path], version: str, rel: str) -> str:
    return (trees[version] / rel).read_text(encoding="utf-8")


@pytest.mark.parametrize("version", DEEPSEEK_RELEASES)
def test_whitelist_adds_the_four_model_types_once(
    pristine_trees: dict[str, Path], version: str
) -> None:
    before = read(pristine_trees, version, SPEC)
    result = allow_list.append_deepseek_kimi(before)
    assert result.changed
    compile(result.source, SPEC, "exec")
    for name in ("deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25"):
        assert result.source.count(f'"{name}"') == before.count(f'"{name}"') + 1
    assert all("_supported = [" in line for line in removed_lines(before, result.source))
    again = allow_list.append_deepseek_kimi(result.source)
    assert not again.changed and again.source == result.source


@pytest.mark.parametrize("version", KIMI_RELEASES)
def test_image_token_branch_reads_media_placeholder(
    pristine_trees: dict[str, Path], version: str
) -> None:
    before = read(pristine_trees, version, EAGLE)
    result = image_token_kimi.rewrite(before)
    assert result.changed
    compile(result.source, EAGLE, "exec")
    assert (
        'elif self.get_model_name(target_model) == "KimiK25ForConditionalGeneration":'
        in result.source
    )
    assert "target_model.config.media_placeholder_token_id" in result.source
    # a pure insertion: not one original line changes
    assert removed_lines(before, result.source) == []
    branch = result.source.index("KimiK25ForConditionalGeneration")
    fallback = result.source.index("target_model.config.image_token_index", branch)
    assert branch < fallback, "the Kimi branch must come before the generic fallback"
    assert not image_token_kimi.rewrite(result.source).changed


@pytest.mark.parametrize("version", DEEPSEEK_RELEASES)
def test_supports_eagle3_on_deepseek_is_the_whole_change(
    pristine_trees: dict[str, Path], version: str
) -> None:
    before = read(pristine_trees, version, DEEPSEEK)
    result = supports_eagle3.rewrite_deepseek(before)
    assert result.changed
    compile(result.source, DEEPSEEK, "exec")
    tree = cst.parse_module(result.source)
    classes = {n.name.value: n for n in tree.body if isinstance(n, cst.ClassDef)}
    bases = [cst.Module([]).code_for_node(a.value) for a in classes["DeepseekV2ForCausalLM"].bases]
    assert "SupportsEagle3" in bases
    src = result.source
    assert "def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:" in src
    assert "return (2, num_layers // 2, num_layers - 3)" in src
    assert "self.aux_hidden_state_layers = tuple[int, ...]()" in src
    assert "hidden_states if residual is None else hidden_states + residual" in src
    assert "return hidden_states, aux_hidden_states" in src
    for line in removed_lines(before, src):
        assert "import" in line or "for layer in islice" in line or "SupportsLoRA" in line, line
    assert not supports_eagle3.rewrite_deepseek(src).changed


@pytest.mark.parametrize("version", KIMI_RELEASES)
def test_supports_eagle3_on_kimi_delegates_to_its_language_model(
    pristine_trees: dict[str, Path], version: str
) -> None:
    before = read(pristine_trees, version, KIMI)
    result = supports_eagle3.rewrite_kimi(before)
    assert result.changed
    compile(result.source, KIMI, "exec")
    if "self.language_model = DeepseekV2Model(" in before:
        # 0.15.x: the language model is a bare DeepseekV2Model; act on it directly.
        assert "self.language_model.aux_hidden_state_layers = layers" in result.source
    else:
        assert "self.language_model.set_aux_hidden_state_layers(layers)" in result.source
        assert "return self.language_model.get_eagle3_aux_hidden_state_layers()" in result.source
    for line in removed_lines(before, result.source):
        assert "import" in line or "SupportsPP" in line, line
    assert not supports_eagle3.rewrite_kimi(result.source).changed


def test_upstream_0_18_needs_nothing() -> None:
    from vllm_patcher.wheels import sources

    tree = sources.fetch_release("0.18.0", CATALOGUE.all_paths())
    assert not allow_list.append_deepseek_kimi((tree / SPEC).read_text()).changed
    assert not image_token_kimi.rewrite((tree / EAGLE).read_text()).changed
    assert not supports_eagle3.rewrite_deepseek((tree / DEEPSEEK).read_text()).changed
    assert not supports_eagle3.rewrite_kimi((tree / KIMI).read_text()).changed


def test_single_line_lists_keep_their_style() -> None:
    src = 'class SpeculativeConfig:\n    def f(self):\n        eagle3_target_supported = ["llama", "qwen"]\n'
    out = allow_list.append_deepseek_kimi(src).source
    assert (
        'eagle3_target_supported = ["llama", "qwen", "deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25"]\n'
        in out
    )


def test_exploded_list_with_trailing_comma_stays_exploded() -> None:
    head = "class SpeculativeConfig:\n    def f(self):\n"
    src = (
        head
        + '        aux_hidden_states_supported = [\n            "llama",\n            "qwen",\n        ]\n'
    )
    out = allow_list.append_deepseek_kimi(src).source
    added = "".join(
        f'            "{t}",\n' for t in ("deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25")
    )
    assert out == src.replace('            "qwen",\n', '            "qwen",\n' + added)


@pytest.mark.parametrize(
    ("func", "source", "fragment"),
    [
        (allow_list.append_deepseek_kimi, "x = 1\n", "no EAGLE-3 allow-list"),
        (
            allow_list.append_deepseek_kimi,
            "class C:\n    def f(self):\n        eagle3_target_supported = [1]\n",
            "other than plain strings",
        ),
        (allow_list.append_deepseek_kimi, "def f(:\n", "not valid Python"),
        (image_token_kimi.rewrite, "if a:\n    pass\nelse:\n    pass\n", "no image-token fallback"),
        (
            supports_eagle3.rewrite_deepseek,
            "from .interfaces import SupportsPP\n",
            "DeepseekV2Model",
        ),
        (
            supports_eagle3.rewrite_kimi,
            "from .interfaces import SupportsPP\n"
            "class KimiK25ForConditionalGeneration(nn.Module):\n    x = 1\n",
            "has no __init__",
        ),
    ],
)
def test_unexpected_shapes_are_refused_with_a_reason(func, source: str, fragment: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(PatchShapeError) as info:
        func(source)
    assert fragment in info.value.message


def test_forward_without_the_layer_loop_is_refused(pristine_trees: dict[str, Path]) -> None:
    src = read(pristine_trees, "0.15.1", DEEPSEEK)
    broken = src.replace(
        "for layer in islice(self.layers, self.start_layer, self.end_layer):",
        "for layer in self.layers[self.start_layer:self.end_layer]:",
    )
    with pytest.raises(PatchShapeError) as info:
        supports_eagle3.rewrite_deepseek(broken)
    assert "for layer in islice" in info.value.message


# --- the family codemod on the shapes of Qwen3-VL (a VL wrapper, an inherited interface) -------

VL_SOURCE = """from .interfaces import (
    SupportsLoRA,  # LoRA adapters
    # pipeline stages
    SupportsPP,
)


class TinyLLMModel(TinyModel):
    def __init__(self, *, vllm_config, prefix=""):
        super().__init__(vllm_config=vllm_config, prefix=prefix)

    def forward(self, input_ids, positions, intermediate_tensors=None):
        hidden_states, residual = self.embed_tokens(input_ids), None
        for layer_idx, layer in islice(
            enumerate(self.layers), self.start_layer, self.end_layer
        ):
            hidden_states, residual = layer(positions, hidden_states, residual)
        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states


class TinyVLForConditionalGeneration(nn.Module, SupportsLoRA, SupportsPP):
    def __init__(self, *, vllm_config, prefix=""):
        super().__init__()
        self.language_model = TinyLLMForCausalLM(vllm_config=vllm_config)
"""


def _vl_family(interface: bool) -> object:
    from vllm_patcher.catalogue.family import Family, FamilyModel

    model = FamilyModel(
        file="vllm/model_executor/models/tiny_vl.py",
        causal_lm="TinyVLForConditionalGeneration",
        model="TinyLLMModel",
        inner="language_model.model",
        interface=interface,
    )
    return Family(name="Tiny-VL", model_types=("tiny_vl",), models=(model,))


def test_family_codemod_reaches_a_vl_wrappers_language_model_and_keeps_import_comments() -> None:
    from vllm_patcher.transforms import eagle3_family

    out = eagle3_family.rewrite(
        VL_SOURCE, "vllm/model_executor/models/tiny_vl.py", family=_vl_family(True),
        version="0.15.1",
    ).source  # fmt: skip
    # the exploded import gains the interface where it sorts; its comments stay where they were
    assert out.startswith(
        "from .interfaces import (\n    SupportsEagle3,\n    SupportsLoRA,  # LoRA adapters\n"
        "    # pipeline stages\n    SupportsPP,\n)\n"
    ), out[:200]
    # islice(enumerate(self.layers), ...) keeps its own (absolute) index for the capture
    assert "            if layer_idx in self.aux_hidden_state_layers:\n" in out
    assert "        self.language_model.model.aux_hidden_state_layers = layers\n" in out
    assert "        num_layers = len(self.language_model.model.layers)\n" in out
    compile(out, "tiny_vl.py", "exec")


def test_family_codemod_leaves_an_inheriting_causal_lm_alone() -> None:
    from vllm_patcher.transforms import eagle3_family

    out = eagle3_family.rewrite(
        VL_SOURCE, "vllm/model_executor/models/tiny_vl.py", family=_vl_family(False),
        version="0.14.1",
    ).source  # fmt: skip
    head, _, wrapper = out.partition("class TinyVLForConditionalGeneration")
    assert wrapper == VL_SOURCE.partition("class TinyVLForConditionalGeneration")[2]
    assert head.startswith(VL_SOURCE.partition("\n\n\n")[0])  # no interface imported
    assert "aux_hidden_states.append(" in head and "self.aux_hidden_state_layers = " in head


@pytest.mark.parametrize("version", ["0.11.0", "0.11.1", "0.12.0", "0.14.1", "0.15.1"])
def test_the_proposer_gives_a_qwen3_vl_drafter_its_image_token_id(version: str) -> None:
    """Each shape of the proposer's image-token branch (none in 0.11.0; Qwen2.5-VL alone in
    0.11.1; Qwen3-VL without its MoE in 0.12-0.14) ends naming both Qwen3-VL classes in the
    branch that reads image_token_id; 0.15.1, upstream, is left alone."""
    from vllm_patcher.transforms import image_token_qwen3_vl
    from vllm_patcher.wheels import sources

    src = (sources.fetch_release(version, [EAGLE]) / EAGLE).read_text(encoding="utf-8")
    result = image_token_qwen3_vl.rewrite(src)
    assert result.changed is (version != "0.15.1")
    out = result.source
    compile(out, EAGLE, "exec")
    branch = out.split("self.model.config.image_token_index = target_model.config.image_token_id")
    assert len(branch) == 2, version
    for name in ("Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration"):
        assert f'"{name}",' in branch[0][-400:], (version, name)  # in that branch's test
    assert "target_model.config.image_token_index" in branch[1]  # the fallback stays
    assert image_token_qwen3_vl.rewrite(out).changed is False
    assert removed_lines(src, out) == [] or version in ("0.11.0", "0.11.1")


@pytest.mark.parametrize(
    ("source", "wanted"),
    [
        (  # the last name's own comment stays on its line
            "from .interfaces import (\n    SupportsPP,\n    MixtureOfExperts,  # moe\n)\n",
            "from .interfaces import (\n    SupportsPP,\n    MixtureOfExperts,  # moe\n"
            "    SupportsEagle3,\n)\n",
        ),
        (  # a name imported under another keeps it
            "from .interfaces import SupportsLoRA as L, SupportsPP\n",
            "from .interfaces import SupportsEagle3, SupportsLoRA as L, SupportsPP\n",
        ),
    ],
)
def test_the_interfaces_import_gains_the_name_and_loses_nothing(source: str, wanted: str) -> None:
    from vllm_patcher.transforms._headers import interfaces_import

    module, changed = interfaces_import(cst.parse_module(source), ["SupportsEagle3"])
    assert changed and module.code == wanted


@pytest.mark.parametrize("version", ["0.18.0", "0.21.0"])
def test_family_codemod_leaves_a_model_that_captures_already_unchanged(version: str) -> None:
    """0.18.0 on: Qwen3-VL's language models capture through the mixin they inherit from
    Qwen3Model. The codemod adds nothing, not even the import (it used to add a second
    EagleModelMixin base and import it)."""
    from vllm_patcher.wheels import sources

    patch = CATALOGUE.get("eagle3-qwen3-vl")
    assert patch is not None
    changes = [c for c in patch.transforms if c.family is not None]
    tree = sources.fetch_release(version, [c.path for c in changes])
    assert len(changes) == 2
    for change in changes:
        source = (tree / change.path).read_text()
        assert "self._maybe_add_hidden_state(" in source  # upstream's capture, the mixin's
        got = codemod.rewrite(change, source, version)
        assert not got.changed and got.source == source, change.path
