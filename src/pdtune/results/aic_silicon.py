"""aiconfigurator's silicon measurement CSV (``systems/silicon_sample.csv`` of ai-dynamo/aiconfigurator).

One row per measured deployment and concurrency, from vLLM, SGLang and TensorRT-LLM, with the measured
TTFT and TPOT (``silicon_ttft_ms``, ``silicon_tpot_ms``) and the whole parallel layout. How each column is read:

=====================================  ==================================================================
column(s)                              tidy field
=====================================  ==================================================================
``model_path``                         ``model`` (the Hugging Face id, e.g. ``openai/gpt-oss-120b``)
``system``                             ``gpu``: ``h100_sxm`` -> ``h100``, ... (:data:`SYSTEMS`); unknown -> error
``backend``, ``backend_version``       kept as they are (the version is empty on some rows)
``precision``, ``gemm_quant_mode``,    kept as they are: how the weights were served (``fp8``, ``nvfp4``,
``moe_quant_mode``                     ``int4_wo``, ...); the performance model reads them
``tp_size``, ``pp_size``,              ``topology`` in pdtune's grammar (:mod:`pdtune.topology`): attention
``attention_dp_size``,                 ``TP<tp>DP<dp>PP<pp>``, experts ``+EP`` when ``moe_ep_size`` covers
``moe_tp_size``, ``moe_ep_size``       every GPU of a stage, ``+EP<n>`` for MoE-TP x MoE-EP, none when each
                                       expert is sliced (``moe_ep_size`` 1)
``prefill_*``, ``decode_*``            ``prefill_topology``/``decode_topology`` and the worker counts of
                                       disaggregated rows, read the same way
``batch_size`` (per attention-DP       ``concurrency`` = ``batch_size x attention_dp_size`` (disaggregated:
rank)                                  ``decode_batch_size x decode_attention_dp_size x decode_num_workers``);
                                       the run's own ``silicon_concurrency=`` in ``silicon_data_source`` wins
                                       where it is recorded
``silicon_ttft_ms``, ``silicon_tpot_ms``  ``ttft_ms_p50``, ``tpot_ms_p50`` (see the data README on mean vs median)
``id``, ``silicon_data_source``        ``source_id`` and ``provenance`` (database dump, config id, measured
                                       date, workflow run, container image)
=====================================  ==================================================================

GPU counts are the layout's: ``tp x dp x pp`` per engine (``attention_dp_size`` empty or 0 means 1, or what
``moe_tp_size x moe_ep_size`` implies). Throughput is not in the file: ``total_tps`` is derived by Little's law
for the closed loop the runs used, ``concurrency x (ISL + OSL) / (TTFT + (OSL - 1) x TPOT)``. Disaggregated
rows that do not record their worker counts (most SGLang and TensorRT-LLM ones) are named ``?x<prefill>:?x<decode>``,
count one engine per side and leave the per-GPU columns empty rather than divide by a guess.

Bad input is one :class:`~pdtune.errors.InputError` naming the file, the line and the column: a missing
column, an unknown ``system``, a ``mode`` other than agg/disagg, a MoE layout whose GPUs (``moe_tp_size x
moe_ep_size``) differ from the attention layout's (``tp_size x attention_dp_size``).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from pdtune.errors import InputError
from pdtune.results._read import read_csv
from pdtune.results.gpus import GpuCounts
from pdtune.results.schema import Row, number, text, whole
from pdtune.topology import Topology

SOURCE = "aiconfigurator-silicon"

#: aiconfigurator's system names -> pdtune's GPU names (data/gpus/gpus.csv).
SYSTEMS = {
    "h100_sxm": "h100",
    "h200_sxm": "h200",
    "b200_sxm": "b200",
    "b300_sxm": "b300",
    "gb200": "gb200",
    "gb300": "gb300",
}

_LAYOUT = ("tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")
REQUIRED = (
    "id", "silicon_data_source", "backend", "backend_version", "model_path", "system", "precision", "mode",
    "isl", "osl", "gemm_quant_mode", "moe_quant_mode", "batch_size", *_LAYOUT,
    "prefill_batch_size", "prefill_num_workers", *(f"prefill_{c}" for c in _LAYOUT),
    "decode_batch_size", "decode_num_workers", *(f"decode_{c}" for c in _LAYOUT),
    "silicon_ttft_ms", "silicon_tpot_ms",
)

#: The columns this format adds to the tidy table (kept by :func:`pdtune.results.load_results`).
EXTRA = (
    "backend", "backend_version", "gpu", "system", "precision", "gemm_quant_mode", "moe_quant_mode",
    "source_id", "provenance",
)

_CONCURRENCY = re.compile(r"silicon_concurrency=(\d+)")


def is_silicon_header(header: list[str]) -> bool:
    """Any of the format's own columns: a file missing the others is then named for what it lacks."""
    return any(c in header for c in ("silicon_ttft_ms", "silicon_tpot_ms", "silicon_data_source"))


def rows(path: Path) -> list[Row]:
    header, table = read_csv(path)
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise InputError(path, missing[0], "column missing from the aiconfigurator silicon header")
    out = [_row(path, lineno, values) for lineno, values in table]
    if not out:
        raise InputError(path, "rows", "the CSV has a header but no rows")
    return out


def gpu_of_system(system: str, where: str) -> str:
    key = system.strip().lower()
    if key not in SYSTEMS:
        raise InputError(where, "system", f"unknown system {system!r}; known: {', '.join(sorted(SYSTEMS))}")
    return SYSTEMS[key]


def _row(path: Path, lineno: int, values: dict[str, str]) -> Row:
    where = f"{path} (line {lineno})"
    gpu = gpu_of_system(values["system"], where)
    mode = values["mode"].strip().lower()
    if mode not in ("agg", "disagg"):
        raise InputError(where, "mode", f"must be agg or disagg, got {values['mode']!r}")
    isl = whole(values["isl"], where, "isl", required=True)
    osl = whole(values["osl"], where, "osl", required=True)
    ttft = number(values["silicon_ttft_ms"], where, "silicon_ttft_ms", required=True, positive=True)
    tpot = number(values["silicon_tpot_ms"], where, "silicon_tpot_ms", required=True, positive=True)
    assert isl is not None and osl is not None and ttft is not None and tpot is not None
    provenance = values["silicon_data_source"].strip()
    recorded = _CONCURRENCY.search(provenance)
    row: Row = {
        "source": SOURCE,
        "path": str(path),
        "model": text(values["model_path"]),
        "mode": mode,
        "isl": isl,
        "osl": osl,
        "ttft_ms_p50": ttft,
        "tpot_ms_p50": tpot,
        "mtp_tokens": None,  # the file does not say whether speculative decoding ran
        "modeled": False,
        "backend": text(values["backend"]),
        "backend_version": text(values["backend_version"]),
        "gpu": gpu,
        "system": values["system"].strip(),
        "precision": text(values["precision"]),
        "gemm_quant_mode": text(values["gemm_quant_mode"]),
        "moe_quant_mode": text(values["moe_quant_mode"]),
        "source_id": text(values["id"]),
        "provenance": provenance or None,
        "_label": where,
        "_fields": {"tpot_ms_p50": "silicon_tpot_ms", "throughput": "silicon_tpot_ms"},
    }
    if mode == "agg":
        topo = layout(values, "", where)
        row["topology"] = topo.name
        row["gpus"] = GpuCounts.aggregated(topo.gpus)
        per_rank = whole(values["batch_size"], where, "batch_size")
        concurrency = per_rank * topo.dp if per_rank is not None else None
    else:
        prefill, decode = layout(values, "prefill_", where), layout(values, "decode_", where)
        n_p = whole(values["prefill_num_workers"], where, "prefill_num_workers")
        n_d = whole(values["decode_num_workers"], where, "decode_num_workers")
        row.update(prefill_topology=prefill.name, decode_topology=decode.name)
        row["n_prefill_workers"], row["n_decode_workers"] = n_p, n_d
        if n_p is not None and n_d is not None:
            row["topology"] = f"{n_p}x{prefill.name}:{n_d}x{decode.name}"
        else:
            row["topology"] = f"{n_p or '?'}x{prefill.name}:{n_d or '?'}x{decode.name}"  # '?': not recorded
            row["_per_gpu_unknown"] = True  # one engine per side is a floor, not the deployment's count
        row["gpus"] = GpuCounts.disaggregated(prefill.gpus * (n_p or 1), decode.gpus * (n_d or 1))
        per_rank = whole(values["decode_batch_size"], where, "decode_batch_size")
        concurrency = per_rank * decode.dp * (n_d or 1) if per_rank is not None else None
    if recorded:
        concurrency = int(recorded.group(1))
    if concurrency is None or concurrency < 1:
        field = "batch_size" if mode == "agg" else "decode_batch_size"
        raise InputError(where, field, "missing, and silicon_data_source records no silicon_concurrency")
    row["concurrency"] = concurrency
    row["total_tps"] = little_tps(concurrency, isl, osl, ttft, tpot)
    row["output_tps"] = row["total_tps"] * osl / (isl + osl)
    return row


def layout(values: dict[str, str], prefix: str, where: str) -> Topology:
    """One engine's topology from the ``<prefix>tp_size`` ... ``<prefix>moe_ep_size`` columns."""

    def size(column: str) -> int | None:
        value = number(values.get(prefix + column), where, prefix + column)
        if value is None or value == 0:
            return None  # empty or 0: the file leaves it unset
        if value != int(value):
            raise InputError(where, prefix + column, f"expected a whole number, got {value:g}")
        return int(value)

    tp = size("tp_size")
    if tp is None:
        raise InputError(where, prefix + "tp_size", "missing")
    pp = size("pp_size") or 1
    dp = size("attention_dp_size")
    moe_tp, moe_ep = size("moe_tp_size") or 1, size("moe_ep_size") or 1
    moe_gpus = moe_tp * moe_ep
    if dp is None:
        # Unset attention DP: the MoE layout's GPUs say how many ranks there are (1 for a dense model).
        if moe_gpus > 1 and moe_gpus % tp:
            raise InputError(where, prefix + "moe_tp_size",
                             f"moe_tp_size x moe_ep_size = {moe_gpus} GPUs is not a multiple of tp_size {tp}")
        dp = moe_gpus // tp if moe_gpus > tp else 1
    if moe_gpus > 1 and moe_gpus != tp * dp:
        raise InputError(
            where,
            prefix + "moe_ep_size",
            f"the MoE layout (moe_tp_size {moe_tp} x moe_ep_size {moe_ep} = {moe_gpus} GPUs) does not match the "
            f"attention layout (tp_size {tp} x attention_dp_size {dp} = {tp * dp} GPUs)",
        )
    ep = moe_ep if moe_gpus > 1 else 1
    return Topology(tp=tp, dp=dp, pp=pp, expert_parallel=ep > 1, ep_size=ep if ep > 1 else None)


def little_tps(concurrency: float, isl: int, osl: int, ttft_ms: float, tpot_ms: float) -> float:
    """Total tokens/s of a closed loop of ``concurrency`` clients (Little's law): each client waits TTFT, then
    OSL - 1 more tokens TPOT apart, then sends its next request."""
    seconds = (ttft_ms + (osl - 1) * tpot_ms) / 1000.0
    return concurrency * (isl + osl) / seconds if seconds > 0 and math.isfinite(seconds) else math.nan
