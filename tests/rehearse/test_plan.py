"""What the rehearsal starts the server with, and what it refuses before starting one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_patcher.errors import BadSetting
from vllm_patcher.rehearse import run
from vllm_patcher.serving.args import parse
from vllm_patcher.wheels import sources

from ..conftest import CATALOGUE, assert_refused, make_venv, run_cli

SPEC = '{"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}'


@pytest.mark.parametrize(
    "given",
    [
        ["--load-format", "safetensors"],
        ["--load-format=safetensors"],
        ["--load_format", "safetensors"],
        ["--load-f", "safetensors"],  # vLLM's parser takes an unambiguous prefix
    ],
)
def test_the_users_load_format_is_replaced_by_dummy_and_named(given: list[str]) -> None:
    p = run.plan(parse(["/m", "--port", "9", *given, "--dtype", "bfloat16"]), False, False, 60)
    assert p.args.rest == ("--dtype", "bfloat16", "--load-format", "dummy")
    assert p.ignored == (
        "--port (the server listens on 127.0.0.1 and a free port)",
        "--load-format safetensors (rehearse reads no checkpoint: dummy)",
    )


def test_the_speculative_config_is_passed_on_and_real_drafter_gives_it_its_own_load() -> None:
    plain = run.plan(parse(["/m", "--speculative-config", SPEC]), False, True, 60)
    assert plain.args.rest[-2] == "--speculative-config"
    assert json.loads(plain.args.rest[-1]) == json.loads(SPEC)
    real = run.plan(parse(["/m", "--speculative-config", SPEC]), True, True, 60)
    spec = json.loads(real.args.rest[-1])
    assert spec["draft_load_config"] == {"load_format": "auto"} and spec["model"] == "/d"
    assert real.args.rest[:2] == ("--load-format", "dummy")  # the target stays random


def test_real_drafter_is_refused_without_a_drafter_or_on_a_release_without_draft_load_config() -> (
    None
):
    with pytest.raises(BadSetting, match="needs a drafter"):
        run.plan(parse(["/m"]), True, True, 60)
    with pytest.raises(BadSetting, match="doctor"):
        run.plan(parse(["/m", "--speculative-config", SPEC]), True, False, 60)


def test_draft_load_config_is_read_from_the_releases_own_source() -> None:
    assert not run.has_draft_load_config(sources.fetch_release("0.15.1", CATALOGUE.all_paths()))
    assert run.has_draft_load_config(sources.fetch_release("0.17.1", CATALOGUE.all_paths()))
    assert not run.has_draft_load_config(Path("/nonexistent"))


def test_the_command_refuses_before_starting_anything(tmp_path: Path) -> None:
    assert_refused(run_cli("rehearse"), 2, "give the arguments of vllm serve after --")
    assert_refused(run_cli("rehearse", "--ready-timeout", "inf", "--", "/m"), 2, "finite")
    venv = make_venv(tmp_path / "v", vllm=True)  # vLLM 0.15.1's files: no draft_load_config
    proc = run_cli(
        "--python", str(venv / "bin" / "python"), "rehearse", "--real-drafter", "--",
        "/m", "--speculative-config", SPEC,
    )  # fmt: skip
    assert_refused(proc, 2, "--real-drafter", "vllm-patcher doctor")
    proc = run_cli("--json", "rehearse", "--")
    assert proc.returncode == 2 and json.loads(proc.stdout)["command"] == "rehearse"


def _granite(tmp_path: Path, arch: str = "GraniteForCausalLM") -> str:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": [arch]}))
    return str(tmp_path)


@pytest.mark.parametrize(
    ("extra", "version", "arch"),
    [
        ((), "0.25.0", "GraniteForCausalLM"),  # fixed in the patch: nothing to warn of
        (("--enforce-eager",), "0.25.0", "GraniteForCausalLM"),
        ((), "0.21.0", "GraniteForCausalLM"),
        ((), "0.25.0", "LlamaForCausalLM"),
        ((), "not-a-version", "GraniteForCausalLM"),
    ],
)
def test_rehearse_says_up_front_when_it_walks_into_a_known_failure(
    tmp_path: Path, extra: tuple[str, ...], version: str, arch: str
) -> None:
    from vllm_patcher.cli.render.rehearse import opening
    from vllm_patcher.doctor import faults

    model = _granite(tmp_path, arch)
    spec = '{"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}'
    argv = [model, "--speculative-config", spec, *extra]
    p = run.plan(parse(argv), False, False, 60.0, None, "vllm-patcher apply")
    assert run.known_faults(p, version) == []  # none is open (doctor/faults.py FAULTS)
    assert not any(line.startswith("known failure") for line in opening(p, []))
    said = opening(p, [faults.GRANITE_DRAFTER_GRAPHS])  # how one is said, were it open
    assert said[-1].startswith("known failure (granite-drafter-graphs) of eagle3-granite's path")
    assert said[-1].endswith(f"Avoid it with {faults.GRANITE_DRAFTER_GRAPHS.workaround}")


def test_no_config_no_warning(tmp_path: Path) -> None:
    p = run.plan(parse([str(tmp_path / "absent")]), False, False, 60.0, None, "x")
    assert run.known_faults(p, "0.25.0") == []


@pytest.mark.parametrize(
    "spec", [None, '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}']
)
def test_no_known_fault_without_an_eagle3_drafter(tmp_path: Path, spec: str | None) -> None:
    model = _granite(tmp_path)
    extra = [] if spec is None else ["--speculative-config", spec]
    p = run.plan(parse([model, *extra]), False, False, 60.0, None, "x")
    assert run.known_faults(p, "0.25.0") == []


# --- pipeline parallelism: captures made on an earlier stage never reach the drafter -----------


def _target(tmp_path: Path, model_type: str) -> str:
    folder = tmp_path / model_type
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
    return str(folder)


@pytest.mark.parametrize(
    ("given", "version", "model_type", "refused"),
    [
        (("--pipeline-parallel-size", "2"), "0.15.1", "granitemoe", True),
        (("-pp", "4"), "0.21.0", "qwen3_next", True),
        (("--pipeline_parallel_size=2",), "0.15.1", "llama", True),  # before 0.30.0: every family
        (("--pipeline-parallel-size", "2", "-pp", "1"), "0.15.1", "granite", False),  # the last
        (("-pp", "1"), "0.15.1", "granite", False),
        ((), "0.15.1", "granite", False),
        (("-pp", "2"), "0.31.0", "llama", False),  # 0.30.0 on: llama carries its captures
        (("-pp", "2"), "0.31.0", "granite", True),  # ... a family backport does not
        (("-pp", "+2"), "0.15.1", "granite", True),  # argparse's int() reads "+2" as 2
        (("-pp", "²"), "0.15.1", "granite", False),  # nor a number to argparse: vLLM refuses it
    ],
)
def test_eagle3_with_pipeline_parallelism_is_refused_where_captures_cannot_cross_stages(
    tmp_path: Path, given: tuple[str, ...], version: str, model_type: str, refused: bool
) -> None:
    from vllm_patcher.doctor.checks import serve_pipeline_refusal

    argv = [_target(tmp_path, model_type), "--speculative-config", SPEC, *given]
    said = serve_pipeline_refusal(parse(argv), version)
    assert (said is not None) is refused, said
    if refused:
        assert said is not None and "does not pass the aux hidden states" in said
        assert "serve with --pipeline-parallel-size 1" in said
    # another drafter, or none, captures nothing: no refusal
    ngram = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'
    argv = [argv[0], "--speculative-config", ngram]
    assert serve_pipeline_refusal(parse([*argv, *given]), version) is None
    assert serve_pipeline_refusal(parse([argv[0], *given]), version) is None


def test_a_drafter_named_eagle3_without_a_method_is_eagle3_as_vllm_reads_it(tmp_path: Path) -> None:
    from vllm_patcher.doctor.checks import serve_pipeline_refusal

    spec = '{"model": "/d/Qwen3-VL-8B_eagle3", "num_speculative_tokens": 3}'
    argv = [_target(tmp_path, "qwen3_vl"), "--speculative-config", spec, "-pp", "2"]
    assert serve_pipeline_refusal(parse(argv), "0.11.0") is not None
    plain = '{"model": "/d/Qwen3-VL-8B_eagle", "num_speculative_tokens": 3}'  # EAGLE-1
    assert serve_pipeline_refusal(parse([argv[0], "-sc", plain, "-pp", "2"]), "0.11.0") is None


def test_a_hub_target_with_pipeline_parallelism_is_judged_by_the_release_alone() -> None:
    from vllm_patcher.doctor.checks import serve_pipeline_refusal

    argv = ["org/model", "--speculative-config", SPEC, "-pp", "2"]
    assert serve_pipeline_refusal(parse(argv), "0.21.0") is not None  # no release carries them
    assert serve_pipeline_refusal(parse(argv), "0.31.0") is None  # it depends on the family


def test_rehearse_and_sweep_refuse_pipeline_parallelism_before_starting_anything(
    tmp_path: Path,
) -> None:
    venv = make_venv(tmp_path / "v", vllm=True)  # vLLM 0.15.1's files
    target = _target(tmp_path, "granitemoe")
    serve = ["--", target, "--speculative-config", SPEC, "--pipeline-parallel-size", "2"]
    py = ["--python", str(venv / "bin" / "python")]
    said = ("--pipeline-parallel-size 2: vLLM 0.15.1 (before 0.30.0)", "--tensor-parallel-size")
    assert_refused(run_cli(*py, "rehearse", *serve), 2, *said)
    assert_refused(run_cli(*py, "payoff", "sweep", "--k", "0,2", *serve), 2, *said)
