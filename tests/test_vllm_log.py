"""vLLM start-up logs (0.11 to 0.33): per-worker figures, the waterfall, the config lines, the cross-check."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pdtune.cli import main
from pdtune.errors import InputError
from pdtune.units import GiB, from_gib
from pdtune.vllm_log import CudaGraphGroup, cross_check, parse_log, parse_log_text

LOGS = Path(__file__).parent / "fixtures" / "logs"
QWEN3_32B = str(LOGS / "models" / "qwen3-32b")
QWEN3_NEXT = str(LOGS / "models" / "qwen3-next-80b-a3b-fp8")
V011_TP2 = LOGS / "v0.11_tp2_qwen3-32b.log"
V011_DP2 = LOGS / "v0.11_dp2_qwen3-next-debug.log"
V020_DP2 = LOGS / "v0.20_dp2_qwen3-32b.log"
V026_TP2 = LOGS / "v0.26_tp2_qwen3-32b.log"
V033_TP2 = LOGS / "v0.33_tp2_qwen3-32b_fp8kv.log"
V033_DP2 = LOGS / "v0.33_dp2_qwen3-32b.log"
H100 = from_gib(79.19)
H200 = from_gib(139.80)

HEAD = "INFO 10-14 09:12:41 [gpu_worker.py:298] "


def line(msg: str, proc: str | None = "EngineCore_DP0", pid: int = 11, level: str = "INFO") -> str:
    prefix = f"({proc} pid={pid}) " if proc else ""
    return f"{prefix}{level} 10-14 09:12:41 [somefile.py:123] {msg}"


# ------------------------------------------------------------------------------------ 0.11


def test_v011_tp2_keeps_ranks_apart() -> None:
    log = parse_log(V011_TP2)
    assert log.names == ["APIServer", "EngineCore_DP0", "Worker_TP0", "Worker_TP1"]
    tp0, tp1 = log.worker("Worker_TP0"), log.worker("Worker_TP1")
    assert tp0.available_kv_cache == from_gib(36.08) and tp1.available_kv_cache == from_gib(36.11)
    assert tp0.weights == tp1.weights == from_gib(30.5855)
    assert tp0.model_load_seconds == pytest.approx(26.113204) and tp1.model_load_seconds == pytest.approx(26.403204)
    assert (tp0.graph_capture_seconds, tp0.graph_capture_memory) == (11.0, from_gib(0.88))
    engine = log.worker("EngineCore_DP0")
    # 0.11 prints one size per rank, from that rank's memory, before shrinking both to the smaller
    assert [(r.tokens, r.max_concurrency, r.max_model_len) for r in engine.kv_cache_reports] == [
        (295_552, 9.02, 32_768), (295_808, 9.03, 32_768)]
    assert (engine.kv_cache_tokens, engine.max_concurrency) == (295_552, 9.02)
    assert engine.init_seconds == pytest.approx(71.42)
    assert [w.name for w in log.workers_of("EngineCore_DP0")] == ["Worker_TP0", "Worker_TP1"]
    assert log.engine_of("Worker_TP1") is engine


def test_v011_config_banner_and_args() -> None:
    c = parse_log(V011_TP2).config
    assert (c.version, c.model, c.tensor_parallel_size, c.data_parallel_size) == ("0.11.0", "Qwen/Qwen3-32B", 2, 1)
    assert (c.max_model_len, c.kv_cache_dtype, c.dtype, c.num_speculative_tokens) == (32768, "auto", "bfloat16", 0)
    assert c.enable_prefix_caching is True and c.gpu_memory_utilization is None and c.args_logged


def test_v011_waterfall_needs_the_total_and_then_lumps_the_overhead() -> None:
    log = parse_log(V011_TP2)
    with pytest.raises(InputError) as err:
        log.waterfall("Worker_TP0")
    assert err.value.field == "total memory"
    wf = log.waterfall("Worker_TP0", total=H100)
    tp0 = log.worker("Worker_TP0")
    assert wf.gpu_memory_utilization == 0.9  # not among the non-default args: vLLM's default
    assert wf.requested == int(H100 * 0.9)  # 0.11 truncates
    assert wf.non_torch == 0 and wf.cudagraph_estimate == 0
    assert wf.activation_peak == wf.requested - tp0.weights - tp0.available_kv_cache
    assert wf.activation_peak == pytest.approx(4.61 * GiB, abs=0.01 * GiB)
    assert wf.kv_cache() == tp0.available_kv_cache
    assert "not split" in wf.source and "default 0.9" in wf.source


def test_v011_dp2_hybrid_debug_log() -> None:
    log = parse_log(V011_DP2)
    assert log.names == ["APIServer", "EngineCore_DP0", "EngineCore_DP1"]
    api = log.worker("APIServer")
    assert (api.attention_block_size, api.mamba_padding_pct) == (544, 1.49)
    c = log.config
    assert (c.model, c.data_parallel_size, c.max_model_len, c.quantization) == (
        "Qwen/Qwen3-Next-80B-A3B-Instruct-FP8", 2, 262144, "fp8")
    assert c.enable_prefix_caching is False
    for name in ("EngineCore_DP0", "EngineCore_DP1"):
        e = log.worker(name)
        assert e.is_engine and log.workers_of(name) == [e]  # TP=1: the worker runs inside the engine core
        assert (e.kv_cache_tokens, e.max_concurrency, e.max_concurrency_tokens) == (491_232, 7.45, 262_144)
        assert e.available_kv_cache == from_gib(44.98)
        assert e.total_memory == from_gib(139.80084228515625)  # the DEBUG line's unrounded GiB
        assert e.profile_torch_peak_increase == from_gib(5.74)
    dp0, dp1 = log.worker("EngineCore_DP0"), log.worker("EngineCore_DP1")
    assert dp0.non_torch != dp1.non_torch  # each engine keeps its own numbers
    wf = log.waterfall("EngineCore_DP0")
    assert wf.activation_peak == dp0.peak_activation and wf.non_torch == dp0.non_torch
    assert wf.kv_cache() == pytest.approx(dp0.available_kv_cache, abs=0.005 * GiB)
    assert "not split" not in wf.source


# ------------------------------------------------------------------------------------ 0.20 / 0.26


def test_v020_dp2_graphs_estimate_and_two_line_sizes() -> None:
    log = parse_log(V020_DP2)
    assert log.names == ["APIServer", "EngineCore_DP0", "EngineCore_DP1"]
    dp0, dp1 = log.worker("EngineCore_DP0"), log.worker("EngineCore_DP1")
    assert dp0.cudagraph_groups == (CudaGraphGroup("PIECEWISE", 51, 512), CudaGraphGroup("FULL", 35, 256))
    assert dp0.cudagraph_estimate == from_gib(1.12) and dp0.cudagraph_estimate_applied is True
    assert dp0.gpu_memory_utilization == pytest.approx(0.92)
    assert (dp0.kv_cache_tokens, dp1.kv_cache_tokens) == (253_008, 252_960)
    assert dp0.max_concurrency == dp1.max_concurrency == 7.72
    assert (dp0.cudagraph_pool_actual, dp0.cudagraph_pool_estimated, dp0.cudagraph_pool_difference_pct) == (
        from_gib(1.06), from_gib(1.12), 5.8)
    assert (dp1.graph_capture_memory, dp0.init_seconds, dp0.compilation_seconds) == (from_gib(1.07), 84.12, 28.66)
    assert (log.config.version, log.config.gpu_memory_utilization, log.config.enable_prefix_caching) == (
        "0.20.0", 0.92, False)
    wf = log.waterfall("EngineCore_DP1", total=H200)
    assert wf.cudagraph_estimate == from_gib(1.12) and wf.kv_cache() == dp1.available_kv_cache
    assert wf.requested == math.ceil(H200 * 0.92)  # 0.20 rounds up


def test_v026_info_line_splits_the_overhead() -> None:
    log = parse_log(V026_TP2)
    assert log.names == ["APIServer", "EngineCore", "Worker_TP0", "Worker_TP1"]
    tp0 = log.worker("Worker_TP0")
    assert (tp0.total_memory, tp0.free_memory_at_start, tp0.requested_memory) == (
        from_gib(79.19), from_gib(78.62), from_gib(71.27))
    assert (tp0.peak_activation, tp0.non_torch, tp0.cudagraph_memory) == (from_gib(3.91), from_gib(0.6), from_gib(0.87))
    wf = log.waterfall("Worker_TP0")
    assert (wf.total, wf.weights, wf.activation_peak, wf.non_torch, wf.cudagraph_estimate) == (
        from_gib(79.19), from_gib(30.59), from_gib(3.91), from_gib(0.6), from_gib(0.92))
    # five parts each rounded to 0.01 GiB: the rebuilt KV cache is within their rounding of the logged one
    assert abs(wf.kv_cache() - tp0.available_kv_cache) <= 0.025 * GiB
    engine = log.worker("EngineCore")
    assert (engine.kv_cache_tokens, engine.max_concurrency_tokens) == (288_768, 40_960)
    assert log.engine_of("Worker_TP0") is engine


# ------------------------------------------------------------------------------------ 0.33


def test_v033_tp2_one_line_size_and_consumed_memory() -> None:
    log = parse_log(V033_TP2)
    assert log.config.version == "0.33.0" and log.config.model == "Qwen/Qwen3-32B"  # logo and banner agree
    assert log.config.kv_cache_dtype == "fp8" and log.config.gpu_memory_utilization == 0.92
    engine = log.worker("EngineCore")
    assert [(r.tokens, r.max_concurrency, r.max_model_len, r.device) for r in engine.kv_cache_reports] == [
        (601_936, 18.37, 32_768, "GPU")]
    tp1 = log.worker("Worker_TP1")
    assert (tp1.consumed, tp1.peak_activation, tp1.cudagraph_estimate) == (
        from_gib(31.17), from_gib(4.91), from_gib(0.9))
    wf = log.waterfall("Worker_TP1")
    assert wf.non_torch == tp1.consumed - tp1.weights  # consumed = weights + non-torch
    assert wf.activation_peak == tp1.peak_activation - tp1.cudagraph_estimate  # the logged peak includes it
    assert abs(wf.kv_cache() - tp1.available_kv_cache) <= 0.025 * GiB
    assert wf.version == "0.33"


def test_v033_dp2_interleaved_engines() -> None:
    log = parse_log(V033_DP2)
    assert [w.name for w in log.engines] == ["EngineCore_DP0", "EngineCore_DP1"]
    dp0, dp1 = log.engines
    assert dp0.kv_cache_tokens == dp1.kv_cache_tokens == 242_064
    assert (dp0.graph_capture_memory, dp1.graph_capture_memory) == (from_gib(1.04), from_gib(1.05))
    assert dp0.first_line < dp1.first_line
    assert log.config.block_size == 16 and log.config.max_model_len == 16384


# ------------------------------------------------------------------------------------ cross-check


@pytest.mark.parametrize(
    ("log_path", "model", "expected"),
    [
        (V011_TP2, QWEN3_32B, [("EngineCore_DP0", "Worker_TP0", 295_552, 9.02)]),
        (V011_DP2, QWEN3_NEXT, [("EngineCore_DP0", "EngineCore_DP0", 491_232, 7.45),
                                ("EngineCore_DP1", "EngineCore_DP1", 491_232, 7.45)]),
        (V020_DP2, QWEN3_32B, [("EngineCore_DP0", "EngineCore_DP0", 253_008, 7.72),
                               ("EngineCore_DP1", "EngineCore_DP1", 252_960, 7.72)]),
        (V026_TP2, QWEN3_32B, [("EngineCore", "Worker_TP0", 288_768, 7.05)]),
        (V033_TP2, QWEN3_32B, [("EngineCore", "Worker_TP0", 601_936, 18.37)]),
        (V033_DP2, QWEN3_32B, [("EngineCore_DP0", "EngineCore_DP0", 242_064, 14.77),
                               ("EngineCore_DP1", "EngineCore_DP1", 242_064, 14.77)]),
    ],
)
def test_state_module_predicts_the_logged_kv_cache(log_path: Path, model: str,
                                                   expected: list[tuple[str, str, int, float]]) -> None:
    checks = cross_check(parse_log(log_path), model)
    got = [(c.engine, c.worker, c.predicted_kv_cache_tokens, round(c.predicted_max_concurrency, 2)) for c in checks]
    assert got == expected
    assert all(c.tokens_difference == 0 for c in checks)
    assert all(c.logged_max_concurrency == round(c.predicted_max_concurrency, 2) for c in checks)


def test_cross_check_uses_the_logs_settings() -> None:
    (check,) = cross_check(parse_log(V033_TP2), QWEN3_32B)
    assert check.settings == {"tp": 2, "kv_cache_dtype": "fp8", "max_model_len": 32768, "num_speculative_tokens": 0,
                              "vllm": "0.33", "prefix_caching": False, "block_size": None}
    # fp8 halves the page: 1 MiB per 16-token block over 64 layers at TP=2
    assert check.num_blocks == check.available_kv_cache // (1 << 20)
    older = cross_check(parse_log(V033_TP2), QWEN3_32B, vllm="0.11")[0]
    assert older.settings["vllm"] == "0.11" and older.predicted_kv_cache_tokens == check.num_blocks * 16


# ------------------------------------------------------------------------------------ line forms


def test_kv_size_line_forms() -> None:
    text = "\n".join([
        line("GPU KV cache size: 1,234,560 tokens", "EngineCore_DP0"),
        line("Maximum concurrency for 1,048,576 tokens per request: 1.18x", "EngineCore_DP0"),
        line("KV cache size: 99,984 tokens", "EngineCore_DP1", pid=12),
        line("Maximum concurrency for 8,192 tokens per request: 12.21x", "EngineCore_DP1", pid=12),
        line("XPU KV cache size: 4,096 tokens, Maximum concurrency for 2,048 tokens per request: 2.00x", "EngineCore_DP2",
             pid=13),
        line("GPU + host KV cache size: 2,000,000 tokens, Maximum concurrency for 131,072 tokens per request: 15.26x",
             "EngineCore_DP3", pid=14),
    ])
    log = parse_log_text(text)
    reports = {w.name: w.kv_cache_reports[0] for w in log.engines}
    assert (reports["EngineCore_DP0"].tokens, reports["EngineCore_DP0"].max_model_len,
            reports["EngineCore_DP0"].max_concurrency) == (1_234_560, 1_048_576, 1.18)
    assert (reports["EngineCore_DP1"].tokens, reports["EngineCore_DP1"].device) == (99_984, None)
    assert (reports["EngineCore_DP2"].device, reports["EngineCore_DP2"].max_concurrency) == ("XPU", 2.0)
    assert (reports["EngineCore_DP3"].device, reports["EngineCore_DP3"].tokens) == ("GPU + host", 2_000_000)


def test_prefixes_colours_and_repeated_names() -> None:
    stamp = "INFO 10-14 09:12:00"
    kv = "[kv_cache_utils.py:1147] GPU KV cache size: {} tokens, Maximum concurrency for 10 tokens per request: {}x"
    text = "\n".join([
        f"\x1b[0;36m(Worker_TP1 pid=4103)\x1b[0m {stamp} [gpu_worker.py:298] Available KV cache memory: 36.11 GiB",
        f"(RayWorkerWrapper pid=771, ip=10.0.0.5) {stamp} [gpu_worker.py:298] Available KV cache memory: 12.5 GiB",
        f"node-3: (EngineCore pid=1) {stamp} " + kv.format(100, "10.00") + "\r",
        f"(EngineCore pid=2) {stamp} " + kv.format(200, "20.00"),
        HEAD + "Available KV cache memory: 7.25 GiB",
    ])
    log = parse_log_text(text)
    assert log.names == ["Worker_TP1", "RayWorkerWrapper", "EngineCore pid=1", "EngineCore pid=2", "main"]
    assert log.worker("Worker_TP1").available_kv_cache == from_gib(36.11)
    assert log.worker("EngineCore pid=2").kv_cache_tokens == 200
    assert log.worker("main").available_kv_cache == from_gib(7.25)


def test_banner_and_args_with_speculation() -> None:
    banner = ("Initializing a V1 LLM engine (v0.26.1rc1.dev1177+ga9a17e709) with config: model='/models/q', "
              "speculative_config=SpeculativeConfig(method='mtp', model='/models/q', num_spec_tokens=3), "
              "tokenizer='/models/q', dtype=torch.bfloat16, max_seq_len=9216, tensor_parallel_size=4, "
              "pipeline_parallel_size=1, data_parallel_size=4, quantization=modelopt_fp4, kv_cache_dtype=fp8_e4m3, "
              "enable_prefix_caching=False, compilation_config={'cudagraph_mode': <CUDAGraphMode.FULL_DECODE_ONLY: 2>}")
    args = ("non-default args: {'model': '/models/q', 'tensor_parallel_size': 4, 'data_parallel_size': 4, "
            "'gpu_memory_utilization': 0.92, 'block_size': 64, 'speculative_config': "
            "'{\"method\": \"mtp\", \"num_speculative_tokens\": 3}', 'compilation_config': CompilationConfig(mode=3)}")
    log = parse_log_text(line(banner) + "\n" + line(args, "APIServer", 1) + "\n" + line(
        "Available KV cache memory: 133.74 GiB"))
    c = log.config
    assert (c.version, c.model, c.max_model_len, c.tensor_parallel_size, c.data_parallel_size) == (
        "0.26.1rc1.dev1177+ga9a17e709", "/models/q", 9216, 4, 4)
    assert (c.speculative_method, c.num_speculative_tokens, c.kv_cache_dtype, c.quantization) == (
        "mtp", 3, "fp8_e4m3", "modelopt_fp4")
    assert (c.gpu_memory_utilization, c.block_size, c.enable_prefix_caching) == (0.92, 64, False)
    dict_form = parse_log_text(line(
        "non-default args: {'model_tag': 'm', 'speculative_config': {'method': 'qwen3_next_mtp', "
        "'num_speculative_tokens': 2}, 'enable_prefix_caching': True}", "APIServer") + "\n" + line(
        "Available KV cache memory: 1.0 GiB"))
    assert (dict_form.config.model, dict_form.config.num_speculative_tokens) == ("m", 2)
    assert dict_form.config.enable_prefix_caching is True


def test_disabled_graph_estimate_is_not_subtracted() -> None:
    text = "\n".join([
        line("Model loading took 10.0 GiB memory and 3.000000 seconds"),
        line("Estimated CUDA graph memory: 2.00 GiB total"),
        line("Available KV cache memory: 50.0 GiB"),
        line("CUDA graph memory profiling is disabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). Without it, CUDA "
             "graph memory is not accounted for during KV cache allocation, which may require lowering "
             "--gpu-memory-utilization to avoid OOM. Consider re-enabling it (the default as of v0.21.0) and "
             "increasing --gpu-memory-utilization from 0.8000 to 0.8250.", level="WARNING"),
    ])
    log = parse_log_text(text)
    w = log.worker("EngineCore_DP0")
    assert w.cudagraph_estimate_applied is False and w.gpu_memory_utilization == 0.8
    wf = log.waterfall("EngineCore_DP0", total=from_gib(80))
    assert wf.cudagraph_estimate == 0 and wf.kv_cache() == from_gib(50.0)


def test_unknown_worker_and_missing_weights() -> None:
    log = parse_log(V026_TP2)
    with pytest.raises(InputError, match="no process 'Worker_TP7'"):
        log.waterfall("Worker_TP7")
    bare = parse_log_text(line("Available KV cache memory: 5.0 GiB"))
    with pytest.raises(InputError) as err:
        bare.waterfall("EngineCore_DP0", total=from_gib(80), gpu_memory_utilization=0.9)
    assert err.value.field == "Model loading took"
    with pytest.raises(InputError) as err:
        bare.waterfall("EngineCore_DP0", total=from_gib(80))
    assert err.value.field == "gpu_memory_utilization"  # no args line: vLLM's default cannot be assumed


def test_partial_log_parses_when_asked() -> None:
    text = line("Model loading took 10.0 GiB memory and 3.000000 seconds")
    with pytest.raises(InputError, match="did not finish starting"):
        parse_log_text(text)
    assert parse_log_text(text, require_kv=False).worker("EngineCore_DP0").weights == from_gib(10.0)


# ------------------------------------------------------------------------------------ CLI


def test_cli_log_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["log", str(V033_TP2), "--model", QWEN3_32B]) == 0
    out = capsys.readouterr().out
    assert "tokens predicted" in out and "601,936" in out and "Worker_TP1" in out
    assert main(["log", str(V020_DP2), "--json", "--total-gib", "139.80"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["workers"]) == {"APIServer", "EngineCore_DP0", "EngineCore_DP1"}
    assert data["workers"]["EngineCore_DP1"]["kv_cache_tokens"] == 252_960
    assert data["waterfalls"]["EngineCore_DP0"]["kv_cache_gib"] == pytest.approx(61.77)
    assert data["cross_check"] == []
    assert main(["log", str(V011_TP2), "--json", "--model", QWEN3_32B]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "error" in data["waterfalls"]["Worker_TP0"]  # no total memory in a 0.11 INFO log
    (check,) = data["cross_check"]
    assert (check["logged_kv_cache_tokens"], check["predicted_kv_cache_tokens"], check["tokens_difference"]) == (
        295_552, 295_552, 0)


# ------------------------------------------------------------------------------------ the environment a log shows


def _llama4_log(warning: bool, tokens: str, concurrency: str) -> str:
    """A start-up log written here (not a real one) in vLLM 0.33's line forms, for Llama-4-Scout at TP 1."""
    lines = [
        line("vLLM API server version 0.33.0", "APIServer", 1),
        line("non-default args: {'model_tag': 'meta-llama/Llama-4-Scout-17B-16E-Instruct', 'max_model_len': 32768, "
             "'max_num_batched_tokens': 8192, 'enable_prefix_caching': False}", "APIServer", 1),
        line("Unknown vLLM environment variable detected: VLLM_SERVE_ARGS", "APIServer", 1, "WARNING"),
    ]
    if warning:  # config/vllm.py VllmConfig.__post_init__, when the variable is 0
        lines.append(line("There is a latency regression when using chunked local attention with the hybrid KV "
                          "cache manager. Disabling it, by default. To enable it, set the environment "
                          "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1.", "APIServer", 1, "WARNING"))
    lines += [
        line("Available KV cache memory: 40.0 GiB", "EngineCore", 2),
        line(f"GPU KV cache size: {tokens} tokens, Maximum concurrency for 32,768 tokens per request: {concurrency}x",
             "EngineCore", 2),
    ]
    return "\n".join(lines)


def test_log_environment_lines_are_read() -> None:
    log = parse_log_text(_llama4_log(True, "218,448", "6.67") + "\n" + line(
        "Turning off hybrid kv cache manager because `--kv-transfer-config` selects a KV connector that does not "
        "support it.", "APIServer", 1, "WARNING") + "\n" + line(
        "non-default args: {'model_tag': 'x', 'disable_hybrid_kv_cache_manager': True}", "APIServer", 1))
    c = log.config
    assert c.chunked_local_hma == "0" and c.kv_connector_without_hma is True
    assert c.unknown_env == ("VLLM_SERVE_ARGS",) and c.disable_hybrid_kv_cache_manager is True


@pytest.mark.parametrize(("warning", "tokens", "concurrency", "blocks"), [
    # 40 GiB // (48 layers x 65,536 B) = 13,653 blocks of 2,048 per request: int(13,653 / 2,048 x 32,768) = 218,448
    (True, "218,448", "6.67", 13_653),
    # the default (variable 1): 4 groups of 12, 40 GiB // (12 x 65,536) = 54,613 blocks, 6,656 per request:
    # int(54,613 / 6,656 x 32,768) = 268,864
    (False, "268,864", "8.21", 54_613),
])
def test_cross_check_follows_the_chunked_local_warning(warning: bool, tokens: str, concurrency: str,
                                                       blocks: int) -> None:
    (check,) = cross_check(parse_log_text(_llama4_log(warning, tokens, concurrency)), "llama-4-scout-17b-16e")
    assert check.num_blocks == blocks
    assert check.logged_kv_cache_tokens == check.predicted_kv_cache_tokens == int(tokens.replace(",", ""))
    assert (check.settings_extra.get("vllm_env") == "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0") is warning
    assert any("VLLM_SERVE_ARGS" in note for note in check.notes)


def test_log_vllm_env_flag_is_applied_and_checked(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "llama4.log"
    path.write_text(_llama4_log(False, "268,864", "8.21"))
    assert main(["log", str(path), "--model", "llama-4-scout-17b-16e", "--json",
                 "--vllm-env", "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0"]) == 0
    out = json.loads(capsys.readouterr().out)
    (check,) = out["cross_check"]
    assert check["num_blocks"] == 13_653  # the flag's 0: one group of 48 layers
    # ... which this log (no warning: the manager stayed on) contradicts: 218,448 predicted, 268,864 logged
    assert (check["predicted_kv_cache_tokens"], check["tokens_inside"]) == (218_448, False)
    assert check["given"] == ["VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0"]
    assert main(["log", str(path), "--model", "llama-4-scout-17b-16e", "--vllm-env", "VLLM_NOPE=1"]) == 2
    assert "VLLM_NOPE" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ pids that come back


def _reused_pid_loop(restarts: int, sets: int) -> list[str]:
    """The real 0.33 TP2 start-up repeated ``restarts`` times, its pids taken from ``sets`` sets in turn (a
    container restarting a crashed server gets the same pids back)."""
    import re

    start = V033_TP2.read_text(encoding="utf-8").splitlines()
    pid = re.compile(r"pid=(\d+)")
    return [pid.sub(lambda m: f"pid={int(m.group(1)) * 10 + k % sets}", ln) for k in range(restarts) for ln in start]


@pytest.mark.parametrize("sets", [1, 2])
def test_a_pid_that_comes_back_costs_no_more_memory_the_more_it_does(sets: int) -> None:
    """Issue 22: a crash loop whose restarts reuse their pids peaked at 645 MB for 20 MB (each return kept a
    copy of the process's ever longer report list in the table of shared values). What the parse holds must
    not grow with the restarts: the same shared values and runs of reports after 40 restarts as after 10."""
    from pdtune.vllm_log.parse import _Builder

    held = []
    for restarts in (10, 40):
        builder = _Builder()
        builder.feed(_reused_pid_loop(restarts, sets))
        runs = [rec.get("kv_runs", []) for rec in builder.records.values()]
        runs += [dict(zip(*stored, strict=True)).get("kv_runs", ()) for stored in builder.stored.values()]
        held.append((len(builder._shared), len(builder.records) + len(builder.stored), sum(map(len, runs))))
    assert held[0] == held[1]
    # ... and the engine still holds every report it logged, one per restart, with the logged figures
    log = parse_log_text("\n".join(_reused_pid_loop(40, sets)))
    for engine in log.engines:
        assert len(engine.kv_cache_reports) == 40 // sets
        assert (engine.kv_cache_tokens, engine.max_concurrency) == (601_936, 18.37)
