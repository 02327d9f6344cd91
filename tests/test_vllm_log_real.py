"""Real start-up logs users pasted in public issues, the lines added for issue 11, and the rounding-range check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdtune.cli import main
from pdtune.errors import InputError
from pdtune.units import GiB, from_gib
from pdtune.vllm_log import cross_check, parse_log, parse_log_text, split_header

REAL = Path(__file__).parent / "fixtures" / "logs" / "real"
QWEN3_14B_LOG = REAL / "lmcache-1739-qwen3-14b.log"
HEAD = "INFO 11-02 10:00:00 [x.py:1] "


def line(msg: str, proc: str = "EngineCore_DP0", pid: int = 7, level: str = "INFO") -> str:
    return f"({proc} pid={pid}) {level} 11-02 10:00:00 [x.py:1] {msg}"


# ------------------------------------------------------------------------------------ real logs


def test_real_log_without_tp_or_speculation_is_inside_the_rounding_range() -> None:
    # LMCache#1739 (vLLM 0.10.2 line numbers; one KV group prints num_blocks x 16 as 0.11 does). Qwen3-14B:
    # 40 layers x 8 KV heads x 128 x 2 x 2 B = 163,840 B per token, 2,621,440 B per 16-token block.
    # 6.505 GiB -> 2664 blocks = 42,624 tokens; 6.515 GiB (exclusive) -> 2668 blocks = 42,688 tokens.
    log = parse_log(QWEN3_14B_LOG)
    assert log.config.version is None and log.config.tensor_parallel_size is None
    with pytest.raises(InputError, match="pass --vllm"):
        cross_check(log, "qwen3-14b")
    (check,) = cross_check(log, "qwen3-14b", vllm="0.11", tp=1, num_speculative_tokens=0)
    assert check.tokens_range == (42_624, 42_688)
    assert check.logged_kv_cache_tokens == 42_656 and check.tokens_inside
    assert check.predicted_kv_cache_tokens == 42_656 and check.num_blocks == 2_666
    assert check.given == ("vllm=0.11", "tp=1", "num_speculative_tokens=0")
    assert any(a.startswith("kv_cache_dtype=auto") for a in check.assumed)


def test_cli_on_the_real_log_reports_inside(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["log", str(QWEN3_14B_LOG), "--model", "qwen3-14b", "--vllm", "0.11", "--tp", "1",
            "--num-speculative-tokens", "0"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "42,624-42,688" in out and "yes" in out and "given by flag: vllm=0.11, tp=1" in out
    assert "assumed: kv_cache_dtype=auto" in out
    assert main([*argv, "--json"]) == 0
    (check,) = json.loads(capsys.readouterr().out)["cross_check"]
    assert check["tokens_inside"] is True and check["tokens_range"] == [42_624, 42_688]


def test_real_log_with_one_report_per_rank() -> None:
    # vllm#26646 (Qwen3-Next on 0.11): the size is printed once per TP rank; no available memory, no check.
    log = parse_log(REAL / "vllm-26646-qwen3-next.log")
    (engine,) = log.engines
    assert [r.tokens for r in engine.kv_cache_reports] == [90_048, 90_048]
    assert engine.max_concurrency_tokens == 215_040
    with pytest.raises(InputError, match="Available KV cache memory"):
        cross_check(log, "qwen3-next-80b-a3b", vllm="0.11")


def test_real_log_of_an_engine_that_did_not_start() -> None:
    log = parse_log(REAL / "vllm-27508-gpt-oss-120b.log")
    assert log.worker("EngineCore_DP0").available_kv_cache == from_gib(1.71)
    with pytest.raises(InputError, match="no engine logged its KV cache size"):
        cross_check(log, "gpt-oss-120b", vllm="0.11")


# ------------------------------------------------------------------------------------ lines added for issue 11


def test_new_lines() -> None:
    text = "\n".join([
        "vLLM Version                 : 0.20.2rc1.dev129+g5d8f1a2c3 (git sha: 5d8f1a2c3)",  # collect_env, no prefix
        line("Chunked prefill is enabled with max_num_batched_tokens=16384.", "APIServer", 1),
        line("Asynchronous scheduling is enabled.", "APIServer", 1),
        line("Updating mamba_ssm_cache_dtype to 'float32' for NemotronH model", "APIServer", 1),
        line("Add 2 padding layers, may waste at most 20.00% KV cache memory", level="WARNING"),
        line("Multiplying the GPU KV cache size by the cp_world_size 4 (pcp_world_size 1 * dcp_world_size 4)."),
        line("GPU KV cache size: 1,000 tokens"),
        line("Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: 250", level="DEBUG"),
        line("Available KV cache memory: 1.0 GiB"),
    ])
    log = parse_log_text(text)
    c = log.config
    assert c.version == "0.20.2rc1.dev129+g5d8f1a2c3"
    assert (c.max_num_batched_tokens, c.async_scheduling, c.mamba_ssm_cache_dtype) == (16384, True, "float32")
    assert c.decode_context_parallel_size == 4
    e = log.worker("EngineCore_DP0")
    assert (e.padding_layers, e.padding_waste_pct, e.kv_size_multiplier, e.num_gpu_blocks) == (2, 20.0, 4, 250)
    old = parse_log_text(line("Multiplying the GPU KV cache size by the dcp_world_size 8.") + "\n"
                         + line("GPU KV cache size: 8 tokens"))
    assert old.worker("EngineCore_DP0").kv_size_multiplier == 8 and old.config.decode_context_parallel_size == 8


def test_banner_and_args_name_the_draft_and_dcp() -> None:
    banner = ("Initializing a V1 LLM engine (v0.33.0) with config: model='meta-llama/Llama-3.1-8B-Instruct', "
              "speculative_config=SpeculativeConfig(method='eagle3', model='yuhuili/EAGLE3-LLaMA3.1-Instruct-8B', "
              "num_spec_tokens=3), tokenizer='x', dtype=torch.bfloat16, max_seq_len=8192, tensor_parallel_size=2, "
              "pipeline_parallel_size=1, data_parallel_size=1, decode_context_parallel_size=2, kv_cache_dtype=auto")
    log = parse_log_text(line(banner) + "\n" + line("Available KV cache memory: 10.0 GiB", "Worker_TP0", 9) + "\n"
                         + line("GPU KV cache size: 1 tokens, Maximum concurrency for 8,192 tokens per request: 1.00x"))
    c = log.config
    assert (c.speculative_method, c.speculative_model, c.decode_context_parallel_size) == (
        "eagle3", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", 2)
    with pytest.raises(InputError) as err:  # an EAGLE draft adds layers: its config is needed
        cross_check(log, "llama-3.1-8b")
    assert err.value.field == "speculative_config"
    (check,) = cross_check(log, "llama-3.1-8b", speculative_model="eagle3-llama3-8b")
    # 33 layers x 16 x (8 / 2) x 128 x 2 x 2 = 1,081,344 B per pool block; 10 GiB -> 9929 blocks; DCP 2 shards
    # 8192 tokens to 4096 -> 256 blocks per request; int(9929 / 256 x 8192) = 317,728.
    assert (check.num_blocks, check.predicted_kv_cache_tokens) == (9929, 317_728)
    assert check.settings_extra["speculative_model"] == "eagle3-llama3-8b"


def test_development_build_lets_the_numbers_pick_the_rule() -> None:
    # Jamba at 0.20.2rc1.dev129: the log's number decides between num_blocks // groups x block (0.20) and
    # int(concurrency x L) (0.21+). 8 groups, blocks of 80 tokens: 10 GiB / (4 x 327,680 B) = 8192 blocks.
    blocks_rule = 8192 // 8 * 80  # 81,920
    concurrency_rule = int(8192 / (7 + 410) * 32768)  # 643,744 (one recurrent block per group, no caching)
    for logged, rule in ((blocks_rule, "blocks"), (concurrency_rule, "concurrency")):
        text = "\n".join([
            "vLLM Version                 : 0.20.2rc1.dev129+g5d8f1a2c3",
            line("non-default args: {'model': 'ai21labs/AI21-Jamba-1.5-Mini', 'enable_prefix_caching': False, "
                 "'max_model_len': 32768}", "APIServer", 1),
            line("Available KV cache memory: 10.0 GiB"),
            line(f"GPU KV cache size: {logged:,} tokens"),
            line("Maximum concurrency for 32,768 tokens per request: 19.65x"),
        ])
        (check,) = cross_check(parse_log_text(text), "jamba-1.5-mini")
        assert check.rule == rule and check.tokens_inside, (rule, check.tokens_range, check.notes)
        assert any("development build" in n and "KV cache size rule" in n for n in check.notes)


# ------------------------------------------------------------------------------------ hostile lines


@pytest.mark.parametrize("hostile", [
    "(x pid=1" * 2_000,                                   # unclosed process prefixes: not a logger line
    "1" * 20_000 + " GiB",                                # one huge number, no header
    "x " * 10_000 + "KV cache size: 1 tokens",            # a long run before the keyword, no header
    HEAD + "Free memory on device (" + "9," * 6_000,      # a number that never ends
    HEAD + "Profiling CUDA graph memory: " + "FULL=1 (largest=" * 2_000,  # groups never closed
])
def test_hostile_lines_are_not_vllm_lines(hostile: str) -> None:
    # Parse time on these is benchmarks/bench_vllm_log.py's job (make bench); here: no record, one InputError.
    with pytest.raises(InputError, match="no vLLM start-up lines|did not finish starting"):
        parse_log_text(hostile + "\n" + hostile)


def test_split_header_forms() -> None:
    assert split_header("(Worker_TP1 pid=4) INFO 10-14 09:12:00 [a.py:3] hello") == ("Worker_TP1", 4, "hello")
    assert split_header("^[[0;36m(EngineCore_DP0 pid=70073)^[[0;0m INFO 01-27 00:31:59 [m.py:1] hi") == (
        "EngineCore_DP0", 70073, "hi")
    assert split_header("INFO 10-14 09:12:00 [a.py:3] plain") == (None, None, "plain")
    assert split_header("no header here") is None


def test_rounding_range_is_half_a_step_each_side() -> None:
    (check,) = cross_check(parse_log(QWEN3_14B_LOG), "qwen3-14b", vllm="0.11")
    low, high = check.num_blocks_range
    block = 2_621_440
    assert low == int((6.51 - 0.005) * GiB) // block and high == int((6.51 + 0.005) * GiB - 1) // block
