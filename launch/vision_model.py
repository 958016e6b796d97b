"""`slogate model make --size vision`: a tiny Idefics3/SmolVLM-shaped vision-language model made
offline, served by vLLM with `--load-format dummy` (random weights: what is measured is the cost of
the shapes, the vision encoder's patches and the image tokens they add to the prompt).

It holds the demo tokenizer (launch/model.py) with Idefics3's image tokens added, a `config.json`
with a 2-layer SigLIP-style vision encoder (width 128, 512-pixel tiles in 16-pixel patches, merged
4x4 by the connector: 64 image tokens a tile) before a tiny Llama text model, a
`preprocessor_config.json` for Idefics3's image processor (an image up to 512 pixels is one tile;
a larger one is split into 512-pixel tiles plus a global view, as SmolVLM does) and a ChatML
template that places each image part as `<image>`, which the processor expands.

vLLM's CPU build (0.32) serves this shape. Qwen2-VL/Qwen2.5-VL, LLaVA (1.5, NeXT, OneVision),
Gemma 3, InternVL and Pixtral/Mistral 3 it cannot here: their vLLM modules or transformers
processors import torchvision, which the CPU venv lacks (PyPI's torchvision is a CUDA build whose
operators do not load beside the CPU torch). PaliGemma, BLIP-2 and GLM-4V take one image a prompt.
"""

from __future__ import annotations

import json
from pathlib import Path

from slogate.launch.model import SHAPES, tokenizer_config, train_tokenizer

IMAGE_TOKEN = "<image>"
# Idefics3's processor writes these around each tile's image tokens.
IMAGE_TOKENS = [
    "<fake_token_around_image>",
    IMAGE_TOKEN,
    "<end_of_utterance>",
    "<global-img>",
    *(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)),
]
VISION_VOCAB_SIZE = 2112  # the demo vocabulary (2048) and the image tokens, rounded up
TILE, PATCH, SCALE = 512, 16, 4  # SmolVLM's: (512 / 16)^2 / 4^2 = 64 image tokens a tile
IMAGE_SEQ_LEN = (TILE // PATCH) ** 2 // SCALE**2
# Content may be a string or OpenAI-style parts; an image part becomes the image token.
VISION_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% else %}{{ '<image>' }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _add_image_tokens(out: Path) -> int:
    """Add the image tokens to the saved tokenizer; the id of `<image>`."""
    from tokenizers import AddedToken, Tokenizer

    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in IMAGE_TOKENS])
    tok.save(str(out / "tokenizer.json"))
    return tok.token_to_id(IMAGE_TOKEN)


def _write(out: Path, name: str, value: dict) -> None:
    (out / name).write_text(json.dumps(value, indent=2) + "\n")


def make_vision_model(out_dir: str | Path) -> Path:
    """Write the model directory; returns it."""
    shape = SHAPES["tiny"]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    eos_id = train_tokenizer(out)
    image_id = _add_image_tokens(out)
    text = {
        "model_type": "llama",
        "vocab_size": VISION_VOCAB_SIZE,
        **shape.config_fields(),
        "rms_norm_eps": 1e-5,
        "rope_theta": 100_000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "bos_token_id": eos_id,
        "eos_token_id": eos_id,
        "pad_token_id": eos_id,
    }
    vision = {
        "model_type": "idefics3_vision",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_channels": 3,
        "image_size": TILE,
        "patch_size": PATCH,
        "hidden_act": "gelu_pytorch_tanh",
        "layer_norm_eps": 1e-6,
    }
    config = {
        "architectures": ["Idefics3ForConditionalGeneration"],
        "model_type": "idefics3",
        "text_config": text,
        "vision_config": vision,
        "scale_factor": SCALE,
        "image_token_id": image_id,
        "pad_token_id": eos_id,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }
    _write(out, "config.json", config)
    _write(out, "generation_config.json", {"eos_token_id": eos_id})
    _write(out, "tokenizer_config.json", tokenizer_config(VISION_TEMPLATE))
    image_processor = {
        "image_processor_type": "Idefics3ImageProcessor",
        "processor_class": "Idefics3Processor",
        "do_resize": True,
        "size": {"longest_edge": 2 * TILE},  # SmolVLM-256M: 4 * 512; smaller, for a fast CPU test
        "max_image_size": {"longest_edge": TILE},
        "do_image_splitting": True,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_convert_rgb": True,
        "do_pad": True,
    }
    _write(out, "preprocessor_config.json", image_processor)
    _write(out, "processor_config.json", {"processor_class": "Idefics3Processor", "image_seq_len": IMAGE_SEQ_LEN})
    _write(out, "chat_template.json", {"chat_template": VISION_TEMPLATE})
    _write(out, "slogate-model.json", {"size": "vision", "shape": shape.__dict__, "vision": vision})
    return out
