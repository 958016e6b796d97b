"""Trace prompts built token-exactly: block `hash_id` of a Mooncake trace (locustfiles/load/trace.py)
as the same text in every request and every process, exactly its size in tokens.

Token-exact blocks (`PromptBuilder`). A block is a sequence of words, each written " word" and
each exactly one token of the server's tokenizer (chosen by asking `/tokenize`, word by word).
Byte-level BPE tokenizers (GPT-2, Qwen, Llama 3, the demo model) split text before merging at
every " word" boundary, so such a text is exactly as many tokens as it has words, and a
concatenation of blocks is the sum of its blocks: equal hash ids give token-identical blocks and
`input_length` is met exactly. Tokenizers that merge across words are caught by a check at
calibration (`PromptError`), never by a silently wrong length. Why not what others do:
`vllm bench serve` (`TimedTrace`) and AIPerf draw random token ids (or corpus tokens) per hash id
and send ids to `/v1/completions` or decode them to text; a decoded text re-encodes to other
tokens where pieces merge across block edges (vLLM's own `gen_prompt_decode_to_target_len`
documents it), and token ids do not go through `/v1/chat/completions` and its chat template, which
slogate measures. `TimedTrace` also seeds blocks with Python's `hash()` of a string, which differs
per process; here a block depends only on (nonce, hash id), so every `--processes` worker builds
the same text for the same id. Distinct ids give distinct blocks: each block starts with its id
written in a prefix-free code of the same words.

Checked with vLLM's tokenizer (tests/load/test_trace.py, vllm-marked): the sample trace's prompts are
exactly `input_length` tokens through `/tokenize`, requests share exactly their common blocks'
tokens (inside the chat template too), and sent one at a time to vLLM they hit its prefix cache
at the rate `implied_prefix_cache` gives, within 2 points (120 requests: 0.501 implied, 0.494
measured; the gap is vLLM caching whole 16-token blocks only).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from functools import lru_cache

from slogate.locustfiles.load.trace import TraceRequest
from slogate.locustfiles.load.words import WORDS


class PromptError(Exception):
    """The server's tokenizer does not allow token-exact blocks; str() is one line."""


CountTokens = Callable[[str], "int | None"]
ALPHABET_WORDS = 64  # single-token words to find; more only shortens the id codes
_MIN_ALPHABET = 8
_POOL = [" " + word for word in dict.fromkeys(WORDS)]  # in order, each once: the same alphabet everywhere


class PromptBuilder:
    """Prompt text for trace requests: block `hash_id` is the same text in every request and
    every process (for one `nonce`), exactly its size in tokens when `exact`.

    `nonce` changes every block, so a second run does not hit what a first one left in the
    server's cache (pass the run's prompt nonce); the same nonce gives the same prompts.
    """

    def __init__(self, words: Sequence[str], block_tokens: int, nonce: str = "", exact: bool = True) -> None:
        if len(words) < 2:
            raise PromptError("need at least 2 single-token words to build blocks")
        self.words = tuple(words)
        self.block_tokens = block_tokens
        self.nonce = nonce
        self.exact = exact
        self._block = lru_cache(maxsize=4096)(self._make_block)

    @classmethod
    def calibrate(cls, count_tokens: CountTokens, block_tokens: int, nonce: str = "") -> PromptBuilder:
        """Find single-token words through `count_tokens` (the server's `/tokenize`) and check
        that blocks add up exactly; raises `PromptError` if the tokenizer merges across words.

        With no counts at all (a server without `/tokenize`), the builder keeps the first words
        of the pool and `exact` is False: blocks are still identical for equal ids, but their
        lengths are the words' count, not checked tokens.
        """
        words: list[str] = []
        for word in _POOL:
            count = count_tokens(word)
            if count is None:
                return cls(_POOL[:ALPHABET_WORDS], block_tokens, nonce, exact=False)
            if count == 1:
                words.append(word)
                if len(words) == ALPHABET_WORDS:
                    break
        if len(words) < _MIN_ALPHABET:
            raise PromptError(
                f"the server's tokenizer has only {len(words)} single-token words in slogate's pool"
                f" (need {_MIN_ALPHABET}); trace prompts cannot be token-exact"
            )
        builder = cls(words, block_tokens, nonce)
        builder._check(count_tokens)
        return builder

    def _check(self, count_tokens: CountTokens) -> None:
        ids = (0, 1, 10**9)
        text = "".join(self.block(h, self.block_tokens) for h in ids)
        counted = count_tokens(text)
        if counted != len(ids) * self.block_tokens:
            raise PromptError(
                f"{len(ids)} blocks of {self.block_tokens} single-token words counted {counted} tokens:"
                " the server's tokenizer merges across words, trace prompts cannot be token-exact"
            )

    def _id_code(self, hash_id: int) -> list[str]:
        """`hash_id` in base len(words)-1 over words[1:], ended by words[0]: no code is a prefix
        of another, so distinct ids start their blocks differently."""
        base = len(self.words) - 1
        digits = []
        while True:
            hash_id, digit = divmod(hash_id, base)
            digits.append(self.words[1 + digit])
            if hash_id == 0:
                break
        return [*reversed(digits), self.words[0]]

    def _make_block(self, hash_id: int, size: int) -> str:
        code = self._id_code(hash_id)
        rng = random.Random(f"slogate-trace-block:{self.nonce}:{hash_id}")
        filler = rng.choices(self.words, k=max(0, self.block_tokens - len(code)))
        # A short block is the start of the full one: a later turn that extends it still shares it.
        return "".join((code + filler)[:size])

    def block(self, hash_id: int, size: int) -> str:
        """Block `hash_id`'s text, `size` words; distinct ids differ within their first 2-5 words
        (the id's code), so blocks shorter than that may coincide (only a trace's last ones)."""
        return self._block(hash_id, size)

    def prompt(self, request: TraceRequest) -> str:
        """The request's prompt: its blocks in order, `input_length` tokens in all."""
        sizes = request.block_sizes(self.block_tokens)
        return "".join(self.block(h, size) for h, size in zip(request.hash_ids, sizes, strict=True))
