"""The tiny vision-language model made offline (`slogate model make --size vision`): an Idefics3
config whose image token is one token of its tokenizer, and a chat template that renders each
image part as that token (tests/e2e/test_vllm_images.py serves it with real vLLM)."""

import json
from pathlib import Path

import jinja2
from slogate.launch.model import make_model
from slogate.launch.vision_model import IMAGE_SEQ_LEN, IMAGE_TOKENS
from tokenizers import Tokenizer


def test_the_vision_model_is_an_idefics3_whose_image_tokens_are_single_tokens(tmp_path: Path) -> None:
    out = make_model(tmp_path / "vision", "vision")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["Idefics3ForConditionalGeneration"]
    vision = config["vision_config"]
    assert vision["hidden_size"] // vision["num_attention_heads"] == 64  # CPU kernels reject smaller heads
    assert IMAGE_SEQ_LEN == (vision["image_size"] // vision["patch_size"]) ** 2 // config["scale_factor"] ** 2 == 64
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    ids = [tok.encode(t).ids for t in IMAGE_TOKENS]
    assert all(len(i) == 1 for i in ids) and len({i[0] for i in ids}) == len(IMAGE_TOKENS)
    assert tok.token_to_id("<image>") == config["image_token_id"] < config["text_config"]["vocab_size"]
    assert tok.get_vocab_size() <= config["text_config"]["vocab_size"]
    processor = json.loads((out / "processor_config.json").read_text())
    assert processor == {"processor_class": "Idefics3Processor", "image_seq_len": IMAGE_SEQ_LEN}

    template = jinja2.Template(json.loads((out / "tokenizer_config.json").read_text())["chat_template"])
    parts = [{"type": "image_url", "image_url": {"url": "data:,"}}] * 2 + [{"type": "text", "text": "what?"}]
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": parts}]
    assert template.render(messages=messages, add_generation_prompt=True) == (
        "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\n<image><image>what?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
