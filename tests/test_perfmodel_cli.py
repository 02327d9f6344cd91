"""``pdtune predict``: the table, the JSON, and one-line errors."""

from __future__ import annotations

import json

import pytest

from pdtune.cli import main


def test_decode_table(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "predict",
            "qwen3.8-2.4t",
            "--gpu",
            "gb300",
            "--topology",
            "TP4DP4+EP",
            "--mode",
            "decode",
            "--concurrency",
            "1,8,64,512",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("MODELED")
    assert "room for 6028 running requests" in out  # 4 DP ranks x 1507 at ISL/OSL 1/1000
    assert (
        len([line for line in out.splitlines() if line.strip().split(" ")[0] in {"1", "8", "64", "512"}]) == 4
    )


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "predict",
            "qwen3.8-2.4t",
            "--topology",
            "TEP8",
            "--mode",
            "decode",
            "--mtp",
            "3",
            "--acceptance",
            "0.5",
            "--concurrency",
            "1,600",
            "--json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["modeled"] is True
    assert data["acceptance"] == 0.5 and data["engines"]["decode"]["capacity"] == 454
    first, second = data["predictions"]
    assert first["tps_per_user"] == pytest.approx(1000 / first["tpot_ms"])
    assert second["kv_limited"] is True and first["kv_limited"] is False


def test_disaggregated_is_inferred_from_the_name(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "predict",
            "qwen3.8-2.4t",
            "--topology",
            "1xTP2DP4+EP:1xTEP8",
            "--mtp",
            "3",
            "--concurrency",
            "1",
            "--json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["mode"] == "disagg" and set(data["engines"]) == {"prefill", "decode"}
    assert data["isl"] == 8192 and data["osl"] == 1024
    assert data["predictions"][0]["gpus_total"] == 16


def test_prefill_with_custom_workload(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "predict",
            "qwen3-next-80b-a3b",
            "--gpu",
            "h100",
            "--topology",
            "TP4",
            "--mode",
            "prefill",
            "--isl",
            "2048",
            "--osl",
            "4",
            "--concurrency",
            "1,4",
            "--json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and (data["isl"], data["osl"]) == (2048, 4)
    a, b = data["predictions"]
    assert b["tps_per_gpu"] > a["tps_per_gpu"]


@pytest.mark.parametrize(
    "argv, field",
    [
        (["--topology", "TEP8"], "mode"),
        (["--topology", "TEP8", "--mode", "disagg"], "topology"),
        (["--topology", "1xTEP8:1xTEP8", "--mode", "decode"], "topology"),
        (["--topology", "TEP8", "--mode", "prefill", "--mtp", "2"], "mtp"),
        (["--topology", "TEP8", "--mode", "decode", "--acceptance", "2"], "acceptance"),
        (["--topology", "TP2", "--mode", "decode"], "kv_cache"),
        (["--topology", "TEP8", "--mode", "decode", "--gpu", "tpu"], "gpu"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["predict", "qwen3.8-2.4t", *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and f"{field}:" in err and "Traceback" not in err
