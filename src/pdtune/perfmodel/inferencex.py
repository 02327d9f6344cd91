"""The model against measurements nobody here tuned it on: InferenceX's nine GB200 DeepSeek-R1 points.

Each row of ``data/clusters/inferencex-gb200-dsr1/`` is one disaggregated deployment at one concurrency
(Dynamo + TensorRT-LLM, FP4, MTP, ISL/OSL 1024/1024). :func:`inferencex_check` predicts each point from the
DeepSeek-V3 architecture (DeepSeek-R1 shares it) with the row's own GPU counts, expert parallelism, MTP and
concurrency, with the same calibration as every other prediction, and returns the error per point. Nothing
is fitted to these rows.

What a row does not record, and what is assumed instead (the same for every row):

* the checkpoint is DeepSeek-R1-0528 with NVFP4 routed experts and the config's FP8 block-scaled dense layers;
* decode engines are ``EP`` GPUs each (``Num Decode GPUs / EP`` of them): ``DP<EP>+EP`` when the row says DP
  attention, ``TEP<EP>`` otherwise;
* prefill engines are one 4-GPU GB200 tray each (``Num Prefill GPUs / 4``), with the decode side's attention
  style (``DP4+EP`` or ``TEP4``): the file does not give the prefill layout;
* ``Spec Decoding = mtp`` means three MTP draft tokens at the model's default acceptance rate;
* the KV cache is FP8; the vLLM memory and state accounting stands in for TensorRT-LLM's.
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pandas as pd

from pdtune import guarded
from pdtune.errors import InputError
from pdtune.gpus import load_gpu
from pdtune.model import ModelSpec, load_model
from pdtune.paths import clusters_dir
from pdtune.perfmodel.efficiency import DEFAULT_ACCEPTANCE, DEFAULT_EFFICIENCY, Efficiency
from pdtune.perfmodel.sweeps import predict_disagg
from pdtune.topology import Deployment, Topology

DATASET = "inferencex-gb200-dsr1"
FILE_NAME = "InferenceX_DeepSeek-R1-0528_interactivity_gb200.csv"
PREFILL_ENGINE_GPUS = 4  # one GB200 compute tray
MTP_TOKENS = 3

#: NVFP4: 4-bit values and one FP8 scale per 16 (9/16 byte per parameter).
NVFP4 = Fraction(9, 16)


def inferencex_file() -> Path:
    return clusters_dir() / DATASET / FILE_NAME


def dsr1_fp4_spec() -> ModelSpec:
    """DeepSeek-R1-0528 as served in FP4: DeepSeek-V3's architecture, NVFP4 routed experts."""
    base = load_model("deepseek-v3")
    weights = replace(base.weights, experts=NVFP4, name="fp8-block+nvfp4-experts")
    return replace(base, name="deepseek-r1-0528-fp4", weights=weights)


def read_points(path: str | Path | None = None) -> list[dict[str, str]]:
    """The CSV's rows (its ``#`` licence lines skipped) as dicts of raw strings."""
    source = Path(path) if path is not None else inferencex_file()
    text = guarded.read_text(source, "file")
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    _header, table = guarded.parse_csv(body, source)
    rows = [row for _, row in table]
    if not rows:
        raise InputError(source, "rows", "no data rows")
    return rows


def _int(row: dict[str, str], key: str, where: str) -> int:
    try:
        value = float(row[key])
    except (KeyError, ValueError):
        raise InputError(where, key, f"expected a number, got {row.get(key)!r}") from None
    if value != int(value) or value < 1:
        raise InputError(where, key, f"expected a whole number >= 1, got {row[key]!r}")
    return int(value)


def _float(row: dict[str, str], key: str, where: str) -> float:
    try:
        value = float(row[key])
    except (KeyError, ValueError):
        raise InputError(where, key, f"expected a number, got {row.get(key)!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise InputError(where, key, f"expected a positive number, got {row[key]!r}")
    return value


def deployment_of(row: dict[str, str], where: str = "InferenceX row") -> Deployment:
    """The xPyD layout a row implies, under the assumptions in the module docstring."""
    prefill_gpus = _int(row, "Num Prefill GPUs", where)
    decode_gpus = _int(row, "Num Decode GPUs", where)
    ep = _int(row, "EP", where)
    dp_attention = row.get("DP Attention", "").strip().lower() == "true"
    if decode_gpus % ep:
        raise InputError(where, "EP", f"{decode_gpus} decode GPUs do not split into engines of EP={ep}")
    if prefill_gpus % PREFILL_ENGINE_GPUS:
        raise InputError(
            where, "Num Prefill GPUs", f"{prefill_gpus} is not a multiple of {PREFILL_ENGINE_GPUS}"
        )

    def engine(size: int) -> Topology:
        if dp_attention:
            return Topology(tp=1, dp=size, expert_parallel=True, name=f"DP{size}+EP")
        return Topology(tp=size, expert_parallel=True, name=f"TEP{size}")

    return Deployment(
        engine(PREFILL_ENGINE_GPUS), prefill_gpus // PREFILL_ENGINE_GPUS, engine(ep), decode_gpus // ep
    )


def inferencex_check(
    path: str | Path | None = None,
    *,
    acceptance: float = DEFAULT_ACCEPTANCE,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
) -> pd.DataFrame:
    """Predicted versus measured for every row: throughput per GPU, tokens/s per user, median TTFT.

    ``*_error`` columns are ``predicted / measured - 1`` (0.25 = predicted 25 % high). The CSV's ``(ms)``
    columns hold seconds; they are converted here.
    """
    source = Path(path) if path is not None else inferencex_file()
    spec = dsr1_fp4_spec()
    gpu = load_gpu("gb200")
    out = []
    for i, row in enumerate(read_points(source), start=1):
        where = f"{source} (row {i})"
        dep = deployment_of(row, where)
        isl, osl = _int(row, "ISL", where), _int(row, "OSL", where)
        concurrency = _int(row, "Concurrency", where)
        mtp = MTP_TOKENS if row.get("Spec Decoding", "").strip().lower() == "mtp" else 0
        [pred] = predict_disagg(
            spec,
            gpu,
            dep,
            [concurrency],
            isl=isl,
            osl=osl,
            mtp_tokens=mtp,
            acceptance=acceptance,
            efficiency=efficiency,
        )
        measured_tpot_ms = 1000 * _float(row, "Median TPOT (ms)", where)  # the column holds seconds
        measured = {
            "tps_per_gpu": _float(row, "Throughput/GPU (tok/s)", where),
            "tps_per_user": 1000 / measured_tpot_ms,
            "ttft_ms": 1000 * _float(row, "Median TTFT (ms)", where),
        }
        predicted = {
            "tps_per_gpu": pred.tps_per_gpu,
            "tps_per_user": pred.tps_per_user,
            "ttft_ms": pred.ttft_ms,
        }
        record: dict[str, object] = {
            "concurrency": concurrency,
            "gpus_prefill": dep.gpus_prefill,
            "gpus_decode": dep.gpus_decode,
            "deployment": dep.label,
            "mtp_tokens": mtp,
        }
        for key in ("tps_per_gpu", "tps_per_user", "ttft_ms"):
            record[f"measured_{key}"] = measured[key]
            record[f"predicted_{key}"] = predicted[key]
            record[f"{key}_error"] = predicted[key] / measured[key] - 1
        record["kv_limited"] = pred.kv_limited
        out.append(record)
    return pd.DataFrame(out)
