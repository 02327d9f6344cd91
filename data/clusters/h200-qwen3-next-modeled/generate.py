"""Regenerate this folder: Qwen3-Next-80B-A3B on HGX H200, MODELED by pdtune's performance model.

    .venv/bin/python data/clusters/h200-qwen3-next-modeled/generate.py

``pdtune dataset generate`` writes only the article's dataset (it has no flags for another model, GPU or
set of topologies yet), so this script calls the same generator, :func:`pdtune.dataset.generate_dataset`,
with its own :class:`~pdtune.dataset.DatasetSpec`. The generator was written for the article's GB300 runs and
stamps three of their facts on every file; this script corrects them afterwards, and changes nothing else:

* the article's GSM8K result (0.95) is copied onto every disaggregated file. Nobody has measured
  Qwen3-Next's accuracy in these deployments, so the copy is removed: the accuracy gate then keeps every
  deployment and lists it as unmeasured, which is the truth;
* the job metadata says the weights are NVFP4 and a node has 4 GPUs (a GB300 NVL72 tray). This model's
  config is BF16, and an HGX H200 node has 8 GPUs.

``tests/test_workbook.py`` regenerates the folder and compares every byte, so the files stay what this
script writes with the current performance model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pdtune.dataset import MANIFEST, DatasetSpec, generate_dataset, generated_files

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
)

PRECISION = "bf16"  # torch_dtype of data/models/qwen3-next-80b-a3b/config.json
GPUS_PER_NODE = 8  # an HGX H200 board


def _dump(obj: object) -> str:
    # the generator's own formatting, so a corrected file differs only in what was corrected
    return json.dumps(obj, indent=2, allow_nan=False) + "\n"


def correct(folder: Path) -> None:
    """Remove the copied article accuracy; state this model's precision and this GPU's node size."""
    for rel in generated_files(folder):
        path = folder / rel
        if path.suffix != ".json":
            continue
        record = json.loads(path.read_text(encoding="utf-8"))
        if rel.name == MANIFEST:
            note = "not measured for this model; generate.py removed the article's GSM8K result (0.95)"
            record["accuracy"] = {"value": None, "note": note}
            record["corrected_by"] = "data/clusters/h200-qwen3-next-modeled/generate.py (see its docstring)"
        elif "max_concurrency" in record:  # a result file
            record.pop("accuracy", None)
            record.pop("accuracy_note", None)
        else:  # a job's metadata
            record["model"]["precision"] = PRECISION
            record["resources"]["gpus_per_node"] = GPUS_PER_NODE
        path.write_text(_dump(record), encoding="utf-8")


def generate(out: Path = HERE) -> Path:
    target = generate_dataset(out, SPEC)
    correct(target)
    return target


if __name__ == "__main__":
    folder = generate(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
    print(f"wrote {len(generated_files(folder))} modeled files to {folder}")
