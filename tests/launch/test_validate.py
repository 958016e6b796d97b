"""Profiles checked against the seed's known mistakes and the installed vLLM's own parser, on
any machine: `slogate validate` and `slogate launch --dry-run` with the other build or no vLLM."""

import fcntl
import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from slogate.launch import launcher, validate
from slogate.launch.installation import VllmInstall, find_vllm
from slogate.launch.profile import Profile, load_profile
from slogate.launch.validate import (
    REMOVED_FLAGS,
    ProfileCheck,
    ProfileInvalid,
    VllmParser,
    check_known_mistakes,
    check_with_vllm,
    vllm_rejections,
)

from slogate import cli

_real_probe = validate.run_probe


class ParserAnswers:
    """What the installed vLLM's parser said of each argument list, shared by this module's tests in
    every pytest process of the session (a JSON file beside the workers' temp folders, named by the
    session's run id, under a lock): loading that parser takes ~10 s on 2 cores, and the parallel
    workers (pytest-xdist) would each load it for the tests they were given. The first miss judges
    every argument list the module needs (`judged_profiles`) in one start."""

    def __init__(self, folder: Path, run_id: str) -> None:
        self.folder = folder / f"vllm-parser-{run_id}"
        self.folder.mkdir(exist_ok=True)
        self.path = self.folder / "answers.json"

    def probe(self, vllm: VllmInstall, argvs: list[list[str]]) -> dict:
        """`validate.run_probe`'s answer, from the file where it holds every argument list asked for."""
        python = str(vllm.python)
        with (self.folder / "lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            saved = json.loads(self.path.read_text()) if self.path.exists() else {}
            known = saved.get(python, {"results": {}})
            if "version" not in known or any(json.dumps(a) not in known["results"] for a in argvs):
                known = self._judge_missing(vllm, known, argvs)
                partial = self.path.with_suffix(".partial")  # a process that dies writing leaves no half file
                partial.write_text(json.dumps({**saved, python: known}))
                partial.replace(self.path)
        return {"version": known["version"], "flags": known["flags"],
                "results": [known["results"][json.dumps(a)] for a in argvs]}  # fmt: skip

    def _judge_missing(self, vllm: VllmInstall, known: dict, argvs: list[list[str]]) -> dict:
        """`known` with the answers to `argvs` and the module's other argument lists it lacks, in one start."""
        module_argvs = [validate.parser_argv(p) for p in judged_profiles(vllm, self.folder)]
        wanted = [k for k in dict.fromkeys(map(json.dumps, [*argvs, *module_argvs])) if k not in known["results"]]
        out = _real_probe(vllm, [json.loads(key) for key in wanted])
        results = {**known["results"], **dict(zip(wanted, out["results"], strict=True))}
        return {"version": out["version"], "flags": out["flags"], "results": results}


@pytest.fixture(scope="module", autouse=True)
def each_argv_parsed_once(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every distinct argument list goes through the real parser once in the session (`ParserAnswers`);
    a test counts the starts a command asks for by wrapping this probe."""
    base = tmp_path_factory.getbasetemp()
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # the same in every worker of the session
    answers = ParserAnswers(base.parent, run_id) if run_id else ParserAnswers(base, "single")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(validate, "run_probe", answers.probe)
        yield


def installed_vllm() -> VllmInstall:
    found = find_vllm()
    if found is None:
        if os.environ.get("SLOGATE_REQUIRE_VLLM") == "1":
            pytest.fail("vLLM required but not installed")
        pytest.skip("vLLM is not installed (`slogate setup-cpu`)")
    return found


@pytest.fixture
def no_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A machine without vLLM: slogate's home and CPU venv empty, nothing on PATH, and a current
    interpreter that is not there (so it has no vLLM either)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("SLOGATE_HOME", str(empty))
    monkeypatch.setenv("SLOGATE_VLLM_VENV", str(empty / "venv-vllm-cpu"))
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(sys, "executable", str(empty / "python"))
    assert find_vllm() is None
    return empty


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


BUILTIN = ("cpu-demo", "cpu-demo-baseline", "cpu-tiny", "cpu-vision", "baseline", "tuned", "tuned-awq")
REJECTED = [
    (
        {"enable-prefix-cache": True},
        "--enable-prefix-cache is not a flag of the installed vLLM 0.32.0; did you mean --enable-prefix-caching?",
    ),
    ({"max-model-len": "lots"}, "vLLM 0.32.0 rejects the arguments: vllm serve: error: argument --max-model-len"),
    ({"disable-log-requests": True}, "is not a flag of the installed vLLM"),
]


BAD_VALUE = "extends: tuned\nargs: {max-model-len: lots}\n"


def other_build_flag(other: str) -> str:
    """A profile of the build that is not installed, with a flag the installed one does not know."""
    return f"extends: tuned\nbuild: {other}\nargs: {{only-on-the-{other}-build: 1}}\n"


def judged_profiles(vllm: VllmInstall, folder: Path) -> list[Profile]:
    """The built-in profiles, each of REJECTED's variants of cpu-demo, then the profiles of
    `test_validate_judges_several_profiles_with_one_parser_start` that are not built in (in `folder`)."""
    demo = load_profile("cpu-demo")
    bad = [replace(demo, args={**demo.args, **args}) for args, _ in REJECTED]
    (folder / "bad-value.yaml").write_text(BAD_VALUE)
    (folder / "other-build-flag.yaml").write_text(other_build_flag("gpu" if vllm.build == "cpu" else "cpu"))
    later = [load_profile(str(folder / name)) for name in ("bad-value.yaml", "other-build-flag.yaml")]
    return [*(load_profile(n) for n in BUILTIN), *bad, *later]


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str | None]]:
    """The built-in profiles, then each of REJECTED's variants of cpu-demo, through the installed
    vLLM's parser (one start of it for the session: `ParserAnswers`)."""
    try:
        vllm = launcher.locate_vllm(load_profile("cpu-demo"), install=False)
    except Exception as e:
        if os.environ.get("SLOGATE_REQUIRE_VLLM") == "1":
            raise
        pytest.skip(str(e))
    version, rejections = vllm_rejections(vllm, *judged_profiles(vllm, tmp_path_factory.mktemp("profiles")))
    return version, rejections[: len(BUILTIN) + len(REJECTED)]  # the last two are another test's


def test_the_installed_parser_accepts_every_builtin_profile(verdicts) -> None:
    # The GPU profiles' flags exist in the CPU build too: its parser is the same.
    version, rejections = verdicts
    assert version == "0.32.0" and rejections[: len(BUILTIN)] == [None] * len(BUILTIN)


@pytest.mark.parametrize(("i", "expected"), [(i, expected) for i, (_, expected) in enumerate(REJECTED)])
def test_the_installed_parser_rejects_unknown_flags_and_bad_values(verdicts, i: int, expected: str) -> None:
    rejection = verdicts[1][len(BUILTIN) + i]
    assert rejection is not None and rejection.startswith(f"{load_profile('cpu-demo').source}: ")
    assert expected in rejection


def test_check_with_vllm_raises_the_first_rejection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validate, "vllm_rejections", lambda vllm, *profiles: ("0.32.0", [None, "b.yaml: no", "c: no"]))
    with pytest.raises(ProfileInvalid, match=r"^b\.yaml: no$"):
        check_with_vllm(VllmInstall(Path("python"), "cpu"), load_profile("cpu-demo"))
    monkeypatch.setattr(validate, "vllm_rejections", lambda vllm, *profiles: ("0.32.0", [None]))
    assert check_with_vllm(VllmInstall(Path("python"), "cpu"), load_profile("cpu-demo")) == "0.32.0"


def slogate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], list[str]]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


JUDGED_BY = re.compile(
    r"checked by the seed-mistake rules and the argument parser of vLLM (\d+\.\d+\.\d+\S*), (cpu|gpu) build"
)


@pytest.mark.parametrize("name", ["tuned", "baseline", "tuned-awq"])
def test_dry_run_of_a_gpu_profile_works_with_whichever_vllm_is_here(name: str, capsys) -> None:
    found = installed_vllm()
    code, out, err = slogate(capsys, "launch", name, "--dry-run", "--port", "9000")
    assert code == 0, err
    profile = load_profile(name)
    python = str(found.python) if found.build == "gpu" else "python"  # the GPU build's placeholder
    assert out == [launcher.plan(profile, VllmInstall(Path(python), "gpu"), "127.0.0.1", 9000).shell()]
    assert f"{python} -m vllm.entrypoints.openai.api_server --model {profile.model} " in out[0]
    judged = next(line for line in err if line.startswith(f"slogate: {name}: valid; "))
    match = JUDGED_BY.search(judged)
    assert match and match.group(2) == found.build, judged
    if found.build == "cpu":  # the CPU build judged a GPU profile, and says so
        assert judged.endswith("for a gpu profile: a flag or choice only the gpu build has is a warning, not an error")
        assert any("note: the gpu build of vLLM is not installed here: `python` in the command" in e for e in err)
    assert not any(e.startswith(("slogate: warning:", "slogate: error:")) for e in err), err


def test_dry_run_without_vllm_checks_the_seed_rules_and_prints_the_command(no_vllm: Path, capsys) -> None:
    code, out, err = slogate(capsys, "launch", "tuned", "--dry-run")
    assert code == 0, err
    assert out[0].startswith("HF_HUB_OFFLINE=0 python -m vllm.entrypoints.openai.api_server --model Qwen/")
    assert "slogate: tuned: valid; checked by the seed-mistake rules only: no vLLM is installed here, " in err[0]
    code, out, err = slogate(capsys, "launch", "cpu-demo", "--dry-run")  # the CPU build's own place
    assert code == 0, err
    python = no_vllm / "venv-vllm-cpu" / "bin" / "python"
    assert f"{python} -m vllm.entrypoints.openai.api_server --model {no_vllm}/models/demo " in out[0]
    assert any("the cpu build of vLLM is not installed here" in e for e in err)


@pytest.mark.parametrize("command", ["launch", "validate"])
@pytest.mark.parametrize("vllm_visible", [True, False])
@pytest.mark.parametrize("flag", ["backend", "enable-prefix-cache"])
def test_a_seed_mistake_exits_2_with_its_one_line_message_anywhere(
    command: str, vllm_visible: bool, flag: str, tmp_path: Path, request: pytest.FixtureRequest, capsys
) -> None:
    if vllm_visible:
        installed_vllm()
    else:
        request.getfixturevalue("no_vllm")
    path = tmp_path / "p.yaml"
    path.write_text(f"extends: tuned\nargs: {{{flag}: true}}\n")
    argv = ["launch", str(path), "--dry-run"] if command == "launch" else ["validate", str(path)]
    code, out, err = slogate(capsys, *argv)
    assert (code, out) == (2, [])
    assert err == [f"slogate: error: {path.resolve()}: field 'args': {REMOVED_FLAGS[flag]}"]


def test_validate_judges_several_profiles_with_one_parser_start(tmp_path: Path, monkeypatch, capsys) -> None:
    found = installed_vllm()
    starts: list[int] = []
    probe = validate.run_probe

    def counted(vllm: VllmInstall, argvs: list[list[str]]) -> dict:
        starts.append(len(argvs))
        return probe(vllm, argvs)

    monkeypatch.setattr(validate, "run_probe", counted)
    bad_value = tmp_path / "bad-value.yaml"
    bad_value.write_text(BAD_VALUE)
    other = "gpu" if found.build == "cpu" else "cpu"
    elsewhere = tmp_path / "other-build-flag.yaml"  # a flag the judging build does not know
    elsewhere.write_text(other_build_flag(other))
    seed = tmp_path / "seed.yaml"
    seed.write_text("extends: tuned\nenv: {VLLM_ATTENTION_BACKEND: FLASH_ATTN}\n")
    names = ["tuned", "baseline", "tuned-awq", "cpu-demo", str(bad_value), str(elsewhere), str(seed), "no-such"]
    code, out, err = slogate(capsys, "validate", *names)
    assert code == 2
    assert starts == [6]  # one start for every profile without a seed mistake
    valid = [line.split(":")[0] for line in out]
    assert valid == ["tuned", "baseline", "tuned-awq", "cpu-demo", "other-build-flag"]
    assert all(JUDGED_BY.search(line) for line in out), out
    assert err[0].startswith("slogate: error: no profile named 'no-such'")
    assert f"slogate: error: {bad_value}: vLLM " in err[1] and "argument --max-model-len" in err[1]
    assert err[2].startswith(f"slogate: warning: {elsewhere}: field 'args': --only-on-the-{other}-build is not a flag")
    assert f"({found.build} build), which judged this {other} profile" in err[2]
    assert err[3].startswith(f"slogate: error: {seed}: field 'env': VLLM_ATTENTION_BACKEND is ignored")
    assert len(err) == 4


def test_across_builds_what_the_judge_does_not_know_is_a_warning_a_wrong_type_an_error() -> None:
    result = {
        "unknown": ["--gpu-memory-utilisation", "--only-here"],
        "errors": [
            [None, "vllm serve: error: argument --dtype: invalid choice: 'bogus' (choose from 'auto')"],
            [None, "vllm serve: error: argument --max-model-len: invalid int value: 'lots'"],
        ],
    }
    known = {"--gpu-memory-utilization", "--dtype", "--max-model-len"}
    judge = VllmParser("cpu", "0.32.0")
    gpu = validate._parser_check(load_profile("tuned"), judge, result, known)
    assert gpu.cross_build and not gpu.valid
    assert gpu.errors == (f"{gpu.profile.source}: vLLM 0.32.0 rejects the arguments: {result['errors'][1][1]}",)
    assert [w.split(": ", 1)[1] for w in gpu.warnings] == [
        "field 'args': --gpu-memory-utilisation is not a flag of vLLM 0.32.0 (cpu build), which judged this gpu "
        "profile: check it where the gpu build is installed; did you mean --gpu-memory-utilization?",
        "field 'args': --only-here is not a flag of vLLM 0.32.0 (cpu build), which judged this gpu profile: check "
        "it where the gpu build is installed",
        f"vLLM 0.32.0 (cpu build) rejects a choice of this gpu profile, which the gpu build may accept: "
        f"{result['errors'][0][1]}",
    ]
    cpu = validate._parser_check(load_profile("cpu-demo"), judge, result, known)  # its own build: all errors
    assert not cpu.cross_build and len(cpu.errors) == 4 and cpu.warnings == ()
    assert "--gpu-memory-utilisation is not a flag of the installed vLLM 0.32.0; did you mean" in cpu.errors[0]
    assert ProfileCheck(load_profile("tuned"), None).checked_by().startswith("checked by the seed-mistake rules only")
