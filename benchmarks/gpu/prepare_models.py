"""Finish the Qwen2.5-7B-shaped model directory for `--load-format dummy` runs, and make its AWQ twin.

    python benchmarks/gpu/prepare_models.py MODEL_DIR AWQ_DIR

1. The offline-trained tokenizer has 32,000 tokens, the model's vocabulary 152,064. Random
   weights pick ids above 32,000 (greedy decoding picks the same one every step), which decode to
   nothing: vLLM then streams no content at all and no TTFT can be measured (seen on the H200).
   So the tokenizer's vocabulary is padded with decode-only tokens (`pad<id>`, no merges lead to
   them, so encoding is unchanged) up to the model's size: every generated token is text.
2. AWQ_DIR is a copy whose config.json gains the quantization_config of
   Qwen/Qwen2.5-7B-Instruct-AWQ (4-bit GEMM, group 128, zero point) and its float16 dtype; vLLM
   builds the AWQ layers (AWQ-Marlin on Hopper) and the dummy loader fills them.
"""

import json
import shutil
import sys
from pathlib import Path

QWEN25_AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}


def pad_vocab(model_dir: Path) -> int:
    """Pad tokenizer.json's BPE vocabulary to config.json's vocab_size; returns the tokens added."""
    config = json.loads((model_dir / "config.json").read_text())
    path = model_dir / "tokenizer.json"
    tok = json.loads(path.read_text())
    vocab: dict[str, int] = tok["model"]["vocab"]
    taken = set(vocab.values()) | {t["id"] for t in tok.get("added_tokens", [])}
    added = 0
    for i in range(config["vocab_size"]):
        if i not in taken:
            name = f"pad{i}"
            if name in vocab:
                raise SystemExit(f"{path}: {name!r} is already a token")
            vocab[name] = i
            added += 1
    path.write_text(json.dumps(tok, ensure_ascii=False))
    return added


def make_awq_twin(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, dirs_exist_ok=True)
    config = json.loads((dst / "config.json").read_text())
    config.update(quantization_config=QWEN25_AWQ, torch_dtype="float16")
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")


if __name__ == "__main__":
    model, awq = Path(sys.argv[1]), Path(sys.argv[2])
    print(f"{model}: {pad_vocab(model)} decode-only tokens added")
    make_awq_twin(model, awq)
