"""Where ``pdtune.perfmodel.validation.MEASURED_OVERHEADS_GIB`` comes from: this folder's measured table.

    .venv/bin/python data/clusters/llm-d-vllm-memory/overheads.py

prints the median activation peak of the eight runs, the non-torch memory at TP2 and the median CUDA-graph memory
(GiB), which pdtune rounds to (5.6, 0.55, 0.0) for the start-up memory of measured servers it predicts
(``tests/test_llmd_memory.py`` checks that they agree).
"""

from __future__ import annotations

from pathlib import Path

from pdtune.results.llmd_memory import read_memory_table

TABLE = Path(__file__).with_name("empirical-vllm-memory-results.md")


def overheads(path: Path = TABLE) -> tuple[float, float, float]:
    """(activation peak, non-torch, CUDA graphs) in GiB, from the table at ``path``."""
    df = read_memory_table(path)
    return (float(df["activation_peak_gib"].median()), float(df.loc[df["tp"] == 2, "non_torch_gib"].max()),
            float(df["cudagraph_gib"].median()))


if __name__ == "__main__":
    activation, non_torch, graphs = overheads()
    print(f"activation peak {activation:.2f} GiB (median), non-torch {non_torch:.2f} GiB (TP2), "
          f"CUDA graphs {graphs:.2f} GiB (median)")
