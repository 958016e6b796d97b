"""Profiles checked against the seed's known mistakes and the installed vLLM's own parser."""

import os
from dataclasses import replace
from pathlib import Path

import pytest
from slogate.launch import launcher, validate
from slogate.launch.installation import VllmInstall
from slogate.launch.profile import load_profile
from slogate.launch.validate import ProfileInvalid, check_known_mistakes, check_with_vllm, vllm_verdicts


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


BUILTIN = ("cpu-demo", "cpu-demo-baseline", "cpu-tiny", "baseline", "tuned", "tuned-awq")
REJECTED = [
    (
        {"enable-prefix-cache": True},
        "--enable-prefix-cache is not a flag of the installed vLLM 0.32.0; did you mean --enable-prefix-caching?",
    ),
    ({"max-model-len": "lots"}, "vLLM 0.32.0 rejects the arguments: vllm serve: error: argument --max-model-len"),
    ({"disable-log-requests": True}, "is not a flag of the installed vLLM"),
]


@pytest.fixture(scope="module")
def verdicts() -> tuple[str, list[str | None]]:
    """The built-in profiles, then each of REJECTED's variants of cpu-demo, through the installed
    vLLM's parser in one start of it (importing vLLM takes seconds)."""
    demo = load_profile("cpu-demo")
    try:
        vllm = launcher.locate_vllm(demo, install=False)
    except Exception as e:
        if os.environ.get("SLOGATE_REQUIRE_VLLM") == "1":
            raise
        pytest.skip(str(e))
    bad = [replace(demo, args={**demo.args, **args}) for args, _ in REJECTED]
    return vllm_verdicts(vllm, *(load_profile(n) for n in BUILTIN), *bad)


@pytest.mark.vllm
def test_the_installed_parser_accepts_every_builtin_profile(verdicts) -> None:
    # The GPU profiles' flags exist in the CPU build too: its parser is the same.
    version, rejections = verdicts
    assert version == "0.32.0" and rejections[: len(BUILTIN)] == [None] * len(BUILTIN)


@pytest.mark.vllm
@pytest.mark.parametrize(("i", "expected"), [(i, expected) for i, (_, expected) in enumerate(REJECTED)])
def test_the_installed_parser_rejects_unknown_flags_and_bad_values(verdicts, i: int, expected: str) -> None:
    rejection = verdicts[1][len(BUILTIN) + i]
    assert rejection is not None and rejection.startswith(f"{load_profile('cpu-demo').source}: ")
    assert expected in rejection


def test_check_with_vllm_raises_the_first_rejection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validate, "vllm_verdicts", lambda vllm, *profiles: ("0.32.0", [None, "b.yaml: no", "c: no"]))
    with pytest.raises(ProfileInvalid, match=r"^b\.yaml: no$"):
        check_with_vllm(VllmInstall(Path("python"), "cpu"), load_profile("cpu-demo"))
    monkeypatch.setattr(validate, "vllm_verdicts", lambda vllm, *profiles: ("0.32.0", [None]))
    assert check_with_vllm(VllmInstall(Path("python"), "cpu"), load_profile("cpu-demo")) == "0.32.0"
