"""Issue 11, item 3 beyond `pdtune state`: `--speculative-model` and `--decode-context-parallel-size` in
`pdtune predict` (the KV room the performance model uses) and in `pdtune plan` (rooms, transfer, recipes)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from pdtune.cli import main
from pdtune.model import load_model
from pdtune.state import plan_state
from pdtune.units import GiB

DECODE = ["llama-3.1-8b", "--gpu", "h100", "--mode", "decode", "--isl", "8192", "--osl", "1024", "--vllm", "0.33.0",
          "--concurrency", "1,16"]


def _engine(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    assert main(["predict", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_an_eagle_heads_layer_shrinks_the_decode_kv_room(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B, fp8 KV at TP1: 8 KV heads x 128 x 2 (K, V) x 1 B = 2,048 B per token per layer, 32 layers;
    9,216 tokens (576 blocks of 16): 32 x 2,048 x 9,216 B = 576 MiB. The EAGLE-3 head's one Llama layer joins the group (33 layers, 594 MiB),
    the figure `pdtune state --speculative-model` gives; the same KV cache then holds fewer requests."""
    plain = _engine([*DECODE, "--topology", "TP1"], capsys)
    eagle = _engine([*DECODE, "--topology", "TP1", "--speculative-model", "eagle3-llama3-8b",
                     "--num-speculative-tokens", "3"], capsys)
    before, after = plain["engines"]["decode"], eagle["engines"]["decode"]
    assert before["bytes_per_request"] == 32 * 2_048 * 9_216 == 576 * 2**20
    assert after["bytes_per_request"] == 33 * 2_048 * 9_216 == 594 * 2**20
    state = plan_state(load_model("llama-3.1-8b"), max_model_len=9216, kv_cache_dtype="fp8", vllm="0.33.0",
                       num_speculative_tokens=3, speculative_model=load_model("eagle3-llama3-8b"))
    assert state.bytes_per_request == after["bytes_per_request"]
    kv = round(after["kv_cache_gib"] * GiB)
    assert after["capacity"] == math.floor(state.capacity(kv).max_concurrency) < before["capacity"]
    assert eagle["speculative_model"] == "eagle3-llama3-8b" and "not in the step time" in eagle["kv_room_note"]


def test_dcp_multiplies_the_room_per_engine_as_pdtune_state_says(capsys: pytest.CaptureFixture[str]) -> None:
    """DCP 2 on a TP2 engine: each rank keeps cdiv(9216, 2) = 4,608 of a request's tokens, 288 blocks instead
    of 576, so the bytes per request halve and the room doubles (to the floor), the number `pdtune state
    --decode-context-parallel-size 2 --kv-cache-gib G` prints for the engine's own KV cache."""
    plain = _engine([*DECODE, "--topology", "TP2"], capsys)["engines"]["decode"]
    dcp = _engine([*DECODE, "--topology", "TP2", "--decode-context-parallel-size", "2"], capsys)
    engine = dcp["engines"]["decode"]
    assert engine["bytes_per_request"] * 2 == plain["bytes_per_request"]
    assert engine["kv_cache_gib"] == plain["kv_cache_gib"]
    assert main(["state", "llama-3.1-8b", "--tp", "2", "--kv-cache-dtype", "fp8", "--max-model-len", "9216",
                 "--no-prefix-caching", "--decode-context-parallel-size", "2", "--kv-cache-gib",
                 repr(engine["kv_cache_gib"]), "--json"]) == 0
    state = json.loads(capsys.readouterr().out)
    assert engine["capacity"] == math.floor(state["max_concurrency"])
    assert engine["capacity"] in (2 * plain["capacity"], 2 * plain["capacity"] + 1)
    assert dcp["decode_context_parallel_size"] == 2 and "DCP 2" in dcp["kv_room_note"]


def test_predict_refuses_what_it_cannot_mean(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, needle in (
        ([*DECODE, "--topology", "TP1", "--speculative-model", "eagle3-llama3-8b"],
         "num_speculative_tokens: a speculative model needs --num-speculative-tokens >= 1"),
        ([*DECODE, "--topology", "TP1", "--num-speculative-tokens", "2"], "for MTP use --mtp K"),
        (["deepseek-v3", "--gpu", "gb200", "--topology", "TEP8", "--mode", "decode", "--mtp", "1",
          "--speculative-model", "eagle3-llama3-8b", "--num-speculative-tokens", "1"], "not both"),
        ([*DECODE, "--topology", "TP1", "--decode-context-parallel-size", "2"], "tp_size=1 must be divisible"),
        (["llama-3.1-8b", "--gpu", "h100", "--mode", "prefill", "--topology", "TP2",
          "--decode-context-parallel-size", "2"], "decode (or aggregated) engine"),
    ):
        assert main(["predict", *argv]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, err


def test_plan_sizes_rooms_transfer_and_recipes_with_the_draft_and_dcp(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The plan passes both to the state accounting: decode rooms grow with DCP (and a decode TP the DCP size
    does not divide is rejected with vLLM's reason), the draft's layer moves with every request, and the
    recipes set what the plan assumed; the output says what they do not affect (the step model)."""
    base = ["plan", "llama-3.1-8b", "--gpu", "h100", "--max-gpus", "8", "--isl", "8192", "--osl", "1024",
            "--decode-topologies", "TP1,TP2,TP4", "--prefill-topologies", "TP1", "--json"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)
    out = tmp_path / "recipes"
    assert main([*base, "--speculative-model", "eagle3-llama3-8b", "--num-speculative-tokens", "3",
                 "--decode-context-parallel-size", "2", "--recipes", str(out)]) == 0
    both = json.loads(capsys.readouterr().out)
    room = {(c["role"], c["topology"]): c["kv_room"] for c in plain["candidates"]}
    for c in both["candidates"]:
        if c["role"] == "decode":  # 33/32 of the bytes, then halved by DCP
            assert c["kv_room"] > room[("decode", c["topology"])]
    assert any(r["topology"] == "TP1" and "dcp_size=2" in r["reason"] for r in both["rejected"])
    extras = both["state_extras"]
    assert extras["speculative_method"] == "eagle3" and "not the step model" in extras["affects"]
    # TP1 prefill -> TP2 decode: the draft's layer moves too (33/32 of the bytes); a DCP-2 decode rank gets half.
    key = next(k for k in both["transfers"] if k.startswith("TP1 -> TP2 "))
    t_plain, t_both = plain["transfers"][key], both["transfers"][key]
    assert t_both["prefill_mib_per_rank"] == pytest.approx(t_plain["prefill_mib_per_rank"] * 33 / 32)
    assert t_both["decode_mib_per_rank"] == pytest.approx(t_plain["decode_mib_per_rank"] * 33 / 32 / 2)
    deploy = yaml.safe_load(next(out.glob("deploy-*.yaml")).read_text(encoding="utf-8"))
    roles = deploy["backend"]["vllm_config"]
    spec = json.loads(roles["decode"]["speculative-config"])
    assert spec == {"method": "eagle3", "model": "eagle3-llama3-8b", "num_speculative_tokens": 3}
    assert roles["prefill"]["speculative-config"] == roles["decode"]["speculative-config"]
    assert roles["decode"]["decode-context-parallel-size"] == 2 and "decode-context-parallel-size" not in roles[
        "prefill"]


def test_a_draft_given_as_its_config_file_is_served_from_its_folder() -> None:
    from pdtune.recipe import _draft

    settings = {"speculative_model": "models/eagle3/config.json", "speculative_method": "eagle3",
                "num_speculative_tokens": 2}
    assert _draft(settings) == {"method": "eagle3", "model": "models/eagle3", "num_speculative_tokens": 2}
    assert _draft({"speculative_model": None}) is None
