"""srt-slurm recipes and ``vllm serve`` commands for a plan's deployments, and for the sweeps it needs measured.

For a row of ``pdtune plan --json`` this writes, in the shape of srt-slurm's own vLLM recipes (the samples in
``tests/fixtures/srt_slurm_recipes/``):

* ``deploy-row<K>-<label>.yaml``: the disaggregated deployment: ``resources`` (GPU type, GPUs per node, prefill and
  decode nodes, workers and GPUs per worker), ``backend.vllm_config.prefill/decode`` (the engine flags), and an
  sa-bench ``benchmark`` at the plan's ISL/OSL over concurrencies spanning the predicted curve;
* ``serve-row<K>-<label>.sh``: the same engines as ``vllm serve`` commands, one per role;
* ``measure-prefill-<layout>.yaml`` and ``measure-decode-<layout>.yaml``: the isolated sweeps the article
  measures first (an aggregated server at ISL/2 for prefill, at 1/OSL for decode), whose outputs
  ``pdtune plan --prefill-results/--decode-results`` reads back in place of the model.

Every flag written is checked against the flags vLLM 0.33.0 accepts (``data/vllm/engine-args-0.33.0.txt``,
generated from vLLM's source by ``scripts/vllm_engine_args.py``): srt-slurm turns each ``vllm_config`` key
into ``--key`` for Dynamo's ``dynamo.vllm`` worker, which takes vLLM's engine flags. The recipes are read back
by :func:`pdtune.results.srt_slurm.load_recipe`, which reads srt-slurm's real recipes too.
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
from pdtune.io import output_folder, release, remove_stale, staging_dir, write_text
from pdtune.memory import default_max_num_batched_tokens
from pdtune.paths import data_dir
from pdtune.topology import Topology, parse_topology

#: vLLM line whose flags the recipes use (and whose flag list they are checked against).
VLLM_VERSION = "0.33.0"
CONTAINER = f"vllm/vllm-openai:v{VLLM_VERSION}"
#: Dynamo release installed into the container (the article ran a 1.2.0 development build).
DYNAMO_VERSION = "1.2.1"
KV_TRANSFER_CONFIG = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
#: Tokens of max-model-len beyond ISL + OSL, so that a prompt a few tokens over ISL is not refused.
MODEL_LEN_HEADROOM = 256
#: The isolated sweeps' output lengths: prefill-only is ISL/2 and decode-only is 1/OSL (the article's 8192/2
#: and 1/1000).
PREFILL_ONLY_OSL = 2
DECODE_ONLY_ISL = 1


# ------------------------------------------------------------------------------------------ flag list


def engine_args_file(version: str = VLLM_VERSION) -> Path:
    return data_dir() / "vllm" / f"engine-args-{version}.txt"


@cache
def accepted_flags(version: str = VLLM_VERSION) -> dict[str, str]:
    """Flag -> scope (``engine`` or ``serve``) of one vLLM version, from the generated list."""
    path = engine_args_file(version)
    with guarded.bundled():
        lines = guarded.read_text(path, "engine-args").splitlines()
    out: dict[str, str] = {}
    for lineno, line in enumerate(lines, start=1):
        if line.strip() and not line.startswith("#"):
            parts = line.split()
            if len(parts) != 2:
                raise InputError(path, f"line {lineno}", "expected '<flag> <scope>'")
            out[parts[0]] = parts[1]
    return out


def unknown_flags(flags: Iterable[str], *, serve: bool, version: str = VLLM_VERSION) -> list[str]:
    """The flags of ``flags`` vLLM ``version`` does not accept (``serve``: ``vllm serve``'s own count too)."""
    known = accepted_flags(version)
    return [f for f in flags if f not in known or (known[f] == "serve" and not serve)]


def config_flags(config: dict[str, Any]) -> list[str]:
    """The flags srt-slurm passes for one ``vllm_config`` role: ``--key`` per key set (a false bool drops)."""
    return [f"--{str(k).replace('_', '-')}" for k, v in config.items() if v is not False and v is not None]


def _checked(flags: list[str], *, serve: bool, where: str) -> None:
    bad = unknown_flags(flags, serve=serve)
    if bad:  # a bug in pdtune, not bad input: never write a flag vLLM would refuse
        raise RuntimeError(f"{where}: vLLM {VLLM_VERSION} does not accept {', '.join(bad)}")


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



def serve_command(model: str, config: dict[str, Any], port: int) -> list[str]:
    """``vllm serve`` with one role's ``vllm_config`` as flags (``key: true`` a bare flag, as srt-slurm does)."""
    cmd = ["vllm", "serve", model]
    for key, value in config.items():
        if value is False or value is None:
            continue
        cmd.append(f"--{key}")
        if value is not True:
            cmd.append(str(value))
    return cmd + ["--port", str(port)]


def _engine(role: str, topology: str, mtp: int, concurrency: int, settings: dict[str, Any], *,
            max_model_len: int, block_size: int | None, kv_transfer: bool) -> Engine:
    """One role's engine for ``concurrency`` requests in flight on it (its heaviest point on the curve).

    Decode: ``max-num-seqs`` is that load per DP rank, so the running batch (and TPOT) stays where the plan
    put it and more requests wait. Prefill: twice it, at least 8, for bursts; a prefill batch is bounded by
    ``max-num-batched-tokens`` anyway.
    """
    topo = parse_topology(topology)
    if getattr(topo, "ep_size", None):  # MoE-TP x MoE-EP (``+EP<n>``): vLLM splits experts over all ranks only
        raise InputError(topology, "topology", "vLLM has no layout with experts over a subset of the ranks "
                                               "(+EP<n>); use +EP or no expert parallelism")
    seqs = max(1, math.ceil(concurrency / topo.dp))  # requests per DP rank
    if role == "prefill":
        seqs = max(8, 1 << (2 * seqs - 1).bit_length())
        batched = int(settings["max_num_batched_tokens"])
    else:
        # A decode step carries every running request's 1 + K tokens (the article's rule, +16).
        batched = default_max_num_batched_tokens(seqs, mtp)
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


def _nodes(gpus_prefill: int, gpus_decode: int, per_prefill: int, per_decode: int,
           gpus_per_node: int) -> tuple[int, int]:
    """srt-slurm's prefill and decode nodes: decode shares the prefill nodes (``decode_nodes: 0``) when its
    workers fit whole in what prefill leaves free, as in srt-slurm's own packed recipes."""
    prefill_nodes = math.ceil(gpus_prefill / gpus_per_node)
    free = prefill_nodes * gpus_per_node - gpus_prefill
    if 0 < gpus_decode <= free and per_decode <= gpus_per_node and free % per_decode == 0 \
            and per_prefill <= gpus_per_node:
        return prefill_nodes, 0
    return prefill_nodes, math.ceil(gpus_decode / gpus_per_node)


def _benchmark(isl: int, osl: int, concurrencies: Iterable[int]) -> dict[str, Any]:
    values = sorted({int(c) for c in concurrencies if int(c) >= 1})
    return {"type": "sa-bench", "isl": isl, "osl": osl, "concurrencies": "x".join(str(c) for c in values),
            "req_rate": "inf", "use_chat_template": False}


def _base(name: str, model: dict[str, Any], path: str) -> dict[str, Any]:
    return {
        "name": name,
        "model": {"path": path, "container": CONTAINER, "precision": model["precision"]},
        "dynamo": {"version": DYNAMO_VERSION},
    }


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _provenance(plan: dict[str, Any], what: str) -> list[str]:
    s = plan["settings"]
    origin = ("MODELED: the numbers below come from pdtune.perfmodel predictions rate-matched by pdtune plan, "
              "not from measurements") if plan.get("modeled") else "from measured isolated sweeps"
    return [f"{what}", f"Written by pdtune recipe from a pdtune plan of {plan['model']['name']} "
            f"(ISL/OSL {s['isl']}/{s['osl']}, at most {s['max_gpus']} GPUs); {origin}.",
            f"vLLM {VLLM_VERSION} flags (checked against data/vllm/engine-args-{VLLM_VERSION}.txt); "
            "model.path is an alias: map it in srtslurm.yaml model_paths."]


def deployment_recipe(plan: dict[str, Any], row: dict[str, Any], *, model_path: str | None = None) -> Recipe:
    """The srt-slurm recipe of one plan row's disaggregated deployment."""
    s = plan["settings"]
    path = model_path or plan["model"]["name"]
    max_model_len = s["isl"] + s["osl"] + MODEL_LEN_HEADROOM
    block = row.get("block_size_to_set")
    prefill = _engine("prefill", row["prefill_topology"], int(row["mtp_tokens"]),
                      int(row.get("curve_prefill_concurrency_max") or row["prefill_concurrency"]), s,
                      max_model_len=max_model_len, block_size=block, kv_transfer=True)
    decode = _engine("decode", row["decode_topology"], int(row["mtp_tokens"]),
                     int(row.get("curve_decode_concurrency_max") or row["decode_concurrency"]), s,
                     max_model_len=max_model_len, block_size=block, kv_transfer=True)
    gpus = plan["gpus"]
    gpn = int(gpus["prefill"]["gpus_per_node"])
    per_p, per_d = prefill.topology.gpus, decode.topology.gpus
    x, y = int(row["n_prefill_workers"]), int(row["n_decode_workers"])
    prefill_nodes, decode_nodes = _nodes(x * per_p, y * per_d, per_p, per_d, gpn)
    body = _base(f"pdtune-{_slug(plan['model']['name'])}-{_slug(row['deployment'])}", plan["model"], path)
    body["resources"] = {
        "gpu_type": gpus["prefill"]["name"],
        "gpus_per_node": gpn,
        "prefill_nodes": prefill_nodes,
        "decode_nodes": decode_nodes,
        "prefill_workers": x,
        "decode_workers": y,
        "gpus_per_prefill": per_p,
        "gpus_per_decode": per_d,
    }
    body["frontend"] = {"type": "dynamo", "enable_multiple_frontends": False}
    body["backend"] = {"type": "vllm", "connector": None,
                       "vllm_config": {"prefill": prefill.vllm_config(), "decode": decode.vllm_config()}}
    curve = row.get("curve_concurrencies") or [row["concurrency"]]
    body["benchmark"] = _benchmark(s["isl"], s["osl"], curve)
    header = _provenance(plan, f"Disaggregated deployment: plan row {row['row']}, {row['deployment']} on "
                               f"{row['gpus_total']} GPUs.")
    header += [f"Predicted at concurrency {row['concurrency']}: {row['tps_per_gpu']:,.0f} total tokens/s per GPU, "
               f"{row['tps_per_user']:.1f} tokens/s per user, TTFT {row['ttft_ms_p50']:,.0f} ms "
               f"(KV transfer {row['kv_transfer_ms']:.2f} ms over {row['kv_link']})."]
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
    for role, flags in Recipe("", body).flags().items():
        _checked(flags, serve=False, where=f"{row['deployment']} {role}")
    return Recipe(f"deploy-row{row['row']}-{_slug(row['deployment'])}.yaml", body, tuple(header))


def measurement_recipe(plan: dict[str, Any], role: str, topology: str, mtp: int, concurrencies: Sequence[int], *,
                       model_path: str | None = None) -> Recipe:
    """An aggregated srt-slurm recipe that sweeps one engine prefill-only or decode-only (the article's
    isolation runs)."""
    s = plan["settings"]
    gpu = plan["gpus"]["prefill" if role == "prefill" else "decode"]
    path = model_path or plan["model"]["name"]
    isl, osl = (s["isl"], PREFILL_ONLY_OSL) if role == "prefill" else (DECODE_ONLY_ISL, s["osl"])
    top = max(concurrencies) if concurrencies else 1
    # Sized for the plan's workload, so that its KV room is the one the plan checks.
    engine = _engine(role, topology, mtp, top, s, max_model_len=s["isl"] + s["osl"] + MODEL_LEN_HEADROOM,
                     block_size=None, kv_transfer=False)
    label = topology + (f"+MTP{mtp}" if mtp else "")
    body = _base(f"pdtune-{_slug(plan['model']['name'])}-{role}-only-{_slug(label)}", plan["model"], path)
    gpn = int(gpu["gpus_per_node"])
    body["resources"] = {"gpu_type": gpu["name"], "gpus_per_node": gpn,
                         "agg_nodes": math.ceil(engine.topology.gpus / gpn), "agg_workers": 1,
                         "gpus_per_agg": engine.topology.gpus}
    body["frontend"] = {"type": "dynamo", "enable_multiple_frontends": False}
    body["backend"] = {"type": "vllm", "connector": None, "vllm_config": {"aggregated": engine.vllm_config()}}
    body["benchmark"] = _benchmark(isl, osl, concurrencies)
    what = ("Prefill-only sweep (ISL/OSL {}/{}): read back with pdtune plan --prefill-results".format(isl, osl)
            if role == "prefill" else
            "Decode-only sweep (ISL/OSL {}/{}): read back with pdtune plan --decode-results; the plan drops "
            "points beyond the engine's KV room at the real ISL + OSL".format(isl, osl))
    header = _provenance(plan, f"{label} on {engine.topology.gpus} {gpu['name']} GPUs. {what}.")
    for flags in Recipe("", body).flags().values():
        _checked(flags, serve=False, where=f"{label} {role}-only")
    return Recipe(f"measure-{role}-{_slug(label)}.yaml", body, tuple(header))


def serve_script(plan: dict[str, Any], row: dict[str, Any], *, model_path: str | None = None) -> str:
    """The deployment as ``vllm serve`` commands, one per role, with what each engine needs around it."""
    recipe = deployment_recipe(plan, row, model_path=model_path)
    path = model_path or plan["model"]["name"]
    lines = ["#!/usr/bin/env bash",
             f"# {row['deployment']}: the engines of plan row {row['row']} as `vllm serve` commands (vLLM "
             f"{VLLM_VERSION}).",
             "# Start one per worker; a router (Dynamo's frontend, or vLLM's disaggregated proxy) sends each",
             "# request to a prefill engine, then to a decode engine, which pulls the KV cache over NIXL.",
             "set -euo pipefail", ""]
    res = recipe.body["resources"]
    for port, role in ((8100, "prefill"), (8200, "decode")):
        engine = recipe.body["backend"]["vllm_config"][role]
        workers = res[f"{role}_workers"]
        gpus = res[f"gpus_per_{role}"]
        cmd = serve_command(path, engine, port)
        _checked([c for c in cmd if c.startswith("-")], serve=True, where=f"{row['deployment']} {role} serve")
        lines.append(f"# {role}: {workers} worker(s) of {gpus} GPU(s) each; this is one of them.")
        dp = int(engine.get("data-parallel-size", 1))
        if dp > 1 and gpus > res["gpus_per_node"]:
            lines.append(f"# A DP engine over {math.ceil(gpus / res['gpus_per_node'])} nodes: add "
                         "--data-parallel-size-local, --data-parallel-address and --data-parallel-rpc-port on "
                         "every node, and --headless --data-parallel-start-rank on the others.")
        lines.append(shlex.join(cmd))
        lines.append("")
    return "\n".join(lines)


def row_recipes(plan: dict[str, Any], row: dict[str, Any], *, model_path: str | None = None) -> list[Recipe]:
    """The deployment of one row and the two isolated sweeps behind it."""
    out = [deployment_recipe(plan, row, model_path=model_path)]
    for role, topo, mtp in (("prefill", row["prefill_topology"], 0),
                            ("decode", row["decode_topology"], int(row["mtp_tokens"]))):
        out.append(measurement_recipe(plan, role, topo, mtp, _sweep_concurrencies(plan, role, topo, mtp),
                                      model_path=model_path))
    return out


def candidate_recipes(plan: dict[str, Any], *, model_path: str | None = None) -> list[Recipe]:
    """Isolated-sweep recipes of every prefill and decode layout the plan's table uses."""
    seen: set[tuple[str, str, int]] = set()
    out = []
    for row in plan["rows"]:
        for role, topo, mtp in (("prefill", row["prefill_topology"], 0),
                                ("decode", row["decode_topology"], int(row["mtp_tokens"]))):
            if (role, topo, mtp) in seen:
                continue
            seen.add((role, topo, mtp))
            out.append(measurement_recipe(plan, role, topo, mtp, _sweep_concurrencies(plan, role, topo, mtp),
                                          model_path=model_path))
    return out


def _sweep_concurrencies(plan: dict[str, Any], role: str, topology: str, mtp: int) -> list[int]:
    for c in plan.get("candidates", []):
        if c["role"] == role and c["topology"] == topology and int(c["mtp_tokens"]) == mtp:
            return list(c.get("sweep_concurrencies") or [1])
    return [1]


def write_recipes(plan: dict[str, Any], rows: Sequence[int], out: str | os.PathLike[str], *,
                  measurements: bool = False, model_path: str | None = None) -> list[Path]:
    """Write the recipes (and serve scripts) of ``rows`` into ``out``; all of them or none.

    ``measurements`` adds the isolated-sweep recipes of every layout in the plan's table.
    """
    by_row = {int(r["row"]): r for r in plan["rows"]}
    files: dict[str, str] = {}
    for k in rows:
        if k not in by_row:
            raise InputError("--row", "row", f"no row {k}; the plan has rows 0 to {len(by_row) - 1}")
        row = by_row[k]
        for recipe in row_recipes(plan, row, model_path=model_path):
            files[recipe.file_name] = recipe.text()
        files[f"serve-row{k}-{_slug(row['deployment'])}.sh"] = serve_script(plan, row, model_path=model_path)
    if measurements:
        for recipe in candidate_recipes(plan, model_path=model_path):
            files[recipe.file_name] = recipe.text()
    if not files:
        raise InputError("--row", "row", "nothing to write: give --row K or --measurements")
    return _write_all(Path(out), files)


def _write_all(target: Path, files: dict[str, str]) -> list[Path]:
    real = output_folder(target)
    if real.parent.is_dir():
        remove_stale(real.parent, f".{real.name}.new-")
    staging = staging_dir(target)
    try:
        for name, text in files.items():
            write_text(staging / name, text)
            if name.endswith(".sh"):
                (staging / name).chmod(0o755)
        for name in files:  # a folder or a FIFO where a recipe goes is refused before anything moves
            existing = real / name
            if existing.exists() and not existing.is_file():
                raise InputError(existing, "--out", "is in the way: not a regular file")
        real.mkdir(exist_ok=True)
        written = []
        for name in files:
            os.replace(staging / name, real / name)
            written.append(target / name)
    except OSError as exc:
        raise InputError(target, "--out", f"cannot write there: {exc.strerror}") from None
    finally:
        release(staging)
    return written
