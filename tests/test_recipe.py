"""`pdtune recipe`: srt-slurm recipes of the samples' shape, read back by the same reader, every vLLM flag
one vLLM 0.33.0 accepts."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pdtune.cli import main
from pdtune.errors import InputError
from pdtune.plan import PlanSettings, Sla, plan
from pdtune.recipe import (
    MNNVL_ENVIRONMENT,
    accepted_flags,
    candidate_recipes,
    deployment_recipe,
    disagg_placement,
    dynamo_pins,
    dynamo_release,
    place_workers,
    engine_args_file,
    row_recipes,
    serve_commands,
    serve_script,
    unknown_flags,
    write_recipes,
)
from pdtune.results.srt_slurm import load_recipe
from pdtune.vllm_args import config_problems, parse_command, value_problem, value_rules
from pdtune.topology import parse_topology

FIXTURES = Path(__file__).parent / "fixtures" / "srt_slurm_recipes"
SAMPLES = sorted(FIXTURES.glob("*.yaml"))
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def article() -> dict[str, Any]:
    return plan(PlanSettings(model="qwen3.8-2.4t", gpu="gb300", max_gpus=72, isl=8192, osl=1024)).to_dict()


@pytest.fixture(scope="module")
def dsv3() -> dict[str, Any]:
    p = plan(PlanSettings(model="deepseek-v3", gpu="gb200", max_gpus=72, isl=8192, osl=1024),
             [Sla(min_tps_per_user=20)])
    return p.to_dict()


@pytest.fixture(scope="module")
def mixed() -> dict[str, Any]:
    p = plan(PlanSettings(model="qwen3-next-80b-a3b", gpu="b200", decode_gpu="h200", max_gpus=32, isl=8192,
                          osl=1024))
    return p.to_dict()


def _all_recipes(plan_data: dict[str, Any]) -> list[Any]:
    out = []
    for row in plan_data["rows"]:
        out += row_recipes(plan_data, row)
    return out + candidate_recipes(plan_data)


def test_samples_are_read_by_the_recipe_reader() -> None:
    gb200 = load_recipe(FIXTURES / "srt-slurm-recipe-vllm-disagg-gb200-1p4d.yaml")
    assert (gb200.gpu_type, gb200.gpus_per_node, gb200.nodes) == ("gb200", 4, 10)
    workers = (gb200.prefill_workers, gb200.gpus_per_prefill, gb200.decode_workers, gb200.gpus_per_decode)
    assert workers == (1, 8, 4, 8)
    assert gb200.gpus.total == 40 and gb200.concurrencies == (256, 512, 1024)
    assert gb200.vllm_config["decode"]["tensor-parallel-size"] == 8
    qwen = load_recipe(FIXTURES / "srt-slurm-recipe-vllm-qwen3-32b-disagg.yaml")
    # No gpus_per_*: srt-slurm computes 2 nodes x 8 / 6 = 2 per prefill worker; decode_nodes 0 shares them.
    assert (qwen.gpus_per_prefill, qwen.gpus_per_decode, qwen.gpus.prefill, qwen.gpus.decode) == (2, 2, 12, 4)
    agg = load_recipe(FIXTURES / "srt-slurm-recipe-vllm-agg-b200-tp1.yaml")
    assert not agg.disaggregated and (agg.agg_workers, agg.gpus_per_agg) == (1, 1)
    assert list(agg.vllm_config) == ["aggregated"]


def _sample_shape(disaggregated: bool) -> tuple[set[str], set[str]]:
    samples = [yaml.safe_load(p.read_text(encoding="utf-8")) for p in SAMPLES]
    mine = [s for s in samples if ("prefill_nodes" in s["resources"]) == disaggregated]
    return set().union(*mine), set().union(*(s["resources"] for s in mine))


def test_recipes_have_the_samples_shape_and_read_back(article: dict[str, Any], tmp_path: Path) -> None:
    rows = [r["row"] for r in article["rows"]]
    written = write_recipes(article, rows, tmp_path, measurements=True)
    assert written and all(p.exists() for p in written)
    by_name = {p.name: p for p in tmp_path.glob("deploy-*.yaml")}
    modes = set()
    for row in article["rows"]:
        path = by_name[deployment_recipe(article, row).file_name]
        body = yaml.safe_load(path.read_text(encoding="utf-8"))
        keys, resources = _sample_shape(row["mode"] == "disagg")
        assert set(body) <= keys | {"dynamo", "identity"}, path
        assert set(body["resources"]) <= resources, path
        assert body["benchmark"]["type"] == "sa-bench" and body["benchmark"]["random_range_ratio"] == 1.0
        recipe = load_recipe(path)
        assert recipe.backend == "vllm" and recipe.disaggregated == (row["mode"] == "disagg")
        # GPUs the nodes hold cover the workers, with less than one node to spare.
        assert recipe.gpus.total == row["gpus_total"]
        assert 0 <= recipe.nodes * recipe.gpus_per_node - row["gpus_total"] < recipe.gpus_per_node
        # The benchmark spans the predicted curve and includes the row's own concurrency.
        assert row["concurrency"] in recipe.concurrencies
        assert recipe.benchmark["isl"] == 8192 and recipe.benchmark["osl"] == 1024
        modes.add(row["mode"])
        if row["mode"] == "agg":
            assert (recipe.agg_workers, recipe.gpus_per_agg) == (row["agg_replicas"],
                                                                 parse_topology(row["topology"]).gpus)
            cfg = recipe.vllm_config["aggregated"]
            assert "kv-transfer-config" not in cfg
            assert body["frontend"]["type"] == ("vllm" if row["agg_replicas"] == 1 else "dynamo")
            continue
        assert recipe.gpus.prefill == row["gpus_prefill"] and recipe.gpus.decode == row["gpus_decode"]
        assert (recipe.prefill_workers, recipe.decode_workers) == (row["n_prefill_workers"], row["n_decode_workers"])
        for role, topo in (("prefill", row["prefill_topology"]), ("decode", row["decode_topology"])):
            cfg, t = recipe.vllm_config[role], parse_topology(topo)
            assert cfg["tensor-parallel-size"] == t.tp
            assert cfg.get("data-parallel-size", 1) == t.dp
            assert bool(cfg.get("enable-expert-parallel")) == t.expert_parallel
            assert ("speculative-config" in cfg) == (role == "decode" and row["mtp_tokens"] > 0)
            assert json.loads(cfg["kv-transfer-config"])["kv_connector"] == "NixlConnector"
        # GB300 NVL72: one NVLink domain over 18 nodes, so both roles get the multi-node NVLink environment.
        assert body["backend"]["prefill_environment"] == MNNVL_ENVIRONMENT == body["backend"]["decode_environment"]
    assert modes == {"agg", "disagg"}
    for path in tmp_path.glob("measure-*.yaml"):
        recipe = load_recipe(path)
        assert not recipe.disaggregated and list(recipe.vllm_config) == ["aggregated"]
        isl, osl = recipe.benchmark["isl"], recipe.benchmark["osl"]
        # Prefill at ISL/2; decode at ISL 1 with the plan's mean context: 1 + 17408/2 = 8192 + 1024/2 + 1.
        assert (isl, osl) == ((8192, 2) if path.name.startswith("measure-prefill") else (1, 2 * 8192 + 1024))
        assert recipe.vllm_config["aggregated"]["max-model-len"] >= isl + osl
        assert recipe.benchmark["random_range_ratio"] == 1.0


def test_hybrid_with_different_tp_sets_block_size_on_both_sides(article: dict[str, Any]) -> None:
    rows = [r for r in article["rows"] if r.get("block_size_to_set") is not None]
    assert rows, "the article's model has P/D pairs of different TP whose blocks differ"
    for row in rows:
        assert parse_topology(row["prefill_topology"]).tp != parse_topology(row["decode_topology"]).tp
        cfg = deployment_recipe(article, row).body["backend"]["vllm_config"]
        assert cfg["prefill"]["block-size"] == cfg["decode"]["block-size"] == row["block_size_to_set"]
    for row in article["rows"]:
        if row["mode"] == "disagg" and row["block_size_to_set"] is None:
            cfg = deployment_recipe(article, row).body["backend"]["vllm_config"]
            assert "block-size" not in cfg["prefill"] and "block-size" not in cfg["decode"]


def test_every_flag_written_is_one_vllm_accepts(article: dict[str, Any], dsv3: dict[str, Any],
                                               mixed: dict[str, Any]) -> None:
    """Every recipe's flags and values against its own image's vLLM (0.31.0 under Dynamo 1.6.1, else 0.33.0) and
    0.33.0's; every serve line parsed by vLLM 0.33's rules (flags, kinds, choices, bounds)."""
    checked = 0
    for plan_data in (article, dsv3, mixed):
        for recipe in _all_recipes(plan_data):
            for role, flags in recipe.flags().items():
                for version in {recipe.vllm, "0.33.0"}:
                    assert not unknown_flags(flags, serve=False, version=version), (recipe.file_name, role)
                cfg = recipe.body["backend"]["vllm_config"][role]
                assert not config_problems(cfg, version=recipe.vllm), (recipe.file_name, role)
                checked += len(flags)
        for row in plan_data["rows"]:
            commands = serve_commands(serve_script(plan_data, row))
            assert commands
            for _env, words in commands:
                parse_command(words)
                checked += sum(w.startswith("-") for w in words)
    assert checked > 1000


def test_the_samples_flags_are_mostly_in_the_0_33_list(record_property: Any) -> None:
    """The two real recipes: every flag but one is in vLLM 0.33.0's list. `disable-log-requests` (the Qwen3-32B
    recipe, Dynamo 0.8 container) is older: vLLM 0.11 has it, 0.20+ replaced it by --enable-log-requests."""
    missing: dict[str, list[str]] = {}
    total = 0
    for path in SAMPLES:
        recipe = load_recipe(path)
        for role in recipe.vllm_config:
            flags = recipe.flags(role)
            total += len(flags)
            bad = unknown_flags(flags, serve=False)
            if bad:
                missing[f"{path.name}:{role}"] = bad
    record_property("sample_flags_not_in_0_33", missing)
    print(f"{total} sample flags; not in vLLM 0.33.0: {missing}")
    assert {f for flags in missing.values() for f in flags} == {"--disable-log-requests"}
    assert "--enable-log-requests" in accepted_flags()


def test_mixed_pool_recipes_say_what_srt_slurm_cannot_express(mixed: dict[str, Any]) -> None:
    row = next(r for r in mixed["rows"] if r["mode"] == "disagg")
    deploy, prefill, decode = row_recipes(mixed, row)
    assert "MIXED POOLS" in deploy.text() and deploy.body["resources"]["gpu_type"] == "b200"
    assert prefill.body["resources"]["gpu_type"] == "b200" and decode.body["resources"]["gpu_type"] == "h200"


def test_recipe_cli_writes_nothing_on_bad_input(article: dict[str, Any], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(article), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["recipe", str(plan_file), "--row", "999", "--out", str(out)]) == 2
    assert "no row 999" in capsys.readouterr().err and not out.exists()
    (tmp_path / "not-a-plan.json").write_text("{}", encoding="utf-8")
    assert main(["recipe", str(tmp_path / "not-a-plan.json"), "--row", "0", "--out", str(out)]) == 2
    assert "generator" in capsys.readouterr().err and not out.exists()
    for mode, expected in (("disagg", ["deploy", "measure", "measure", "serve"]), ("agg", ["deploy", "serve"])):
        row = next(r for r in article["rows"] if r["mode"] == mode)
        target = out / mode
        assert main(["recipe", str(plan_file), "--row", str(row["row"]), "--out", str(target)]) == 0
        names = sorted(p.name for p in target.iterdir())
        assert [n.split("-")[0] for n in names] == expected
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder left


def test_plan_recipes_flag_writes_the_picks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r"
    assert main(["plan", "qwen3-next-80b-a3b", "--gpu", "h200", "--max-gpus", "16", "--isl", "8192", "--osl",
                 "1024", "--min-tps-per-user", "50,100", "--recipes", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["recipes"] and all(Path(p).exists() for p in data["recipes"])
    assert len(list(out.glob("deploy-*.yaml"))) == len({p["row"] for p in data["picks"]})
    assert data["pdtune_plan"] == 1 and data["comparisons"][0]["sentence"]


# ------------------------------------------------------------------------------------------ the flag list


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("vllm_engine_args", REPO / "scripts" / "vllm_engine_args.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["vllm_engine_args"] = module
    spec.loader.exec_module(module)
    return module


def test_the_generated_list_is_vllm_0_33() -> None:
    text = engine_args_file().read_text(encoding="utf-8")
    assert text.startswith("# vLLM 0.33.0:")
    assert "sha256 4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa" in text
    flags = accepted_flags()
    for flag in ("--tensor-parallel-size", "--data-parallel-size", "--enable-expert-parallel", "--block-size",
                 "--max-num-seqs", "--max-num-batched-tokens", "--gpu-memory-utilization", "--kv-cache-dtype",
                 "--speculative-config", "--kv-transfer-config", "--no-enable-prefix-caching", "-tp"):
        assert flags[flag] == "engine", flag
    assert flags["--port"] == "serve" and flags["--headless"] == "serve"


def test_the_script_reads_flags_as_argparse_registers_them(tmp_path: Path) -> None:
    """A miniature vLLM source: bool fields get --no- twins, ``bool | str | None`` and JSON dataclass fields do
    not, explicit BooleanOptionalAction does, and the frontend's fields become serve flags."""
    src = tmp_path / "vllm"
    files = {
        "_version.py": "__version__ = version = '9.9.9'\n",
        "config/cache.py": """
            from dataclasses import dataclass
            Dtype = Literal["auto", "fp8"]
            @config
            class Inner:
                x: int = 1
            @config
            class CacheConfig:
                block_size: int | None = None
                enable_prefix_caching: bool | None = None
                cache_dtype: Dtype = "auto"
                maybe: bool | str | None = None
                inner: Inner | None = None
            """,
        "engine/arg_utils.py": """
            class EngineArgs:
                @staticmethod
                def add_cli_args(parser):
                    cache_kwargs = get_kwargs(CacheConfig)
                    g = parser.add_argument_group()
                    g.add_argument("--block-size", **cache_kwargs["block_size"])
                    g.add_argument("--enable-prefix-caching", **cache_kwargs["enable_prefix_caching"])
                    g.add_argument("--kv-cache-dtype", **cache_kwargs["cache_dtype"])
                    g.add_argument("--maybe", **cache_kwargs["maybe"])
                    g.add_argument("--inner", "-i", **{**cache_kwargs["inner"], "default": None})
                    parser.add_argument("--fail", action=argparse.BooleanOptionalAction)
            class AsyncEngineArgs(EngineArgs):
                @staticmethod
                def add_cli_args(parser):
                    parser.add_argument("--enable-log-requests", action=argparse.BooleanOptionalAction)
            """,
        "entrypoints/common/cli_args.py": """
            @config
            class BaseFrontendArgs:
                chat_template: str | None = None
                trust_request_chat_template: bool = False
            @config
            class FrontendArgs(BaseFrontendArgs):
                port: int = 8000
            def make_arg_parser(parser):
                parser.add_argument("--headless", action="store_true")
                return parser
            """,
    }
    for rel, body in files.items():
        path = src / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(body), encoding="utf-8")
    script = _script()
    out = tmp_path / "list.txt"
    assert script.main(["--src", str(src), "--out", str(out)]) == 0
    lines = [line.split() for line in out.read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
    got = {flag: scope for flag, scope in lines}
    assert got == {
        "--block-size": "engine", "--enable-prefix-caching": "engine", "--no-enable-prefix-caching": "engine",
        "--kv-cache-dtype": "engine", "--maybe": "engine", "--inner": "engine", "-i": "engine",
        "--fail": "engine", "--no-fail": "engine", "--enable-log-requests": "engine",
        "--no-enable-log-requests": "engine", "--chat-template": "serve", "--trust-request-chat-template": "serve",
        "--no-trust-request-chat-template": "serve", "--port": "serve", "--headless": "serve",
    }
    assert out.read_text(encoding="utf-8").startswith("# vLLM 9.9.9:")


def test_outputs_of_a_measurement_recipe_feed_the_plan(article: dict[str, Any], tmp_path: Path) -> None:
    """The loop the plan closes: srt-slurm copies the recipe it ran into outputs/<job>/config.yaml, so the
    results loader learns each job's layout from it, and `pdtune plan --prefill-results` reads the sweep in
    place of the model. The result files here are synthetic: the committed modeled TP2DP4+EP prefill sweep
    with its pdtune keys (topology, modeled) removed, standing in for a cluster's sa-bench output."""
    row = next(r for r in article["rows"] if r["mode"] == "disagg" and r["prefill_topology"] == "TP2DP4+EP")
    _, prefill, _ = row_recipes(article, row)
    job = tmp_path / "outputs" / "4242"
    bench = job / "logs" / "sa-bench_isl_8192_osl_2"
    bench.mkdir(parents=True)
    (job / "config.yaml").write_text(prefill.text(), encoding="utf-8")
    res = prefill.body["resources"]
    (job / "4242.json").write_text(json.dumps({"job_id": "4242", "model": {"path": "qwen3.8-2.4t"},
                                               "resources": res, "benchmark": {"isl": 8192, "osl": 2}}),
                                   encoding="utf-8")
    source = REPO / "data" / "clusters" / "gb300-qwen3.8-modeled" / "prefill" / "outputs" / "1002"
    for path in (source / "logs" / "sa-bench_isl_8192_osl_2").glob("results_*.json"):
        record = json.loads(path.read_text(encoding="utf-8"))
        for key in ("modeled", "modeled_note", "topology", "mode", "pdtune", "prefill_topology",
                    "decode_topology", "n_prefill_workers", "n_decode_workers", "mtp_tokens", "gpu"):
            record.pop(key, None)
        (bench / path.name).write_text(json.dumps(record), encoding="utf-8")
    from pdtune.results import load_results

    df = load_results(tmp_path)
    assert set(df["topology"]) == {"TP2DP4+EP"} and not df["modeled"].any()
    p = plan(PlanSettings(model="qwen3.8-2.4t", gpu="gb300", max_gpus=72, isl=8192, osl=1024),
             prefill_results=[str(tmp_path)])
    assert {c.source.split(":")[0] for c in p.candidates if c.role == "prefill"} == {"measured"}
    disagg = p.table[p.table["mode"] == "disagg"]
    assert set(disagg["prefill_topology"]) == {"TP2DP4+EP"}
    assert disagg["prefill_source"].str.startswith("measured: ").all()
    assert p.table["modeled"].all()  # the decode side (and the aggregated baseline) is still the model's


# ------------------------------------------------------------------------------------------ --vllm-env


def test_vllm_env_reaches_every_worker_environment(article: dict[str, Any]) -> None:
    # srt-slurm's vLLM backend (srtctl 0.3.0 backends/vllm.py) takes prefill_environment, decode_environment and
    # aggregated_environment mappings; the plan's --vllm-env goes into each role's block beside the GB300 MNNVL
    # variables, and the serve script sets it on every worker line.
    data = json.loads(json.dumps(article))
    data["settings"]["vllm_env"] = {"VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE": "0"}
    want = {"VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE": "0"}
    row = next(r for r in data["rows"] if r["mode"] == "disagg")
    deploy, *measure = row_recipes(data, row)
    backend = deploy.body["backend"]
    assert backend["prefill_environment"] == backend["decode_environment"] == {**MNNVL_ENVIRONMENT, **want}
    for recipe in measure + candidate_recipes(data)[:2]:
        assert want.items() <= recipe.body["backend"]["aggregated_environment"].items()
    assert "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0 " in serve_script(data, row)  # on every worker line
    # none given: the GB300 recipe keeps its MNNVL block only
    plain = next(r for r in article["rows"] if r["mode"] == "disagg")
    assert row_recipes(article, plain)[0].body["backend"]["prefill_environment"] == MNNVL_ENVIRONMENT
    data["settings"]["vllm_env"] = {"VLLM_NOPE": "1"}  # a hand-edited plan file is checked again
    with pytest.raises(InputError, match="VLLM_NOPE"):
        row_recipes(data, row)


def test_plan_cli_records_its_vllm_env(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r"
    assert main(["plan", "qwen3-next-80b-a3b", "--gpu", "h200", "--max-gpus", "16", "--isl", "8192", "--osl",
                 "1024", "--min-tps-per-user", "50", "--recipes", str(out), "--json",
                 "--vllm-env", "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["settings"]["vllm_env"] == {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}
    deploy = next(out.glob("deploy-*.yaml"))
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in deploy.read_text()



def test_the_bad_input_corpus_breaks_a_valid_plan_one_key_at_a_time(tmp_path: Path) -> None:
    """Issue 22's plan-file cases (tests/badinputs.py, causes 2202 and 2203) each change one key of this plan; the
    plan itself passes the schema and writes its recipes."""
    from badinputs import PLAN_ROWS, plan_file

    from pdtune.plan.files import check_plan

    data = plan_file(PLAN_ROWS)
    assert check_plan(data, "base") is data
    names = sorted(p.name for p in write_recipes(data, [0, 1], tmp_path))
    assert names == ["deploy-row0-1xtp2-1xtp2.yaml", "deploy-row1-8xtp2.yaml", "measure-decode-tp2.yaml",
                     "measure-prefill-tp2.yaml", "serve-row0-1xtp2-1xtp2.sh", "serve-row1-8xtp2.sh"]


def test_a_plan_round_trips_through_its_schema(dsv3: dict[str, Any], mixed: dict[str, Any], tmp_path: Path) -> None:
    """What `pdtune plan --json` writes, `pdtune recipe` reads: every plan passes its own schema, as a file too."""
    from pdtune.plan import load_plan

    for name, data in (("dsv3", dsv3), ("mixed", mixed)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        assert load_plan(path)["pdtune_plan"] == 1


# ------------------------------------------------------------------------------------------ placement, versions


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 6), st.sampled_from([1, 2, 4, 8, 16]), st.integers(1, 6), st.sampled_from([1, 2, 4, 8, 16]),
       st.sampled_from([4, 8]), st.booleans())
def test_placement_gives_every_worker_gpus_of_its_own(x: int, gp: int, y: int, gd: int, gpn: int,
                                                      packed: bool) -> None:
    """srt-slurm's allocation rules as pdtune mirrors them: every worker gets its layout's GPUs and no GPU twice,
    or (packed) the placement is refused, which is when srt-slurm's own allocator would hand a whole-node worker
    GPUs a packed worker already holds."""
    try:
        workers = place_workers([("prefill", x, gp), ("decode", y, gd)], gpn, packed=packed)
    except ValueError:
        assert packed  # separate pools never collide
        return
    taken = [(n, g) for w in workers for n, gpus in w.places for g in gpus]
    assert len(taken) == len(set(taken)) == x * gp + y * gd
    assert all(sum(len(g) for _, g in w.places) == w.gpus for w in workers)
    assert all(0 <= g < gpn for _, g in taken)


def test_packing_keeps_an_nvlink_priced_row_on_one_node() -> None:
    """7 of 8 H200: 3 TP1 prefill engines and 2 DP2 decode engines, KV over NVLink: one node, decode packed behind
    prefill (GPUs 0-2 and 3-6), where separate pools would take two nodes and move the KV transfer onto the NIC."""
    place = disagg_placement(3, 1, 2, 2, 8, nvlink_in_node=True)
    assert place.packed and (place.prefill_nodes, place.decode_nodes) == (1, 0)
    assert [w.places for w in place.workers] == [((0, (0,)),), ((0, (1,)),), ((0, (2,)),), ((0, (3, 4)),),
                                                 ((0, (5, 6)),)]
    apart = disagg_placement(3, 1, 2, 2, 8, nvlink_in_node=False)
    assert apart.packed  # fewer nodes too
    # Two pools of whole nodes stay apart: 2 x 4 prefill GPUs and one TP8 decode engine on 8-GPU nodes.
    wide = disagg_placement(2, 4, 1, 8, 8, nvlink_in_node=False)
    assert not wide.packed and (wide.prefill_nodes, wide.decode_nodes) == (1, 1)
    # Three TP2 prefill engines (6 of a node) before a TP8 decode: srt-slurm would put the decode engine on the
    # partly used node, so pdtune does not pack it (GPUs 0-5 would be handed out twice).
    with pytest.raises(ValueError, match="share GPU"):
        place_workers([("prefill", 3, 2), ("decode", 1, 8)], 8, packed=True)
    assert not disagg_placement(3, 2, 1, 8, 8, nvlink_in_node=False).packed


def test_dynamo_and_vllm_versions_belong_together() -> None:
    """data/vllm/dynamo-vllm-pins.csv, read from the ai-dynamo wheels' METADATA (`Requires-Dist: vllm[...]==X;
    extra == 'vllm'`): 1.2.1 pins 0.20.1 (the issue's mismatch with a 0.33 image), 1.6.1 pins 0.31.0, none 0.33."""
    pins = {r.version: r.vllm for r in dynamo_pins()}
    assert pins["1.2.1"] == "0.20.1" and pins["1.6.1"] == "0.31.0" and "0.33.0" not in pins.values()
    release_, matched = dynamo_release("0.33.0")
    assert (release_.version, release_.vllm, release_.image, matched) == ("1.6.1", "0.31.0",
                                                                          "vllm/vllm-openai:v0.31.0", False)
    assert dynamo_release("0.26.0") == (next(r for r in dynamo_pins() if r.version == "1.4.2"), True)
    # Every image a recipe names has its flag list bundled, so its flags are checked against its own vLLM.
    bundled = {p.name[len("engine-args-"):-len(".txt")] for p in (REPO / "data" / "vllm").glob("engine-args-*.txt")}
    assert {r.vllm for r in dynamo_pins()[:1]} | {"0.33.0"} <= bundled


def test_recipes_declare_their_versions_for_srt_slurm_to_verify(article: dict[str, Any]) -> None:
    for recipe in _all_recipes(article):
        body = recipe.body
        frameworks = body["identity"]["frameworks"]
        assert body["identity"]["container"]["image"] == body["model"]["container"] == \
            f"vllm/vllm-openai:v{frameworks['vllm']}"
        if body["frontend"]["type"] == "dynamo":
            assert body["dynamo"]["version"] == frameworks["dynamo"] == "1.6.1" and frameworks["vllm"] == "0.31.0"
        else:
            assert "dynamo" not in body and frameworks == {"vllm": "0.33.0"}


def test_the_script_reads_what_each_flag_takes(tmp_path: Path) -> None:
    """``--values``: a miniature vLLM source, each rule of ``get_kwargs`` once. A Literal (nested aliases
    flattened) gives choices argparse enforces, ``Literal | str`` choices the config validator enforces; a
    pydantic ``Field(gt=, le=)`` gives bounds; a config dataclass is JSON with its own fields; an explicit
    ``choices=`` wins."""
    src = tmp_path / "vllm"
    files = {
        "_version.py": "__version__ = '9.9.9'\n",
        "config/cache.py": """
            Inner = Literal["a", "b"]
            Outer = Literal["c", Inner]
            Dtype = Literal["auto", "fp8"]
            @config
            class Spec:
                method: Outer | None = None
                tokens: int = Field(default=None, gt=0)
            @config
            class CacheConfig:
                block_size: int = Field(default=None, gt=0)
                util: float = Field(default=0.9, gt=0, le=1)
                cache_dtype: Dtype | str = "auto"
                mode: Outer = "c"
                spec: Spec | None = None
                caching: bool = True
            """,
        "engine/arg_utils.py": """
            class EngineArgs:
                @staticmethod
                def add_cli_args(parser):
                    kw = get_kwargs(CacheConfig)
                    parser.add_argument("--block-size", **kw["block_size"])
                    parser.add_argument("--util", **kw["util"])
                    parser.add_argument("--kv-cache-dtype", **kw["cache_dtype"])
                    parser.add_argument("--mode", **kw["mode"])
                    parser.add_argument("--spec", **kw["spec"])
                    parser.add_argument("--caching", **kw["caching"])
                    parser.add_argument("--level", type=str, choices=["x", "y"])
            """,
        "entrypoints/common/cli_args.py": """
            @config
            class FrontendArgs:
                port: int = 8000
            def make_arg_parser(parser):
                parser.add_argument("--headless", action="store_true")
                return parser
            """,
    }
    for rel, body in files.items():
        path = src / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(body), encoding="utf-8")
    values = tmp_path / "values.json"
    assert _script().main(["--src", str(src), "--out", str(tmp_path / "list.txt"), "--values", str(values)]) == 0
    got = json.loads(values.read_text(encoding="utf-8"))
    assert got["vllm"] == "9.9.9"
    flags = got["flags"]
    assert flags["--block-size"]["kind"] == "int" and flags["--block-size"]["bounds"] == {"gt": 0}
    assert flags["--util"] == {"kind": "float", "bounds": {"gt": 0, "le": 1}, "field": "CacheConfig.util"}
    assert flags["--kv-cache-dtype"]["choices"] == ["auto", "fp8"]
    assert flags["--kv-cache-dtype"]["enforced"] == "config"
    assert flags["--mode"]["choices"] == ["a", "b", "c"] and flags["--mode"]["enforced"] == "argparse"
    assert flags["--spec"]["kind"] == "json" and flags["--spec"]["config_class"] == "Spec"
    assert flags["--spec"]["fields"]["method"] == {"kind": "str", "choices": ["a", "b", "c"], "enforced": "argparse",
                                                   "optional": True}
    assert flags["--spec"]["fields"]["tokens"]["bounds"] == {"gt": 0}
    assert flags["--caching"]["kind"] == "bool" and flags["--no-caching"] == {"kind": "bool", "negates": "--caching"}
    assert flags["--level"]["choices"] == ["x", "y"] and flags["--headless"] == {"kind": "flag"}
    assert flags["--port"]["kind"] == "int"


def test_the_value_rules_are_vllm_0_33s() -> None:
    """The generated rules of the bundled 0.33.0 wheel, by hand from its source: ``CacheConfig.cache_dtype`` is
    ``CacheDType | str`` (22 dtypes, checked by ``_validate_cache_dtype``), ``gpu_memory_utilization`` is
    ``Field(gt=0, le=1)``, ``block_size`` ``Field(gt=0)``, ``SchedulerConfig.max_num_seqs`` ``Field(ge=1)``
    (vllm/config/cache.py, vllm/config/scheduler.py)."""
    rules = value_rules()
    dtypes = rules["--kv-cache-dtype"]
    assert len(dtypes["choices"]) == 22 and {"auto", "fp8", "nvfp4", "bfloat16"} <= set(dtypes["choices"])
    assert rules["--gpu-memory-utilization"]["bounds"] == {"gt": 0, "le": 1}
    assert rules["--block-size"]["bounds"] == {"gt": 0} and rules["--max-num-seqs"]["bounds"] == {"ge": 1}
    assert "mtp" in rules["--speculative-config"]["fields"]["method"]["choices"]
    assert value_problem("--kv-cache-dtype", "fp7").startswith("must be one of auto, bfloat16")
    assert value_problem("--gpu-memory-utilization", 5.0) == "must be at most 1, got 5.0"
    assert value_problem("--block-size", "big") == "expected an integer, got 'big'"
    assert "65,536 sequences per engine" in value_problem("--max-num-seqs", 70000)
    assert value_problem("--max-num-seqs", "9" * 300) == "an integer of 300 digits"
    assert value_problem("--speculative-config", '{"method":"mtp","num_speculative_tokens":3}') == ""
    assert "no field" in value_problem("--speculative-config", '{"method":"mtp","tokens":3}')
    # vLLM's cross-field rule (SchedulerConfig.verify_max_model_len): the budget holds every decode token.
    assert config_problems({"max-num-seqs": 512, "max-num-batched-tokens": 256}) == [
        "max-num-batched-tokens: 256 is below max-num-seqs (512), which vLLM refuses"]
    with pytest.raises(ValueError, match="no such flag"):
        parse_command("vllm serve m --tp 8")
    with pytest.raises(ValueError, match="takes no value|a value without a flag"):
        parse_command("vllm serve m --headless yes")
    assert parse_command("vllm serve m --port 8100 --headless")["--headless"] is True


def test_bundled_hub_ids_are_the_readme_table() -> None:
    """data/models/hub-ids.csv is the "Hub id" column of data/models/README.md's table (the first `org/name` of
    each row, empty where the row has none); serve scripts load the model by it."""
    import re

    from pdtune.model import bundled_models, load_model
    from pdtune.model.hub import bundled_hub_ids, hub_id

    table = {}
    for line in (REPO / "data" / "models" / "README.md").read_text(encoding="utf-8").splitlines():
        if m := re.match(r"\| `([^`]+)` \| (.+?) \|", line):
            ids = re.findall(r"`([^`]+/[^`]+)`", m.group(2))
            table[m.group(1)] = ids[0] if ids else ""
    assert bundled_hub_ids() == table and set(table) == set(bundled_models())
    assert hub_id(load_model("deepseek-v3")) == "deepseek-ai/DeepSeek-V3"
    assert hub_id(load_model("qwen3.8-2.4t")) is None  # the article's reconstructed model has no Hub id
