"""vllm_patcher/transforms/eagle3_family.py, the family codemod, driven through before/after
sources: one small model file and the exact file each generation and capture convention makes of
it (generation A before 0.18.0: the model keeps its own list of aux layers; B from 0.18.0: it
captures through ``EagleModelMixin``), and what the codemod leaves alone.

The real releases' files are rewritten by the same codemod in ``test_transforms.py`` and
``tests/catalogue/test_release_matrix.py`` (the pins equal its output today).
"""

from __future__ import annotations

import pytest

from vllm_patcher.catalogue.family import Family, FamilyModel
from vllm_patcher.transforms import eagle3_family

PATH = "vllm/model_executor/models/tiny.py"

BEFORE = """\
from torch import nn

from .interfaces import SupportsPP


class TinyModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList()

    def forward(self, input_ids, positions, hidden_states, residual):
        for layer in self.layers[self.start_layer : self.end_layer]:
            hidden_states, residual = layer(positions, hidden_states, residual)
        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states


class TinyForCausalLM(nn.Module, SupportsPP):
    def __init__(self, config):
        super().__init__()
        self.model = TinyModel(config)
"""


def _family(capture: str) -> Family:
    model = FamilyModel(file=PATH, causal_lm="TinyForCausalLM", model="TinyModel", capture=capture)
    return Family(name="Tiny", model_types=("tiny",), models=(model,))


# generation A, the residual stream (``h + residual``) entering each chosen layer
STREAM_A = """\
from torch import nn

from .interfaces import SupportsEagle3, SupportsPP


class TinyModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList()

        self.aux_hidden_state_layers = tuple[int, ...]()

    def forward(self, input_ids, positions, hidden_states, residual):
        aux_hidden_states = []
        for idx, layer in enumerate(self.layers[self.start_layer : self.end_layer]):
            if idx in self.aux_hidden_state_layers:
                aux_hidden_states.append(
                    hidden_states if residual is None else hidden_states + residual
                )
            hidden_states, residual = layer(positions, hidden_states, residual)
        hidden_states, _ = self.norm(hidden_states, residual)

        if len(aux_hidden_states) > 0:
            return hidden_states, aux_hidden_states
        return hidden_states


class TinyForCausalLM(nn.Module, SupportsPP, SupportsEagle3):
    def __init__(self, config):
        super().__init__()
        self.model = TinyModel(config)

    def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:
        self.model.aux_hidden_state_layers = layers

    def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:
        num_layers = len(self.model.layers)
        return (2, num_layers // 2, num_layers - 3)
"""

# generation B: the mixin captures ``h + residual`` before the first layer and after each
STREAM_B = """\
from torch import nn

from .interfaces import EagleModelMixin, SupportsEagle3, SupportsPP


class TinyModel(nn.Module, EagleModelMixin):
    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList()

    def forward(self, input_ids, positions, hidden_states, residual):
        aux_hidden_states = self._maybe_add_hidden_state([], 0, hidden_states, residual)
        for idx, layer in enumerate(self.layers[self.start_layer : self.end_layer]):
            hidden_states, residual = layer(positions, hidden_states, residual)
            self._maybe_add_hidden_state(
                aux_hidden_states, idx + 1, hidden_states, residual
            )
        hidden_states, _ = self.norm(hidden_states, residual)

        if len(aux_hidden_states) > 0:
            return hidden_states, aux_hidden_states
        return hidden_states


class TinyForCausalLM(nn.Module, SupportsPP, SupportsEagle3):
    def __init__(self, config):
        super().__init__()
        self.model = TinyModel(config)
"""

# a layer that adds its own residual: its input, as a tensor of its own (``+ 0``); the capture
# is the only difference from the residual stream's file
HIDDEN_A = STREAM_A.replace(
    "                aux_hidden_states.append(\n"
    "                    hidden_states if residual is None else hidden_states + residual\n"
    "                )\n",
    "                # a Tiny layer adds its own residual: this is the stream entering it,\n"
    "                # as a tensor of its own (the stream itself flows into the next layer)\n"
    "                aux_hidden_states.append(hidden_states + 0)\n",
)
# the same through the mixin: a zero residual, so each capture is ``h + 0``
HIDDEN_B = STREAM_B.replace(
    "        aux_hidden_states = self._maybe_add_hidden_state([], 0, hidden_states, residual)\n",
    "        # a Tiny layer adds its own residual: the stream it returns flows into the\n"
    "        # next layer; a zero residual makes each capture a tensor of its own\n"
    "        aux_hidden_states = self._maybe_add_hidden_state([], 0, hidden_states, 0)\n",
).replace(
    "                aux_hidden_states, idx + 1, hidden_states, residual\n",
    "                aux_hidden_states, idx + 1, hidden_states, 0\n",
)


@pytest.mark.parametrize(
    ("capture", "version", "after"),
    [
        ("stream", "0.15.1", STREAM_A),
        ("stream", "0.19.1", STREAM_B),
        ("hidden", "0.15.1", HIDDEN_A),
        ("hidden", "0.19.1", HIDDEN_B),
    ],
)
def test_the_codemod_makes_exactly_this_file(capture: str, version: str, after: str) -> None:
    got = eagle3_family.rewrite(BEFORE, PATH, family=_family(capture), version=version)
    assert got.changed and got.source == after
    compile(got.source, PATH, "exec")


@pytest.mark.parametrize(
    ("version", "after"), [("0.15.1", STREAM_A), ("0.19.1", STREAM_B), ("0.19.1", HIDDEN_B)]
)
def test_its_own_output_is_left_as_it_is(version: str, after: str) -> None:
    capture = "hidden" if after == HIDDEN_B else "stream"
    got = eagle3_family.rewrite(after, PATH, family=_family(capture), version=version)
    assert not got.changed and got.source == after


def test_a_model_that_captures_through_the_mixin_already_is_left_alone() -> None:
    """Upstream's own capture (a base class has the mixin): no base, no import, no change."""
    upstream = STREAM_B.replace(
        "class TinyModel(nn.Module, EagleModelMixin):", "class TinyModel(nn.Module):"
    )
    assert upstream != STREAM_B
    got = eagle3_family.rewrite(upstream, PATH, family=_family("stream"), version="0.19.1")
    assert not got.changed and got.source == upstream


def test_the_release_decides_the_generation() -> None:
    assert not eagle3_family.generation_b("0.17.1")
    assert eagle3_family.generation_b("0.18.0rc1")  # a pre-release counts as its release
    assert eagle3_family.generation_b("0.21.0+cpu")
