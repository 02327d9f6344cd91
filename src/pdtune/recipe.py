"""srt-slurm recipes and ``vllm serve`` commands for a plan's deployments, and for the sweeps it needs measured.

For a row of ``pdtune plan --json`` (checked in full first: :func:`pdtune.plan.files.check_plan`) this writes,
in the shape of srt-slurm's own vLLM recipes (the samples in ``tests/fixtures/srt_slurm_recipes/``):

* ``deploy-row<K>-<label>.yaml``: the deployment. A disaggregated row: ``resources`` (GPU type, GPUs per node,
  prefill and decode nodes, workers and GPUs per worker), ``backend.vllm_config.prefill/decode``; an
  aggregated row: ``agg_nodes``/``agg_workers`` and ``vllm_config.aggregated``. An sa-bench ``benchmark`` at
  the plan's ISL/OSL over concurrencies spanning the predicted curve, ``random_range_ratio: 1.0`` so the
  requests have the planned lengths (sa-bench's default 0.8 draws them 10 % shorter on average).
* ``serve-row<K>-<label>.sh``: the same engines as ``vllm serve`` commands, one per worker and node, for the
  image's own vLLM (no Dynamo): run it on each node with the node's index.
* ``measure-prefill-<layout>.yaml`` and ``measure-decode-<layout>.yaml`` (disaggregated rows): the isolated
  sweeps the article measures first, on one aggregated server each: prefill at ISL/2, decode at ISL 1 and
  OSL ``2 ISL + OSL``, whose requests hold the plan's mean context (``ISL + OSL/2``, what every decode step
  reads; :func:`pdtune.plan.pools.matching_decode_osl`). ``pdtune plan --prefill-results/--decode-results``
  read their outputs back in place of the model, and refuse a decode sweep of another context.

**Where the GPUs go.** A recipe never asks for more GPUs than the row priced: its nodes are as few as hold its
workers, and prefill and decode workers share nodes (``decode_nodes: 0`` with
``backend.allow_prefill_decode_colocation``) when that takes fewer nodes, and always when the plan priced the
KV transfer over NVLink inside one node's NVLink domain (an 8-GPU HGX board): two pools on two nodes would move
it onto the NIC. Workers are placed as srt-slurm places them (:mod:`pdtune.placement`), and packing is used only
where that placement gives every worker GPUs of its own; the tests check it against srt-slurm's own code. On a GPU whose NVLink domain spans nodes (GB200/GB300 NVL72), both roles get
srt-slurm's GB200 vLLM recipes' multi-node NVLink environment (:data:`MNNVL_ENVIRONMENT`).

**Versions.** srt-slurm starts a disaggregated vLLM deployment (and more than one aggregated replica) through
Dynamo's ``dynamo.vllm`` workers and router only; its ``frontend.type: vllm`` runs one aggregated ``vllm serve``.
No ai-dynamo release pins vLLM 0.33 (``data/vllm/dynamo-vllm-pins.csv``, read from the wheels' metadata), so
those recipes run the newest Dynamo release in the image of the vLLM it pins (ai-dynamo 1.6.1 and
``vllm/vllm-openai:v0.31.0``), a pair that belongs together, and their flags are checked against that vLLM's
list as well as 0.33's. A single aggregated server, the measurement recipes and the serve scripts run the
image's own vLLM 0.33.0 (``frontend.type: vllm``, no Dynamo). Every recipe declares its versions in
srt-slurm's ``identity`` block, which srt-slurm verifies when the job starts.

Every flag and value written is checked against vLLM's own rules (:mod:`pdtune.vllm_args`: the flag lists and
value rules generated from the wheels by ``scripts/vllm_engine_args.py``); a value the plan makes impossible
(a ``max-num-seqs`` beyond pdtune's bound) is bad input naming the plan's file and row. The recipes are read
back by :func:`pdtune.results.srt_slurm.load_recipe`, which reads srt-slurm's real recipes too.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from pdtune import guarded
from pdtune.errors import InputError
from pdtune.gpus import gpu_count
from pdtune.io import FolderSwap, write_text
from pdtune.memory import default_max_num_batched_tokens
from pdtune.paths import data_dir
from pdtune.placement import Placement, Worker, disagg_placement, nodes_used, place_workers
from pdtune.topology import Topology, parse_topology
from pdtune.vllm_args import (
    VLLM_VERSION,
    accepted_flags,
    config_problems,
    engine_args_file,
    parse_command,
    unknown_flags,
)

__all__ = [
    "CONTAINER", "KV_TRANSFER_CONFIG", "MNNVL_ENVIRONMENT", "VLLM_VERSION", "DynamoRelease", "Engine", "Placement",
    "Recipe", "Worker", "accepted_flags", "candidate_recipes", "config_flags", "deployment_recipe",
    "disagg_placement", "dynamo_pins", "dynamo_release", "engine_args_file", "measurement_recipe", "place_workers",
    "row_recipes", "serve_command", "serve_commands", "serve_script", "unknown_flags", "write_recipes",
]

#: The image of the vLLM line the serve scripts, single servers and measurement recipes run.
CONTAINER = f"vllm/vllm-openai:v{VLLM_VERSION}"
KV_TRANSFER_CONFIG = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
#: Tokens of max-model-len beyond ISL + OSL, so that a prompt a few tokens over ISL is not refused.
MODEL_LEN_HEADROOM = 256
#: The isolated sweeps' output lengths: prefill-only is ISL/2 (the article's 8192/2); decode-only runs at ISL 1.
PREFILL_ONLY_OSL = 2
DECODE_ONLY_ISL = 1
#: sa-bench draws lengths from [ratio x L, L]; 1.0 sends exactly the planned ISL and OSL.
RANDOM_RANGE_RATIO = 1.0
#: What every one of srt-slurm's GB200 vLLM recipes sets for both roles (recipes/vllm/deepseek-v4-pro/GB200/ at
#: srt-slurm c88ef731): NCCL over the multi-node NVLink, and UCX (NIXL's transport) over CUDA IPC across it.
MNNVL_ENVIRONMENT = {"NCCL_MNNVL_ENABLE": "1", "UCX_CUDA_IPC_ENABLE_MNNVL": "y", "UCX_TLS": "cuda_copy,cuda_ipc,tcp"}
#: Ports of the serve scripts: each worker's OpenAI port, its NIXL side channel (a block of one port per DP
#: rank: vLLM adds the rank; srt-slurm's base), a DP engine's RPC port, and the base of the ports vLLM scans
#: for its own sockets (``VLLM_PORT``, a block per process as srt-slurm gives, so neighbours never race).
SERVE_PORT_BASE = 8100
NIXL_PORT_BASE = 5400
DP_RPC_PORT_BASE = 13345
VLLM_PORT_BASE, VLLM_PORT_STRIDE = 20000, 50


# ------------------------------------------------------------------------------------------ versions


@dataclass(frozen=True)
class DynamoRelease:
    """An ai-dynamo release and the vLLM its ``vllm`` extra pins (``Requires-Dist: vllm[...]==X``)."""

    version: str
    vllm: str
    wheel: str

    @property
    def image(self) -> str:
        return f"vllm/vllm-openai:v{self.vllm}"


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


@cache
def dynamo_pins() -> tuple[DynamoRelease, ...]:
    """``data/vllm/dynamo-vllm-pins.csv``, newest release first."""
    with guarded.bundled():
        rows = guarded.read_csv_table(data_dir() / "vllm" / "dynamo-vllm-pins.csv", ("ai_dynamo", "vllm", "wheel"))
    out = [DynamoRelease(r["ai_dynamo"], r["vllm"], r["wheel"]) for r in rows]
    return tuple(sorted(out, key=lambda r: _version_key(r.version), reverse=True))



def dynamo_release(vllm: str = VLLM_VERSION) -> tuple[DynamoRelease, bool]:
    """The newest Dynamo release pinning ``vllm`` (and True), else the newest release at all (and False): its
    image is then its own pin's, never ``vllm``'s."""
    pins = dynamo_pins()
    for release_ in pins:
        if release_.vllm == vllm:
            return release_, True
    return pins[0], False


# ------------------------------------------------------------------------------------------ flags


def config_flags(config: dict[str, Any]) -> list[str]:
    """The flags srt-slurm passes for one ``vllm_config`` role: ``--key`` per key set (a false bool drops)."""
    return [f"--{str(k).replace('_', '-')}" for k, v in config.items() if v is not False and v is not None]


def _checked(flags: list[str], *, serve: bool, where: str, version: str = VLLM_VERSION) -> None:
    bad = unknown_flags(flags, serve=serve, version=version)
    if bad:  # a bug in pdtune, not bad input: never write a flag vLLM would refuse
        raise RuntimeError(f"{where}: vLLM {version} does not accept {', '.join(bad)}")


def _checked_values(config: dict[str, Any], *, versions: Sequence[str], source: str | Path, where: str) -> None:
    """Every value of one role's ``vllm_config`` as vLLM ``versions`` take it: the plan's numbers end up here,
    so a value vLLM (or pdtune's bound) refuses is bad input naming the plan and the row."""
    for version in versions:
        problems = config_problems(config, version=version)
        if problems:
            raise InputError(source, where, f"would write {problems[0]} (vLLM {version})")


# ------------------------------------------------------------------------------------------ engines


@dataclass(frozen=True)
class Engine:
    """One role's vLLM engine as a plan row sets it."""

    role: str  # "prefill", "decode" or "aggregated"
    topology: Topology
    mtp_tokens: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    gpu_memory_utilization: float
    kv_cache_dtype: str
    block_size: int | None
    kv_transfer: bool
    draft: dict[str, Any] | None = None  # speculative-config of a draft model beside the target (EAGLE, ...)
    decode_context_parallel_size: int = 1

    def vllm_config(self) -> dict[str, Any]:
        """srt-slurm's ``vllm_config`` keys for this engine (``key: true`` is a bare flag)."""
        t = self.topology
        config: dict[str, Any] = {"tensor-parallel-size": t.tp}
        if t.pp > 1:
            config["pipeline-parallel-size"] = t.pp
        if t.dp > 1:
            config["data-parallel-size"] = t.dp
        if t.expert_parallel:
            config["enable-expert-parallel"] = True
        if self.decode_context_parallel_size > 1:
            config["decode-context-parallel-size"] = self.decode_context_parallel_size
        config.update({
            "max-model-len": self.max_model_len,
            "max-num-seqs": self.max_num_seqs,
            "max-num-batched-tokens": self.max_num_batched_tokens,
            "gpu-memory-utilization": self.gpu_memory_utilization,
            "kv-cache-dtype": self.kv_cache_dtype,
            "no-enable-prefix-caching": True,
        })
        if self.block_size is not None:
            config["block-size"] = self.block_size
        if self.mtp_tokens:
            config["speculative-config"] = json.dumps({"method": "mtp", "num_speculative_tokens": self.mtp_tokens},
                                                      separators=(",", ":"))
        elif self.draft is not None:
            config["speculative-config"] = json.dumps(self.draft, separators=(",", ":"))
        if self.kv_transfer:
            config["kv-transfer-config"] = json.dumps(KV_TRANSFER_CONFIG, separators=(",", ":"))
        return config


def serve_command(model: str, config: dict[str, Any], port: int | None, extra: Sequence[str] = ()) -> list[str]:
    """``vllm serve`` with one role's ``vllm_config`` as flags (``key: true`` a bare flag, as srt-slurm does),
    ``extra`` flags (multi-node, DP) and the port (none on a headless node)."""
    cmd = ["vllm", "serve", model]
    for key, value in config.items():
        if value is False or value is None:
            continue
        cmd.append(f"--{key}")
        if value is not True:
            cmd.append(str(value))
    cmd += list(extra)
    return cmd + (["--port", str(port)] if port is not None else [])


def _engine(role: str, topology: str, mtp: int, concurrency: int, settings: dict[str, Any], *,
            max_model_len: int, block_size: int | None, kv_transfer: bool) -> Engine:
    """One role's engine for ``concurrency`` requests in flight on it (its heaviest point on the curve).

    Decode and aggregated: ``max-num-seqs`` is that load per DP rank, so the running batch (and TPOT) stays
    where the plan put it and more requests wait. Prefill: twice it, at least 8, for bursts; a prefill batch is
    bounded by ``max-num-batched-tokens`` anyway. A decode step carries every running request's 1 + K tokens
    (the article's rule, +16); an aggregated server keeps the plan's token budget for its prompt chunks.
    """
    topo = parse_topology(topology)
    seqs = max(1, math.ceil(concurrency / topo.dp))  # requests per DP rank
    if role == "prefill":
        batched = int(settings["max_num_batched_tokens"])
        # vLLM refuses max-num-seqs above max-num-batched-tokens (SchedulerConfig.verify_max_model_len).
        seqs = min(max(8, 1 << (2 * seqs - 1).bit_length()), batched)
    elif role == "decode":
        batched = default_max_num_batched_tokens(seqs, mtp)
    else:
        batched = max(int(settings["max_num_batched_tokens"]), seqs)
    return Engine(role, topo, mtp, seqs, batched, max_model_len, float(settings["gpu_memory_utilization"]),
                  str(settings["kv_cache_dtype"]), block_size, kv_transfer, _draft(settings),
                  int(settings.get("decode_context_parallel_size") or 1) if role == "decode" else 1)


def _draft(settings: dict[str, Any]) -> dict[str, Any] | None:
    """The plan's ``--speculative-model`` as vLLM's speculative-config (both roles run it, as the plan sized
    their KV caches); the method is the one pdtune.state inferred from the draft's architecture."""
    model = settings.get("speculative_model")
    if not model:
        return None
    path = Path(str(model))
    model = str(path.parent) if path.suffix == ".json" else str(model)  # vLLM loads a folder or a Hub id
    return {"method": settings.get("speculative_method") or "draft_model", "model": model,
            "num_speculative_tokens": int(settings.get("num_speculative_tokens") or 1)}


# ------------------------------------------------------------------------------------------ recipes


@dataclass(frozen=True)
class Recipe:
    """One srt-slurm recipe: its file name, the YAML mapping, and the comment block above it."""

    file_name: str
    body: dict[str, Any]
    header: tuple[str, ...] = field(default=())

    def text(self) -> str:
        comments = "".join(f"# {line}\n" if line else "#\n" for line in self.header)
        return comments + yaml.safe_dump(self.body, sort_keys=False, width=120, default_flow_style=False)

    def flags(self) -> dict[str, list[str]]:
        """Role -> the flags srt-slurm will pass."""
        roles = self.body.get("backend", {}).get("vllm_config", {})
        return {role: config_flags(cfg) for role, cfg in roles.items()}

    @property
    def vllm(self) -> str:
        """The vLLM version the recipe's image runs."""
        return str(self.body.get("identity", {}).get("frameworks", {}).get("vllm", VLLM_VERSION))


def _benchmark(isl: int, osl: int, concurrencies: Iterable[int]) -> dict[str, Any]:
    values = sorted({int(c) for c in concurrencies if int(c) >= 1})
    return {"type": "sa-bench", "isl": isl, "osl": osl, "concurrencies": "x".join(str(c) for c in values),
            "req_rate": "inf", "random_range_ratio": RANDOM_RANGE_RATIO, "use_chat_template": False}


def _base(name: str, plan: dict[str, Any], path: str, *, dynamo: DynamoRelease | None) -> dict[str, Any]:
    """``name``, ``model`` and the install: Dynamo and the image of the vLLM it pins, or the image's own vLLM."""
    model = plan["model"]
    image = dynamo.image if dynamo is not None else CONTAINER
    body: dict[str, Any] = {"name": name, "model": {"path": path, "container": image, "precision": model["precision"]}}
    frameworks = {"vllm": dynamo.vllm if dynamo is not None else VLLM_VERSION}
    if dynamo is not None:
        body["dynamo"] = {"version": dynamo.version}
        frameworks = {"dynamo": dynamo.version, **frameworks}
    identity: dict[str, Any] = {}
    if model.get("hub_id"):
        identity["model"] = {"repo": model["hub_id"]}
    identity["container"] = {"image": image}
    identity["frameworks"] = frameworks
    body["identity"] = identity
    return body


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _provenance(plan: dict[str, Any], what: str, *, dynamo: tuple[DynamoRelease, bool] | None = None) -> list[str]:
    s = plan["settings"]
    origin = ("MODELED: the numbers below come from pdtune.perfmodel predictions rate-matched by pdtune plan, "
              "not from measurements") if plan.get("modeled") else "from measured isolated sweeps"
    lines = [f"{what}", f"Written by pdtune recipe from a pdtune plan of {plan['model']['name']} "
             f"(ISL/OSL {s['isl']}/{s['osl']}, at most {gpu_count(s['max_gpus'])}); {origin}; latencies from the "
             f"{plan.get('latency_model', 'steady-state')} model.",
             "model.path is an alias: map it in srtslurm.yaml model_paths."]
    if dynamo is None:
        lines.append(f"vLLM {VLLM_VERSION}, the image's own (frontend.type: vllm, no Dynamo); flags checked against "
                     f"data/vllm/engine-args-{VLLM_VERSION}.txt.")
    else:
        rel, matched = dynamo
        lines.append(f"Dynamo {rel.version} in {rel.image}, the vLLM its vllm extra pins"
                     + (f" (the plan's vLLM {s.get('vllm')})." if matched else
                        f": no ai-dynamo release pins the plan's vLLM {s.get('vllm')} (data/vllm/dynamo-vllm-pins.csv),"
                        f" so this recipe runs vLLM {rel.vllm}; its flags are checked against both lines' lists."))
    return lines


def _row_where(row: dict[str, Any], plan: dict[str, Any] | None = None) -> str:
    """The row's key in the plan file (``rows[3]``), as the plan schema names it."""
    rows = plan.get("rows", []) if plan is not None else []
    index = next((i for i, r in enumerate(rows) if r is row), None)
    return f"rows[{index}]" if index is not None else f"rows[row {row['row']}]"


def deployment_recipe(plan: dict[str, Any], row: dict[str, Any], *, model_path: str | None = None,
                      source: str | Path = "PLAN.json") -> Recipe:
    """The srt-slurm recipe of one plan row's deployment (aggregated or disaggregated)."""
    if row["mode"] == "agg":
        return _agg_recipe(plan, row, model_path=model_path, source=source)
    return _disagg_recipe(plan, row, model_path=model_path, source=source)


def _mnnvl_environment(gpu: dict[str, Any]) -> dict[str, str] | None:
    """The MNNVL environment where one NVLink domain spans nodes (GB200/GB300 NVL72)."""
    if int(gpu["nvlink_domain_gpus"]) > int(gpu["gpus_per_node"]):
        return dict(MNNVL_ENVIRONMENT)
    return None


def engine_loads(row: dict[str, Any]) -> dict[str, int]:
    """Requests in flight on one engine of each role of a plan row, at the heaviest point of its predicted curve
    (the load :func:`_engine` sizes ``--max-num-seqs`` for): prefill and decode, or aggregated."""
    if row.get("mode") == "agg":
        return {"aggregated": int(row.get("curve_server_concurrency_max") or row["server_concurrency"])}
    return {"prefill": int(row.get("curve_prefill_concurrency_max") or row["prefill_concurrency"]),
            "decode": int(row.get("curve_decode_concurrency_max") or row["decode_concurrency"])}


def row_engines(plan: dict[str, Any], row: dict[str, Any]) -> tuple[Engine, ...]:
    """The engines a recipe of ``row`` starts, one per role: prefill and decode, or the aggregated server."""
    return (_agg_engine(plan, row),) if row.get("mode") == "agg" else _disagg_engines(plan, row)


def _disagg_engines(plan: dict[str, Any], row: dict[str, Any]) -> tuple[Engine, Engine]:
    s = plan["settings"]
    max_model_len = s["isl"] + s["osl"] + MODEL_LEN_HEADROOM
    block = row.get("block_size_to_set")
    loads = engine_loads(row)
    prefill = _engine("prefill", row["prefill_topology"], 0, loads["prefill"], s,
                      max_model_len=max_model_len, block_size=block, kv_transfer=True)
    decode = _engine("decode", row["decode_topology"], int(row["mtp_tokens"]), loads["decode"], s,
                     max_model_len=max_model_len, block_size=block, kv_transfer=True)
    return prefill, decode


def _placement(plan: dict[str, Any], row: dict[str, Any], prefill: Engine, decode: Engine) -> Placement:
    gpus = plan["gpus"]
    gpn = int(gpus["prefill"]["gpus_per_node"])
    in_node = row["kv_link"] == "nvlink" and int(gpus["prefill"]["nvlink_domain_gpus"]) <= gpn
    return disagg_placement(int(row["n_prefill_workers"]), prefill.topology.gpus, int(row["n_decode_workers"]),
                            decode.topology.gpus, gpn, nvlink_in_node=in_node)


def _disagg_recipe(plan: dict[str, Any], row: dict[str, Any], *, model_path: str | None,
                   source: str | Path) -> Recipe:
    s = plan["settings"]
    path = model_path or plan["model"]["name"]
    prefill, decode = _disagg_engines(plan, row)
    dynamo = dynamo_release(str(s.get("vllm") or VLLM_VERSION))
    gpus = plan["gpus"]
    gpn = int(gpus["prefill"]["gpus_per_node"])
    per_p, per_d = prefill.topology.gpus, decode.topology.gpus
    x, y = int(row["n_prefill_workers"]), int(row["n_decode_workers"])
    place = _placement(plan, row, prefill, decode)
    body = _base(f"pdtune-{_slug(plan['model']['name'])}-{_slug(row['deployment'])}", plan, path,
                 dynamo=dynamo[0])
    body["resources"] = {
        "gpu_type": gpus["prefill"]["name"],
        "gpus_per_node": gpn,
        "prefill_nodes": place.prefill_nodes,
        "decode_nodes": place.decode_nodes,
        "prefill_workers": x,
        "decode_workers": y,
        "gpus_per_prefill": per_p,
        "gpus_per_decode": per_d,
    }
    body["frontend"] = {"type": "dynamo", "enable_multiple_frontends": False}
    backend: dict[str, Any] = {"type": "vllm", "connector": None}
    if place.packed:
        backend["allow_prefill_decode_colocation"] = True
        if place.prefill_nodes > 1:
            backend["allow_prefill_decode_colocation_across_nodes"] = True
    env = _worker_environment(plan, _mnnvl_environment(gpus["prefill"]))
    if env:
        backend["prefill_environment"] = dict(env)
        backend["decode_environment"] = dict(env)
    backend["vllm_config"] = {"prefill": prefill.vllm_config(), "decode": decode.vllm_config()}
    body["backend"] = backend
    curve = row.get("curve_concurrencies") or [row["concurrency"]]
    body["benchmark"] = _benchmark(s["isl"], s["osl"], curve)
    versions = sorted({dynamo[0].vllm, VLLM_VERSION})
    for role, cfg in body["backend"]["vllm_config"].items():
        _checked_values(cfg, versions=versions, source=source, where=f"{_row_where(row, plan)}.{role}")
        for version in versions:
            _checked(config_flags(cfg), serve=False, where=f"{row['deployment']} {role}", version=version)
    header = _provenance(plan, f"Disaggregated deployment: plan row {row['row']}, {row['deployment']} on "
                               f"{row['gpus_total']} GPUs.", dynamo=dynamo)
    header += [f"Predicted at concurrency {row['concurrency']}: {row['tps_per_gpu']:,.0f} total tokens/s per GPU, "
               f"{math.floor(row['tps_per_user'] * 10 + 1e-9) / 10:.1f} tokens/s per user, TTFT "
               f"{math.ceil(row['ttft_ms_p50'] - 1e-9):,} ms (KV transfer {row['kv_transfer_ms']:.2f} ms over "
               f"{row['kv_link']}).",
               f"Nodes: {place.prefill_nodes + place.decode_nodes} of {gpn} GPUs for {row['gpus_total']} GPUs of "
               f"workers ({place.reason})."]
    if _mnnvl_environment(gpus["prefill"]) is not None:
        header.append("Multi-node NVLink environment for both roles, as srt-slurm's GB200 vLLM recipes set it.")
    if plan_environment(plan):
        header.append("The plan's vLLM environment (pdtune plan --vllm-env) for both roles.")
    block = row.get("block_size_to_set")
    if block is not None:
        header.append(f"block-size {block} on both sides: prefill TP{prefill.topology.tp} would pick "
                      f"{row['prefill_block_tokens']} tokens and decode TP{decode.topology.tp} "
                      f"{row['decode_block_tokens']}; NIXL needs one block size.")
    if row.get("network_groups"):
        header.append(f"Scale-out: {row['network_groups']}.")
    if gpus["prefill"]["name"] != gpus["decode"]["name"]:
        header += [
            f"MIXED POOLS: prefill on {gpus['prefill']['name']}, decode on {gpus['decode']['name']} "
            f"({gpus['decode']['gpus_per_node']} GPUs per node); the KV cache crosses the scale-out network.",
            "srt-slurm's vLLM backend takes one gpu_type and one allocation per recipe (its heterogeneous jobs",
            "are SGLang-only): this recipe runs as written only where one Slurm partition holds both kinds and",
            "the decode nodes are the last ones allocated; otherwise start the two pools with the vllm serve",
            "commands of the serve script and a router in front.",
        ]
    return Recipe(f"deploy-row{row['row']}-{_slug(row['deployment'])}.yaml", body, tuple(header))


def _agg_engine(plan: dict[str, Any], row: dict[str, Any]) -> Engine:
    s = plan["settings"]
    load = engine_loads({**row, "mode": "agg"})["aggregated"]
    return _engine("aggregated", row["topology"], 0, load, s, max_model_len=s["isl"] + s["osl"] + MODEL_LEN_HEADROOM,
                   block_size=None, kv_transfer=False)


def _agg_recipe(plan: dict[str, Any], row: dict[str, Any], *, model_path: str | None,
                source: str | Path) -> Recipe:
    """Aggregated replicas: one server through the image's own vLLM frontend, several through Dynamo's router
    (srt-slurm's ``frontend.type: vllm`` runs exactly one aggregated worker)."""
    s = plan["settings"]
    path = model_path or plan["model"]["name"]
    engine = _agg_engine(plan, row)
    replicas = int(row["agg_replicas"])
    gpu = plan["gpus"]["prefill"] if row.get("prefill_gpu") in (None, plan["gpus"]["prefill"]["name"]) else \
        plan["gpus"]["decode"]
    gpn = int(gpu["gpus_per_node"])
    dynamo = dynamo_release(str(s.get("vllm") or VLLM_VERSION)) if replicas > 1 else None
    workers = place_workers([("agg", replicas, engine.topology.gpus)], gpn, packed=False)
    body = _base(f"pdtune-{_slug(plan['model']['name'])}-{_slug(row['deployment'])}", plan, path,
                 dynamo=dynamo[0] if dynamo else None)
    body["resources"] = {"gpu_type": gpu["name"], "gpus_per_node": gpn, "agg_nodes": nodes_used(workers),
                         "agg_workers": replicas, "gpus_per_agg": engine.topology.gpus}
    body["frontend"] = {"type": "dynamo" if dynamo else "vllm", "enable_multiple_frontends": False}
    backend: dict[str, Any] = {"type": "vllm", "connector": None}
    env = _worker_environment(plan, _mnnvl_environment(gpu) if engine.topology.gpus > gpn else None)
    if env:
        backend["aggregated_environment"] = env
    backend["vllm_config"] = {"aggregated": engine.vllm_config()}
    body["backend"] = backend
    body["benchmark"] = _benchmark(s["isl"], s["osl"], row.get("curve_concurrencies") or [row["concurrency"]])
    versions = sorted({dynamo[0].vllm if dynamo else VLLM_VERSION, VLLM_VERSION})
    cfg = backend["vllm_config"]["aggregated"]
    _checked_values(cfg, versions=versions, source=source, where=f"{_row_where(row, plan)}.aggregated")
    for version in versions:
        _checked(config_flags(cfg), serve=False, where=f"{row['deployment']} aggregated", version=version)
    header = _provenance(plan, f"Aggregated deployment: plan row {row['row']}, {row['deployment']} ({replicas} "
                               f"replica{'s' if replicas > 1 else ''} of one vllm serve server) on "
                               f"{gpu_count(row['gpus_total'])}.", dynamo=dynamo)
    header += [f"Predicted at concurrency {row['concurrency']} ({row['server_concurrency']} per replica): "
               f"{row['tps_per_gpu']:,.0f} total tokens/s per GPU, "
               f"{math.floor(row['tps_per_user'] * 10 + 1e-9) / 10:.1f} tokens/s per user, TTFT "
               f"{math.ceil(row['ttft_ms_p50'] - 1e-9):,} ms.",
               f"Nodes: {nodes_used(workers)} of {gpn} GPUs for {gpu_count(row['gpus_total'])} of servers."]
    if replicas > 1:
        header.append("Dynamo's router spreads the requests over the replicas (srt-slurm's frontend.type: vllm "
                      "runs one server only); the serve script starts the same replicas without Dynamo.")
    return Recipe(f"deploy-row{row['row']}-{_slug(row['deployment'])}.yaml", body, tuple(header))


def measurement_recipe(plan: dict[str, Any], role: str, topology: str, mtp: int, concurrencies: Sequence[int], *,
                       model_path: str | None = None, source: str | Path = "PLAN.json") -> Recipe:
    """An aggregated srt-slurm recipe that sweeps one engine prefill-only or decode-only (the article's
    isolation runs), at the lengths the plan reads back: prefill at ISL/2, decode at ISL 1 and OSL 2 ISL + OSL
    (the plan's mean context; see the module docstring)."""
    from pdtune.plan.pools import decode_context, matching_decode_osl

    s = plan["settings"]
    gpu = plan["gpus"]["prefill" if role == "prefill" else "decode"]
    path = model_path or plan["model"]["name"]
    if role == "prefill":
        isl, osl = s["isl"], PREFILL_ONLY_OSL
    else:
        isl, osl = DECODE_ONLY_ISL, matching_decode_osl(s["isl"], s["osl"])
    top = max(concurrencies) if concurrencies else 1
    # Sized for the plan's workload, so that its KV room is the one the plan checks; room for the longer
    # decode-only requests.
    length = max(s["isl"] + s["osl"], isl + osl) + MODEL_LEN_HEADROOM
    engine = _engine(role, topology, mtp, top, s, max_model_len=length, block_size=None, kv_transfer=False)
    label = topology + (f"+MTP{mtp}" if mtp else "")
    body = _base(f"pdtune-{_slug(plan['model']['name'])}-{role}-only-{_slug(label)}", plan, path, dynamo=None)
    gpn = int(gpu["gpus_per_node"])
    body["resources"] = {"gpu_type": gpu["name"], "gpus_per_node": gpn,
                         "agg_nodes": math.ceil(engine.topology.gpus / gpn), "agg_workers": 1,
                         "gpus_per_agg": engine.topology.gpus}
    body["frontend"] = {"type": "vllm", "enable_multiple_frontends": False}
    backend: dict[str, Any] = {"type": "vllm", "connector": None}
    env = _worker_environment(plan, _mnnvl_environment(gpu) if engine.topology.gpus > gpn else None)
    if env:
        backend["aggregated_environment"] = env
    backend["vllm_config"] = {"aggregated": engine.vllm_config()}
    body["backend"] = backend
    body["benchmark"] = _benchmark(isl, osl, concurrencies)
    if role == "prefill":
        what = f"Prefill-only sweep (ISL/OSL {isl}/{osl}): read back with pdtune plan --prefill-results"
    else:
        what = (f"Decode-only sweep (ISL/OSL {isl}/{osl}: its requests hold {decode_context(isl, osl):,.0f} tokens "
                f"of context on average, the plan's {decode_context(s['isl'], s['osl']):,.0f}): read back with "
                "pdtune plan --decode-results; the plan drops points beyond the engine's KV room at the real "
                "ISL + OSL")
    header = _provenance(plan, f"{label} on {engine.topology.gpus} {gpu['name']} GPUs. {what}.")
    cfg = backend["vllm_config"]["aggregated"]
    _checked_values(cfg, versions=[VLLM_VERSION], source=source, where=f"candidates[{label}]: {role}")
    _checked(config_flags(cfg), serve=False, where=f"{label} {role}-only")
    return Recipe(f"measure-{role}-{_slug(label)}.yaml", body, tuple(header))


def plan_environment(plan: dict[str, Any]) -> dict[str, str]:
    """The plan's ``--vllm-env`` (``settings.vllm_env``), checked again: a plan file may be edited by hand."""
    from pdtune.switches import check_env

    raw = plan["settings"].get("vllm_env") or {}
    if not isinstance(raw, dict):
        raise InputError("PLAN.json", "settings.vllm_env", "must be a mapping NAME: VALUE")
    return check_env(raw, str(plan["settings"].get("vllm", VLLM_VERSION)), "settings.vllm_env").as_dict()


def _worker_environment(plan: dict[str, Any], mnnvl: dict[str, str] | None) -> dict[str, str]:
    """One worker's environment: the MNNVL variables where they apply, then the plan's ``--vllm-env``."""
    env = dict(mnnvl or {})
    env.update(plan_environment(plan))
    return env


# ------------------------------------------------------------------------------------------ serve scripts


_SHELL_VARIABLE = re.compile(r"^\$(NODE\d+|MODEL)$")


def _shell_line(words: Sequence[str]) -> str:
    """``words`` as one shell command: quoted, except the script's own variables, which expand."""
    return " ".join(f'"{w}"' if _SHELL_VARIABLE.match(w) else shlex.quote(w) for w in words)


def _ranges(gpus: Sequence[int]) -> str:
    return ",".join(str(g) for g in gpus)


def serve_script(plan: dict[str, Any], row: dict[str, Any], *, model_path: str | None = None,
                 source: str | Path = "PLAN.json") -> str:
    """The deployment as ``vllm serve`` commands of the image's own vLLM: one line per worker and node, grouped
    by node; run the script on node ``i`` as ``serve-....sh i`` (``NODE0`` ... set to the nodes' addresses)."""
    s = plan["settings"]
    model = model_path or plan["model"].get("hub_id")
    named = model is not None
    model = model or "$MODEL"
    if row["mode"] == "agg":
        engines = {"agg": _agg_engine(plan, row)}
        gpu = plan["gpus"]["prefill"] if row.get("prefill_gpu") in (None, plan["gpus"]["prefill"]["name"]) else \
            plan["gpus"]["decode"]
        gpn = int(gpu["gpus_per_node"])
        workers = place_workers([("agg", int(row["agg_replicas"]), engines["agg"].topology.gpus)], gpn, packed=False)
        how = ("Each replica is its own OpenAI server: put any HTTP load balancer in front of their ports.")
    else:
        prefill, decode = _disagg_engines(plan, row)
        engines = {"prefill": prefill, "decode": decode}
        gpn = int(plan["gpus"]["prefill"]["gpus_per_node"])
        place = _placement(plan, row, prefill, decode)
        workers = list(place.workers)
        how = ("A router sends each request to a prefill server, then to a decode server, which pulls the KV cache "
               "over NIXL (Dynamo's frontend, or vLLM's disaggregated proxy: vllm-project/router's "
               "`vllm-router --pd-disaggregation`); point it at the prefill and decode ports below.")
    nodes = nodes_used(workers)
    lines = ["#!/usr/bin/env bash",
             f"# {row['deployment']}: plan row {row['row']} ({row['mode']}) as `vllm serve` commands of vLLM "
             f"{VLLM_VERSION} ({CONTAINER}, no Dynamo), {gpu_count(row['gpus_total'])} on {nodes} node(s) of {gpn}.",
             f"# Run it on every node with the node's index: serve-row{row['row']}-...sh 0 .. {nodes - 1}; set "
             "NODE0 ... to the nodes' addresses (NODE0 leads every engine that spans nodes).",
             f"# {how}",
             "set -euo pipefail",
             f'NODE_INDEX="${{1:?usage: $0 NODE_INDEX (0 to {nodes - 1})}}"']
    if not named:
        lines.append('MODEL="${MODEL:?set MODEL to the model (a Hub id or a path): the plan names no Hub id}"')
    for n in range(nodes):
        lines.append(f'NODE{n}="${{NODE{n}:-node{n}}}"')
    lines.append("")
    port_of: dict[int, int] = {}
    nixl = NIXL_PORT_BASE
    rpc_of: dict[int, int] = {}
    commands: dict[int, list[str]] = {n: [] for n in range(nodes)}
    process = 0
    for w in workers:
        engine = engines[w.role]
        cfg = engine.vllm_config()
        topo = engine.topology
        leader = w.nodes[0]
        nixl_port, nixl = nixl, nixl + topo.dp
        rpc = None
        if topo.dp > 1:
            rpc = rpc_of.get(leader, DP_RPC_PORT_BASE)
            rpc_of[leader] = rpc + 1
        for rank, (node, gpus) in enumerate(w.places):
            extra: list[str] = []
            if len(w.places) > 1:
                extra += ["--nnodes", str(len(w.places)), "--node-rank", str(rank), "--master-addr", f"$NODE{leader}"]
                if rank:
                    extra.append("--headless")
            if rpc is not None:
                extra += ["--data-parallel-rpc-port", str(rpc)]
                if len(w.places) > 1:
                    extra += ["--data-parallel-address", f"$NODE{leader}"]
            port = None
            if rank == 0:
                port = port_of.get(node, SERVE_PORT_BASE)
                port_of[node] = port + 1
            cmd = serve_command(model, cfg, port, extra)
            _checked([c for c in cmd if c.startswith("-")], serve=True, where=f"{row['deployment']} {w.role} serve")
            try:
                parse_command(cmd)
            except ValueError as exc:
                raise InputError(source, _row_where(row, plan), f"would write a vllm serve line vLLM {VLLM_VERSION} "
                                                          f"refuses: {exc}") from None
            env = [f"CUDA_VISIBLE_DEVICES={_ranges(gpus)}", f"VLLM_PORT={VLLM_PORT_BASE + process * VLLM_PORT_STRIDE}"]
            process += 1
            if w.role in ("prefill", "decode"):
                env.append(f"VLLM_NIXL_SIDE_CHANNEL_PORT={nixl_port}")
            mnnvl = _mnnvl_environment(plan["gpus"]["prefill"]) if engine.topology.gpus > gpn else None
            env += [f"{k}={shlex.quote(v)}" for k, v in _worker_environment(plan, mnnvl).items()]
            where = f"node rank {rank} of {len(w.places)}, " if len(w.places) > 1 else ""
            commands[node].append(f"  # {w.role} worker {w.index} ({topo.canonical}): {where}GPUs {_ranges(gpus)}"
                                  + (f", port {port}" if port is not None else ", headless"))
            commands[node].append("  " + " ".join(env) + " " + _shell_line(cmd) + " &")
    for n in range(nodes):
        lines.append(f'if [ "$NODE_INDEX" = {n} ]; then')
        lines += commands[n]
        lines.append("fi")
    lines += ["wait", ""]
    return "\n".join(lines)


def serve_commands(script: str) -> list[tuple[dict[str, str], list[str]]]:
    """The ``vllm serve`` lines of a serve script: per line its environment assignments and the command's words
    (the script's ``$NODE<i>`` and ``$MODEL`` as written)."""
    out = []
    for line in script.splitlines():
        text = line.strip()
        if text.startswith("#") or " vllm serve " not in f" {text} ":
            continue
        words = shlex.split(text.rstrip("&").strip())
        env: dict[str, str] = {}
        while words and "=" in words[0] and not words[0].startswith("-"):
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        out.append((env, words))
    return out


# ------------------------------------------------------------------------------------------ writing


def row_recipes(plan: dict[str, Any], row: dict[str, Any], *, model_path: str | None = None,
                source: str | Path = "PLAN.json") -> list[Recipe]:
    """The deployment of one row and, for a disaggregated one, the two isolated sweeps behind it."""
    out = [deployment_recipe(plan, row, model_path=model_path, source=source)]
    if row["mode"] == "agg":
        return out
    for role, topo, mtp in (("prefill", row["prefill_topology"], 0),
                            ("decode", row["decode_topology"], int(row["mtp_tokens"]))):
        out.append(measurement_recipe(plan, role, topo, mtp, _sweep_concurrencies(plan, role, topo, mtp),
                                      model_path=model_path, source=source))
    return out


def candidate_recipes(plan: dict[str, Any], *, model_path: str | None = None,
                      source: str | Path = "PLAN.json") -> list[Recipe]:
    """Isolated-sweep recipes of every prefill and decode layout the plan's table uses."""
    seen: set[tuple[str, str, int]] = set()
    out = []
    for row in plan["rows"]:
        if row["mode"] == "agg":
            continue
        for role, topo, mtp in (("prefill", row["prefill_topology"], 0),
                                ("decode", row["decode_topology"], int(row["mtp_tokens"]))):
            if (role, topo, mtp) in seen:
                continue
            seen.add((role, topo, mtp))
            out.append(measurement_recipe(plan, role, topo, mtp, _sweep_concurrencies(plan, role, topo, mtp),
                                          model_path=model_path, source=source))
    return out


def _sweep_concurrencies(plan: dict[str, Any], role: str, topology: str, mtp: int) -> list[int]:
    for c in plan.get("candidates", []):
        if c["role"] == role and c["topology"] == topology and int(c["mtp_tokens"]) == mtp:
            return list(c.get("sweep_concurrencies") or [1])
    return [1]


def write_recipes(plan: dict[str, Any], rows: Sequence[int], out: str | os.PathLike[str], *,
                  measurements: bool = False, model_path: str | None = None,
                  source: str | Path = "PLAN.json", field: str = "--out") -> list[Path]:
    """Write the recipes (and serve scripts) of ``rows`` into ``out``; all of them or none.

    The plan is checked against the plan schema first (:func:`pdtune.plan.files.check_plan`), whoever made it;
    ``measurements`` adds the isolated-sweep recipes of every disaggregated layout in the plan's table.
    """
    from pdtune.plan.files import check_plan

    check_plan(plan, source)
    by_row = {int(r["row"]): r for r in plan["rows"]}
    files: dict[str, str] = {}
    for k in rows:
        if k not in by_row:
            raise InputError("--row", "row", f"no row {k}; the plan has rows 0 to {len(by_row) - 1}")
        row = by_row[k]
        for recipe in row_recipes(plan, row, model_path=model_path, source=source):
            files[recipe.file_name] = recipe.text()
        files[f"serve-row{k}-{_slug(row['deployment'])}.sh"] = serve_script(plan, row, model_path=model_path,
                                                                             source=source)
    if measurements:
        for recipe in candidate_recipes(plan, model_path=model_path, source=source):
            files[recipe.file_name] = recipe.text()
    if not files:
        raise InputError("--row", "row", "nothing to write: give --row K or --measurements")
    return _write_all(Path(out), files, field)


def _write_all(target: Path, files: dict[str, str], field: str) -> list[Path]:
    """Every file of ``files`` into ``target`` at once: the folder is swapped in whole (the recipes of an earlier
    run there, and any other file, carried over unless a new one takes its name)."""
    with FolderSwap(target, field, carry=lambda name: name not in files) as swap:
        for name in files:  # a folder or a FIFO where a recipe goes is refused before anything is written
            existing = swap.target / name
            if os.path.lexists(existing) and not existing.is_file():
                raise InputError(existing, field, "is in the way: not a regular file")
        for name, text in files.items():
            write_text(swap.staging / name, text)
            if name.endswith(".sh"):
                (swap.staging / name).chmod(0o755)
        swap.commit()
    return [target / name for name in files]
