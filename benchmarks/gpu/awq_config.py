"""Make an AWQ-shaped copy of a model directory for `--load-format dummy`.

    python benchmarks/gpu/awq_config.py SRC_DIR DST_DIR

The copy's config.json gains the quantization_config of Qwen/Qwen2.5-7B-Instruct-AWQ (4-bit GEMM,
group 128, zero point) and its float16 dtype; vLLM then builds the AWQ layers (AWQ-Marlin on
Hopper) and the dummy loader fills them, so the serving cost is that of the real checkpoint.
"""

import json
import shutil
import sys
from pathlib import Path

QWEN25_AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}


def main(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, dirs_exist_ok=True)
    config = json.loads((dst / "config.json").read_text())
    config.update(quantization_config=QWEN25_AWQ, torch_dtype="float16")
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
