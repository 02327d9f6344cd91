"""`pdtune dataset generate --params PARAMS.yaml` (or flags): modeled sweeps of any model, GPU and topologies,
in srt-slurm's layout, labelled modeled, without writing Python."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdtune.cli import main
from pdtune.dataset import DatasetSpec, generated_files, read_params, spec_from_params
from pdtune.paths import clusters_dir
from pdtune.results import load_results

H200 = clusters_dir() / "h200-qwen3-next-modeled"
GB300 = clusters_dir() / "gb300-qwen3.8-modeled"


def test_the_default_datasets_parameters_file_is_the_default_spec() -> None:
    """data/clusters/gb300-qwen3.8-modeled/dataset.yaml names exactly what `pdtune dataset generate` uses, so
    the committed dataset (byte-checked by test_dataset.py) is also what the file generates."""
    path = GB300 / "dataset.yaml"
    assert spec_from_params(read_params(path), str(path)) == DatasetSpec()


def test_params_file_reproduces_the_h200_folder_byte_for_byte(tmp_path: Path) -> None:
    out = tmp_path / "h200"
    assert main(["dataset", "generate", "--params", str(H200 / "dataset.yaml"), "--out", str(out)]) == 0
    committed = generated_files(H200)
    assert generated_files(out) == committed
    for rel in committed:
        assert (out / rel).read_bytes() == (H200 / rel).read_bytes(), rel


def test_flags_alone_model_a_new_model_and_the_loaders_read_it(tmp_path: Path) -> None:
    out = tmp_path / "dsv3"
    assert main(["dataset", "generate", "--model", "deepseek-v3", "--gpu", "gb200", "--prefill-topologies",
                 "TEP8,TP4DP2+EP", "--decode-topologies", "TEP8", "--disagg", "1xTEP8:1xTEP8+MTP,2xTEP8:1xTEP8",
                 "--concurrency", "1,16,128", "--out", str(out)]) == 0
    for mode, points in (("prefill", 2 * 3), ("decode", 2 * 3), ("disagg", 2 * 3)):
        df = load_results(out / mode, single_workload=True)
        assert len(df) == points and df["modeled"].all() and set(df["model"]) == {"deepseek-v3"}
    manifest = json.loads((out / "pdtune-dataset.json").read_text(encoding="utf-8"))
    assert manifest["modeled"] is True and manifest["gpu"] == "gb200"
    assert manifest["accuracy"]["value"] is None  # nobody measured it: not borrowed from the article
    disagg = load_results(out / "disagg")
    assert set(disagg["mtp_tokens"]) == {0, 3}


def test_workloads_from_the_parameters_file(tmp_path: Path) -> None:
    params = tmp_path / "p.yaml"
    params.write_text("model: qwen3-next-80b-a3b\ngpu: h200\nconcurrencies: [1, 8]\nprefill_topologies: [TP4]\n"
                      "decode_topologies: [TP4]\ndisagg_configs: [{deployment: 1xTP4:1xTP4, mtp: true}]\n"
                      "prefill_workload: {isl: 4096, osl: 2}\ndisagg_workload: {isl: 4096, osl: 512}\n",
                      encoding="utf-8")
    out = tmp_path / "ds"
    assert main(["dataset", "generate", "--params", str(params), "--out", str(out)]) == 0
    assert set(load_results(out / "prefill")["isl"]) == {4096}
    disagg = load_results(out / "disagg")
    assert set(disagg["isl"]) == {4096} and set(disagg["osl"]) == {512}


@pytest.mark.parametrize(("text", "needle"), [
    ("model: qwen3-next-80b-a3b\ncolour: blue\n", "colour: unknown key"),
    ("model: qwen3-next-80b-a3b\nprefill_topologies: [TP3Z]\n", "TP3Z"),
    ("model: qwen3-next-80b-a3b\ndisagg_configs: [TP4]\n", "deployment"),
    ("model: qwen3-next-80b-a3b\nconcurrencies: [0]\n", "concurrencies"),
    ("model: no-such-model\n", "no-such-model"),
    ("gpu: mi300x\n", "unknown GPU"),
    ("- a list\n", "top level must be a mapping"),
])
def test_bad_parameters_are_one_line_and_write_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       text: str, needle: str) -> None:
    params = tmp_path / "bad.yaml"
    params.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    assert main(["dataset", "generate", "--params", str(params), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err
    assert not out.exists()


def test_other_parameters_need_their_own_folder(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dataset", "generate", "--model", "qwen3-next-80b-a3b"]) == 2
    assert "--out" in capsys.readouterr().err
