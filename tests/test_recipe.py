"""`pdtune recipe`: srt-slurm recipes of the samples' shape, read back by the same reader, every vLLM flag
one vLLM 0.33.0 accepts."""

from __future__ import annotations

import importlib.util
import json
import shlex
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from pdtune.cli import main
from pdtune.errors import InputError
from pdtune.plan import PlanSettings, Sla, plan
from pdtune.recipe import (
    accepted_flags,
    candidate_recipes,
    deployment_recipe,
    engine_args_file,
    row_recipes,
    serve_script,
    unknown_flags,
    write_recipes,
)
from pdtune.results.srt_slurm import load_recipe
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


def test_recipes_have_the_samples_shape_and_read_back(article: dict[str, Any], tmp_path: Path) -> None:
    sample_keys = set().union(*(yaml.safe_load(p.read_text(encoding="utf-8")) for p in SAMPLES))
    sample_resources = set().union(*(yaml.safe_load(p.read_text(encoding="utf-8"))["resources"] for p in SAMPLES))
    rows = [r["row"] for r in article["rows"]]
    written = write_recipes(article, rows, tmp_path, measurements=True)
    assert written and all(p.exists() for p in written)
    for path in tmp_path.glob("deploy-*.yaml"):
        body = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert set(body) <= sample_keys | {"dynamo"}, path
        assert set(body["resources"]) <= sample_resources, path
        assert set(body["backend"]["vllm_config"]) == {"prefill", "decode"}
        assert body["benchmark"]["type"] == "sa-bench"
        recipe = load_recipe(path)
        assert recipe.disaggregated and recipe.backend == "vllm"
    by_name = {p.name: p for p in tmp_path.glob("deploy-*.yaml")}
    for row in article["rows"]:
        recipe = load_recipe(by_name[deployment_recipe(article, row).file_name])
        assert recipe.gpus.prefill == row["gpus_prefill"] and recipe.gpus.decode == row["gpus_decode"]
        assert (recipe.prefill_workers, recipe.decode_workers) == (row["n_prefill_workers"], row["n_decode_workers"])
        # GPUs the nodes hold cover the workers.
        assert recipe.nodes * recipe.gpus_per_node >= row["gpus_total"]
        # The benchmark spans the predicted curve and includes the row's own concurrency.
        assert row["concurrency"] in recipe.concurrencies
        assert recipe.benchmark["isl"] == 8192 and recipe.benchmark["osl"] == 1024
        for role, topo in (("prefill", row["prefill_topology"]), ("decode", row["decode_topology"])):
            cfg, t = recipe.vllm_config[role], parse_topology(topo)
            assert cfg["tensor-parallel-size"] == t.tp
            assert cfg.get("data-parallel-size", 1) == t.dp
            assert bool(cfg.get("enable-expert-parallel")) == t.expert_parallel
            assert ("speculative-config" in cfg) == (row["mtp_tokens"] > 0)
            assert json.loads(cfg["kv-transfer-config"])["kv_connector"] == "NixlConnector"
    for path in tmp_path.glob("measure-*.yaml"):
        recipe = load_recipe(path)
        assert not recipe.disaggregated and list(recipe.vllm_config) == ["aggregated"]
        isl, osl = recipe.benchmark["isl"], recipe.benchmark["osl"]
        assert (isl, osl) == ((8192, 2) if path.name.startswith("measure-prefill") else (1, 1024))


def test_hybrid_with_different_tp_sets_block_size_on_both_sides(article: dict[str, Any]) -> None:
    rows = [r for r in article["rows"] if r["block_size_to_set"] is not None]
    assert rows, "the article's model has P/D pairs of different TP whose blocks differ"
    for row in rows:
        assert parse_topology(row["prefill_topology"]).tp != parse_topology(row["decode_topology"]).tp
        cfg = deployment_recipe(article, row).body["backend"]["vllm_config"]
        assert cfg["prefill"]["block-size"] == cfg["decode"]["block-size"] == row["block_size_to_set"]
    for row in article["rows"]:
        if row["block_size_to_set"] is None:
            cfg = deployment_recipe(article, row).body["backend"]["vllm_config"]
            assert "block-size" not in cfg["prefill"] and "block-size" not in cfg["decode"]


def test_every_flag_written_is_one_vllm_0_33_accepts(article: dict[str, Any], dsv3: dict[str, Any],
                                                     mixed: dict[str, Any]) -> None:
    checked = 0
    for plan_data in (article, dsv3, mixed):
        for recipe in _all_recipes(plan_data):
            for role, flags in recipe.flags().items():
                assert not unknown_flags(flags, serve=False), (recipe.file_name, role)
                checked += len(flags)
        for row in plan_data["rows"]:
            for line in serve_script(plan_data, row).splitlines():
                if line.startswith("vllm serve"):
                    flags = [w for w in shlex.split(line) if w.startswith("-")]
                    assert not unknown_flags(flags, serve=True), line
                    checked += len(flags)
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
    row = mixed["rows"][0]
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
    pick = next(p for p in article["picks"] if p["sla"]["min_tps_per_user"] == 50)
    assert main(["recipe", str(plan_file), "--row", str(pick["row"]), "--out", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert [n.split("-")[0] for n in names] == ["deploy", "measure", "measure", "serve"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder left


def test_plan_recipes_flag_writes_the_picks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r"
    assert main(["plan", "qwen3-next-80b-a3b", "--gpu", "h200", "--max-gpus", "16", "--isl", "8192", "--osl",
                 "1024", "--min-tps-per-user", "50,100", "--recipes", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["recipes"] and all(Path(p).exists() for p in data["recipes"])
    assert len(list(out.glob("deploy-*.yaml"))) == len({p["row"] for p in data["picks"]})


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
    row = next(r for r in article["rows"] if r["prefill_topology"] == "TP2DP4+EP")
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
    assert set(p.table["prefill_topology"]) == {"TP2DP4+EP"}
    assert p.table["prefill_source"].str.startswith("measured: ").all()
    assert p.table["modeled"].all()  # the decode side is still the model's


# ------------------------------------------------------------------------------------------ --vllm-env


def test_vllm_env_reaches_every_worker_environment(article: dict[str, Any]) -> None:
    # srt-slurm's vLLM backend (srtctl 0.3.0 backends/vllm.py) takes prefill_environment, decode_environment and
    # aggregated_environment mappings; the plan's --vllm-env goes into each role's block, and the serve script
    # exports it.
    data = json.loads(json.dumps(article))
    data["settings"]["vllm_env"] = {"VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE": "0"}
    want = {"VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE": "0"}
    row = data["rows"][0]
    deploy, *measure = row_recipes(data, row)
    assert deploy.body["backend"]["prefill_environment"] == deploy.body["backend"]["decode_environment"] == want
    for recipe in measure + candidate_recipes(data)[:2]:
        assert recipe.body["backend"]["aggregated_environment"] == want
    assert "export VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0" in serve_script(data, row)
    # none given, no block: the recipes stay as they were
    assert "prefill_environment" not in row_recipes(article, article["rows"][0])[0].body["backend"]
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
