"""`slogate model make`: a model directory vLLM serves with `--load-format dummy`, made offline.

It holds a Qwen2-shaped `config.json` and a byte-level BPE tokenizer trained here on Python's
own standard-library sources (always on disk), with a ChatML chat template. Weights are random
(vLLM fills them), which is fine for latency work: compute cost depends on shapes, not values.
"""

from __future__ import annotations

import json
import sysconfig
from dataclasses import dataclass
from pathlib import Path

VOCAB_SIZE = 2048
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_TRAINING_BYTES = 4_000_000


@dataclass(frozen=True)
class ModelShape:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int

    def config_fields(self) -> dict[str, int | str]:
        """The decoder's fields of a `config.json` (Qwen2 and Llama name them alike)."""
        return {
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.hidden_size // self.num_attention_heads,
            "hidden_act": "silu",
            "max_position_embeddings": 8192,
        }


# head_dim 64 for both: the CPU attention kernels reject smaller heads (head_dim 16 fails).
SHAPES = {
    # ~340 ms TTFT for a 3,400-token unique prompt on a 2-core CPU, ~25 ms when the prefix is cached:
    # the seed article's story (a 200 ms p95 target fails without prefix reuse, passes with it).
    "demo": ModelShape(512, 6, 8, 2, 1408),
    # Fast enough for test suites: ~30 ms unique, ~10 ms cached at 3,400 tokens.
    "tiny": ModelShape(128, 2, 2, 1, 384),
}


def _training_files() -> list[Path]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files, total = [], 0
    for path in sorted(stdlib.glob("*.py")):
        files.append(path)
        total += path.stat().st_size
        if total >= _TRAINING_BYTES:
            break
    return files


def tokenizer_config(chat_template: str) -> dict[str, object]:
    """tokenizer_config.json of a generated model: the tokenizer `train_tokenizer` writes, ChatML's
    special tokens, and the model's chat template."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 8192,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "chat_template": chat_template,
    }


def train_tokenizer(out_dir: Path) -> int:
    """Train and save the tokenizer; returns the id of `<|im_end|>` (the end-of-turn token)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([str(p) for p in _training_files()], trainer)
    tok.save(str(out_dir / "tokenizer.json"))
    return tok.token_to_id("<|im_end|>")


VISION = "vision"  # the tiny model with a vision encoder: launch/vision_model.py


def make_model(out_dir: str | Path, size: str = "demo") -> Path:
    if size == VISION:
        from slogate.launch.vision_model import make_vision_model  # it builds on this module

        return make_vision_model(out_dir)
    if size not in SHAPES:
        raise ValueError(f"unknown model size {size!r}; choose one of {', '.join([*SHAPES, VISION])}")
    shape = SHAPES[size]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    eos_id = train_tokenizer(out)
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "vocab_size": VOCAB_SIZE,
        **shape.config_fields(),
        "max_window_layers": shape.num_hidden_layers,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1_000_000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "use_sliding_window": False,
        "bos_token_id": eos_id,
        "eos_token_id": eos_id,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": eos_id}) + "\n")
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(CHATML_TEMPLATE), indent=2) + "\n")
    (out / "slogate-model.json").write_text(json.dumps({"size": size, "shape": shape.__dict__}) + "\n")
    return out
