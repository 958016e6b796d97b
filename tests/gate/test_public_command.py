"""The command line a report shows (`run.command`, the HTML page): the value of an option that holds
a secret is masked, and nothing else is (issue 28, item 9: `--max-tokens '***'`)."""

import pytest
from slogate.slo.gate.report import REDACTED, is_secret_option, public_command

MASKED = [
    "--api-key",
    "--openai-api-key",
    "--api_key",
    "--apikey",
    "--key",
    "--token",
    "--api-token",
    "--bot-token",
    "--auth-token",
    "--authToken",
    "--slack-token",
    "--web-auth",
    "--password",
    "--clientSecret",
    "--dbPassword",
    "--secretkey",
    "--passwords",
    "--password123",
    "--private-key",
    "--db-passwd",
    "--client-secret",
    "--secret",
    "--authorization",
    "--slack-webhook-url",
    "--webhook",
    "--credential",
    "--credentials-file",
    "-key",
]
NOT_MASKED = [
    "--max-tokens",
    "--unique-prefix-tokens",
    "--user-message-tokens",
    "--shared-prefix-tokens",
    "--max-num-batched-tokens",
    "--tokenizer",
    "--keep-alive",
    "--monkey-patch",
    "--author",
    "--users",
    "--host",
    "--slack-channel",
    "--slo-file",
]


@pytest.mark.parametrize("name", MASKED)
def test_an_option_that_holds_a_secret_is_masked(name: str) -> None:
    assert is_secret_option(name)
    assert public_command([name, "hunter2"]) == f"{name} '{REDACTED}'"
    assert public_command([f"{name}=hunter2", "--users", "4"]) == f"'{name}={REDACTED}' --users 4"


@pytest.mark.parametrize("name", NOT_MASKED)
def test_an_option_that_holds_no_secret_is_shown(name: str) -> None:
    assert not is_secret_option(name)
    assert public_command([name, "64"]) == f"{name} 64"
    assert public_command([f"{name}=64"]) == f"{name}=64"


def test_a_real_command_line_keeps_its_counts_and_hides_its_secrets() -> None:
    argv = [
        "locust", "--max-tokens", "64", "--unique-prefix-tokens", "32", "--user-message-tokens", "16",
        "--web-auth", "u:pw", "--host", "http://u:pw@h:8000/v1?k=s",
    ]  # fmt: skip
    assert public_command(argv) == (
        f"locust --max-tokens 64 --unique-prefix-tokens 32 --user-message-tokens 16 --web-auth '{REDACTED}' "
        "--host http://h:8000/v1"
    )
