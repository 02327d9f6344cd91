"""Regenerate this folder: Qwen3-Next-80B-A3B on HGX H200, MODELED by pdtune's performance model.

    .venv/bin/python data/clusters/h200-qwen3-next-modeled/generate.py

``pdtune dataset generate`` writes only the article's dataset (it has no flags for another model, GPU or
set of topologies yet), so this script calls the same generator, :func:`pdtune.dataset.generate_dataset`,
with its own :class:`~pdtune.dataset.DatasetSpec`. Precision and node size come from the model and the GPU;
``accuracy=None`` because nobody has measured Qwen3-Next's accuracy in these deployments: the files carry
none, and the accuracy gate keeps every deployment and lists it as unmeasured, which is the truth.

``tests/test_workbook.py`` regenerates the folder and compares every byte, so the files stay what this
script writes with the current performance model.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pdtune.dataset import DatasetSpec, generate_dataset, generated_files

HERE = Path(__file__).resolve().parent

#: Concurrencies of every sweep: powers of two up to 1024 (one H200 node holds no more decode requests).
GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

SPEC = DatasetSpec(
    model="qwen3-next-80b-a3b",
    gpu="h200",
    grid=GRID,
    # Every layout fits one 8-GPU node; TP1 does not (about 148 GiB of BF16 weights).
    prefill_topologies=("TP2", "TP4", "TP8", "TP2DP4+EP", "TP4DP2+EP"),
    decode_topologies=("TEP8", "TP2", "TP4", "TP4DP2+EP"),
    # Small deployments with MTP for the latency end; more prefill, no MTP, for the throughput end.
    disagg_configs=(
        ("1xTP2:1xTP2", True),
        ("1xTP2:1xTP4", True),
        ("2xTP2:1xTP4", True),
        ("1xTP4:1xTP4", False),
        ("2xTP2:1xTEP8", False),
    ),
    accuracy=None,
)

def generate(out: Path = HERE) -> Path:
    return generate_dataset(out, SPEC)


if __name__ == "__main__":
    folder = generate(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
    print(f"wrote {len(generated_files(folder))} modeled files to {folder}")
