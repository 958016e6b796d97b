"""The workload's Locust options (command line, `locust.conf`, web UI form; in three groups of the
help: prompts and requests, conversations, datasets and traces) and the per-process workload built
from them. Secrets are never options: the API key comes from the environment only,
credentials in the --host URL become a header (slo/plugin/target.py)."""

from __future__ import annotations

import logging
import secrets
from typing import Any

import gevent.lock
from locust import events
from locust.runners import WorkerRunner
from slogate.locustfiles.load import datasets, replay, server, trace
from slogate.locustfiles.load.endpoints import ENDPOINTS
from slogate.locustfiles.load.workload import Workload, WorkloadConfig, dataset_tags, parse_range
from slogate.slo.gate.judge import UnknownClass, check_classes
from slogate.slo.plugin import target
from slogate.slo.plugin.control import usage_exit
from slogate.slo.plugin.gate import gate_for
from slogate.slo.plugin.parser import group

log = logging.getLogger("slogate.workload")


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    d = WorkloadConfig()
    prompts = group(parser, "slogate: the workload (prompts and requests)")
    conversations = group(parser, "slogate: conversations")
    replay_files = group(parser, "slogate: datasets and traces")
    prompts("--shared-prefixes", type=int, default=d.shared_prefixes, help="How many distinct shared system prompts")
    prompts("--shared-prefix-tokens", type=int, default=d.shared_prefix_tokens, help="Tokens in each shared prefix")
    prompts(
        "--shared-fraction", type=float, default=d.shared_fraction, help="Fraction of requests with a shared prefix"
    )
    prompts("--unique-prefix-tokens", type=int, default=-1, help="Tokens in a unique prefix (-1: same as shared)")
    prompts("--user-message-tokens", type=int, default=d.user_message_tokens, help="Tokens in each user message")
    prompts("--max-tokens", type=int, default=d.max_tokens, help="max_tokens per request")
    prompts("--temperature", type=float, default=d.temperature, help="Sampling temperature")
    prompts("--model", type=str, default="", help="Model name (default: first id from /v1/models)")
    prompts("--seed", type=int, default=d.seed, help="Seed for prompts: same seed, same prompts")
    prompts("--ignore-eos", action="store_true", help="Send ignore_eos (vLLM): every answer is max_tokens long")
    prompts(
        "--request-timeout",
        type=float,
        default=d.request_timeout_s,
        help="Seconds a request may take in all, from its send to its last byte (total, not between bytes: a "
        "server that stalls or trickles a byte at a time fails as `timeout`); raise it for long answers",
    )
    prompts(
        "--ca-bundle",
        type=str,
        default="",
        include_in_web_ui=False,  # a file of the load generator's machines, read at start, not a form field
        help="Verify an https target's certificate against the CAs in this PEM file (streams, model discovery, "
        "/tokenize, /metrics); default: the system's CAs (SSL_CERT_FILE honoured)",
    )
    prompts("--no-prime-prefixes", action="store_true", help="Do not send each shared prefix once before measuring")
    prompts(
        "--prompt-nonce",
        type=str,
        default="",
        help="Reproduce a run's exact prompts (its report's run.workload.prompt_nonce); "
        "default: a new one per run, so unique prompts never repeat across runs",
    )
    prompts(
        "--endpoint",
        type=str,
        default=d.endpoint,
        help=f"The API to stream from: {', '.join(ENDPOINTS)}",
    )
    conversations(
        "--turns",
        type=str,
        default="1",
        help="Turns per conversation, N or A-B (uniform per conversation); each later turn resends the "
        "conversation so far, the streamed answer and a new user message",
    )
    conversations(
        "--think-time-s",
        type=str,
        default="0",
        help="Seconds between a turn's answer and the next turn, X or A-B (uniform)",
    )
    replay_files(
        "--dataset",
        type=str,
        default="",
        help="Send requests from this file: JSONL of OpenAI chat requests or ShareGPT JSON (sampled with --seed)",
    )
    replay_files(
        "--trace", type=str, default="", help="Replay this Mooncake JSONL trace open loop (locustfiles/chat_trace.py)"
    )
    replay_files("--trace-block-tokens", type=int, default=trace.DEFAULT_BLOCK_TOKENS, help="Tokens per hash_ids block")
    replay_files("--trace-speedup", type=float, default=1.0, help="Replay the trace this many times faster")
    replay_files("--trace-start-s", type=float, default=0.0, help="Start this far into the trace")
    replay_files("--trace-limit", type=int, default=0, help="Send at most this many requests (0: all)")


@events.init.add_listener
def _check_options(environment: Any, **_: Any) -> None:
    """Bad workload options, or an SLO on a tag this workload cannot produce: one line and exit 2
    (with an error report), before any load."""
    if environment.parsed_options is None:
        return
    opts = environment.parsed_options
    try:
        target.use_ca_bundle(opts.ca_bundle)
        config = config_from_options(opts)
        tags, workload_name = _available_tags(config, environment)
    except (ValueError, trace.TraceError, datasets.DatasetError) as e:
        usage_exit(environment, str(e))
        return
    spec = gate_for(environment).spec
    if spec is not None:
        try:
            check_classes(spec, tags, workload_name)
        except UnknownClass as e:
            usage_exit(environment, str(e))


def _available_tags(config: WorkloadConfig, environment: Any) -> tuple[list[str], str]:
    """The tags the run's requests can carry and the workload's name for messages; loads and checks
    a --trace or --dataset in full (TraceError / DatasetError / ValueError, one line)."""
    opts = environment.parsed_options
    trace_options = replay.trace_options(opts)
    replays = [getattr(user, "replays_trace", False) for user in environment.user_classes]
    if trace_options is None and any(replays):
        raise ValueError("the trace locustfile needs --trace FILE")
    if trace_options is not None and not all(replays):
        raise ValueError("--trace needs the trace locustfile (locustfiles/chat_trace.py, `slogate locustfile trace`)")
    if trace_options is not None:
        if config.dataset:
            raise ValueError("--trace and --dataset cannot be combined")
        if config.max_turns > 1:
            raise ValueError("--turns does not apply to --trace: each trace line is one request")
        if opts.master and opts.num_users is not None and opts.num_users < opts.expect_workers:
            raise ValueError(f"--trace needs a user per worker: -u {opts.num_users} < {opts.expect_workers} workers")
        scheduled = replay.load_schedule(trace_options)
        return ["all", *replay.trace_tags(scheduled)], f"this trace ({trace_options.path})"
    if config.dataset:
        return dataset_tags(datasets.load_dataset(config.dataset)), f"this dataset ({config.dataset})"
    return (
        config.available_tags(),
        f"this workload (--shared-fraction {config.shared_fraction:g}, --turns {opts.turns})",
    )


@events.test_start.add_listener
def _choose_prompt_nonce(environment: Any, **_: Any) -> None:
    """One nonce per run, chosen where the run starts (locally or on the master, which passes its
    options to the workers with the spawn message)."""
    opts = environment.parsed_options
    if opts is not None and not isinstance(environment.runner, WorkerRunner):
        opts.run_prompt_nonce = opts.prompt_nonce or secrets.token_hex(6)


def config_from_options(opts: Any) -> WorkloadConfig:
    """The workload the options describe; ValueError (one line) for a bad option."""
    return WorkloadConfig(
        shared_prefixes=opts.shared_prefixes,
        shared_prefix_tokens=opts.shared_prefix_tokens,
        shared_fraction=opts.shared_fraction,
        unique_prefix_tokens=None if opts.unique_prefix_tokens < 0 else opts.unique_prefix_tokens,
        user_message_tokens=opts.user_message_tokens,
        max_tokens=opts.max_tokens,
        temperature=opts.temperature,
        model=opts.model or None,
        seed=opts.seed,
        ignore_eos=opts.ignore_eos,
        request_timeout_s=opts.request_timeout,
        prime_prefixes=not (opts.no_prime_prefixes or opts.dataset or opts.trace),
        prompt_nonce=getattr(opts, "run_prompt_nonce", "") or opts.prompt_nonce,
        endpoint=opts.endpoint,
        turns=parse_range(opts.turns, "--turns", int),
        think_time_s=parse_range(opts.think_time_s, "--think-time-s", float),
        dataset=opts.dataset,
    )


_lock = gevent.lock.Semaphore()
_prepared: dict[tuple[int, WorkloadConfig, str], Workload] = {}


def workload_for(environment: Any) -> Workload:
    """The process's workload, prepared once (model discovery, calibration) on first use.

    Raises `locustfiles.server.TargetError` when the target cannot be reached, ValueError for a
    --ca-bundle that cannot be read.
    """
    config = config_from_options(environment.parsed_options)
    target.use_ca_bundle(environment.parsed_options.ca_bundle)  # a worker's may come from its master
    key = (id(environment), config, environment.host)
    with _lock:
        workload = _prepared.get(key)
        if workload is None:
            host, headers = target.resolve(environment)
            workload = Workload.prepare(config, host, headers, getattr(environment.runner, "worker_index", 0))
            if config.prime_prefixes:
                try:
                    bodies = workload.priming_requests()
                    server.prime(host, headers, workload.endpoint.path, bodies, config.request_timeout_s)
                except server.TargetError as e:  # best effort: the measured requests will show the failure
                    log.warning("slogate: priming the shared prefixes failed: %s", e)
            _prepared[key] = workload
    return workload
