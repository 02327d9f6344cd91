"""GPU specifications as data: memory, HBM bandwidth, dense peak FLOP/s per dtype, NVLink.

The bundled table is ``data/gpus/gpus.csv``; its README names the source of every number and which of
NVIDIA's figures are dense and which sparse (pdtune keeps the dense ones). Units inside pdtune are SI: bytes,
bytes/s, FLOP/s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from pdtune.errors import InputError
from pdtune.guarded import bundled, read_csv_table
from pdtune.paths import data_dir
from pdtune.units import GiB


def gpu_count(n: int, kind: str = "") -> str:
    """``n`` GPUs in words, of ``kind`` if given ("1 GPU", "16 h200 GPUs"): a budget of one GPU is planned too
    (an aggregated server)."""
    return f"{n:,} {kind + ' ' if kind else ''}GPU{'' if n == 1 else 's'}"


#: The math formats a weight class can run in, narrowest last.
DTYPES = ("bf16", "fp8", "fp4")

_COLUMNS = (
    "name",
    "description",
    "memory_gb",
    "torch_total_gib",
    "hbm_tb_s",
    "bf16_dense_tflops",
    "fp8_dense_tflops",
    "fp4_dense_tflops",
    "nvlink_gb_s",
    "nvlink_domain_gpus",
    "network_gb_s",
    "gpus_per_node",
)


def gpus_file() -> Path:
    return data_dir() / "gpus" / "gpus.csv"


@dataclass(frozen=True)
class GpuSpec:
    """One GPU: what it holds, how fast it reads it, how fast it multiplies, how fast it talks."""

    name: str
    description: str
    memory_datasheet_gb: float  # the HBM figure NVIDIA prints ("288 GB"); see data/gpus/README.md on its unit
    memory_total: int  # bytes torch reports (what vLLM multiplies by gpu_memory_utilization)
    hbm_bandwidth: float  # bytes/s
    dense_flops: dict[str, float]  # dense tensor-core FLOP/s by math format; absent = not supported
    nvlink_bandwidth: float  # bytes/s per GPU per direction
    nvlink_domain: int  # GPUs in one NVLink domain
    network_bandwidth: float  # bytes/s per GPU per direction beyond the NVLink domain
    gpus_per_node: int = 8  # GPUs one host (a compute tray, an HGX board) holds
    torch_total_known: bool = True

    def peak_flops(self, dtype: str) -> float:
        """Dense peak for math in ``dtype``; a format the GPU lacks runs in BF16 (FP4 weights on Hopper go through
        W4A16 kernels that dequantize to BF16, as vLLM's Marlin and triton MXFP4 paths do)."""
        if dtype not in DTYPES:
            raise InputError(self.name, "dtype", f"unknown math format {dtype!r}; known: {', '.join(DTYPES)}")
        for candidate in (dtype, "bf16"):
            if candidate in self.dense_flops:
                return self.dense_flops[candidate]
        raise InputError(self.name, "bf16_dense_tflops", "missing")  # pragma: no cover - every row has bf16

    def link_bandwidth(self, group_gpus: int) -> float:
        """Per-GPU bandwidth of a collective over ``group_gpus`` GPUs: NVLink in one domain, else the NIC."""
        return self.nvlink_bandwidth if group_gpus <= self.nvlink_domain else self.network_bandwidth

    def crosses_network(self, group_gpus: int) -> bool:
        """Whether a group of ``group_gpus`` GPUs spans more than one NVLink domain."""
        return group_gpus > self.nvlink_domain

    @property
    def ridge_point(self) -> dict[str, float]:
        """FLOP per byte of HBM traffic above which a kernel in each format is compute-bound."""
        return {d: f / self.hbm_bandwidth for d, f in self.dense_flops.items()}

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "description": self.description,
            "memory_datasheet_gb": self.memory_datasheet_gb,
            "memory_total_gib": self.memory_total / GiB,
            "torch_total_known": self.torch_total_known,
            "hbm_tb_s": self.hbm_bandwidth / 1e12,
            "dense_tflops": {d: f / 1e12 for d, f in self.dense_flops.items()},
            "nvlink_gb_s": self.nvlink_bandwidth / 1e9,
            "nvlink_domain_gpus": self.nvlink_domain,
            "network_gb_s": self.network_bandwidth / 1e9,
            "gpus_per_node": self.gpus_per_node,
        }


@cache
def _table(path: str) -> dict[str, GpuSpec]:
    with bundled():  # the guarded reader: a binary or missing file, or a bad row, is one line blaming the data
        return _read_table(Path(path))


def _read_table(source: Path) -> dict[str, GpuSpec]:
    rows = read_csv_table(source, _COLUMNS)
    out: dict[str, GpuSpec] = {}
    for i, row in enumerate(rows, start=2):
        where = f"{source}:{i}"
        name = row["name"].strip().lower()
        if not name:
            raise InputError(where, "name", "empty")
        flops = {}
        for dtype in DTYPES:
            value = _number(
                row[f"{dtype}_dense_tflops"], where, f"{dtype}_dense_tflops", optional=dtype != "bf16"
            )
            if value is not None:
                flops[dtype] = value * 1e12
        torch_total = _number(row["torch_total_gib"], where, "torch_total_gib", optional=True)
        capacity = _number(row["memory_gb"], where, "memory_gb")
        assert capacity is not None
        out[name] = GpuSpec(
            name=name,
            description=row["description"].strip(),
            memory_datasheet_gb=capacity,
            # Unknown torch total: the datasheet figure read as 10^9 B, the smaller of its two readings.
            memory_total=round(torch_total * GiB) if torch_total is not None else round(capacity * 1e9),
            hbm_bandwidth=_required(row, "hbm_tb_s", where) * 1e12,
            dense_flops=flops,
            nvlink_bandwidth=_required(row, "nvlink_gb_s", where) * 1e9,
            nvlink_domain=int(_required(row, "nvlink_domain_gpus", where)),
            network_bandwidth=_required(row, "network_gb_s", where) * 1e9,
            gpus_per_node=int(_required(row, "gpus_per_node", where)),
            torch_total_known=torch_total is not None,
        )
    return out


def _required(row: dict[str, str], key: str, where: str) -> float:
    value = _number(row[key], where, key)
    assert value is not None
    return value


def _number(text: str | None, where: str, key: str, *, optional: bool = False) -> float | None:
    text = (text or "").strip()
    if not text:
        if optional:
            return None
        raise InputError(where, key, "missing")
    try:
        value = float(text)
    except ValueError:
        raise InputError(where, key, f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise InputError(where, key, f"must be a positive number, got {text}")
    return value


def bundled_gpus() -> list[str]:
    return sorted(_table(str(gpus_file())))


def load_gpu(name: str, *, memory_gib: float | None = None) -> GpuSpec:
    """A bundled GPU by name (case-insensitive); ``memory_gib`` overrides what torch reports."""
    table = _table(str(gpus_file()))
    key = str(name).strip().lower()
    if key not in table:
        raise InputError("--gpu", "gpu", f"unknown GPU {name!r}; bundled: {', '.join(bundled_gpus())}")
    gpu = table[key]
    if memory_gib is not None:
        if not math.isfinite(memory_gib) or memory_gib <= 0:
            raise InputError("--gpu-memory-gib", "gpu_memory_gib", f"must be positive, got {memory_gib}")
        gpu = replace(gpu, memory_total=round(memory_gib * GiB), torch_total_known=True)
    return gpu
