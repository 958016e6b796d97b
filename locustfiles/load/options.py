"""The workload's Locust options (command line, `locust.conf`, web UI form; in three groups of the
help: prompts and requests, conversations, datasets and traces) and the per-process workload built
from them. Secrets are never options: the API key comes from the environment only,
credentials in the --host URL become a header (slo/plugin/target.py)."""

from __future__ import annotations

import logging
import secrets
import weakref
from dataclasses import dataclass, field
from typing import Any

import gevent.lock
from locust import events
from locust.runners import WorkerRunner
from slogate.locustfiles.load import datasets, images, output_check, output_options, replay, server, trace
from slogate.locustfiles.load.adapters import adapter_tags, parse_adapters
from slogate.locustfiles.load.cancel import CancelPlan
from slogate.locustfiles.load.endpoints import ENDPOINTS
from slogate.locustfiles.load.workload import Workload, WorkloadConfig, dataset_tags, parse_range
from slogate.slo.gate.judge import UnknownClass, check_classes
from slogate.slo.plugin import settings, target
from slogate.slo.plugin.control import usage_exit
from slogate.slo.plugin.gate import gate_for
from slogate.slo.plugin.parser import group
from slogate.slo.plugin.settings import RunOptions

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
    prompts(
        "--adapters",
        type=str,
        default="",
        help="Spread requests over these LoRA adapters, a,b,c or weighted a:3,b:1 (seeded, per conversation): "
        "each request's model is its adapter's name, its tag adapter_<name> (docs/workloads/adapters.md)",
    )
    prompts(
        "--images",
        type=str,
        default="0",
        help="Image parts per chat or responses request, N or A-B (uniform per request), generated new each time "
        "as PNG data URIs; requests are tagged images_<n> for SLOs (docs/workloads/images.md)",
    )
    prompts("--image-size", type=str, default="x".join(map(str, d.image_size)), help="Generated images' size, WxH")
    prompts(
        "--shared-images",
        type=int,
        default=d.shared_images,
        help="Draw --images from a fixed set of this many images (0: a new image each time)",
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


@dataclass(frozen=True)
class ArrivalOptions:
    """The open-loop arrivals (registered by open_loop.py)."""

    rate: float = 1.0
    process: str = "poisson"
    burstiness: float = 1.0
    max_in_flight: int = 64


@dataclass(frozen=True)
class WorkloadOptions:
    """Every option of the load library, typed, read once per run (`workload_options`)."""

    config: WorkloadConfig
    turns: str  # as given, for messages
    ca_bundle: str | None
    trace: replay.TraceOptions | None  # None: no --trace
    arrivals: ArrivalOptions  # open_loop.py's
    stages: str  # stages.py's --stages, parsed by its shape
    run: RunOptions
    cancel: CancelPlan = field(default_factory=CancelPlan)  # cancel.py's

    @classmethod
    def from_parsed(cls, opts: Any) -> WorkloadOptions:
        """Read `opts` (Locust's parsed options; absent ones take their defaults); ValueError (one
        line) for a bad option."""
        d, a = WorkloadConfig(), ArrivalOptions()

        def get(name: str, default: Any) -> Any:
            value = getattr(opts, name, default)
            return default if value is None else value

        trace_path = get("trace", "")
        dataset = get("dataset", d.dataset)
        unique = get("unique_prefix_tokens", -1)
        turns = str(get("turns", "1"))
        config = WorkloadConfig(
            shared_prefixes=get("shared_prefixes", d.shared_prefixes),
            shared_prefix_tokens=get("shared_prefix_tokens", d.shared_prefix_tokens),
            shared_fraction=get("shared_fraction", d.shared_fraction),
            unique_prefix_tokens=None if unique < 0 else unique,
            user_message_tokens=get("user_message_tokens", d.user_message_tokens),
            max_tokens=get("max_tokens", d.max_tokens),
            temperature=get("temperature", d.temperature),
            model=get("model", "") or None,
            seed=get("seed", d.seed),
            ignore_eos=bool(get("ignore_eos", False)),
            request_timeout_s=get("request_timeout", d.request_timeout_s),
            prime_prefixes=not (get("no_prime_prefixes", False) or dataset or trace_path),
            prompt_nonce=get("run_prompt_nonce", "") or get("prompt_nonce", ""),
            endpoint=get("endpoint", d.endpoint),
            turns=parse_range(turns, "--turns", int),
            think_time_s=parse_range(get("think_time_s", "0"), "--think-time-s", float),
            dataset=dataset,
            **output_options.read(get),
            images=parse_range(str(get("images", "0")), "--images", int),
            image_size=images.parse_size(get("image_size", "x".join(map(str, d.image_size)))),
            shared_images=get("shared_images", d.shared_images),
            adapters=parse_adapters(get("adapters", "")),
        )
        trace_options = None
        if trace_path:
            trace_options = replay.TraceOptions(
                trace_path,
                get("trace_block_tokens", trace.DEFAULT_BLOCK_TOKENS),
                get("trace_speedup", 1.0),
                get("trace_start_s", 0.0),
                get("trace_limit", 0) or None,
            )
        arrivals = ArrivalOptions(
            get("arrival_rate", a.rate),
            get("arrival_process", a.process),
            get("burstiness", a.burstiness),
            get("max_in_flight", a.max_in_flight),
        )
        return cls(
            config,
            turns,
            get("ca_bundle", "") or None,
            trace_options,
            arrivals,
            get("stages", ""),
            settings.run_options(opts),
            CancelPlan.read(get, trace=bool(trace_path)),
        )


# Per environment (gone with it): this run's options, with the parsed options they were read from.
_options: weakref.WeakKeyDictionary[Any, tuple[Any, WorkloadOptions]] = weakref.WeakKeyDictionary()


def workload_options(environment: Any) -> WorkloadOptions:
    """This run's workload options (read at `init`, again at each run's first use: the web UI
    form and a master's spawn message may change them between runs); ValueError for a bad one."""
    opts = settings.parsed(environment)
    cached = _options.get(environment)
    if cached is None or cached[0] is not opts:
        cached = _options[environment] = (opts, WorkloadOptions.from_parsed(opts))
    return cached[1]


@events.init.add_listener
def _check_options(environment: Any, **_: Any) -> None:
    """Bad workload options, or an SLO on a tag this workload cannot produce: one line and exit 2
    (with an error report), before any load."""
    _options.pop(environment, None)
    if settings.parsed(environment) is None:
        return
    try:
        options = workload_options(environment)
        target.use_ca_bundle(options.ca_bundle)
        output_check.load(options.config, trace=options.trace is not None)
        tags, workload_name = _available_tags(options, environment)
        tags = [*tags, *adapter_tags(options.config.adapters)]
    except (ValueError, trace.TraceError, datasets.DatasetError) as e:
        usage_exit(environment, str(e))
        return
    spec = gate_for(environment).spec
    if spec is not None:
        try:
            check_classes(spec, tags, workload_name)
        except UnknownClass as e:
            usage_exit(environment, str(e))


def _available_tags(options: WorkloadOptions, environment: Any) -> tuple[list[str], str]:
    """The tags the run's requests can carry and the workload's name for messages; loads and checks
    a --trace or --dataset in full (TraceError / DatasetError / ValueError, one line)."""
    config, trace_options, run = options.config, options.trace, options.run
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
        if config.images[1] > 0:
            raise ValueError("--images does not apply to --trace: its lines are text prompts")
        if config.adapters:
            raise ValueError("--adapters does not apply to --trace: its requests go to the trace's model")
        if run.master and run.num_users is not None and run.num_users < run.expect_workers:
            raise ValueError(f"--trace needs a user per worker: -u {run.num_users} < {run.expect_workers} workers")
        scheduled = replay.load_schedule(trace_options)
        return ["all", *replay.trace_tags(scheduled)], f"this trace ({trace_options.path})"
    if config.dataset:
        return dataset_tags(datasets.load_dataset(config.dataset)), f"this dataset ({config.dataset})"
    return (
        config.available_tags(),
        f"this workload (--shared-fraction {config.shared_fraction:g}, --turns {options.turns}"
        + (f", --images {images.range_text(config.images)})" if config.images[1] else ")"),
    )


@events.test_start.add_listener
def _choose_prompt_nonce(environment: Any, **_: Any) -> None:
    """One nonce per run, chosen where the run starts (locally or on the master, which passes its
    options to the workers with the spawn message); the run's options are read again at first use."""
    _options.pop(environment, None)
    if settings.parsed(environment) is not None and not isinstance(environment.runner, WorkerRunner):
        nonce = settings.carried(environment, "prompt_nonce", "") or secrets.token_hex(6)
        settings.carry(environment, "run_prompt_nonce", nonce)


@events.test_stop.add_listener
def _forget_options(environment: Any, **_: Any) -> None:
    """The next run (web UI) reads the form's options, even where it needs them before its test_start
    (a load shape's first tick)."""
    _options.pop(environment, None)


_lock = gevent.lock.Semaphore()
# Per environment (a web-UI rerun or a test's next run may change the config or host): gone with it.
_prepared: weakref.WeakKeyDictionary[Any, dict[tuple[WorkloadConfig, str], Workload]] = weakref.WeakKeyDictionary()


def workload_for(environment: Any) -> Workload:
    """The process's workload, prepared once (model discovery, calibration) on first use.

    Raises `locustfiles.server.TargetError` when the target cannot be reached, ValueError for a
    --ca-bundle that cannot be read.
    """
    options = workload_options(environment)
    config = options.config
    target.use_ca_bundle(options.ca_bundle)  # a worker's may come from its master
    key = (config, environment.host)
    with _lock:
        prepared = _prepared.setdefault(environment, {})
        workload = prepared.get(key)
        if workload is None:
            host, headers = target.resolve(environment)
            workload = Workload.prepare(config, host, headers, getattr(environment.runner, "worker_index", 0))
            if config.prime_prefixes:
                try:
                    bodies = workload.priming_requests()
                    server.prime(host, headers, workload.endpoint.path, bodies, config.request_timeout_s)
                except server.TargetError as e:  # best effort: the measured requests will show the failure
                    log.warning("slogate: priming the shared prefixes failed: %s", e)
            prepared[key] = workload
    return workload
