"""Topology names: the article's layouts, the xPyD form, and clear errors for everything else."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdtune.cli import main
from pdtune.errors import InputError
from pdtune.topology import Topology, is_deployment, parse_deployment, parse_topology

# name -> (TP, DP, PP, EP, GPUs)
ARTICLE = {
    "TP4DP2+EP": (4, 2, 1, 8, 8),
    "TP2DP4+EP": (2, 4, 1, 8, 8),
    "TP4DP4+EP": (4, 4, 1, 16, 16),
    "TP2DP8+EP": (2, 8, 1, 16, 16),
    "DP16+EP": (1, 16, 1, 16, 16),
    "TP1PP6+EP": (1, 1, 6, 1, 6),
    "TP1PP8+EP": (1, 1, 8, 1, 8),
    "TP8+EP": (8, 1, 1, 8, 8),
    "TP16+EP": (16, 1, 1, 16, 16),
    "TEP8": (8, 1, 1, 8, 8),
    "TEP16": (16, 1, 1, 16, 16),
    "TP4DP8+EP": (4, 8, 1, 32, 32),
}


@pytest.mark.parametrize("name", sorted(ARTICLE))
def test_article_names(name: str) -> None:
    t = parse_topology(name)
    assert (t.tp, t.dp, t.pp, t.ep, t.gpus) == ARTICLE[name]
    assert t.name == name


def test_tep_is_tp_with_expert_parallelism() -> None:
    assert parse_topology("TEP8") == parse_topology("TP8+EP")
    assert parse_topology("TEP8").canonical == "TEP8"


def test_without_ep_experts_are_sliced_over_the_same_gpus() -> None:
    t = parse_topology("TP8")
    assert (t.tp, t.ep, t.expert_shards, t.expert_parallel) == (8, 1, 8, False)
    assert parse_topology("TP4DP4").expert_shards == 16


def test_lowercase_and_spaces() -> None:
    assert parse_topology(" tp4 dp2+ep ") == parse_topology("TP4DP2+EP")
    assert parse_topology("tep16").name == "TEP16"


def test_component_order_is_free() -> None:
    assert parse_topology("DP2TP4+EP") == parse_topology("TP4DP2+EP")


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "   ",
        "TP",
        "TP0",
        "TP4TP2",
        "XP4",
        "TEP8+EP",
        "TP4+EP+EP",
        "TP4DP2EP",
        "+EP",
        "TEP8TP2",
        "TP-4",
        "TP4.5",
        "3xTEP8",
    ],
)
def test_bad_names_are_input_errors(bad: str) -> None:
    with pytest.raises(InputError) as err:
        parse_topology(bad)
    assert err.value.field == "topology"


def test_disaggregated_form() -> None:
    d = parse_deployment("3xTP2DP4+EP:1xTEP8")
    assert (d.n_prefill, d.prefill.gpus, d.n_decode, d.decode.gpus) == (3, 8, 1, 8)
    assert (d.gpus_prefill, d.gpus_decode, d.gpus_total) == (24, 8, 32)
    assert d.label == "3xTP2DP4+EP:1xTEP8"
    assert not d.decode_mtp


def test_disaggregated_defaults_spaces_and_mtp_suffix() -> None:
    d = parse_deployment("tp4dp2+ep : 2×tp4dp4+ep+MTP")
    assert (d.n_prefill, d.prefill.name, d.n_decode, d.decode.name, d.decode_mtp) == (
        1,
        "TP4DP2+EP",
        2,
        "TP4DP4+EP",
        True,
    )
    assert is_deployment("1xTEP8:1xTEP8") and not is_deployment("TEP8")


@pytest.mark.parametrize(
    "bad", ["3xTP2DP4+EP", "0xTEP8:1xTEP8", "1xTEP8:1xTEP8:1xTEP8", ":1xTEP8", "1xTEP8:", "2xTQ8:1xTEP8"]
)
def test_bad_deployments(bad: str) -> None:
    with pytest.raises(InputError):
        parse_deployment(bad)


@given(tp=st.integers(1, 64), dp=st.integers(1, 64), pp=st.integers(1, 16), ep=st.booleans())
def test_canonical_name_parses_back(tp: int, dp: int, pp: int, ep: bool) -> None:
    t = Topology(tp, dp, pp, ep)
    again = parse_topology(t.canonical)
    assert again == t
    assert again.gpus == tp * dp * pp


def test_cli_bad_topology_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["predict", "qwen3.8-2.4t", "--topology", "TP4DQ2", "--mode", "decode"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "DQ2" in err and "Traceback" not in err


def test_the_layout_notation_is_one_text_in_plan_help_and_the_glossary(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 20: `plan --help` defines TP4DP2+EP, TEP64, DP8+EP and 4xA : 1xB with the words of the book's glossary
    entry "layout notation"; both come from pdtune.topology.LAYOUT_NOTATION."""
    from pathlib import Path

    from pdtune.cli import main
    from pdtune.topology import LAYOUT_NOTATION

    glossary = (Path(__file__).resolve().parents[1] / "book" / "glossary.md").read_text(encoding="utf-8")
    body = glossary.split("\nlayout notation\n", 1)[1].split("\n\n", 1)[0]
    assert " ".join(body.split()) == LAYOUT_NOTATION
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    assert " ".join(LAYOUT_NOTATION.split()) in " ".join(capsys.readouterr().out.split())
    for name in ("TP4DP2+EP", "TEP64", "DP8+EP", "4xA : 1xB"):
        assert name in LAYOUT_NOTATION
