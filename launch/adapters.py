"""LoRA adapters for a generated model (launch/model.py), made offline, and the vLLM flags that serve them.

Each adapter is a PEFT directory (`adapter_config.json`, `adapter_model.safetensors`) with
random low-rank weights on the attention projections, shaped from the model's `config.json`.
The safetensors file is written here by hand (a JSON header and raw little-endian float32), so
that making adapters needs neither peft nor torch. Random weights are fine for latency work: what
an adapter costs (its matrices applied at each step, the slots `--max-loras` gives) depends on
its rank and shapes, not on its values.
"""

from __future__ import annotations

import json
import random
import struct
import sys
from array import array
from pathlib import Path

TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
DEFAULT_RANK = 8


def _projections(config: dict) -> dict[str, tuple[int, int]]:
    """Each target module's (in, out) features, from a Qwen2/Llama-shaped `config.json`."""
    hidden = config["hidden_size"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    q = config["num_attention_heads"] * head_dim
    kv = config.get("num_key_value_heads", config["num_attention_heads"]) * head_dim
    return {"q_proj": (hidden, q), "k_proj": (hidden, kv), "v_proj": (hidden, kv), "o_proj": (q, hidden)}


def _safetensors(tensors: dict[str, tuple[list[int], array]]) -> bytes:
    """The safetensors encoding of float32 `tensors` (name -> (shape, values))."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name, (shape, values) in tensors.items():
        if sys.byteorder != "little":
            values = array("f", values)
            values.byteswap()
        blob = values.tobytes()
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-aligned
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def make_adapter(model_dir: str | Path, out_dir: str | Path, rank: int = DEFAULT_RANK, seed: int = 0) -> Path:
    """Write one adapter for the model in `model_dir` into `out_dir` (rank `rank`, weights from `seed`)."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    rng = random.Random(f"slogate-adapter:{seed}")
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        for module, (n_in, n_out) in _projections(config).items():
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            tensors[f"{prefix}.lora_A.weight"] = (
                [rank, n_in],
                array("f", (rng.gauss(0, 0.02) for _ in range(rank * n_in))),
            )
            tensors[f"{prefix}.lora_B.weight"] = (
                [n_out, rank],
                array("f", (rng.gauss(0, 0.02) for _ in range(n_out * rank))),
            )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "adapter_model.safetensors").write_bytes(_safetensors(tensors))
    adapter_config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": str(Path(model_dir).resolve()),
        "r": rank,
        "lora_alpha": 2 * rank,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": list(TARGET_MODULES),
        "fan_in_fan_out": False,
        "inference_mode": True,
    }
    (out / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2) + "\n")
    return out


def adapter_names(count: int) -> list[str]:
    """The names `make_adapters` gives `count` adapters: a, b, c, ... (then a1, b1, ... past z)."""
    return [chr(ord("a") + i % 26) + (str(i // 26) if i >= 26 else "") for i in range(count)]


def adapter_dirs(model_dir: str | Path, count: int) -> dict[str, Path]:
    """Where `make_adapters` puts `count` adapters of the model in `model_dir`: name -> directory."""
    if count < 1:
        raise ValueError(f"adapters: the count must be >= 1, got {count}")
    return {name: Path(model_dir) / "adapters" / name for name in adapter_names(count)}


def make_adapters(model_dir: str | Path, count: int, rank: int = DEFAULT_RANK) -> dict[str, Path]:
    """`count` adapters for the model in `model_dir`, in `<model_dir>/adapters/<name>`: name -> directory.
    Made once: an adapter directory that is already there is kept."""
    out = adapter_dirs(model_dir, count)
    for i, path in enumerate(out.values()):
        if not (path / "adapter_config.json").exists():
            make_adapter(model_dir, path, rank, seed=i)
    return out


def lora_args(adapters: dict[str, Path], rank: int = DEFAULT_RANK) -> list[str]:
    """vLLM's flags that serve `adapters` (name -> directory) under their names, all at once.

    `--lora-modules` takes every adapter after one flag: a repeated flag keeps only its last."""
    return [
        "--enable-lora",
        "--max-lora-rank",
        str(rank),
        "--max-loras",
        str(len(adapters)),
        "--lora-modules",
        *(f"{name}={path}" for name, path in adapters.items()),
    ]
