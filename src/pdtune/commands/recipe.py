"""``pdtune recipe``: srt-slurm recipes and ``vllm serve`` commands for rows of a ``pdtune plan --json``."""

from __future__ import annotations

import argparse

from pdtune.commands._common import emit_json, shared_flag, whole_flag

EPILOG = """\
For each --row K (a row number of the plan's table): deploy-row<K>-<deployment>.yaml (the srt-slurm recipe of the
deployment, aggregated or disaggregated, sa-bench over concurrencies spanning its predicted curve with
random_range_ratio 1.0), serve-row<K>-<...>.sh (the same engines as `vllm serve` commands, one per worker and
node: run it on each node with the node's index), and for a disaggregated row measure-prefill-<layout>.yaml /
measure-decode-<layout>.yaml (the isolated sweeps behind it, prefill at ISL/2 and decode at ISL 1 / OSL 2 ISL + OSL,
the plan's mean context; feed them back with pdtune plan --prefill-results/--decode-results).
--measurements writes the isolated-sweep recipes of every disaggregated layout in the plan's table.
The plan file is checked in full first (format version, every key, vLLM's value rules, the model's layouts).
Recipes that need a router (disaggregated, or several aggregated replicas) run Dynamo 1.6.1 in the vLLM 0.31.0
image it pins (no Dynamo release pins 0.33); one aggregated server, the measurements and the serve scripts run
the image's own vLLM 0.33.0. Prefill and decode share nodes when the plan priced their KV transfer over NVLink.
Every vLLM flag and value written is one those vLLM versions accept (data/vllm/).
Example:
  pdtune plan qwen3.8-2.4t --gpu gb300 --max-gpus 72 --isl 8192 --osl 1024 --json > plan.json
  pdtune recipe plan.json --row 6 --out recipes/
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "recipe",
        help="srt-slurm recipes and vllm serve commands for rows of a plan",
        description="Write srt-slurm recipes for deployments of a `pdtune plan --json` output.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("plan", metavar="PLAN.json", help="output of pdtune plan --json")
    p.add_argument("--row", type=whole_flag(1 << 20, "rows", minimum=0), action="append", default=[], metavar="K",
                   help="plan row to write (repeatable)")
    p.add_argument("--measurements", action="store_true",
                   help="also the isolated-sweep recipes of every layout in the plan's table")
    shared_flag(p, "--out", required=True, help="folder to write into")
    p.add_argument("--model-path", metavar="PATH",
                   help="the model the serve scripts load and the recipes' model.path (default: the model's Hub id in "
                        "the serve scripts, its name as an srtslurm.yaml alias in the recipes)")
    shared_flag(p, "--json", help="list the files written as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pdtune.plan import load_plan
    from pdtune.recipe import write_recipes

    data = load_plan(args.plan)
    written = write_recipes(data, args.row, args.out, measurements=args.measurements, model_path=args.model_path,
                            source=args.plan)
    if args.json:
        emit_json({"written": [str(p) for p in written]})
    else:
        print(f"wrote {len(written)} files to {args.out}:")
        for path in written:
            print(f"  {path}")
    return 0
