"""The first release a family's model file is in has one owner: the built-in pins. doctor reads
it from there, so a re-pin moves what it says."""

from __future__ import annotations

from packaging.version import Version

from vllm_patcher.catalogue.model import Catalogue
from vllm_patcher.catalogue.shipped import first_release_with
from vllm_patcher.doctor.checks import KIMI_K25_MODEL, MINIMAX_M2_MODEL

from ..conftest import CATALOGUE


def test_the_first_release_of_each_family_model_is_the_first_built_in_pin_that_touches_it() -> None:
    assert first_release_with(CATALOGUE, KIMI_K25_MODEL) == Version("0.15.0")
    assert first_release_with(CATALOGUE, MINIMAX_M2_MODEL) == Version("0.11.1")


def test_a_file_no_built_in_pin_touches_has_no_first_release() -> None:
    assert first_release_with(CATALOGUE, "vllm/nowhere.py") is None
    assert first_release_with(Catalogue(()), KIMI_K25_MODEL) is None
