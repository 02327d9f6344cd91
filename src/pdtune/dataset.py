"""The default dataset: the article's sweeps, predicted by :mod:`pdtune.perfmodel`, as srt-slurm result trees.

The article publishes its sweep figures without numbers, so chapters 5-7 read a *modeled* stand-in through
the same loaders as real measurements. :func:`generate_dataset` writes it; the committed copy in
``data/clusters/gb300-qwen3.8-modeled/`` is exactly what ``pdtune dataset generate`` produces (a test
regenerates it and compares every byte). Every result file says ``"modeled": true``.

Layout (srt-slurm's, one job per deployment)::

    <out>/pdtune-dataset.json                              what was generated, from which settings
    <out>/{prefill,decode,disagg}/outputs/<job_id>/<job_id>.json                 job metadata
    <out>/{prefill,decode,disagg}/outputs/<job_id>/logs/sa-bench_isl_<I>_osl_<O>/
        results_concurrency_<C>_gpus_<T>.json                  aggregated (prefill-only, decode-only)
        results_concurrency_<C>_gpus_<T>_ctx_<P>_gen_<D>.json  disaggregated

Files are written to a temporary folder beside ``<out>`` and renamed into place; files in ``<out>`` that
the generator does not own (the folder's README) are left alone.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pdtune import __version__
from pdtune import limits
from pdtune.errors import InputError, brief
from pdtune.gpus import load_gpu
from pdtune.io import FolderSwap, read_mapping, write_text
from pdtune.model import load_model
from pdtune.paths import clusters_dir
from pdtune.perfmodel import (
    DEFAULT_ACCEPTANCE,
    DEFAULT_EFFICIENCY,
    Efficiency,
    Prediction,
    predict_decode,
    predict_disagg,
    predict_prefill,
)
from pdtune.perfmodel.sweeps import DECODE_ISL, DECODE_OSL, DISAGG_ISL, DISAGG_OSL, PREFILL_ISL, PREFILL_OSL
from pdtune.topology import parse_deployment, parse_topology

#: Where the committed copy lives.
DEFAULT_DATASET = "gb300-qwen3.8-modeled"

#: Concurrencies of every sweep: powers of two from 1 to 2048, points in between, and the article's 2560.
GRID: tuple[int, ...] = (
    1,
    2,
    4,
    8,
    16,
    24,
    32,
    48,
    64,
    96,
    128,
    192,
    256,
    384,
    512,
    768,
    1024,
    1536,
    2048,
    2560,
)

#: The article's figure 1 topologies.
PREFILL_TOPOLOGIES = (
    "TP4DP2+EP",
    "TP2DP4+EP",
    "TP4DP4+EP",
    "TP2DP8+EP",
    "DP16+EP",
    "TP1PP6+EP",
    "TP1PP8+EP",
    "TP8+EP",
    "TP16+EP",
)
#: The article's figure 2 topologies, plus TP4DP4+EP: its findings name it and its disaggregated decode uses
#: it, although its list leaves it out.
DECODE_TOPOLOGIES = ("TP2DP4+EP", "TP4DP8+EP", "TEP8", "TEP16", "TP4DP4+EP")
#: The seven PD configurations: the latency side decodes on one TEP8 engine with MTP, fed by each of the
#: article's single-engine prefill layouts; the throughput side decodes on one TP4DP4+EP engine without MTP
#: (its KV room holds the 2560 requests) fed by one to four TP2DP4+EP engines.
DISAGG_CONFIGS: tuple[tuple[str, bool], ...] = (
    ("1xTEP8:1xTEP8", True),
    ("1xTP4DP2+EP:1xTEP8", True),
    ("1xTP2DP4+EP:1xTEP8", True),
    ("1xTP2DP4+EP:1xTP4DP4+EP", False),
    ("2xTP2DP4+EP:1xTP4DP4+EP", False),
    ("3xTP2DP4+EP:1xTP4DP4+EP", False),
    ("4xTP2DP4+EP:1xTP4DP4+EP", False),
)
#: The article reports GSM8K 95 % for every PD configuration: a measured fact, not modeled.
ARTICLE_ACCURACY = 0.95

MANIFEST = "pdtune-dataset.json"
_GENERATED = ("prefill", "decode", "disagg", MANIFEST)
_JOB_BASE = {"prefill": 1000, "decode": 2000, "disagg": 3000}


@dataclass(frozen=True)
class DatasetSpec:
    """Everything the generated files depend on."""

    model: str = "qwen3.8-2.4t"
    gpu: str = "gb300"
    grid: tuple[int, ...] = GRID
    prefill_topologies: tuple[str, ...] = PREFILL_TOPOLOGIES
    decode_topologies: tuple[str, ...] = DECODE_TOPOLOGIES
    disagg_configs: tuple[tuple[str, bool], ...] = DISAGG_CONFIGS
    mtp_tokens: int = 3
    acceptance: float = DEFAULT_ACCEPTANCE
    efficiency: Efficiency = field(default=DEFAULT_EFFICIENCY)
    num_prompts_per_concurrency: int = 10  # sa-bench sends this many requests per client
    # Accuracy stamped on disaggregated files: the article's reported GSM8K result for its model; None for a
    # model nobody measured (the files then carry no accuracy and the accuracy gate lists them as unmeasured).
    accuracy: float | None = ARTICLE_ACCURACY
    accuracy_note: str = "GSM8K as the article reports it for every PD configuration; not modeled"
    # The three workloads (ISL, OSL): the article's by default.
    prefill_workload: tuple[int, int] = (PREFILL_ISL, PREFILL_OSL)
    decode_workload: tuple[int, int] = (DECODE_ISL, DECODE_OSL)
    disagg_workload: tuple[int, int] = (DISAGG_ISL, DISAGG_OSL)


@dataclass(frozen=True)
class _Job:
    mode: str
    job_id: str
    name: str
    predictions: list[Prediction]
    resources: dict[str, object]


def _sig(x: float, digits: int = 7) -> float:
    """Round to ``digits`` significant digits: stable bytes across platforms' last-ulp differences."""
    if x == 0 or not math.isfinite(x):
        return x
    return float(f"{x:.{digits}g}")


def result_record(p: Prediction, spec: DatasetSpec) -> dict[str, object]:
    """One sweep point as vLLM ``--save-result`` JSON, plus the keys that mark modeled data."""
    completed = spec.num_prompts_per_concurrency * p.concurrency
    duration = completed / p.request_rate
    ttft, tpot = _sig(p.ttft_ms), _sig(p.tpot_ms)
    # One step delivers 1 + K*A tokens per request at once: streamed chunks arrive a step apart.
    per_step = 1 + p.mtp_tokens * (p.acceptance or 0.0)
    itl = _sig(p.tpot_ms * per_step)
    e2el = _sig(p.ttft_ms + (p.osl - 1) * p.tpot_ms)
    record: dict[str, object] = {
        "date": "modeled",
        "backend": "vllm",
        "model_id": p.model,
        "tokenizer_id": p.model,
        "num_prompts": completed,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": p.concurrency,
        "duration": _sig(duration),
        "completed": completed,
        "failed": 0,
        "total_input_tokens": completed * p.isl,
        "total_output_tokens": completed * p.osl,
        "request_throughput": _sig(p.request_rate),
        "request_goodput": None,
        "output_throughput": _sig(p.output_tps),
        "total_token_throughput": _sig(p.total_tps),
        "max_concurrent_requests": p.concurrency,
    }
    for metric, value in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2el)):
        record[f"mean_{metric}_ms"] = value
        record[f"median_{metric}_ms"] = value
        record[f"std_{metric}_ms"] = 0.0
        record[f"p99_{metric}_ms"] = value
    record.update(
        {
            "modeled": True,
            "modeled_note": "predicted by pdtune.perfmodel (a roofline model), not measured; latencies are "
            "modeled means, so median = p99 = mean",
            "mode": p.mode,
            "topology": p.topology,
            "prefill_topology": p.prefill_topology,
            "decode_topology": p.decode_topology,
            "n_prefill_workers": p.n_prefill_workers,
            "n_decode_workers": p.n_decode_workers,
            "mtp_tokens": p.mtp_tokens,
            "gpu": p.gpu,
            "gpus_prefill": p.gpus_prefill,
            "gpus_decode": p.gpus_decode,
        }
    )
    if p.mode == "disagg" and spec.accuracy is not None:
        record["accuracy"] = spec.accuracy
        record["accuracy_note"] = spec.accuracy_note
    record["pdtune"] = {
        "acceptance": p.acceptance,
        "running": _sig(p.running),
        "kv_capacity": p.kv_capacity,
        "kv_limited": p.kv_limited,
        "roofline_total_tps": _sig(p.roofline_tps),
        "step_ms": {k: _sig(1000 * v, 5) for k, v in p.step.items()},
    }
    if p.mode == "disagg":  # the KV transfer term of its TTFT (pdtune.transfer, as pdtune plan charges it)
        record["pdtune"]["kv_transfer_ms"] = _sig(p.kv_transfer_ms)  # type: ignore[index]
    return record


def _jobs(spec: DatasetSpec) -> list[_Job]:
    model = load_model(spec.model)
    gpu = load_gpu(spec.gpu)
    grid = list(spec.grid)
    jobs: list[_Job] = []
    n = 0
    for name in spec.prefill_topologies:
        topo = parse_topology(name)
        n += 1
        isl, osl = spec.prefill_workload
        preds = predict_prefill(model, gpu, topo, grid, isl=isl, osl=osl, efficiency=spec.efficiency)
        jobs.append(
            _Job(
                "prefill",
                str(_JOB_BASE["prefill"] + n),
                f"prefill-only {topo.name}",
                preds,
                {"agg_workers": 1, "gpus_per_agg": topo.gpus},
            )
        )
    n = 0
    for name in spec.decode_topologies:
        topo = parse_topology(name)
        for mtp in (0, spec.mtp_tokens):
            n += 1
            isl, osl = spec.decode_workload
            preds = predict_decode(
                model, gpu, topo, grid, isl=isl, osl=osl, mtp_tokens=mtp, acceptance=spec.acceptance,
                efficiency=spec.efficiency,
            )
            label = f"decode-only {topo.name}" + (f" MTP{mtp}" if mtp else "")
            jobs.append(
                _Job(
                    "decode",
                    str(_JOB_BASE["decode"] + n),
                    label,
                    preds,
                    {"agg_workers": 1, "gpus_per_agg": topo.gpus},
                )
            )
    n = 0
    for name, mtp in spec.disagg_configs:
        dep = parse_deployment(name)
        n += 1
        k = spec.mtp_tokens if mtp else 0
        isl, osl = spec.disagg_workload
        preds = predict_disagg(
            model, gpu, dep, grid, isl=isl, osl=osl, mtp_tokens=k, acceptance=spec.acceptance,
            efficiency=spec.efficiency,
        )
        label = f"disaggregated {dep.label}" + (f" MTP{k}" if k else "")
        jobs.append(
            _Job(
                "disagg",
                str(_JOB_BASE["disagg"] + n),
                label,
                preds,
                {
                    "prefill_workers": dep.n_prefill,
                    "gpus_per_prefill": dep.prefill.gpus,
                    "decode_workers": dep.n_decode,
                    "gpus_per_decode": dep.decode.gpus,
                },
            )
        )
    return jobs


def _metadata(job: _Job, spec: DatasetSpec) -> dict[str, object]:
    first = job.predictions[0]
    precision = load_model(spec.model).weights.name  # "nvfp4", "fp8-block", or an unquantised model's dtype
    return {
        "job_id": job.job_id,
        "name": job.name,
        "modeled": True,
        "modeled_note": "a pdtune.perfmodel prediction written in srt-slurm's layout; no job ran",
        "model": {"path": spec.model, "precision": precision},
        "resources": {
            "gpu_type": spec.gpu,
            "gpus_per_node": load_gpu(spec.gpu).gpus_per_node,
            **job.resources,
        },
        "benchmark": {
            "type": "sa-bench",
            "isl": first.isl,
            "osl": first.osl,
            "concurrencies": "x".join(str(c) for c in spec.grid),
        },
        "pdtune": {
            "mode": job.mode,
            "topology": first.topology,
            "prefill_topology": first.prefill_topology,
            "decode_topology": first.decode_topology,
            "mtp_tokens": first.mtp_tokens,
            "acceptance": first.acceptance,
        },
    }


def _file_name(p: Prediction) -> str:
    if p.mode == "disagg":
        ctx_gen = f"ctx_{p.gpus_prefill}_gen_{p.gpus_decode}"
        return f"results_concurrency_{p.concurrency}_gpus_{p.gpus_total}_{ctx_gen}.json"
    return f"results_concurrency_{p.concurrency}_gpus_{p.gpus_total}.json"


def _dump(obj: object) -> str:
    return json.dumps(obj, indent=2, allow_nan=False) + "\n"


def manifest(spec: DatasetSpec) -> dict[str, object]:
    return {
        "generator": "pdtune dataset generate",
        "pdtune_version": __version__,
        "modeled": True,
        "model": spec.model,
        "gpu": spec.gpu,
        "workloads": {
            "prefill": {"isl": spec.prefill_workload[0], "osl": spec.prefill_workload[1]},
            "decode": {"isl": spec.decode_workload[0], "osl": spec.decode_workload[1]},
            "disagg": {"isl": spec.disagg_workload[0], "osl": spec.disagg_workload[1]},
        },
        "concurrencies": list(spec.grid),
        "prefill_topologies": list(spec.prefill_topologies),
        "decode_topologies": list(spec.decode_topologies),
        "disagg_configs": [{"deployment": d, "mtp": m} for d, m in spec.disagg_configs],
        "mtp_tokens": spec.mtp_tokens,
        "acceptance": spec.acceptance,
        "efficiency": spec.efficiency.to_dict(),
        "accuracy": {
            "value": spec.accuracy,
            "note": spec.accuracy_note if spec.accuracy is not None else "not measured: the files carry none",
        },
    }


def write_tree(root: Path, spec: DatasetSpec) -> list[Path]:
    """Write every generated file under ``root`` (which must be empty or absent); return their paths."""
    written = []
    for job in _jobs(spec):
        job_dir = root / job.mode / "outputs" / job.job_id
        first = job.predictions[0]
        bench = job_dir / "logs" / f"sa-bench_isl_{first.isl}_osl_{first.osl}"
        bench.mkdir(parents=True, exist_ok=True)
        meta = job_dir / f"{job.job_id}.json"
        write_text(meta, _dump(_metadata(job, spec)))
        written.append(meta)
        for p in job.predictions:
            path = bench / _file_name(p)
            write_text(path, _dump(result_record(p, spec)))
            written.append(path)
    path = root / MANIFEST
    write_text(path, _dump(manifest(spec)))
    written.append(path)
    return written


def generate_dataset(out: str | os.PathLike[str] | None = None, spec: DatasetSpec | None = None) -> Path:
    """Generate the dataset into ``out`` (default: the committed folder) and return the folder.

    The new folder is built beside ``out`` and swapped in whole (:class:`pdtune.io.FolderSwap`): the generated
    entries (``prefill/``, ``decode/``, ``disagg/``, the manifest) are replaced, every other entry of ``out``
    is carried over as it was.
    """
    spec = spec or DatasetSpec()
    with FolderSwap(Path(out) if out is not None else clusters_dir() / DEFAULT_DATASET,
                    carry=lambda name: name not in _GENERATED) as swap:
        write_tree(swap.staging, spec)
        return swap.commit()


def generated_files(root: str | os.PathLike[str]) -> list[Path]:
    """The files of a dataset folder that the generator owns, relative to ``root``, sorted."""
    base = Path(root)
    out = []
    for name in _GENERATED:
        entry = base / name
        if entry.is_file():
            out.append(Path(name))
        elif entry.is_dir():
            out += sorted(p.relative_to(base) for p in entry.rglob("*") if p.is_file())
    return sorted(out)


# ------------------------------------------------------------------------------------------ parameters files

#: Keys a dataset parameters file may hold (``pdtune dataset generate --params``).
PARAMS_KEYS = ("model", "gpu", "concurrencies", "prefill_topologies", "decode_topologies", "disagg_configs",
               "mtp_tokens", "acceptance", "accuracy", "accuracy_note", "num_prompts_per_concurrency",
               "prefill_workload", "decode_workload", "disagg_workload")


def spec_from_params(params: dict[str, object], source: str = "PARAMS.yaml") -> DatasetSpec:
    """A :class:`DatasetSpec` from a parameters mapping (see ``PARAMS_KEYS``); missing keys keep the defaults
    except ``accuracy``, which is None (not measured) unless given.

    ``disagg_configs`` entries are ``"1xTP2:1xTEP8"``, ``"1xTP2:1xTEP8+MTP"`` (decode with MTP) or
    ``{deployment: ..., mtp: true}``; workloads are ``{isl: N, osl: N}``.
    """
    unknown = sorted(set(params) - set(PARAMS_KEYS))
    if unknown:
        raise InputError(source, unknown[0], f"unknown key; known: {', '.join(PARAMS_KEYS)}")
    changes: dict[str, object] = {"accuracy": None}
    for key in ("model", "gpu", "accuracy_note"):
        if key in params:
            changes[key] = _text_param(params[key], source, key)
    if "concurrencies" in params:
        changes["grid"] = tuple(_whole_list(params["concurrencies"], source, "concurrencies"))
    for key in ("prefill_topologies", "decode_topologies"):
        if key in params:
            names = _text_list(params[key], source, key)
            for name in names:
                parse_topology(name, f"{source}: {key}")
            changes[key] = tuple(names)
    if "disagg_configs" in params:
        changes["disagg_configs"] = tuple(_disagg_entry(e, source) for e in _list(params["disagg_configs"],
                                                                                  source, "disagg_configs"))
    if "mtp_tokens" in params:
        changes["mtp_tokens"] = _whole_list([params["mtp_tokens"]], source, "mtp_tokens", minimum=0)[0]
    for key in ("acceptance", "accuracy"):
        if key in params and params[key] is not None:
            value = params[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= float(value) <= 1:
                raise InputError(source, key, f"expected a fraction in [0, 1], got {brief(value)}")
            changes[key] = float(value)
    if "num_prompts_per_concurrency" in params:
        changes["num_prompts_per_concurrency"] = _whole_list([params["num_prompts_per_concurrency"]], source,
                                                             "num_prompts_per_concurrency")[0]
    for key in ("prefill_workload", "decode_workload", "disagg_workload"):
        if key in params:
            changes[key] = _workload(params[key], source, key)
    spec = replace(DatasetSpec(), **changes)  # type: ignore[arg-type]
    model = load_model(spec.model)  # an unknown model or GPU is bad input before anything is written
    load_gpu(spec.gpu)
    _check_against_model(spec, model, set(params), source)
    return spec


def _check_against_model(spec: DatasetSpec, model: Any, given: set[str], source: str) -> None:
    """Every layout and the MTP setting can serve the model, by the rules the workbook and ``plan`` apply
    (:func:`pdtune.scenario.layout_problem`), blamed on the parameters' key that names them (or on its absence,
    when the article's default is what does not fit): never on the model's config.json."""
    from pdtune.perfmodel import EngineConfig
    from pdtune.scenario import layout_problem

    isl, osl = max(spec.prefill_workload, spec.decode_workload, spec.disagg_workload, key=sum)
    engine = EngineConfig()  # what the sweeps are predicted with

    def check(key: str, layout: str, what: str) -> None:
        problem = layout_problem(model, layout, max_model_len=isl + osl, kv_cache_dtype=engine.kv_cache_dtype,
                                 vllm=engine.vllm,
                                 source=f"{source}: {key}")
        if problem:
            origin = "" if key in given else f"not given, and the article's default {what} "
            raise InputError(source, key, f"{origin}{layout}: {problem}" + ("" if key in given else
                                                                             f": list the {key} to model"))

    for key in ("prefill_topologies", "decode_topologies"):
        for name in getattr(spec, key):
            check(key, name, "layout")
    for name, _mtp in spec.disagg_configs:
        dep = parse_deployment(name, f"{source}: disagg_configs")
        for layout in (dep.prefill.name, dep.decode.name):
            check("disagg_configs", layout, f"deployment {name} has")
    uses_mtp = bool(spec.mtp_tokens) and (bool(spec.decode_topologies) or any(m for _, m in spec.disagg_configs))
    if uses_mtp and model.num_mtp_layers == 0:
        origin = "" if "mtp_tokens" in given else "not given, so the article's "
        raise InputError(source, "mtp_tokens", f"{origin}{spec.mtp_tokens} MTP tokens, and {model.name} has no MTP "
                                               "module: set mtp_tokens: 0")


def read_params(path: str | os.PathLike[str]) -> dict[str, object]:
    """A parameters file's mapping, unchecked (:func:`spec_from_params` checks it)."""
    return read_mapping(path, "--params")


def _list(value: object, source: str, key: str) -> list[object]:
    if not isinstance(value, list) or not value:
        raise InputError(source, key, f"expected a non-empty list, got {brief(value)}")
    return value


def _text_param(value: object, source: str, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(source, key, f"expected a name, got {brief(value)}")
    return value.strip()


def _text_list(value: object, source: str, key: str) -> list[str]:
    return [_text_param(v, source, key) for v in _list(value, source, key)]


#: The ceiling of each whole-number parameter (:mod:`pdtune.limits`); a workload's lengths are bounded too.
_MAXIMA = {"concurrencies": limits.MAX_CONCURRENCY, "mtp_tokens": limits.MAX_SPECULATIVE_TOKENS,
           "num_prompts_per_concurrency": limits.MAX_CONCURRENCY}


def _whole_list(value: object, source: str, key: str, *, minimum: int = 1) -> list[int]:
    out = []
    values = _list(value, source, key)
    if len(values) > 4096:
        raise InputError(source, key, f"{len(values):,} entries are more than the 4,096 pdtune accepts")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise InputError(source, key, f"expected whole numbers >= {minimum}, got {brief(v)}")
        limits.bound(v, _MAXIMA.get(key, limits.MAX_MODEL_LEN), source, key)
        out.append(v)
    return out


def _disagg_entry(entry: object, source: str) -> tuple[str, bool]:
    if isinstance(entry, dict):
        unknown = sorted(set(entry) - {"deployment", "mtp"})
        if unknown or "deployment" not in entry:
            raise InputError(source, "disagg_configs",
                             f"expected {{deployment: ..., mtp: true|false}}, got {brief(entry)}")
        name = _text_param(entry["deployment"], source, "disagg_configs")
        mtp = entry.get("mtp", False)
        if not isinstance(mtp, bool):
            raise InputError(source, "disagg_configs", f"mtp must be true or false, got {brief(mtp)}")
    else:
        name = _text_param(entry, source, "disagg_configs")
        mtp = name.upper().endswith("+MTP")
        name = name[: -len("+MTP")] if mtp else name
    parse_deployment(name, f"{source}: disagg_configs")
    return name, mtp


def _workload(value: object, source: str, key: str) -> tuple[int, int]:
    if not isinstance(value, dict) or set(value) != {"isl", "osl"}:
        raise InputError(source, key, f"expected {{isl: N, osl: N}}, got {brief(value)}")
    isl, osl = _whole_list([value["isl"], value["osl"]], source, key)
    return isl, osl
