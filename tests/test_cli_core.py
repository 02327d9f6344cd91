"""The ``state``, ``memory`` and ``graphs`` commands: the issue's examples and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pdtune.cli import main


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_state_article_example(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "state", "qwen3.8-2.4t", "--kv-cache-dtype", "fp8", "--isl", "8192", "--osl", "1024",
                   "--vllm", "0.11")
    assert out["attention_per_token"] == 2048
    assert out["conv_per_request"] == 122_880 and out["ssm_per_request"] == 4_194_304
    assert out["block_tokens"] == 2112 and out["block_bytes"] == 4_325_376
    assert out["blocks_per_request"] == 184
    assert out["bytes_per_request"] == 795_869_184 and out["mib_per_request"] == 759.0


def test_state_current_line_differs_and_help_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "state", "qwen3.8-2.4t", "--kv-cache-dtype", "fp8", "--isl", "8192", "--osl", "1024")
    assert out["vllm"] == "0.33" and out["mamba_cache_mode"] == "align"  # vLLM's default: prefix caching on
    assert out["bytes_per_request"] > 795_869_184
    with pytest.raises(SystemExit):
        main(["state", "--help"])
    help_text = capsys.readouterr().out
    assert "--vllm 0.11 reproduces the article" in help_text and "prefix caching" in help_text


def test_state_with_kv_cache(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "state", "qwen3.8-2.4t", "--kv-cache-dtype", "fp8", "--isl", "8192", "--osl", "1024",
                   "--vllm", "0.11", "--kv-cache-gib", "83")
    assert out["num_blocks"] == 895 and out["kv_cache_tokens"] == 470_976
    assert out["max_concurrency"] == pytest.approx(111.875)


def test_state_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["state", "qwen3.8-2.4t", "--kv-cache-dtype", "fp8", "--max-model-len", "9216", "--vllm", "0.11",
                 "--kv-cache-gib", "83"]) == 0
    text = capsys.readouterr().out
    assert "2,112 tokens = 4,325,376 B" in text and "759.0 MiB" in text and "470,976 tokens" in text


def test_state_text_groups_the_thousands_of_mib(capsys: pytest.CaptureFixture[str]) -> None:
    # DeepSeek-V3 at TP=1 and 32,768 tokens: 1,024 blocks of 32 tokens x 61 MLA layers x 36,864 B (576 x 2 B x 32)
    # = 2,302,672,896 B = 2,196.0 MiB, its thousands grouped like the byte count beside it (was "2196.0 MiB").
    assert main(["state", "deepseek-v3", "--tp", "1", "--max-model-len", "32768"]) == 0
    text = capsys.readouterr().out
    assert "61 layers, 1,024 blocks per request" in text and "= 2,302,672,896 B = 2,196.0 MiB" in text


@pytest.mark.parametrize(("seqs", "spec", "count"), [(272, 3, 85), (528, 0, 52)])
def test_graphs_examples(capsys: pytest.CaptureFixture[str], seqs: int, spec: int, count: int) -> None:
    out = run_json(capsys, "graphs", "--max-num-seqs", str(seqs), "--num-speculative-tokens", str(spec))
    assert out["count"] == count and len(out["sizes"]) == count  # type: ignore[arg-type]


def test_memory_example(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "memory", "--total-gib", "276.62", "--gpu-memory-utilization", "0.92",
                   "--non-torch-gib", "0.72", "--weights-gib", "169.28", "--activation-gib", "0.57",
                   "--graphs-gib", "0.91", "--per-request-mib", "759")
    # 276.62 x 0.92 - 0.72 - 169.28 - 0.57 - 0.91 = 83.0104 (published 83.00, rounded inputs)
    assert out["kv_cache_gib"] == pytest.approx(83.00, abs=0.011)
    assert round(out["max_requests"], 1) == 112.0  # type: ignore[arg-type]


BAD = [
    (["state", "no-such-model", "--max-model-len", "10"], "model"),
    (["state", "qwen3.8-2.4t", "--isl", "8192"], "max_model_len"),
    (["state", "qwen3.8-2.4t", "--max-model-len", "9216", "--tp", "3"], "num_attention_heads"),
    (["state", "qwen3.8-2.4t", "--max-model-len", "9216", "--kv-cache-dtype", "fp7"], "kv_cache_dtype"),
    (["state", "qwen3.8-2.4t", "--max-model-len", "9216", "--vllm", "nightly"], "vllm"),
    (["state", "qwen3.8-2.4t", "--max-model-len", "9216", "--vllm", "0.9"], "vllm"),
    (["state", "qwen3.8-2.4t", "--max-model-len", "9216", "--vllm", "0.33", "--mamba-cache-mode", "all"],
     "mamba_cache_mode"),
    (["memory", "--total-gib", "276", "--weights-gib", "1", "--per-request-mib", "0"], "per_request_mib"),
]


@pytest.mark.parametrize(("argv", "field"), BAD)
def test_bad_input_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], field: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f": {field}:" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["state", "qwen3.8-2.4t", "--max-model-len", "-5"],
        ["state", "qwen3.8-2.4t", "--max-model-len", "9216", "--tp", "0"],
        ["graphs", "--max-num-seqs", "0"],
        ["memory", "--total-gib", "-1", "--weights-gib", "1"],
        ["memory", "--total-gib", "276", "--weights-gib", "1", "--gpu-memory-utilization", "1.2"],
    ],
)
def test_bad_flags_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_bad_config_file_through_the_installed_command(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "qwen3_next", "hidden_size": 2048}), encoding="utf-8")
    pdtune = Path(sys.executable).parent / "pdtune"
    done = subprocess.run([str(pdtune), "state", str(cfg), "--max-model-len", "100"], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert str(cfg) in done.stderr and "vocab_size" in done.stderr


KIMI_LIKE = Path(__file__).resolve().parent / "fixtures" / "models" / "kimi-k2-like"


def test_memory_for_weights_that_do_not_fit_prints_no_nan(capsys: pytest.CaptureFixture[str]) -> None:
    """Kimi-K2's config says bfloat16: TEP8 on B200 does not fit, said in words, never as "nan"; with its real
    FP8 weights (--weights fp8) the same layout holds requests."""
    import json as _json

    argv = ["memory", "--model", str(KIMI_LIKE), "--topology", "TEP8", "--gpu", "b200"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "nan" not in text.lower() and "none, weights do not fit" in text and "--weights" in text
    assert main([*argv, "--json"]) == 0
    out = _json.loads(capsys.readouterr().out)  # strict JSON: NaN would not parse with json's defaults off
    assert out["note"] == "weights do not fit" and out["mib_per_request_rank"] > 0
    assert "requests_per_engine" not in out
    assert main([*argv, "--weights", "fp8"]) == 0
    fp8 = capsys.readouterr().out
    assert "(fp8+fp8-experts weights)" in fp8 and "nan" not in fp8.lower()
    requests = float(fp8.split("rank): ", 1)[1].split(";", 1)[0])
    assert requests > 50
