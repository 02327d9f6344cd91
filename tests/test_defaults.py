"""Default factors per GPU: where each comes from, and that the file names what it was fitted on."""

from __future__ import annotations

from pdtune.model import bundled_models
from pdtune.perfmodel.efficiency import DEFAULT_EFFICIENCY
from pdtune.perfmodel.defaults import SILICON_GPUS, gpu_defaults


def test_article_gpus_keep_the_article_factors() -> None:
    for gpu in ("gb300", "gb200", "a100"):
        assert gpu_defaults(gpu).efficiency == DEFAULT_EFFICIENCY and gpu_defaults(gpu).source == "article"


def test_silicon_gpus_name_the_bundled_models_they_were_fitted_on() -> None:
    bundled = set(bundled_models())
    for gpu in SILICON_GPUS:
        d = gpu_defaults(gpu)
        assert d.source == "silicon" and "vLLM aggregated rows" in d.note
        models = d.note.split(" of ", 1)[1].split()
        assert models and set(models) <= bundled, (gpu, models)
        assert 0 < d.efficiency.experts < 1 and d.efficiency.request_overhead_s > 0
