"""The launch flags of the measured servers (pdtune.perfmodel.launch_flags): read from the table, laid over vLLM's
defaults, and reaching the engine and the simulator."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdtune.errors import InputError
from pdtune.gpus import load_gpu
from pdtune.perfmodel.launch_flags import COLUMNS, ServerFlags, _evaluate, launch_flags_file, measured_date, row_flags
from pdtune.perfmodel.validation import agg_engine_config, row_setup, sim_config

HEADER = ",".join(COLUMNS)


def _row(**kw: object) -> pd.Series:
    base = {"source": "aiconfigurator-silicon", "model": "MiniMaxAI/MiniMax-M2.5", "gpu": "b200", "precision": "fp8",
            "topology": "TP2", "isl": 1024, "osl": 1024, "concurrency": 64,
            "provenance": "db-dump/2026-04-27; config_id=1; measured=2026-04-03T00:00:00.000Z; x"}
    base.update(kw)
    return pd.Series(base)


def _table(tmp_path, *lines: str):
    path = tmp_path / "flags.csv"
    path.write_text("\n".join([HEADER, *lines]) + "\n")
    return path


# A table written here for the tests (not InferenceX's flags): two script versions of one (model, GPU, precision)
# and a branch on the tensor-parallel size.
LINES = (
    "minimaxai/minimax-m2.5,b200,fp8,2026-03-01,2026-03-31,a.sh,aaaa,,auto,,,,,,,TEP{TP},",
    "minimaxai/minimax-m2.5,b200,fp8,2026-04-01,2026-04-30,b.sh,bbbb,TP>=4,fp8,8192,,0.9,,32,off,,",
    "minimaxai/minimax-m2.5,b200,fp8,2026-04-01,2026-04-30,b.sh,bbbb,CONC>64,,,,,,,,,the client was not the row's",
    "minimaxai/minimax-m2.5,b200,fp8,2026-04-01,2026-04-30,b.sh,bbbb,TP<4,fp8,$((ISL * 2)),CONC,0.9,2048,32,off,,",
)


def test_the_row_takes_the_line_of_its_date_and_branch(tmp_path):
    path = _table(tmp_path, *LINES)
    # Measured 2026-04-03 on TP2 at ISL 1,024 and 64 clients: the second script's TP<4 branch, whose batch is
    # 2 x ISL = 2,048 tokens and whose max_num_seqs is the concurrency, 64.
    flags = row_flags(_row(), path)
    assert flags == ServerFlags(kv_cache_dtype="fp8", max_num_batched_tokens=2048, max_num_seqs=64,
                                gpu_memory_utilization=0.9, max_capture_size=2048, block_size=32,
                                prefix_caching=False, source="b.sh@bbbb")
    assert row_flags(_row(topology="TP4"), path).max_num_batched_tokens == 8192
    # The first line that holds wins: at 128 clients the row is marked, with the reason.
    assert row_flags(_row(concurrency=128), path).unpredictable == "the client was not the row's"
    # 2026-03-11: the first script passes only --kv-cache-dtype auto (every other flag stays vLLM's default) and
    # launched TP2 as TEP2.
    early = row_flags(_row(provenance="measured=2026-03-11"), path)
    assert early == ServerFlags(kv_cache_dtype="auto", topology="TEP2", source="a.sh@aaaa")
    # Undated: the earliest line. Another source, another GPU, or a date no line covers: no flags.
    assert row_flags(_row(provenance="source_file=x.csv"), path).source == "a.sh@aaaa"
    assert row_flags(_row(source="vllm-bench"), path) is None
    assert row_flags(_row(gpu="h200"), path) is None
    assert row_flags(_row(provenance="measured=2026-05-02"), path) is None


def test_flags_lay_over_vllm_defaults():
    gpu = load_gpu("b200")
    base = agg_engine_config(gpu, "0.19.0")
    flags = ServerFlags(kv_cache_dtype="fp8", max_num_batched_tokens=2048, block_size=32)
    config = agg_engine_config(gpu, "0.19.0", "auto", flags)
    assert (config.kv_cache_dtype, config.max_num_batched_tokens, config.block_size) == ("fp8", 2048, 32)
    # What the script does not pass stays the default.
    assert config.max_num_seqs == base.max_num_seqs
    assert config.gpu_memory_utilization == base.gpu_memory_utilization
    assert ServerFlags().engine_config(base) is base


@given(st.integers(1, 1 << 16), st.integers(1, 1 << 14))
def test_arithmetic_of_the_scripts(isl, conc):
    env = {"ISL": isl, "CONC": conc}
    assert _evaluate("$((ISL * 2))", env, "f", "x") == 2 * isl
    assert _evaluate("ISL+256", env, "f", "x") == isl + 256
    assert _evaluate("max(8192, 2*ISL)", env, "f", "x") == max(8192, 2 * isl)
    assert _evaluate("CONC", env, "f", "x") == conc


@pytest.mark.parametrize("line, field", [
    ("minimaxai/minimax-m2.5,b200,fp8,,,a.sh,aaaa,TP~4,fp8,,,,,,,,", "condition"),
    ("minimaxai/minimax-m2.5,b200,fp8,,,a.sh,aaaa,,fp8,ISL**2,,,,,,,", "max_num_batched_tokens"),
    ("minimaxai/minimax-m2.5,b200,fp8,,,a.sh,aaaa,,fp8,,,1.5,,,,,", "gpu_memory_utilization"),
    ("minimaxai/minimax-m2.5,b200,fp8,,,a.sh,aaaa,,fp8,,,,,,maybe,,", "prefix_caching"),
])
def test_a_malformed_line_is_named(tmp_path, line, field):
    path = _table(tmp_path, line)
    from pdtune.perfmodel import launch_flags

    launch_flags._rules.cache_clear()
    with pytest.raises(InputError) as err:
        row_flags(_row(provenance="x"), path)
    assert err.value.field == field and str(path) in err.value.source


def test_the_shipped_table_covers_the_inferencex_rows():
    """Every aggregated vLLM silicon row of an InferenceX model finds its launch flags; the Qwen3 rows
    (aiconfigurator's own Dynamo runs, not InferenceX's) find none."""
    from pdtune.perfmodel.defaults import silicon_file, silicon_problems
    from pdtune.results import load_results

    assert launch_flags_file().exists()
    problems = silicon_problems(load_results(silicon_file()))
    covered = {}
    for (model, _gpu), problem in problems.items():
        flags = [row_flags(r) for _, r in problem.rows.iterrows()]
        covered.setdefault(model, []).extend(f is not None for f in flags)
    for model in ("minimax-m2.5", "kimi-k2.5", "gpt-oss-120b", "llama-3.1-70b"):
        assert all(covered[model]), model
    for model in ("qwen3-32b", "qwen3-235b-a22b-fp8"):
        assert not any(covered[model]), model


def test_a_silicon_row_is_simulated_as_launched():
    """MiniMax-M2.5 FP8 on B200 at ISL 1,024 (InferenceX's minimaxm2.5_fp8_b200.sh): FP8 KV cache, 2 x ISL = 2,048
    batched tokens, 32-token blocks, no prefix caching, and the engine is built so."""
    from pdtune.model import load_model
    from pdtune.perfmodel.engine import build_engine
    from pdtune.topology import parse_topology

    row = _row(weights="fp8")
    setup = row_setup(row, load_model("minimax-m2.5"))
    assert setup.flags is not None
    gpu = load_gpu("b200")
    config = agg_engine_config(gpu, setup.vllm, setup.kv_cache_dtype, setup.flags)
    assert (config.kv_cache_dtype, config.max_num_batched_tokens, config.block_size) == ("fp8", 2048, 32)
    assert sim_config(setup).enable_prefix_caching is False
    engine = build_engine(setup.spec, gpu, parse_topology("TP2"), isl=1024, osl=1024, config=config)
    assert engine.plan.attention_page.block_size == 32
    # The FP8 cache holds a token in half the bytes of the BF16 one: twice the requests fit.
    default = build_engine(setup.spec, gpu, parse_topology("TP2"), isl=1024, osl=1024,
                           config=agg_engine_config(gpu, setup.vllm, setup.kv_cache_dtype))
    assert engine.plan.attention_page.bytes_per_token * 2 == default.plan.attention_page.bytes_per_token


def test_the_served_layout_replaces_the_recorded_one_of_the_same_size():
    from pdtune.perfmodel.launch_flags import served_topology
    from pdtune.topology import parse_topology

    tp8 = parse_topology("TP8")
    assert served_topology(tp8, ServerFlags(topology="TEP8")).name == parse_topology("TEP8").name
    # Another GPU count is a conflict of the data's own: the recorded layout stays.
    assert served_topology(tp8, ServerFlags(topology="TEP4")) is tp8
    assert served_topology(parse_topology("TEP4"), ServerFlags(topology="TP2")).name == "TEP4"
    assert served_topology(tp8, None) is tp8


def test_a_dp_attention_layout_recorded_on_tp_x_dp_gpus_is_served_on_tp():
    """aiconfigurator's file records InferenceX's ``tp: 4, ep: 4, dp-attn: true`` as TP4DP4+EP on 16 GPUs; the
    server ran on TP = 4 GPUs (InferenceX's utils/process_result.py: tput_per_gpu = total / TP), as the script's
    layout (minimaxm2.5_fp8_b200.sh has no DP_ATTENTION branch: TEP4; minimaxm2.5_fp4_b200.sh's passes
    --tensor-parallel-size=1 --data-parallel-size=4: DP4+EP)."""
    from pdtune.perfmodel.launch_flags import served_topology
    from pdtune.topology import parse_topology

    wide = parse_topology("TP4DP4+EP")
    assert wide.gpus == 16
    assert served_topology(wide, ServerFlags(topology="TEP4")).name == "TEP4"
    assert served_topology(wide, ServerFlags(topology="DP4+EP")).gpus == 4
    assert served_topology(wide, ServerFlags(topology="TP4")).name == "TP4"
    # Only the recorded TP's GPU count is the script's: another count stays a visible conflict.
    assert served_topology(wide, ServerFlags(topology="TEP8")) is wide


@pytest.mark.parametrize("precision, served", [("fp8", "TEP2"), ("fp4", "DP2+EP")])
def test_the_shipped_dp_attention_rows_run_as_their_scripts(precision, served):
    """MiniMax-M2.5 on B200, measured 2026-04-08, recorded TP2DP2+EP on 4 GPUs at 1,000 tokens/s per GPU: the FP8
    script (bddbf403) ran TEP2, the FP4 one (79bd988e) DP2+EP, both on 2 GPUs, so 2,000 tokens/s per GPU."""
    from pdtune.model import load_model
    from pdtune.perfmodel.validation import validate_rows
    from pdtune.perfmodel.efficiency import DEFAULT_EFFICIENCY

    row = _row(topology="TP2DP2+EP", precision=precision, gemm_quant_mode="fp8_block",
               moe_quant_mode="fp8_block" if precision == "fp8" else "nvfp4", gpus_total=4, mode="agg",
               provenance="measured=2026-04-08T00:00:00.000Z", tps_per_gpu=1000.0, ttft_ms_p50=80.0,
               tpot_ms_p50=10.0)
    setup = row_setup(row, load_model("minimax-m2.5"))
    assert setup.reason is None, setup.reason
    assert setup.topology.name == served and setup.topology.gpus == 2
    point = validate_rows(pd.DataFrame([row]), load_model("minimax-m2.5"), load_gpu("b200"),
                          DEFAULT_EFFICIENCY).iloc[0]
    assert point["predicted"] and point["gpus_total"] == 2
    assert point["measured_tps_per_gpu"] == pytest.approx(2000.0)


def test_a_gpu_count_unlike_the_engines_is_rescaled_only_where_the_script_served_fewer():
    """A row whose file counts more GPUs than one engine of its layout (replicas, ``--gpus``) without a script
    layout keeps the file's count and throughput per GPU: only :func:`served_topology` moves them."""
    from pdtune.model import load_model
    from pdtune.perfmodel.validation import validate_rows
    from pdtune.perfmodel.efficiency import DEFAULT_EFFICIENCY

    row = _row(source="vllm-bench", topology="TP8", gpus_total=16, mode="agg", provenance=None,
               tps_per_gpu=1000.0, ttft_ms_p50=80.0, tpot_ms_p50=10.0, gemm_quant_mode="fp8_block",
               moe_quant_mode="fp8_block")
    setup = row_setup(row, load_model("minimax-m2.5"))
    assert setup.topology.gpus == 8 and setup.recorded_gpus is None
    point = validate_rows(pd.DataFrame([row]), load_model("minimax-m2.5"), load_gpu("b200"),
                          DEFAULT_EFFICIENCY).iloc[0]
    assert point["gpus_total"] == 16 and point["measured_tps_per_gpu"] == pytest.approx(1000.0)


def test_measured_date():
    assert measured_date(_row()) == "2026-04-03"
    assert measured_date(_row(provenance="source_file=a.csv; silicon_concurrency=8")) is None
