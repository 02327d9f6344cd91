"""Golden KV-cache plans from vLLM 0.33.0's own planner, for every bundled model at TP 1/2/4/8.

    .venv/bin/python scripts/golden_plans.py specs --out _build/golden/specs.json
    $VLLM_REF/bin/python scripts/golden_plans.py plan --specs _build/golden/specs.json --out data/vllm/golden-plans.json

(``make golden-plans`` runs both; ``VLLM_REF`` is a venv with ``pip install vllm==0.33.0``, never the project's.)

``specs`` runs in the project's venv: for each ``data/models/*`` config and TP 1, 2, 4, 8 it asks pdtune for every
layer's KV cache spec (``StatePlan.layer_specs``: the per-layer specs before grouping, as a model's layers hand them
to ``get_kv_cache_groups``) and writes them with the settings they were made for. A layout pdtune refuses (heads
that do not divide) is written with pdtune's reason and no layers.

``plan`` runs in vLLM's venv and imports nothing of pdtune: for each case it builds a ``VllmConfig`` from a folder
holding the model's real ``config.json`` (``skip_tokenizer_init=True``, ``DeviceConfig(device="cpu")``,
``cache_config.kv_cache_layout`` set), turns each layer into vLLM's own spec class (``FullAttentionSpec``,
``SlidingWindowSpec``, ``ChunkedLocalAttentionSpec``, ``MLAAttentionSpec``, ``MambaSpec``), and passes them to
``vllm/v1/core/kv_cache_planning.py``'s ``get_kv_cache_groups`` and ``get_kv_cache_configs`` with a fixed
40 GiB of KV memory. It records the groups (spec type, layers, block size), each group's blocks per request
(``cdiv(max_memory_usage_bytes, page_size_bytes)``, what ``get_max_concurrency_for_kv_cache_config`` sums),
``num_blocks`` and the maximum concurrency.

The CPU platform answers two questions differently from CUDA, and the CUDA answers are passed deliberately:

* ``CpuPlatform.support_hybrid_kv_cache()`` is False (``VllmConfig.__post_init__`` would turn the hybrid
  KV-cache manager off for every model): it is patched to the CUDA platform's True *before* the config is built,
  so vLLM's own rule (chunked local attention, ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE``) decides.
* async scheduling (two batches in flight: ``max_in_flight_tokens``) is set on, as the CUDA default with the
  ``uni``/``mp`` executors; the CPU executor's answer is not used.

The hybrid block alignment (``Platform._align_hybrid_block_size``, the CUDA backends' kernel blocks) is not run:
the attention block sizes are pdtune's, so these cases check the grouping, page unification, blocks per request
and ``num_blocks``, not the alignment. No spec is vLLM's own (vLLM builds them from the model's layer objects,
which need the weights' shapes on a device); all are pdtune's, converted field by field.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TPS = (1, 2, 4, 8)
KV_MEMORY = 40 * 1024**3
MAX_MODEL_LEN = 32_768
MAX_NUM_BATCHED_TOKENS = 8192
VLLM = "0.33"


# ------------------------------------------------------------------------------------------ pdtune's side


def case_settings(model: str) -> dict[str, object]:
    """The settings of one model's cases: 32,768 tokens (or the config's own limit if lower), no prefix
    caching (PD deployments), bf16/auto KV, 8192 tokens per step, vLLM 0.33's defaults otherwise."""
    from pdtune.model import load_model

    spec = load_model(model)
    length = MAX_MODEL_LEN
    if spec.max_length is not None and not spec.max_length.assumed:
        length = min(length, spec.max_length.tokens)
    return {"model": model, "max_model_len": length, "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS,
            "prefix_caching": False, "kv_cache_dtype": "auto", "vllm": VLLM}


def pdtune_plan(settings: dict[str, object], tp: int):  # noqa: ANN201 - a StatePlan
    """``pdtune state MODEL --tp N --max-model-len L --no-prefix-caching --max-num-batched-tokens 8192``."""
    from pdtune.model import load_model
    from pdtune.state import plan_state

    return plan_state(load_model(str(settings["model"])), max_model_len=int(settings["max_model_len"]),  # type: ignore[call-overload]
                      tp=tp, vllm=str(settings["vllm"]), prefix_caching=bool(settings["prefix_caching"]),
                      max_num_batched_tokens=int(settings["max_num_batched_tokens"]),  # type: ignore[call-overload]
                      kv_cache_dtype=str(settings["kv_cache_dtype"]))


def _layer(slot) -> dict[str, object]:  # noqa: ANN001 - a pdtune.state.layers.Slot
    from pdtune.state.specs import AttentionPage, MLAPage, RecurrentPage

    p = slot.page
    out: dict[str, object] = {"name": f"layer.{slot.index}" + (".draft" if slot.draft else "")}
    if isinstance(p, AttentionPage):
        plain = p.slot_bytes is None and p.head_slots == 1
        out.update(type="sliding" if p.sliding_window else "chunked" if p.chunk_size else "full",
                   block_size=p.block_size, num_kv_heads=p.num_kv_heads, head_size=p.head_size,
                   head_size_v=p.head_size_v or p.head_size, dtype_bytes=p.dtype_bytes, plain=plain,
                   sliding_window=p.sliding_window, attention_chunk_size=p.chunk_size,
                   page_size_padded=p.page_size_padded, page_size_bytes=p.page_size_bytes)
    elif isinstance(p, MLAPage):
        out.update(type="mla", block_size=p.block_size, head_size=p.latent_dim, dtype_bytes=p.dtype_bytes,
                   plain=p.latent_bytes_per_token is None and not p.fp8_ds_mla,
                   indexer_bytes_per_token=p.indexer_bytes_per_token, page_size_bytes=p.page_size_bytes)
    elif isinstance(p, RecurrentPage):
        out.update(type="mamba", kind=str(p.kind), block_size=p.block_size, shapes=[list(s) for s in p.shapes],
                   dtype_bytes=list(p.dtypes), page_size_padded=p.page_size_padded,
                   num_speculative_blocks=p.spec_blocks, num_prefill_checkpoint_blocks=p.checkpoint_blocks,
                   page_size_bytes=p.page_size_bytes)
    return out


def write_specs(out: Path) -> None:
    from pdtune.errors import InputError
    from pdtune.paths import models_dir

    cases = []
    for folder in sorted(p for p in models_dir().iterdir() if (p / "config.json").is_file()):
        settings = case_settings(folder.name)
        for tp in TPS:
            case: dict[str, object] = {**settings, "tp": tp, "config": str(folder / "config.json")}
            try:
                plan = pdtune_plan(settings, tp)
            except InputError as exc:
                case["pdtune_refuses"] = f"{exc.field}: {exc.message}"
                cases.append(case)
                continue
            case.update(hybrid_kv_cache_manager=plan.hybrid_kv_cache_manager, async_scheduling=plan.async_scheduling,
                        in_flight_tokens=plan.request.in_flight, block_tokens=plan.block_tokens,
                        layers=[_layer(s) for s in plan.layer_specs])
            cases.append(case)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"vllm": VLLM, "kv_memory_bytes": KV_MEMORY, "cases": cases}, indent=1) + "\n")
    print(f"{len(cases)} cases -> {out}", file=sys.stderr)


# ------------------------------------------------------------------------------------------ vLLM's side


def _torch_dtype(nbytes: int):  # noqa: ANN202
    import torch

    return {1: torch.float8_e4m3fn, 2: torch.bfloat16, 4: torch.float32}[nbytes]


def vllm_spec(layer: dict, torch_dtype_of_model):  # noqa: ANN001, ANN201 - vLLM's KVCacheSpec
    import torch
    from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
    from vllm.v1.kv_cache_interface import (
        ChunkedLocalAttentionSpec,
        FullAttentionSpec,
        MambaSpec,
        MLAAttentionSpec,
        SlidingWindowSpec,
    )

    kind = layer["type"]
    if kind in ("full", "sliding", "chunked"):
        if not layer["plain"]:
            raise NotImplementedError("a packed KV layout (quantized slots) is not converted")
        common = dict(block_size=layer["block_size"], num_kv_heads=layer["num_kv_heads"],
                      head_size=layer["head_size"], head_size_v=layer["head_size_v"],
                      dtype=_torch_dtype(layer["dtype_bytes"]), page_size_padded=layer["page_size_padded"])
        if kind == "sliding":
            return SlidingWindowSpec(**common, sliding_window=layer["sliding_window"])
        if kind == "chunked":
            return ChunkedLocalAttentionSpec(**common, attention_chunk_size=layer["attention_chunk_size"])
        return FullAttentionSpec(**common)
    if kind == "mla":
        if not layer["plain"]:
            raise NotImplementedError("a packed MLA layout is not converted")
        latent = MLAAttentionSpec(block_size=layer["block_size"], num_kv_heads=1, max_tp_shards=1,
                                  head_size=layer["head_size"], dtype=_torch_dtype(layer["dtype_bytes"]),
                                  cache_dtype_str="auto", is_index_group_leader=bool(layer["indexer_bytes_per_token"]))
        return latent
    if kind == "mamba":
        backend = {"gdn": "GDN_ATTN", "kda": "GDN_ATTN", "mamba2": "MAMBA2", "mamba1": "MAMBA1",
                   "short_conv": "SHORT_CONV", "linear": "LINEAR"}.get(layer["kind"], "MAMBA2")
        return MambaSpec(block_size=layer["block_size"], shapes=tuple(tuple(s) for s in layer["shapes"]),
                         dtypes=tuple(_torch_dtype(b) for b in layer["dtype_bytes"]),
                         page_size_padded=layer["page_size_padded"],
                         mamba_type=MambaAttentionBackendEnum[backend], mamba_cache_mode="none",
                         num_speculative_blocks=layer["num_speculative_blocks"],
                         num_prefill_checkpoint_blocks=layer["num_prefill_checkpoint_blocks"])
    raise NotImplementedError(kind)


def _indexer_spec(layer: dict):  # noqa: ANN001, ANN202
    """DeepSeek-V3.2's indexer key cache: its own layer (``DeepseekV32IndexerCache.get_kv_cache_spec``)."""
    import torch
    from vllm.v1.kv_cache_interface import MLAAttentionSpec, SparseCacheRole

    return MLAAttentionSpec(block_size=layer["block_size"], num_kv_heads=1, max_tp_shards=1,
                            head_size=layer["indexer_bytes_per_token"], dtype=torch.uint8,
                            cache_role=SparseCacheRole.INDEXER)


def vllm_plan(case: dict, kv_memory: int) -> dict[str, object]:
    import torch
    from vllm.config import (
        CacheConfig,
        DeviceConfig,
        ModelConfig,
        ParallelConfig,
        SchedulerConfig,
        VllmConfig,
    )
    from vllm.utils.math_utils import cdiv
    from vllm.v1.core import kv_cache_planning as planning
    from vllm.v1.core.kv_cache_utils import get_max_concurrency_for_kv_cache_config

    length = case["max_model_len"]
    model = _model_config(case["config"], length)
    cache = CacheConfig(block_size=case["block_tokens"], gpu_memory_utilization=0.9, cache_dtype="auto",
                        enable_prefix_caching=case["prefix_caching"])
    cache.kv_cache_layout = "NHD"
    scheduler = SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=case["max_num_batched_tokens"],
                                max_model_len=length, enable_chunked_prefill=True, is_encoder_decoder=False,
                                async_scheduling=True)
    vc = VllmConfig(model_config=model, cache_config=cache, scheduler_config=scheduler,
                    parallel_config=ParallelConfig(tensor_parallel_size=case["tp"]),
                    device_config=DeviceConfig(device="cpu"))
    vc.scheduler_config.async_scheduling = True  # the CUDA default (uni/mp executor); see the docstring
    specs = {}
    for layer in case["layers"]:
        specs[layer["name"]] = vllm_spec(layer, torch.bfloat16)
        if layer["type"] == "mla" and layer["indexer_bytes_per_token"]:
            specs[layer["name"] + ".indexer"] = _indexer_spec(layer)
    groups = planning.get_kv_cache_groups(vc, dict(specs))
    config = planning.get_kv_cache_configs(vc, [dict(specs)], [kv_memory], groups)[0]
    out_groups = []
    for g in config.kv_cache_groups:
        spec = g.kv_cache_spec
        out_groups.append({
            "spec": type(spec).__name__,
            "layers": len(g.layer_names),
            "block_size": spec.block_size,
            "page_size_bytes": spec.page_size_bytes,
            "blocks_per_request": cdiv(spec.max_memory_usage_bytes(vc), spec.page_size_bytes),
        })
    return {
        "hybrid_kv_cache_manager": not vc.scheduler_config.disable_hybrid_kv_cache_manager,
        "max_in_flight_tokens": vc.max_in_flight_tokens,
        "groups": out_groups,
        "blocks_per_request": sum(g["blocks_per_request"] for g in out_groups),
        "num_blocks": config.num_blocks,
        "max_concurrency": get_max_concurrency_for_kv_cache_config(vc, config),
    }


_MODELS: dict[tuple[str, int], object] = {}
_WORK = tempfile.TemporaryDirectory(prefix="golden-plans-")  # one folder per model, holding its config.json


def _model_config(config: str, length: int):  # noqa: ANN202 - vLLM's ModelConfig
    """One ``ModelConfig`` per model (its architecture inspection is the slow part), copied for each TP."""
    import copy

    from vllm.config import ModelConfig

    key = (config, length)
    if key not in _MODELS:
        folder = Path(_WORK.name, Path(config).parent.name)
        folder.mkdir(exist_ok=True)
        (folder / "config.json").write_text(Path(config).read_text())
        _MODELS[key] = ModelConfig(model=str(folder), skip_tokenizer_init=True, dtype="bfloat16", seed=0,
                                   max_model_len=length)
    return copy.deepcopy(_MODELS[key])


def patch_cuda_answers() -> None:
    """The CUDA platform's answers where the CPU platform's differ (the docstring says which and why)."""
    from vllm.platforms import current_platform

    type(current_platform).support_hybrid_kv_cache = classmethod(lambda cls: True)  # type: ignore[method-assign]


def write_plans(specs_file: Path, out: Path) -> None:
    import vllm

    patch_cuda_answers()
    data = json.loads(specs_file.read_text())
    cases = []
    for case in data["cases"]:
        record = {k: case[k] for k in ("model", "tp", "max_model_len", "max_num_batched_tokens", "prefix_caching",
                                       "kv_cache_dtype")}
        if "pdtune_refuses" in case:
            record["pdtune_refuses"] = case["pdtune_refuses"]
        else:
            try:
                record["vllm"] = vllm_plan(case, data["kv_memory_bytes"])
            except Exception as exc:  # recorded, never dropped: the test lists every case vLLM could not plan
                record["vllm_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
        cases.append(record)
        print(f"{case['model']} TP{case['tp']}: {record.get('vllm', record.get('vllm_error', record.get('pdtune_refuses')))}",
              file=sys.stderr, flush=True)
        _write(out, vllm.__version__, data["kv_memory_bytes"], cases)


def _write(out: Path, version: str, memory: int, cases: list[dict]) -> None:
    out.write_text(json.dumps({
        "vllm_version": version,
        "kv_memory_bytes": memory,
        "platform": "CPU, with the CUDA platform's support_hybrid_kv_cache() = True and async scheduling on",
        "layer_specs": "pdtune's (StatePlan.layer_specs), converted to vLLM's spec classes",
        "cases": cases,
    }, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("specs")
    s.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("plan")
    p.add_argument("--specs", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.cmd == "specs":
        write_specs(args.out)
    else:
        write_plans(args.specs, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
