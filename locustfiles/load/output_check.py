"""Tool calls and structured output (docs/workloads/tools.md): `--tools FILE`, `--tool-choice` and
`--response-format FILE`, what they add to each request body, and the check of each answer once its
stream has ended.

The files are read and checked once, at start (`load`): bad JSON, a tools file that is not a list
of functions, a schema that is not a valid JSON schema, a `--tool-choice` naming no tool: one line,
exit 2, before any load. During a stream the user only appends the tool-call deltas it sees to the
request's `OutputCapture` (and the timer keeps the answer text): nothing is parsed on the per-chunk
path. At the end, `OutputSpec.problem` says whether each tool call names a tool and its arguments
parse as JSON matching that tool's `parameters`, or whether the answer parses as JSON matching the
response format's schema: a request whose output does not is an `invalid_output` failure.

vLLM streams a forced call (`--tool-choice required` or a function name) as `tool_calls` deltas
only when started with a `--tool-call-parser`; without one (0.32) guided decoding still forces
the call's JSON, sent as answer text: for `required` a list of `{"name", "parameters"}`, for a
named function its arguments. Both forms are checked, and TTFTC is then the first answer token.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

if TYPE_CHECKING:
    from jsonschema.protocols import Validator
    from slogate.locustfiles.load.workload import WorkloadConfig

TOOL_CHOICES = ("auto", "required", "none")  # or a function's name
# What each endpoint takes: the tools on chat and responses (in its flat shape: `{"type": "function",
# "name", "parameters"}`; vLLM's completions has none), the response format on all three.
TOOLS_ENDPOINTS = ("chat", "responses")
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
MESSAGE_CHARS = 200  # a failure's message, as the report keeps it


@dataclass(frozen=True)
class OutputSpec:
    """The checked options: what each request sends and what its output must be."""

    endpoint: str
    tools: tuple[dict[str, Any], ...] = ()  # the file's entries, as sent
    tool_choice: str = ""  # "": the server's default (auto with tools)
    schema: dict[str, Any] | None = None  # --response-format
    schema_name: str = "response"
    parameters: tuple[tuple[str, Validator], ...] = ()  # each tool's name and its parameters' validator
    answer: Validator | None = None  # the response format's

    @property
    def forces_call(self) -> bool:
        """Whether every answer must be a tool call (`required`, or a function's name)."""
        return bool(self.tools) and self.tool_choice not in ("", "auto", "none")

    def body_fields(self) -> dict[str, Any]:
        """What each request body gains, in its endpoint's shape."""
        fields: dict[str, Any] = {}
        if self.tools:
            flat = self.endpoint == "responses"  # the Responses API's tools: the function's fields at the top
            fields["tools"] = [{"type": "function", **t["function"]} for t in self.tools] if flat else list(self.tools)
            if self.tool_choice in TOOL_CHOICES:
                fields["tool_choice"] = self.tool_choice
            elif self.tool_choice:
                named = {"name": self.tool_choice}
                fields["tool_choice"] = {"type": "function", **(named if flat else {"function": named})}
        if self.schema is not None:
            if self.endpoint == "responses":
                fields["text"] = {"format": {"type": "json_schema", "name": self.schema_name, "schema": self.schema}}
            else:  # chat, and vLLM's completions (`CompletionRequest.response_format`)
                schema = {"name": self.schema_name, "schema": self.schema}
                fields["response_format"] = {"type": "json_schema", "json_schema": schema}
        return fields

    def capture(self) -> OutputCapture:
        return OutputCapture(self)

    def problem(self, calls: dict[int, list[Any]], answer: str) -> str | None:
        """Why this output is invalid (one line), or None. `calls`: index -> [name, argument pieces]."""
        if calls:
            if self.tool_choice == "none":
                return "a tool call, with --tool-choice none"
            for index in sorted(calls):
                name, pieces = calls[index]
                problem = self._call_problem(name, "".join(pieces) or "{}")
                if problem is not None:
                    return problem
            return None
        if self.tool_choice == "required":
            return self._listed_calls_problem(answer)
        if self.forces_call:
            return self._call_problem(self.tool_choice, answer)
        if self.answer is not None:
            value, problem = _parsed(answer, "the answer")
            return problem or _mismatch(self.answer, value, "the answer does not match --response-format")
        return None

    def _call_problem(self, name: str, arguments: str) -> str | None:
        if self.forces_call and self.tool_choice != "required" and name != self.tool_choice:
            return _short(f"tool call {name!r}, with --tool-choice {self.tool_choice}")
        validator = dict(self.parameters).get(name)
        if validator is None:
            return _short(f"tool call {name!r}: no such tool in --tools")
        value, problem = _parsed(arguments, f"tool call {name!r}: arguments")
        return problem or _mismatch(validator, value, f"tool call {name!r}: arguments do not match its parameters")

    def _listed_calls_problem(self, answer: str) -> str | None:
        """vLLM without a tool parser, `required`: the calls as answer text, `[{"name", "parameters"}]`."""
        value, problem = _parsed(answer, "no tool call, and the answer (a list of calls)")
        if problem is not None:
            return problem
        if not isinstance(value, list) or not value:
            return "no tool call, and the answer is not a list of calls"
        for call in value:
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                return "no tool call, and the answer is not a list of calls"
            problem = self._call_problem(call["name"], json.dumps(call.get("parameters", {})))
            if problem is not None:
                return problem
        return None


class OutputCapture:
    """One request's tool calls as streamed: its spec, index -> [name, argument pieces], and when the
    first tool-call delta came (chat: `tool_calls` deltas, joined by their `index`; responses:
    `function_call_arguments` deltas, each call whole in its `output_item.done`, in arrival order)."""

    __slots__ = ("calls", "first_call", "open_calls", "spec")

    def __init__(self, spec: OutputSpec) -> None:
        self.spec = spec
        self.calls: dict[int, list[Any]] = {}
        self.first_call: float | None = None
        self.open_calls: set[object] = set()  # responses: items whose arguments came, not yet their done item

    def tool_calls(self, now: float, deltas: list[dict[str, Any]] | None) -> None:
        """A delta's `tool_calls` (None: none). A delta that is not an object raises AttributeError,
        which the stream readers count as a protocol failure (sse.SHAPE_ERRORS)."""
        if not deltas:
            return
        self.called(now)
        for delta in deltas:
            function = delta.get("function") or {}
            call = self.calls.setdefault(delta.get("index") or 0, ["", []])
            name, arguments = function.get("name"), function.get("arguments")
            if name and isinstance(name, str):
                call[0] = name
            if arguments and isinstance(arguments, str):
                call[1].append(arguments)

    def called(self, now: float) -> None:
        """A tool-call delta at `now`: the first one times the call."""
        if self.first_call is None:
            self.first_call = now

    def arguments_delta(self, now: float, item_id: object) -> None:
        """A responses `function_call_arguments.delta` of item `item_id`: the first times the call."""
        self.called(now)
        self.open_calls.add(item_id)

    def whole_call(self, item: dict[str, Any]) -> None:
        """A responses `function_call` output item as its `output_item.done` event gives it: its name
        and all its arguments, kept in arrival order (a server's repeated or absent `output_index`
        cannot make one call replace another)."""
        self.open_calls.discard(item.get("id"))
        name, arguments = item.get("name"), item.get("arguments")
        call = [name if isinstance(name, str) else "", [arguments] if isinstance(arguments, str) else []]
        self.calls[len(self.calls)] = call

    def problem(self, answer: str) -> str | None:
        if self.open_calls:  # a stream that ended without closing a call: its arguments were never given whole
            return "a tool call's arguments came, never its response.output_item.done"
        return self.spec.problem(self.calls, answer)

    def first_call_at(self, first_token: float | None) -> float | None:
        """When the first tool call came: its first delta, or, for a forced call the server streamed as
        answer text, the first token; None when no call came."""
        if self.first_call is not None:
            return self.first_call
        return first_token if self.spec.forces_call else None


def _parsed(text: str, what: str) -> tuple[Any, str | None]:
    try:
        return json.loads(text), None
    except ValueError as e:
        return None, _short(f"{what} is not JSON ({e}): {text[:60]!r}")
    except RecursionError:
        return None, _short(f"{what} is not JSON (nested deeper than the parser goes): {text[:60]!r}")


def _mismatch(validator: Validator, value: Any, what: str) -> str | None:
    from jsonschema import exceptions  # imported by a run with schemas only (~75 ms of every process's start)

    try:
        error = exceptions.best_match(validator.iter_errors(value))
    except RecursionError:  # a value nested deeper than validation goes: no answer a schema wants
        return _short(f"{what}: nested too deep to check")
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(root)"
    return _short(f"{what}: at {where}: {error.message}")


def _short(text: str) -> str:
    return " ".join(text.split())[:MESSAGE_CHARS]


def load(config: WorkloadConfig, trace: bool = False) -> OutputSpec | None:
    """The checked `--tools`, `--tool-choice` and `--response-format` of `config` (None: none given);
    ValueError, one line, for a file that cannot be read or is not what its option takes, a choice
    that names no tool, or an endpoint (or `--trace`) they do not apply to."""
    if not (config.tools or config.tool_choice or config.response_format):
        return None
    if trace:
        raise ValueError("--tools, --tool-choice and --response-format do not apply to --trace")
    if config.tool_choice and not config.tools:
        raise ValueError("--tool-choice needs --tools")
    tools, parameters = _load_tools(config.tools, config.endpoint) if config.tools else ((), ())
    names = [name for name, _ in parameters]
    if config.tool_choice and config.tool_choice not in (*TOOL_CHOICES, *names):
        raise ValueError(
            f"--tool-choice must be one of {', '.join(TOOL_CHOICES)} or a tool of --tools "
            f"({', '.join(names)}), got {config.tool_choice!r}"
        )
    schema, answer, name = None, None, "response"
    if config.response_format:
        schema = _read_json(config.response_format, "--response-format")
        if not isinstance(schema, dict):
            raise ValueError(f"--response-format {config.response_format}: not a JSON schema (an object)")
        answer = _validator(schema, f"--response-format {config.response_format}")
        name = re.sub(r"[^a-zA-Z0-9_-]", "_", Path(config.response_format).stem)[:64] or "response"
    return OutputSpec(config.endpoint, tools, config.tool_choice, schema, name, parameters, answer)


def _load_tools(path: str, endpoint: str) -> tuple[tuple[dict[str, Any], ...], tuple[tuple[str, Validator], ...]]:
    if endpoint not in TOOLS_ENDPOINTS:
        raise ValueError(f"--tools applies to --endpoint {', '.join(TOOLS_ENDPOINTS)}, not {endpoint}")
    tools = _read_json(path, "--tools")
    if not isinstance(tools, list) or not tools:
        raise ValueError(f"--tools {path}: not a list of tools (OpenAI's `tools`: a JSON list of functions)")
    parameters: dict[str, Validator] = {}
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name or tool.get("type") != "function":
            raise ValueError(
                f'--tools {path}: entry {i}: not {{"type": "function", "function": {{"name": ..., "parameters": ...}}}}'
            )
        if name in parameters:
            raise ValueError(f"--tools {path}: tool {name!r} is defined twice")
        schema = function.get("parameters", EMPTY_PARAMETERS)
        if not isinstance(schema, dict):
            raise ValueError(f"--tools {path}: tool {name!r}: parameters is not a JSON schema (an object)")
        parameters[name] = _validator(schema, f"--tools {path}: tool {name!r}: parameters")
    return tuple(tools), tuple(parameters.items())


def _read_json(path: str, option: str) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{option} {path}: cannot read it: {getattr(e, 'strerror', None) or e}") from None
    try:
        return json.loads(text)
    except ValueError as e:
        raise ValueError(f"{option} {path}: not JSON: {e}") from None


def _validator(schema: dict[str, Any], where: str) -> Validator:
    from jsonschema import exceptions, validators  # see _mismatch

    cls = validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except exceptions.SchemaError as e:
        raise ValueError(_short(f"{where}: not a valid JSON schema: {e.message}")) from None
    for ref in _refs(schema):  # checked here: one that does not resolve would fail every request's check
        if not _resolves(schema, ref):
            raise ValueError(_short(f"{where}: $ref {ref!r} does not resolve (only refs within the file: #/...)"))
    return cls(schema)


def _refs(node: Any) -> list[str]:
    """Every `$ref` in a schema."""
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs(value)]
    return []


def _resolves(schema: dict[str, Any], ref: str) -> bool:
    """Whether `ref` is a JSON pointer into `schema` itself (`#`, `#/$defs/x`) that leads somewhere."""
    if not ref.startswith("#"):
        return False
    node: Any = schema
    for part in [p for p in ref[1:].split("/") if p]:
        part = unquote(part).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True
