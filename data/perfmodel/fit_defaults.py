"""Refit this folder's ``defaults.csv`` from the public measurements pdtune ships.

    .venv/bin/python data/perfmodel/fit_defaults.py

For H100, H200, B200 and B300: the factors of :class:`pdtune.perfmodel.efficiency.Efficiency` fitted
(:func:`pdtune.perfmodel.defaults.fit_gpu_defaults`) on every vLLM aggregated row of aiconfigurator's silicon
sample (``data/clusters/aiconfigurator-silicon/``) whose model is a bundled one, measured on a GPU of the same
architecture (H100 with H200, B200 with B300: one fit each). GB200 and GB300 keep the article-tuned factors. The fit is deterministic; ``tests/test_validation.py`` checks that the
file names the models it was fitted on and that they are bundled.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pdtune.perfmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency
from pdtune.perfmodel.defaults import (
    SILICON_GPUS,
    GpuDefaults,
    architecture_of,
    fit_gpu_defaults,
    silicon_file,
    silicon_problems,
    write_defaults,
)
from pdtune.results import load_results

HERE = Path(__file__).resolve().parent


def main(out: Path = HERE / "defaults.csv") -> Path:
    problems = silicon_problems(load_results(silicon_file()))
    rows = []
    fits: dict[tuple[str, ...], tuple[Efficiency, list[str]]] = {}
    for gpu in SILICON_GPUS:
        members = architecture_of(gpu)
        if members not in fits:  # one fit per architecture
            fits[members] = fit_gpu_defaults(problems, gpu)
        eff, models = fits[members]
        n = sum(len(p.rows) for (m, g), p in problems.items() if g in members)
        where = (f"{n} vLLM aggregated rows on {' and '.join(members)}" if n
                 else "no rows on this architecture: every GPU's rows")
        rows.append(GpuDefaults(gpu, eff, "silicon", f"fitted on {where} of {' '.join(models)}"))
    for gpu in ("gb200", "gb300"):
        rows.append(GpuDefaults(gpu, DEFAULT_EFFICIENCY, "article", "the article-tuned factors (chapters 5-7)"))
    write_defaults(out, rows, "pdtune's default performance-model factors per GPU; written by fit_defaults.py")
    return out


if __name__ == "__main__":
    print(f"wrote {main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / 'defaults.csv')}")
