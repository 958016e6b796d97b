"""Profiles checked against the seed's known mistakes and the installed vLLM's own parser."""

import os
from dataclasses import replace
from pathlib import Path

import pytest
from slogate.launch import launcher
from slogate.launch.profile import load_profile
from slogate.launch.validate import ProfileInvalid, check_known_mistakes, check_with_vllm


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"args": {"backend": "vllm-flash-attn"}}, "--attention-backend FLASH_ATTN"),
        ({"args": {"disable-log-requests": True}}, "--disable-log-requests was removed"),
        ({"env": {"VLLM_ATTENTION_BACKEND": "FLASH_ATTN"}}, "VLLM_ATTENTION_BACKEND is ignored by current vLLM"),
        ({"model": "TheBloke/Qwen2.5-7B-Instruct-AWQ"}, "official AWQ checkpoint is Qwen/Qwen2.5-7B-Instruct-AWQ"),
    ],
)
def test_the_seed_mistakes_get_specific_messages(change: dict, expected: str) -> None:
    profile = load_profile("tuned")
    merged = {k: {**getattr(profile, k), **v} if isinstance(v, dict) else v for k, v in change.items()}
    with pytest.raises(ProfileInvalid, match=r"tuned\.yaml: field") as err:
        check_known_mistakes(replace(profile, **merged))
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_builtin_profiles_have_none_of_the_seed_mistakes() -> None:
    for path in Path(load_profile("tuned").source).parent.glob("*.yaml"):
        check_known_mistakes(load_profile(str(path)))


@pytest.fixture(scope="module")
def installed_vllm():
    try:
        return launcher.locate_vllm(load_profile("cpu-demo"), install=False)
    except Exception as e:
        if os.environ.get("SLOGATE_REQUIRE_VLLM") == "1":
            raise
        pytest.skip(str(e))


@pytest.mark.vllm
def test_the_installed_parser_accepts_every_builtin_profile(installed_vllm) -> None:
    # The GPU profiles' flags exist in the CPU build too: its parser is the same.
    names = ("cpu-demo", "cpu-demo-baseline", "cpu-tiny", "baseline", "tuned", "tuned-awq")
    assert check_with_vllm(installed_vllm, *(load_profile(n) for n in names)) == "0.32.0"


@pytest.mark.vllm
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            {"enable-prefix-cache": True},
            "--enable-prefix-cache is not a flag of the installed vLLM 0.32.0; did you mean --enable-prefix-caching?",
        ),
        ({"max-model-len": "lots"}, "vLLM 0.32.0 rejects the arguments: vllm serve: error: argument --max-model-len"),
        ({"disable-log-requests": True}, "is not a flag of the installed vLLM"),
    ],
)
def test_the_installed_parser_rejects_unknown_flags_and_bad_values(installed_vllm, args: dict, expected: str) -> None:
    profile = load_profile("cpu-demo")
    with pytest.raises(ProfileInvalid) as err:
        check_with_vllm(installed_vllm, replace(profile, args={**profile.args, **args}))
    assert expected in str(err.value)
