"""Issue 20's three plans, from the plan to what srt-slurm would launch: gpt-oss-120b on 8 H200 (1k/1k, >= 50 tokens/s
per user), Qwen3-235B-A22B-FP8 on 16 H200 (4k/512, >= 30) and DeepSeek-V3 on 72 GB200 (8k/1k, >= 20).

For each plan every row's recipes and the measurement recipes are written; srt-slurm itself (its venv ``.srt/``,
made by ``make srt``; ``tests/srt_check.py`` runs it, offline) dry-runs every recipe, and its own worker-command
builder renders every deployment: the GPUs its workers get are exactly the ones the row priced, each worker
its layout's, none shared. Every ``vllm serve`` line of every serve script parses under vLLM 0.33's rules
(:func:`pdtune.vllm_args.parse_command`) and names the model by its Hub id. All numbers are modeled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from pdtune.plan import Plan, PlanSettings, Sla, comparison_sentence, plan
from pdtune.recipe import serve_commands, serve_script, write_recipes
from pdtune.topology import parse_topology
from pdtune.vllm_args import parse_command

REPO = Path(__file__).resolve().parents[1]
SRT_PYTHON = Path(os.environ.get("PDTUNE_SRT", REPO / ".srt")) / "bin" / "python"
CHECK = REPO / "tests" / "srt_check.py"

CASES = {
    "gpt-oss-120b": (PlanSettings(model="gpt-oss-120b", gpu="h200", max_gpus=8, isl=1024, osl=1024), 50.0),
    "qwen3-235b-a22b-fp8": (PlanSettings(model="qwen3-235b-a22b-fp8", gpu="h200", max_gpus=16, isl=4096, osl=512),
                            30.0),
    "deepseek-v3": (PlanSettings(model="deepseek-v3", gpu="gb200", max_gpus=72, isl=8192, osl=1024), 20.0),
}
HUB = {"gpt-oss-120b": "openai/gpt-oss-120b", "qwen3-235b-a22b-fp8": "Qwen/Qwen3-235B-A22B-FP8",
       "deepseek-v3": "deepseek-ai/DeepSeek-V3"}


@pytest.fixture(scope="module")
def plans() -> dict[str, Plan]:
    return {name: plan(s, [Sla(min_tps_per_user=floor)], require_sla=True) for name, (s, floor) in CASES.items()}


@pytest.fixture(scope="module")
def written(plans: dict[str, Plan], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every row's recipes and serve script, and every measurement recipe, of each plan."""
    out = {}
    for name, p in plans.items():
        folder = tmp_path_factory.mktemp(name)
        data = json.loads(json.dumps(p.to_dict()))  # as `pdtune recipe` reads the file
        write_recipes(data, [int(r["row"]) for r in data["rows"]], folder, measurements=True)
        out[name] = folder
    return out


def _srt(mode: str, paths: list[Path], tmp_path: Path) -> dict[str, Any]:
    if not SRT_PYTHON.is_file():
        pytest.fail(f"srt-slurm's venv is missing ({SRT_PYTHON}): run `make srt` (make test does)")
    target = tmp_path / f"{mode}.json"
    done = subprocess.run([str(SRT_PYTHON), str(CHECK), mode, str(target), *map(str, paths)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(target.read_text(encoding="utf-8"))


def test_the_tables_hold_both_serving_modes_and_name_the_winner(plans: dict[str, Plan]) -> None:
    """Must show: gpt-oss-120b on 8 H200 and Qwen3-235B-A22B-FP8 on 16 H200 (and DeepSeek-V3 on 72 GB200) have
    aggregated and disaggregated rows in one table, and one sentence names the winner and the ratio."""
    for name, p in plans.items():
        (pick,) = p.picks
        assert pick.met and set(p.table["mode"]) == {"agg", "disagg"}
        assert pick.best_agg is not None and pick.best_disagg is not None
        a, d = p.row(pick.best_agg), p.row(pick.best_disagg)
        assert a["mode"] == "agg" and d["mode"] == "disagg"
        assert a["tps_per_user"] >= CASES[name][1] and d["tps_per_user"] >= CASES[name][1]
        sentence = comparison_sentence(p, pick)
        cmp = p.comparison(pick)
        assert f"{ {'agg': 'aggregated', 'disagg': 'disaggregated'}[cmp['winner']]} wins" in sentence
        assert f"{cmp['ratio']:.2f}x" in sentence
        # The pick is the winner's row: the best row meeting the SLA, within the TTFT ceiling where one is.
        assert p.row(pick.row)["mode"] == cmp["winner"]
        assert p.row(pick.row)["tps_per_gpu"] == (a if cmp["winner"] == "agg" else d)["tps_per_gpu"]
        print(f"{name}: {sentence}")


def test_every_recipe_passes_srtctl_dry_run(written: dict[str, Path], tmp_path: Path) -> None:
    paths = sorted(p for folder in written.values() for p in folder.glob("*.yaml"))
    kinds = Counter(p.name.split("-")[0] for p in paths)
    assert kinds["deploy"] >= 30 and kinds["measure"] >= 10, kinds
    result = _srt("dry-run", paths, tmp_path)
    failed = {Path(k).name: v["tail"][-500:] for k, v in result.items() if v["code"] != 0}
    assert not failed, failed
    print(f"srtctl dry-run: {len(result)} recipes, all exit 0 ({dict(kinds)})")


def test_srt_slurms_workers_use_exactly_the_gpus_the_row_priced(plans: dict[str, Plan], written: dict[str, Path],
                                                                 tmp_path: Path) -> None:
    rows = {}
    paths = []
    for name, p in plans.items():
        for r in p.to_dict()["rows"]:
            path = next(written[name].glob(f"deploy-row{r['row']}-*.yaml"))
            rows[str(path)] = (name, r)
            paths.append(path)
    result = _srt("workers", paths, tmp_path)
    for key, rendered in result.items():
        name, r = rows[key]
        procs = rendered["processes"]
        gpus = [(q["node"], g) for q in procs for g in q["gpus"]]
        assert len(gpus) == len(set(gpus)), f"{key}: two processes share a GPU"
        assert len(gpus) == r["gpus_total"], (key, len(gpus), r["gpus_total"])
        # Never more nodes than the row's GPUs need: less than one node's GPUs to spare.
        assert rendered["nodes"] * rendered["gpus_per_node"] - r["gpus_total"] < rendered["gpus_per_node"]
        per_worker: dict[tuple[str, int], int] = defaultdict(int)
        for q in procs:
            per_worker[(q["role"], q["index"])] += len(q["gpus"])
            # srt-slurm hands each process its GPUs by --device-ids; they are the ones counted here.
            cmd = q["command"]
            assert cmd[cmd.index("--device-ids") + 1] == ",".join(map(str, q["gpus"]))
        if r["mode"] == "agg":
            layout = parse_topology(r["topology"])
            assert per_worker == {("agg", i): layout.gpus for i in range(r["agg_replicas"])}
            continue
        p_layout, d_layout = parse_topology(r["prefill_topology"]), parse_topology(r["decode_topology"])
        expected = {("prefill", i): p_layout.gpus for i in range(r["n_prefill_workers"])}
        expected.update({("decode", i): d_layout.gpus for i in range(r["n_decode_workers"])})
        assert dict(per_worker) == expected, key
        for q in procs:
            cmd = q["command"]
            layout = p_layout if q["role"] == "prefill" else d_layout
            assert cmd[cmd.index("--tensor-parallel-size") + 1] == str(layout.tp)
            assert ("--data-parallel-size" in cmd) == (layout.dp > 1)
            assert cmd[cmd.index("--disaggregation-mode") + 1] == q["role"]
            if plans[name].settings.gpu == "gb200":  # one NVLink domain over 18 nodes: MNNVL on for both roles
                assert q["environment"]["NCCL_MNNVL_ENABLE"] == "1"
                assert q["environment"]["UCX_CUDA_IPC_ENABLE_MNNVL"] == "y"
        # A KV transfer priced over NVLink on an 8-GPU HGX board stays on one node.
        if r["kv_link"] == "nvlink" and rendered["gpus_per_node"] == 8:
            assert {q["node"] for q in procs} == {"node0"}, key


def test_every_serve_line_parses_under_vllm_0_33_and_fits_its_node(plans: dict[str, Plan],
                                                                      written: dict[str, Path]) -> None:
    lines = multi = 0
    for name, p in plans.items():
        data = p.to_dict()
        gpn = data["gpus"]["prefill"]["gpus_per_node"]
        for r in data["rows"]:
            script = next(written[name].glob(f"serve-row{r['row']}-*.sh")).read_text(encoding="utf-8")
            assert script == serve_script(data, r)
            by_node: dict[str, list[tuple[dict[str, str], dict[str, Any]]]] = defaultdict(list)
            node = None
            for line in script.splitlines():
                if line.startswith('if [ "$NODE_INDEX" = '):
                    node = line.split("= ")[1].split(" ]")[0]
                elif " vllm serve " in f" {line.strip()} " and not line.strip().startswith("#"):
                    ((env, words),) = serve_commands(line)
                    flags = parse_command(words)
                    assert flags["model"] == HUB[name]
                    by_node[str(node)].append((env, flags))
                    lines += 1
            gpus_seen = 0
            nixl: set[int] = set()
            for node, entries in by_node.items():
                devices = [int(g) for env, _ in entries for g in env["CUDA_VISIBLE_DEVICES"].split(",")]
                assert len(devices) == len(set(devices)) and all(0 <= g < gpn for g in devices), (name, r["row"])
                gpus_seen += len(devices)
                ports = [int(f["--port"]) for _, f in entries if "--port" in f]
                assert len(ports) == len(set(ports)), (name, r["row"], node)
                assert len({env["VLLM_PORT"] for env, _ in entries}) == len(entries)
                for env, f in entries:
                    if "--nnodes" in f:
                        multi += 1
                        assert f["--master-addr"].startswith("$NODE")
                        assert ("--headless" in f) == (f["--node-rank"] != "0")
                        assert ("--port" in f) == (f["--node-rank"] == "0")
                    if r["mode"] == "disagg":
                        port = int(env["VLLM_NIXL_SIDE_CHANNEL_PORT"])
                        if "--nnodes" not in f or f["--node-rank"] == "0":
                            assert port not in nixl
                            nixl.add(port)
            assert gpus_seen == r["gpus_total"], (name, r["row"])
    assert lines > 100 and multi > 0  # DeepSeek-V3's TP8+ engines span 4-GPU GB200 nodes
    print(f"{lines} vllm serve lines parsed, {multi} of them multi-node")


def test_gpt_oss_on_8_h200_packs_both_pools_on_one_node(plans: dict[str, Plan], written: dict[str, Path]) -> None:
    """The issue's case: a plan that fits 7 of 8 H200 (KV over NVLink) asked for two nodes; now one."""
    p = plans["gpt-oss-120b"]
    for r in p.to_dict()["rows"]:
        if r["mode"] != "disagg" or r["kv_link"] != "nvlink":
            continue
        body = yaml.safe_load(next(written["gpt-oss-120b"].glob(f"deploy-row{r['row']}-*.yaml")).read_text())
        res = body["resources"]
        assert (res["prefill_nodes"], res["decode_nodes"]) == (1, 0), r["deployment"]
        assert body["backend"]["allow_prefill_decode_colocation"] is True


if __name__ == "__main__":  # print the three plans' winner sentences
    for n, (settings, floor) in CASES.items():
        result = plan(settings, [Sla(min_tps_per_user=floor)], require_sla=True)
        print(f"{n}: {comparison_sentence(result, result.picks[0])}")
    sys.exit(0)
