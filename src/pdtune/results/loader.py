"""Find result files, recognise their format, and build the tidy table.

A folder is walked (hidden folders skipped); each file is recognised by name first, content second:

- ``results_concurrency_*.json``, ``concurrency_*.json`` ... -> srt-slurm result files
- ``benchmark-rollup.csv`` -> srt-slurm rollup, used only when the folder holds no result files it
  summarises (else every point would appear twice)
- a CSV with ``Throughput/GPU (tok/s)`` -> InferenceX
- a CSV with ``silicon_ttft_ms``/``silicon_tpot_ms`` -> aiconfigurator's silicon measurements
- JSON with AIPerf metric objects -> AIPerf; JSON with ``max_concurrency``/``median_tpot_ms`` -> vLLM
  ``bench serve`` or SGLang ``bench_serving`` (told apart by their own keys)

Other files met during a walk (job metadata, AIPerf's per-request ``profile_export.jsonl``, configs) are
skipped; the same file named explicitly is an error, as is a folder in which nothing is recognised.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from pdtune import guarded
from pdtune.errors import InputError
from pdtune.results import aic_silicon, aiperf, inferencex, sglang, srt_slurm, vllm_bench
from pdtune.results._read import csv_header, read_records, read_text
from pdtune.results.gpus import SIDECAR_NAME, GpuCounts, SidecarFinder
from pdtune.results.schema import Row, check_measured, frame

_SKIP_NAMES = {"profile_export.jsonl", "inputs.json", "benchmark-rollup.json", SIDECAR_NAME}
_SUFFIXES = {".json", ".jsonl", ".csv"}


class _Loader:
    def __init__(self, gpus: GpuCounts | None) -> None:
        self.gpus = gpus
        self.sidecars = SidecarFinder()
        self.metadata = srt_slurm.MetadataFinder()

    # -- one file ------------------------------------------------------------------------------------

    def file(self, path: Path, *, explicit: bool) -> list[Row]:
        """Rows of one file; an unrecognised file is skipped during a walk and an error when named."""
        name = path.name
        if name in _SKIP_NAMES or path.suffix not in _SUFFIXES:
            if explicit:
                what = "a GPU-count sidecar" if name == SIDECAR_NAME else "not a benchmark result format pdtune reads"
                raise InputError(path, "format", f"{what} (expected AIPerf, vLLM bench, SGLang, srt-slurm "
                                                 "or InferenceX output)")
            return []
        if srt_slurm.is_result_name(name):
            return srt_slurm.result_rows(path, self.metadata.near(path))
        text = read_text(path)
        if path.suffix == ".csv":
            header = csv_header(path, text) or []
            if name == srt_slurm.ROLLUP_NAME or srt_slurm.is_rollup_header(header):
                return srt_slurm.rollup_rows(path, self.metadata.near(path))
            if inferencex.is_inferencex_header(header):
                return inferencex.rows(path)
            if aic_silicon.is_silicon_header(header):
                return aic_silicon.rows(path)
            if explicit:
                raise InputError(path, "header", "not an InferenceX export, an srt-slurm rollup or an "
                                                 "aiconfigurator silicon CSV")
            return []
        records = read_records(path, text)
        first = records[0]
        if aiperf.is_aiperf(first):
            return aiperf.rows(path, first)
        found = vllm_bench.kind(first)
        if found is not None:
            rows: list[Row] = []
            for i, record in enumerate(records):
                where = f" (line {i + 1})" if len(records) > 1 else ""
                loader = sglang if vllm_bench.kind(record) == "sglang" else vllm_bench
                rows += loader.rows(path, record, None, where)
            return rows
        if explicit:
            if srt_slurm.is_metadata(first):
                raise InputError(path, "job_id", "srt-slurm job metadata, not results: pass the job folder")
            raise InputError(path, "format", "JSON that is neither AIPerf, vLLM bench nor SGLang output")
        return []

    # -- a folder ------------------------------------------------------------------------------------

    def folder(self, root: Path) -> list[Row]:
        files: list[Path] = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            # only regular files: a FIFO, socket or device in a results folder is not a result (and a FIFO
            # would block the open); a broken link is nothing at all
            files += [Path(dirpath) / f for f in sorted(filenames) if not f.startswith(".")
                      and _is_regular(Path(dirpath) / f)]
        result_dirs = {p.parent for p in files if srt_slurm.is_result_name(p.name)}
        rows: list[Row] = []
        for path in files:
            if path.name == srt_slurm.ROLLUP_NAME and any(_under(d, path.parent) for d in result_dirs):
                continue  # the result files it summarises are loaded instead
            for row in self.file(path, explicit=False):
                row["_root"] = root
                rows.append(row)
        if not rows:
            raise InputError(root, "results", "no benchmark results found in this folder (AIPerf, vLLM bench, "
                                              "SGLang, srt-slurm or InferenceX files)")
        return rows

    # -- finishing a row -----------------------------------------------------------------------------

    def finish(self, row: Row) -> Row:
        label = row.pop("_label", row["path"])
        fields = row.pop("_fields", {})
        root = row.pop("_root", None)
        # the file's own numbers first: a missing metric is a clearer error than missing GPU counts
        total, output = row.get("total_tps"), row.get("output_tps")
        if total is None and output is None:
            raise InputError(label, fields.get("throughput", "output_throughput"), "missing: no throughput recorded")
        tpot = row.get("tpot_ms_p50")
        if tpot is None and row.get("mode") != "prefill":
            raise InputError(label, fields.get("tpot_ms_p50", "median TPOT"), "missing: interactivity needs TPOT")
        if tpot is not None and tpot <= 0:
            raise InputError(label, fields.get("tpot_ms_p50", "median TPOT"), f"must be positive, got {tpot:g}")
        check_measured(row, label, fields)
        row.pop("_output_tokens", None)
        row.pop("_duration_s", None)
        counts: GpuCounts | None = row.pop("gpus", None)
        if counts is None:
            folder = Path(row["path"]).parent
            side = self.sidecars.find(folder, root if root is not None else folder)
            if side is not None and self.gpus is not None and side[1] != self.gpus:
                raise InputError(side[0], "gpus", f"says {side[1].describe()} but --gpus says {self.gpus.describe()}")
            counts = side[1] if side is not None else self.gpus
        if counts is None:
            raise InputError(label, "gpus", f"{row['source']} output does not record GPU counts: pass "
                                            f"--gpus N (or prefill=P,decode=D), or put {SIDECAR_NAME} beside it")
        mode = row.get("mode")
        counts = counts.for_mode(mode)
        if mode is None:
            mode = "disagg" if counts.is_disaggregated else "agg"
        elif (mode == "disagg") != counts.is_disaggregated:
            raise InputError(label, "mode", f"is {mode} but the GPU counts are {counts.describe()}")
        row["mode"] = mode
        row["gpus_prefill"], row["gpus_decode"], row["gpus_total"] = counts.prefill, counts.decode, counts.total

        row["tps_per_gpu"] = None if total is None else total / counts.total
        row["tps_per_user"] = None if tpot is None else 1000.0 / tpot
        row["output_tps_per_decode_gpu"] = None if output is None or counts.decode == 0 else output / counts.decode
        if row.pop("_per_gpu_unknown", False):  # the GPU counts are a floor: no per-GPU figure
            row["tps_per_gpu"] = row["output_tps_per_decode_gpu"] = None
        row.setdefault("modeled", False)
        return row


def _is_regular(path: Path) -> bool:
    try:
        return guarded.describe_mode(os.stat(path).st_mode) is None
    except OSError:
        return False


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _as_paths(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        return [Path(paths)]
    return [Path(p) for p in paths]


def load_results(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    gpus: GpuCounts | None = None,
    single_workload: bool = False,
) -> pd.DataFrame:
    """One row per deployment x concurrency from every result file in ``paths`` (folders are walked).

    ``gpus`` serves files that do not record their GPU counts (as does a ``pdtune-gpus.yaml`` beside
    them; the two must agree). ``single_workload`` demands one ISL/OSL pair across all rows.
    """
    loader = _Loader(gpus)
    raw: list[Row] = []
    targets = _as_paths(paths)
    if not targets:
        raise InputError("results", "paths", "no result files or folders given")
    for path in targets:
        if path.is_dir():
            raw += loader.folder(path)
        elif path.exists():
            guarded.check_regular(path, "path")  # a FIFO or a device named on the command line
            raw += [dict(r, _root=path.parent) for r in loader.file(path, explicit=True)]
        else:
            raise InputError(path, "path", "no such file or folder")
    rows = [loader.finish(r) for r in raw]
    if single_workload:
        _check_single_workload(rows)
    df = frame(rows)
    # a sweep's files share a folder: keep them together, in concurrency order
    folder = df["path"].map(lambda p: str(Path(p).parent))
    order = df.assign(_folder=folder).sort_values(["source", "_folder", "concurrency", "path"], kind="stable").index
    return df.loc[order].reset_index(drop=True)


def _check_single_workload(rows: list[Row]) -> None:
    seen: dict[tuple[Any, Any], str] = {}
    for row in rows:
        key = (row.get("isl"), row.get("osl"))
        if None in key:
            raise InputError(row["path"], "isl/osl", "unknown, but one workload is expected")
        seen.setdefault(key, row["path"])
        if len(seen) > 1:
            (a, pa), (b, pb) = list(seen.items())[:2]
            raise InputError(pb, "isl/osl", f"{b[0]}/{b[1]} differs from {a[0]}/{a[1]} in {pa}: "
                                            "one workload (ISL/OSL) is expected")
