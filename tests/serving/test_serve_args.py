"""The user's `vllm serve` arguments as the sweep reads them: the model, the speculative config
rewritten per k, our own host and port."""

from __future__ import annotations

import json

import pytest

from vllm_patcher.errors import BadSetting
from vllm_patcher.serving.args import parse
from vllm_patcher.serving.server import command

SPEC = '{"method": "eagle3", "model": "/m/drafter", "num_speculative_tokens": 5}'


def test_each_k_gets_the_users_speculative_config_with_its_own_draft_length_and_k0_none() -> None:
    args = parse(["/m/target", "--tensor-parallel-size", "8", "--speculative-config", SPEC])
    assert args.model == "/m/target"
    assert args.with_k(0) == ["--tensor-parallel-size", "8"]
    rest = args.with_k(2)
    assert rest[:3] == ["--tensor-parallel-size", "8", "--speculative-config"]
    assert json.loads(rest[3]) == {
        "method": "eagle3",
        "model": "/m/drafter",
        "num_speculative_tokens": 2,
    }


def test_the_users_host_and_port_are_replaced_by_loopback_and_a_free_port() -> None:
    args = parse(
        ["--model=/m/t", "--host", "0.0.0.0", "--port=8000", f"--speculative-config={SPEC}"]
    )
    cmd = command("/venv/bin/python", args, 41234)
    assert cmd[:5] == [
        "/venv/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/m/t",
    ]
    assert cmd[-4:] == ["--host", "127.0.0.1", "--port", "41234"]
    assert "0.0.0.0" not in cmd and "--port=8000" not in cmd
    assert args.replaced == ("--host", "--port")


def test_the_served_name_and_tokenizer_stay_in_the_command_and_are_known() -> None:
    args = parse(["/m/t", "--served-model-name", "tiny", "--tokenizer=/m/tok"])
    assert (args.served_name, args.tokenizer) == ("tiny", "/m/tok")
    assert args.with_k(0) == ["--served-model-name", "tiny", "--tokenizer", "/m/tok"]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        ([], "the model first"),
        (["--dtype", "bfloat16"], "the model first"),
        (["/m/t", "--speculative-config", "{not json"], "not JSON"),
        (["/m/t", "--speculative-config", "[1, 2]"], "JSON object"),
        (["/m/t", "--speculative-config.num_speculative_tokens", "3"], "one JSON object"),
        (["/m/t", "--port"], "--port needs a value"),
    ],
)
def test_arguments_the_sweep_cannot_use_are_refused_in_one_line(argv: list[str], said: str) -> None:
    with pytest.raises(BadSetting, match=said):
        parse(argv)


def test_a_draft_length_above_0_without_the_users_speculative_config_is_refused() -> None:
    with pytest.raises(BadSetting, match="needs the drafter"):
        parse(["/m/t"]).with_k(1)


def test_vllms_other_spellings_of_the_speculative_config_are_read_and_k0_drops_them() -> None:
    """vLLM reads ``_`` as ``-`` and has ``-sc`` (0.31): a k=0 baseline that kept them would
    still speculate."""
    spec = '{"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}'
    for flag in ("-sc", "--speculative_config", "--speculative-config"):
        args = parse(["/m", "--dtype", "bfloat16", flag, spec, "--served_model_name", "x"])
        assert args.speculative is not None and args.speculative["model"] == "/d", flag
        assert args.with_k(0) == ["--dtype", "bfloat16", "--served-model-name", "x"], flag
        assert args.served_name == "x"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["/m", "--uds", "/tmp/s.sock"], "--uds: the servers started here answer plain HTTP"),
        (["/m", "--ssl-keyfile=k.pem"], "--ssl-keyfile: the servers started here"),
        (["serve", "/m"], "without the words `vllm serve`"),
        (["vllm", "serve", "/m"], "without the words `vllm serve`"),
    ],
)
def test_what_a_server_started_here_could_not_answer_is_refused(argv: list[str], said: str) -> None:
    with pytest.raises(BadSetting) as refused:
        parse(argv)
    assert said in refused.value.message


def test_the_api_key_stays_with_the_server_and_is_known_to_the_requests() -> None:
    args = parse(["/m", "--api-key", "sekrit"])
    assert args.api_key == "sekrit" and args.with_k(0) == ["--api-key", "sekrit"]


def test_an_unambiguous_prefix_of_an_option_is_read_as_vllm_reads_it() -> None:
    """vLLM's parser takes ``--speculative`` for ``--speculative-config`` and ``--api-k`` for
    ``--api-key`` (argparse's abbreviations); so does the reader, from three letters on."""
    spec = '{"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}'
    args = parse(["/m", "--speculative", spec, "--api-k", "k", "--served-model", "x"])
    assert args.speculative is not None and args.api_key == "k" and args.served_name == "x"
    assert args.with_k(0) == ["--api-key", "k", "--served-model-name", "x"]
    with pytest.raises(BadSetting):
        parse(["/m", "--ssl-key", "k.pem"])
    assert parse(["/m", "--ssl", "x"]).rest == ("--ssl", "x")  # two of ours begin so: vLLM's call
