"""srt-slurm output trees (NVIDIA/srt-slurm): per-concurrency result files, job metadata, the rollup CSV.

Layout of one job::

    outputs/<job_id>/<job_id>.json                      job metadata: resources, benchmark isl/osl
    outputs/<job_id>/logs/sa-bench_isl_<ISL>_osl_<OSL>/
        results_concurrency_<C>_gpus_<T>_ctx_<P>_gen_<D>.json   disaggregated (T = P + D)
        results_concurrency_<C>_gpus_<T>.json                   aggregated
    outputs/<job_id>/logs/benchmark-rollup.csv          one row per concurrency

Older trees name files ``concurrency_<C>.json`` or ``concurrency_<C>_req_rate_<R>.json`` (in
``vllm_isl_*`` / ``sglang_isl_*`` folders) or ``isl_<I>_osl_<O>_concurrency_<C>_req_rate_<R>[_ctx<P>_gen<D>].json``.
A result file holds vLLM ``--save-result`` JSON or SGLang ``bench_serving`` lines; its ``source`` is
``srt-slurm`` either way. GPU counts come from the file name, else from the metadata's worker counts
(``prefill_workers * gpus_per_prefill`` and so on, as srt-slurm's own rollup computes them).
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from pdtune import guarded
from pdtune.errors import InputError
from pdtune.limits import MAX_CONCURRENCY, MAX_GPUS, MAX_MODEL_LEN, bound
from pdtune.results import sglang, vllm_bench
from pdtune.results._read import read_csv, read_records
from pdtune.results.gpus import GpuCounts
from pdtune.results.schema import Row, as_dict, number, text, whole

SOURCE = "srt-slurm"
#: srt-slurm copies the recipe it ran into ``outputs/<job_id>/config.yaml`` (``srtctl/cli/submit.py``).
RECIPE_COPY = "config.yaml"
ROLLUP_SOURCE = "srt-slurm-rollup"
ROLLUP_NAME = "benchmark-rollup.csv"

_RESULT = re.compile(r"^results_concurrency_(?P<c>\d+)_gpus_(?P<t>\d+)(?:_ctx_(?P<p>\d+)_gen_(?P<d>\d+))?\.json$")
_OLD = re.compile(
    r"^(?:isl_(?P<isl>\d+)_osl_(?P<osl>\d+)_)?concurrency_(?P<c>\d+)(?:_req_rate_(?P<rate>[A-Za-z0-9.]+?))?"
    r"(?:_ctx(?P<p>\d+)_gen(?P<d>\d+)|_gpus(?P<t>\d+))?\.jsonl?$"
)
_BENCH_DIR = re.compile(r"(?:^|_)isl_(?P<isl>\d+)_osl_(?P<osl>\d+)$")
ROLLUP_COLUMNS = ("Concurrency", "Total Token Throughput", "Output Token Throughput", "Median TPOT")


def is_result_name(name: str) -> bool:
    return bool(_RESULT.match(name) or _OLD.match(name))


def is_rollup_header(header: list[str]) -> bool:
    return all(c in header for c in ROLLUP_COLUMNS)


@dataclass(frozen=True)
class JobMetadata:
    """What ``<job_id>.json`` says about the deployment."""

    path: str
    gpus: GpuCounts | None
    n_prefill_workers: int | None
    n_decode_workers: int | None
    model: str | None
    isl: int | None
    osl: int | None
    recipe: str | None = None  # the job's ``config.yaml`` (srt-slurm copies the recipe there), if present


def is_metadata(record: dict[str, Any]) -> bool:
    return ("job_id" in record or "resources" in record) and "max_concurrency" not in record


def parse_metadata(path: Path, record: dict[str, Any]) -> JobMetadata:
    source = str(path)
    res = as_dict(record.get("resources"))

    def count(key: str) -> int:
        return whole(res.get(key), source, f"resources.{key}", positive=False) or 0

    prefill = count("prefill_workers") * count("gpus_per_prefill")
    decode = count("decode_workers") * count("gpus_per_decode")
    agg = count("agg_workers") * count("gpus_per_agg") or count("agg_nodes") * count("gpus_per_node")
    gpus: GpuCounts | None = None
    if prefill and decode:
        gpus = GpuCounts.disaggregated(prefill, decode)
    elif agg:
        gpus = GpuCounts.aggregated(agg)
    bench = as_dict(record.get("benchmark"))
    model = record.get("model")
    return JobMetadata(
        path=source,
        gpus=gpus,
        n_prefill_workers=count("prefill_workers") or None,
        n_decode_workers=count("decode_workers") or None,
        model=text(model.get("path")) if isinstance(model, dict) else text(model),
        isl=whole(bench.get("isl"), source, "benchmark.isl"),
        osl=whole(bench.get("osl"), source, "benchmark.osl"),
    )


class MetadataFinder:
    """``<job_id>.json`` beside the ``sa-bench_*`` folders or one level up, cached per folder."""

    def __init__(self) -> None:
        self._by_dir: dict[Path, JobMetadata | None] = {}

    def near(self, result: Path) -> JobMetadata | None:
        for folder in list(result.parents)[:3]:
            found = self._in(folder)
            if found is not None:
                return found
        return None

    def _in(self, folder: Path) -> JobMetadata | None:
        if folder in self._by_dir:
            return self._by_dir[folder]
        found = None
        candidates = [folder / f"{folder.name}.json"]
        with contextlib.suppress(OSError):
            candidates += sorted(p for p in folder.glob("*.json") if p.stem.isdigit())
        for candidate in candidates:
            if not candidate.is_file():
                continue
            try:
                record = guarded.read_json(candidate)
            except InputError:
                continue  # not the metadata; a broken metadata file is reported when loaded directly
            if isinstance(record, dict) and is_metadata(record):
                found = parse_metadata(candidate, record)
                recipe = folder / RECIPE_COPY
                if recipe.is_file():
                    found = replace(found, recipe=str(recipe))
                break
        self._by_dir[folder] = found
        return found


def _name_hints(path: Path) -> tuple[dict[str, int], GpuCounts | None]:
    hints: dict[str, int] = {}
    gpus = None
    hit = _RESULT.match(path.name) or _OLD.match(path.name)
    if hit:
        source = f"{path} (file name)"
        groups = hit.groupdict()
        for key, maximum in (("c", MAX_CONCURRENCY), ("p", MAX_GPUS), ("d", MAX_GPUS), ("t", MAX_GPUS),
                             ("isl", MAX_MODEL_LEN), ("osl", MAX_MODEL_LEN)):
            if groups.get(key) is not None:  # a file name holds at most 255 digits: int() is safe, then bounded
                bound(int(groups[key]), maximum, source, _NAME_FIELDS[key])
        hints["concurrency"] = int(groups["c"])
        if groups.get("isl"):
            hints["isl"], hints["osl"] = int(groups["isl"]), int(groups["osl"])
        if groups.get("p") is not None:
            prefill, decode = int(groups["p"]), int(groups["d"])
            total = int(groups["t"]) if groups.get("t") else prefill + decode
            if prefill + decode != total or total == 0:
                raise InputError(source, "gpus", f"ctx {prefill} + gen {decode} != gpus {total}")
            gpus = GpuCounts.disaggregated(prefill, decode) if prefill and decode else GpuCounts.aggregated(total)
        elif groups.get("t") is not None:
            if int(groups["t"]) == 0:
                raise InputError(source, "gpus", "is 0")
            gpus = GpuCounts.aggregated(int(groups["t"]))
    if "isl" not in hints and (folder := _BENCH_DIR.search(path.parent.name)):
        hints["isl"], hints["osl"] = (bound(int(folder.group(k)), MAX_MODEL_LEN, f"{path.parent} (folder name)", k)
                                      for k in ("isl", "osl"))
    return hints, gpus


_NAME_FIELDS = {"c": "concurrency", "p": "gpus (ctx)", "d": "gpus (gen)", "t": "gpus", "isl": "isl", "osl": "osl"}


def result_rows(path: Path, metadata: JobMetadata | None) -> list[Row]:
    hints, gpus = _name_hints(path)
    if metadata is not None:
        for key in ("isl", "osl"):
            meta_value = getattr(metadata, key)
            if meta_value is not None and key in hints and hints[key] != meta_value:
                raise InputError(path, key, f"folder says {hints[key]} but {metadata.path} says {meta_value}: "
                                            "mixed workloads in one job")
            if meta_value is not None:
                hints.setdefault(key, meta_value)
        if gpus is not None and metadata.gpus is not None and gpus != metadata.gpus:
            raise InputError(path, "gpus", f"file name says {gpus.describe()} but {metadata.path} "
                                           f"says {metadata.gpus.describe()}")
        gpus = gpus or metadata.gpus
    records = read_records(path)
    out: list[Row] = []
    for i, record in enumerate(records):
        where = f" (line {i + 1})" if len(records) > 1 else ""
        found = vllm_bench.kind(record)
        if found is None:
            raise InputError(f"{path}{where}", "max_concurrency", "not a vLLM or SGLang benchmark result")
        loader = sglang if found == "sglang" else vllm_bench
        for row in loader.rows(path, record, hints, where):
            for key in ("isl", "osl"):
                if key in hints and row.get(key) is not None and row[key] != hints[key]:
                    raise InputError(row["_label"], key, f"is {row[key]} but the folder name says {hints[key]}: "
                                                         "mixed workloads")
            row["source"] = SOURCE
            if gpus is not None:
                row["gpus"] = gpus
            if metadata is not None:
                row.setdefault("n_prefill_workers", metadata.n_prefill_workers if gpus and gpus.prefill else None)
                row.setdefault("n_decode_workers", metadata.n_decode_workers if gpus and gpus.prefill else None)
                row["model"] = row.get("model") or metadata.model
                if metadata.recipe is not None:
                    for key, value in _recipe_layout(metadata.recipe).items():
                        if row.get(key) is None:  # the result file's own keys win
                            row[key] = value
            out.append(row)
    return out


def rollup_rows(path: Path, metadata: JobMetadata | None) -> list[Row]:
    header, table = read_csv(path)
    missing = [c for c in ROLLUP_COLUMNS if c not in header]
    if missing:
        raise InputError(path, missing[0], "column missing from the rollup header")
    isl, osl, model = _rollup_workload(path, metadata)
    out: list[Row] = []
    for lineno, values in table:
        label = f"{path} (line {lineno})"
        col = {name: number(values.get(name), label, name) for name in
               ("Total Token Throughput", "Output Token Throughput", "Median TTFT", "Median TPOT")}
        total = whole(values.get("Total Working GPU Count") or values.get("Total GPU Count"), label,
                      "Total Working GPU Count")
        decode = whole(values.get("Decode Working GPU Count") or values.get("Decode GPU Count"), label,
                       "Decode Working GPU Count", positive=False)
        prefill = whole(values.get("Prefill Working GPU Count"), label, "Prefill Working GPU Count", positive=False)
        gpus = None
        if total is not None:
            decode = total if decode is None else decode
            prefill = prefill or total - decode  # nodes known, workers not: the other GPUs prefill
            if prefill + decode != total or decode > total:
                raise InputError(label, "Total Working GPU Count",
                                 f"prefill {prefill} + decode {decode} != total {total}")
            gpus = GpuCounts(prefill, decode, total)
        row: Row = {
            "source": ROLLUP_SOURCE,
            "path": str(path),
            "model": model,
            "isl": isl,
            "osl": osl,
            "concurrency": whole(values.get("Concurrency"), label, "Concurrency", required=True),
            "total_tps": col["Total Token Throughput"],
            "output_tps": col["Output Token Throughput"],
            "ttft_ms_p50": col["Median TTFT"],
            "tpot_ms_p50": col["Median TPOT"],
            "modeled": False,
            "_label": label,
            "_fields": {"tpot_ms_p50": "Median TPOT", "throughput": "Total Token Throughput",
                        "total_tps": "Total Token Throughput", "output_tps": "Output Token Throughput"},
        }
        if gpus is not None:
            row["gpus"] = gpus
        if metadata is not None and gpus is not None and gpus.prefill:
            row["n_prefill_workers"], row["n_decode_workers"] = metadata.n_prefill_workers, metadata.n_decode_workers
        out.append(row)
    if not out:
        raise InputError(path, "rows", "the rollup has a header but no rows")
    return out


def _rollup_workload(path: Path, metadata: JobMetadata | None) -> tuple[int | None, int | None, str | None]:
    """ISL/OSL and model of a rollup: its JSON twin, the job metadata, or the one sa-bench folder beside it."""
    isl = osl = None
    model = None
    twin = path.with_suffix(".json")
    if twin.is_file():
        record = read_records(twin)[0]
        config = as_dict(record.get("config"))
        isl = whole(config.get("isl"), str(twin), "config.isl")
        osl = whole(config.get("osl"), str(twin), "config.osl")
        model = text(config.get("model"))
    if metadata is not None:
        isl = isl if isl is not None else metadata.isl
        osl = osl if osl is not None else metadata.osl
        model = model or metadata.model
    if isl is None:
        pairs = {(int(h.group("isl")), int(h.group("osl")))
                 for d in path.parent.iterdir() if d.is_dir() and (h := _BENCH_DIR.search(d.name))}
        if len(pairs) > 1:
            raise InputError(path, "isl/osl", f"folder holds several workloads {sorted(pairs)}: cannot tell "
                                              "which one the rollup summarises")
        if pairs:
            isl, osl = pairs.pop()
    return isl, osl, model


# ------------------------------------------------------------------------------------------ recipes


@dataclass(frozen=True)
class Recipe:
    """An srt-slurm recipe (the YAML ``srtctl apply -f`` takes), as far as pdtune reads it.

    GPUs per worker follow srt-slurm's ``ResourceConfig``: the explicit ``gpus_per_prefill`` (and so on), else
    ``nodes * gpus_per_node // workers``; ``decode_nodes: 0`` puts decode workers on the prefill nodes with
    the prefill workers' size.
    """

    path: str
    name: str
    model: str | None
    gpu_type: str
    gpus_per_node: int
    disaggregated: bool
    prefill_workers: int
    decode_workers: int
    gpus_per_prefill: int
    gpus_per_decode: int
    agg_workers: int
    gpus_per_agg: int
    nodes: int
    backend: str
    vllm_config: dict[str, dict[str, Any]]  # role -> its engine keys, as written
    benchmark: dict[str, Any]
    concurrencies: tuple[int, ...]

    @property
    def gpus(self) -> GpuCounts:
        if self.disaggregated:
            return GpuCounts.disaggregated(self.prefill_workers * self.gpus_per_prefill,
                                           self.decode_workers * self.gpus_per_decode)
        return GpuCounts.aggregated(self.agg_workers * self.gpus_per_agg)

    def flags(self, role: str) -> list[str]:
        """The command-line flags srt-slurm passes for one role: ``--key`` per key whose value is not false."""
        config = self.vllm_config.get(role, {})
        return [f"--{str(k).replace('_', '-')}" for k, v in config.items() if v is not False and v is not None]


def load_recipe(path: str | Path) -> Recipe:
    """Read an srt-slurm recipe YAML; a missing or malformed field is bad input naming it."""
    from pdtune.io import read_mapping

    source = Path(path)
    record = read_mapping(source, "recipe")
    where = str(source)
    for key in ("name", "model", "resources"):
        if key not in record:
            raise InputError(source, key, "missing")
    res = as_dict(record.get("resources"))
    gpu_type = text(res.get("gpu_type"))
    if not gpu_type:
        raise InputError(source, "resources.gpu_type", "missing")

    def count(key: str, default: int | None = None) -> int | None:
        value = whole(res.get(key), where, f"resources.{key}", positive=False)
        return default if value is None else value

    gpn = count("gpus_per_node", 4) or 4
    prefill_nodes, decode_nodes = count("prefill_nodes"), count("decode_nodes")
    disaggregated = prefill_nodes is not None or decode_nodes is not None
    workers = {role: count(f"{role}_workers", 0) or 0 for role in ("prefill", "decode", "agg")}

    def per_worker(role: str, nodes: int | None) -> int:
        explicit = count(f"gpus_per_{role}")
        if explicit is not None:
            return explicit
        if nodes and workers[role]:
            return nodes * gpn // workers[role]
        return gpn

    per_prefill = per_worker("prefill", prefill_nodes)
    per_decode = per_worker("decode", decode_nodes)
    if decode_nodes == 0 and workers["decode"] and count("gpus_per_decode") is None:
        per_decode = per_prefill  # sharing the prefill nodes: srt-slurm inherits the prefill size
    agg_nodes = count("agg_nodes")
    per_agg = per_worker("agg", agg_nodes)
    if disaggregated and not (workers["prefill"] and workers["decode"]):
        raise InputError(source, "resources.prefill_workers",
                         "a disaggregated recipe needs prefill and decode workers")
    backend = as_dict(record.get("backend"))
    config = as_dict(backend.get("vllm_config"))
    roles = {str(role): dict(as_dict(cfg)) for role, cfg in config.items()}
    bench = as_dict(record.get("benchmark"))
    concurrencies = _concurrency_list(bench.get("concurrencies"), where)
    model = record.get("model")
    return Recipe(
        path=where,
        name=str(record["name"]),
        model=text(model.get("path")) if isinstance(model, dict) else text(model),
        gpu_type=gpu_type,
        gpus_per_node=gpn,
        disaggregated=disaggregated,
        prefill_workers=workers["prefill"],
        decode_workers=workers["decode"],
        gpus_per_prefill=per_prefill,
        gpus_per_decode=per_decode,
        agg_workers=workers["agg"] or (0 if disaggregated else 1),
        gpus_per_agg=per_agg,
        nodes=(prefill_nodes or 0) + (decode_nodes or 0) if disaggregated else (agg_nodes or 1),
        backend=str(backend.get("type", "sglang")),
        vllm_config=roles,
        benchmark=dict(bench),
        concurrencies=concurrencies,
    )


def engine_layout(config: dict[str, Any], where: str) -> tuple[str, int]:
    """A ``vllm_config`` role's topology name (canonical: ``TEP8``, ``TP2DP4+EP``) and MTP draft tokens."""
    from pdtune.topology import Topology

    def size(key: str) -> int:
        value = config.get(key, config.get(key.replace("-", "_")))
        return whole(value, where, key) or 1

    expert = config.get("enable-expert-parallel", config.get("enable_expert_parallel")) is True
    topology = Topology(size("tensor-parallel-size"), size("data-parallel-size"), size("pipeline-parallel-size"),
                        expert)
    spec = config.get("speculative-config", config.get("speculative_config"))
    mtp = 0
    if spec:
        try:
            parsed = json.loads(spec) if isinstance(spec, str) else spec
        except json.JSONDecodeError:
            raise InputError(where, "speculative-config", f"not valid JSON: {spec!r}") from None
        mtp = whole(as_dict(parsed).get("num_speculative_tokens"), where, "speculative-config") or 0
    return topology.canonical, mtp


@lru_cache(maxsize=256)
def _recipe_layout(path: str) -> dict[str, Any]:
    """Topology keys a job's recipe gives its result rows: an aggregated job's ``topology`` (and MTP), a
    disaggregated job's prefill and decode topologies (MTP from decode)."""
    recipe = load_recipe(path)
    roles = recipe.vllm_config
    where = f"{path}: backend.vllm_config"
    if not recipe.disaggregated:
        role = next(iter(roles), None)
        if role is None:
            return {}
        name, mtp = engine_layout(roles[role], f"{where}.{role}")
        return {"topology": name, "mtp_tokens": mtp}
    if "prefill" not in roles or "decode" not in roles:
        return {}
    prefill, _ = engine_layout(roles["prefill"], f"{where}.prefill")
    decode, mtp = engine_layout(roles["decode"], f"{where}.decode")
    return {"prefill_topology": prefill, "decode_topology": decode, "mtp_tokens": mtp}


def _concurrency_list(value: Any, where: str) -> tuple[int, ...]:
    """``"256x512x1024"`` or a list, as srt-slurm's ``BenchmarkConfig.get_concurrency_list`` reads it."""
    if value is None:
        return ()
    parts = value if isinstance(value, list) else str(value).split("x")
    out = []
    for part in parts:
        number = whole(part if not isinstance(part, str) else part.strip(), where, "benchmark.concurrencies")
        if number is None or number < 1:
            raise InputError(where, "benchmark.concurrencies", f"expected whole numbers >= 1, got {value!r}")
        out.append(number)
    return tuple(out)
