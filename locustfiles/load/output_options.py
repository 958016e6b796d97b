"""The Locust options of tool calls and structured output (docs/workloads/tools.md); their values
are read into `WorkloadConfig` (`read`) and checked, files included, by output_check.py at start."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from locust import events
from slogate.locustfiles.load.output_check import TOOL_CHOICES
from slogate.slo.plugin.parser import group


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    tools = group(parser, "slogate: tool calls and structured output")
    tools(
        "--tools",
        type=str,
        default="",
        help="Send these tools with each chat or responses request: a JSON file of OpenAI tools (a list of "
        '{"type": "function", "function": {"name", "parameters"}}); each call\'s arguments must match '
        "its tool's parameters, else the request fails as `invalid_output`",
    )
    tools(
        "--tool-choice",
        type=str,
        default="",
        help=f"With --tools: {', '.join(TOOL_CHOICES)} or a tool's name (default: the server's, auto)",
    )
    tools(
        "--response-format",
        type=str,
        default="",
        help="Ask for structured output: a JSON schema file, sent as response_format json_schema (responses: "
        "text.format); an answer that is not JSON matching it fails as `invalid_output`",
    )


def read(get: Callable[[str, Any], Any]) -> dict[str, str]:
    """The options as `WorkloadConfig` fields; `get(name, default)` reads a parsed option."""
    return {name: str(get(name, "")) for name in ("tools", "tool_choice", "response_format")}
