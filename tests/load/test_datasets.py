"""Prompt datasets: chat-request JSONL and ShareGPT JSON, validated to one-line errors, sampled
with a seed, replayed as conversations whose answers are the server's."""

import itertools
import json
from pathlib import Path

import pytest
from slogate.locustfiles.load.datasets import (
    DEFAULT_MAX_TOKENS,
    SAMPLE_CHAT,
    SAMPLE_SHAREGPT,
    Conversation,
    DatasetError,
    Turn,
    load_dataset,
    sample_chat_lines,
    sample_sharegpt,
    sampled,
)

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
SHAREGPT = {
    "id": "c1",
    "conversations": [
        {"from": "system", "value": "Be brief."},
        {"from": "human", "value": "What is a token?"},
        {"from": "gpt", "value": "A piece of text the model reads as one unit of meaning here"},
        {"from": "human", "value": "And a block?"},
        {"from": "gpt", "value": "Sixteen tokens."},
        {"from": "human", "value": "Thanks."},
    ],
}


def write_jsonl(tmp_path: Path, *lines: str | dict) -> Path:
    path = tmp_path / "requests.jsonl"
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def test_a_chat_request_line_keeps_its_messages_class_and_extra_fields(tmp_path: Path) -> None:
    line = {**CHAT, "class": "support", "temperature": 0.7, "tools": [{"type": "function"}]}
    [conversation] = load_dataset(write_jsonl(tmp_path, "", line))
    assert conversation == Conversation(
        2, (Turn(tuple(CHAT["messages"]), 16),), "support", {"temperature": 0.7, "tools": [{"type": "function"}]}
    )
    assert conversation.messages(0, []) == CHAT["messages"]


def test_sharegpt_replays_the_human_turns_with_the_servers_answers(tmp_path: Path) -> None:
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps([SHAREGPT]))
    [conversation] = load_dataset(path)
    # sized from the recorded answers: 1.3 x 13 words, 1.3 x 2; the last turn has none
    assert [turn.max_tokens for turn in conversation.turns] == [17, 3, DEFAULT_MAX_TOKENS]
    answers = ["first answer", "second answer"]
    assert conversation.messages(0, []) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is a token?"},
    ]
    assert conversation.messages(2, answers) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is a token?"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": "And a block?"},
        {"role": "assistant", "content": "second answer"},
        {"role": "user", "content": "Thanks."},
    ]
    assert conversation.extra == {} and conversation.request_class is None
    with pytest.raises(ValueError, match="turn 2 needs the answers to the 2 turns before it, got 1"):
        conversation.messages(2, answers[:1])


def test_a_fixed_max_tokens_replaces_the_recorded_answer_length(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path, SHAREGPT)  # a ShareGPT conversation as a JSONL line works too
    [conversation] = load_dataset(path, max_tokens=50)
    assert [turn.max_tokens for turn in conversation.turns] == [50, 50, 50]


def test_a_gpt_turn_before_any_human_turn_is_skipped(tmp_path: Path) -> None:
    entry = {"conversations": [{"from": "gpt", "value": "Hello!"}, {"from": "human", "value": "Hi."}]}
    [conversation] = load_dataset(write_jsonl(tmp_path, entry))
    assert conversation.turns == (Turn(({"role": "user", "content": "Hi."},), DEFAULT_MAX_TOKENS),)


BAD_CHAT = [
    ("{oops", "not valid JSON"),
    ("3", "expected a JSON object, got int"),
    ({"max_tokens": 5}, "missing field 'messages'"),
    ({**CHAT, "messages": []}, "'messages' must be a non-empty list"),
    ({**CHAT, "messages": ["hi"]}, "messages[0] must be an object"),
    ({**CHAT, "messages": [{"role": "robot", "content": "x"}]}, "messages[0]: 'role' must be one of"),
    ({**CHAT, "messages": [{"role": "user"}]}, "messages[0]: 'content' must be a string or a list of parts"),
    ({"messages": CHAT["messages"]}, "missing field 'max_tokens'"),
    ({**CHAT, "max_tokens": -1}, "'max_tokens' must be an integer >= 1, got -1"),
    ({**CHAT, "max_tokens": "16"}, "'max_tokens' must be an integer >= 1, got '16'"),
    ({**CHAT, "class": ""}, "'class' must be a non-empty string"),
    ({**CHAT, "class": "all"}, "'class' 'all' is a name slogate gives requests itself"),
    ({**CHAT, "class": "follow_up"}, "'class' 'follow_up' is a name slogate gives requests itself"),
    ({"conversations": "hi"}, "'conversations' must be a list"),
    ({"conversations": [{"from": "bot", "value": "x"}]}, "conversations[0]: 'from' must be human, gpt or system"),
    ({"conversations": [{"from": "human", "value": 3}]}, "conversations[0]: 'value' must be a string"),
    ({"conversations": [{"from": "gpt", "value": "x"}]}, "the conversation has no human turn"),
]


@pytest.mark.parametrize(("bad", "message"), BAD_CHAT, ids=[m for _, m in BAD_CHAT])
def test_a_bad_jsonl_line_is_one_error_naming_file_and_line(tmp_path: Path, bad: str | dict, message: str) -> None:
    path = write_jsonl(tmp_path, CHAT, "", bad, CHAT)
    with pytest.raises(DatasetError) as caught:
        load_dataset(path)
    text = str(caught.value)
    assert text.startswith(f"{path}:3: ") and message in text
    assert "\n" not in text


def test_a_bad_sharegpt_entry_names_the_line_it_starts_on(tmp_path: Path) -> None:
    path = tmp_path / "sharegpt.json"
    bad = {"conversations": [{"from": "human", "value": "x"}, {"from": "gpt", "value": None}]}
    path.write_text("[\n" + json.dumps(SHAREGPT, indent=1) + ",\n" + json.dumps(bad, indent=1) + "\n]\n")
    bad_line = 2 + len(json.dumps(SHAREGPT, indent=1).splitlines())
    with pytest.raises(DatasetError, match=rf"^{path}:{bad_line}: conversations\[1\]: 'value' must be a string$"):
        load_dataset(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[\n{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1}\n{"x": 1}]',
            ":3: expected ',' or ']' after an item",
        ),
        ('[\n{"conversations": [}\n]', ":2: not valid JSON"),
        ("[\n]\n", ": no requests"),
        ('[{"conversations": [{"from": "human", "value": "x"}]}] [', ":1: text after the list"),
        ("", ": no requests"),
    ],
)
def test_malformed_json_files_are_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "data.json"
    path.write_text(text)
    with pytest.raises(DatasetError, match=rf"^{path}{message}"):
        load_dataset(path)


def test_a_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"absent\.jsonl: cannot read"):
        load_dataset(tmp_path / "absent.jsonl")


def conversations(n: int) -> list[Conversation]:
    return [Conversation(i, (Turn(({"role": "user", "content": str(i)},), 1),)) for i in range(n)]


def test_sampling_uses_each_entry_once_per_pass_in_a_seeded_order() -> None:
    entries = conversations(10)
    first = [c.line for c in itertools.islice(sampled(entries, seed=1), 30)]
    assert [sorted(first[i : i + 10]) for i in (0, 10, 20)] == [list(range(10))] * 3
    assert first[:10] != first[10:20]  # a new order each pass
    assert first == [c.line for c in itertools.islice(sampled(entries, seed=1), 30)]
    assert first != [c.line for c in itertools.islice(sampled(entries, seed=2), 30)]


def test_each_worker_has_its_own_order_and_worker_zero_keeps_the_single_process_one() -> None:
    entries = conversations(10)
    alone = [c.line for c in itertools.islice(sampled(entries, seed=1), 10)]
    assert [c.line for c in itertools.islice(sampled(entries, seed=1, worker=0), 10)] == alone
    worker_orders = {tuple(c.line for c in itertools.islice(sampled(entries, 1, worker), 10)) for worker in (1, 2, 3)}
    assert len(worker_orders) == 3 and tuple(alone) not in worker_orders
    assert all(sorted(order) == list(range(10)) for order in worker_orders)


def test_the_shipped_samples_are_what_the_generators_write_and_load() -> None:
    assert SAMPLE_CHAT.read_text().splitlines() == sample_chat_lines()
    assert json.loads(SAMPLE_SHAREGPT.read_text()) == sample_sharegpt()
    chat = load_dataset(SAMPLE_CHAT)
    assert {c.request_class for c in chat} == {"support", "code", None}
    assert any(c.extra for c in chat)
    sharegpt = load_dataset(SAMPLE_SHAREGPT)
    assert len(sharegpt) == 20 and max(len(c.turns) for c in sharegpt) >= 3
