"""Run srt-slurm's own code on recipes pdtune wrote; started by the tests with srt-slurm's venv (``.srt/``).

    .srt/bin/python tests/srt_check.py dry-run OUT.json RECIPE.yaml ...
    .srt/bin/python tests/srt_check.py workers OUT.json RECIPE.yaml ...

``dry-run``: ``srtctl dry-run -f RECIPE`` (srtctl's own command-line entry point, ``srtctl.cli.submit.main``),
one recipe after another in this process; OUT.json gets each recipe's exit status and the tail of its output.
``workers``: the worker commands srt-slurm would launch, from its own code: ``srtctl.core.config.load_config``,
the backend's ``allocate_endpoints`` and ``endpoints_to_processes`` (as ``srtctl/cli/do_sweep.py`` calls them,
on as many nodes as the recipe asks for), then ``build_worker_command`` of ``srtctl/backends/vllm.py`` per
process; OUT.json gets per recipe the processes (role, worker index, node, GPU indices, command).

Offline by construction: every socket connection is refused before srt-slurm runs (its dry run looks a recipe's
``identity.model.repo`` up on huggingface.co; that check then reports a failure and changes nothing), and node
names resolve to made-up addresses. This file imports srtctl; pdtune never does.
"""

from __future__ import annotations

import contextlib
import io
import json
import socket
import sys
from pathlib import Path
from typing import Any


def _offline() -> None:
    def refuse(*_args: Any, **_kwargs: Any) -> None:
        raise OSError("offline: tests/srt_check.py refuses every connection")

    socket.socket.connect = refuse  # type: ignore[method-assign]
    socket.socket.connect_ex = refuse  # type: ignore[method-assign]
    socket.create_connection = refuse  # type: ignore[assignment]
    socket.getaddrinfo = refuse  # type: ignore[assignment]
    socket.gethostbyname = refuse  # type: ignore[assignment]


def dry_run(paths: list[str]) -> dict[str, Any]:
    from srtctl.cli.submit import main

    out = {}
    for path in paths:
        buffer = io.StringIO()
        argv = sys.argv
        sys.argv = ["srtctl", "dry-run", "-f", path, "-y"]
        code: Any = 0
        try:
            with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
                result = main()
            code = result if isinstance(result, int) else 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Exception as exc:  # srt-slurm refused the recipe with an exception: report it
            code, buffer = 1, io.StringIO(f"{type(exc).__name__}: {exc}")
        finally:
            sys.argv = argv
        out[path] = {"code": code, "tail": buffer.getvalue()[-3000:]}
    return out


def workers(paths: list[str]) -> dict[str, Any]:
    import srtctl.core.slurm as slurm
    from srtctl.core.config import load_config
    from srtctl.core.runtime import Nodes, RuntimeContext
    from srtctl.core.topology import NodePortAllocator

    slurm.get_hostname_ip = lambda host, *_a, **_k: f"10.0.0.{int(host[4:]) + 1}"  # type: ignore[assignment]
    out = {}
    for path in paths:
        config = load_config(path)
        r = config.resources
        names = tuple(f"node{i}" for i in range(r.total_nodes))
        backend = config.backend
        endpoints = backend.allocate_endpoints(
            num_prefill=r.num_prefill, num_decode=r.num_decode, num_agg=r.num_agg,
            gpus_per_prefill=r.gpus_per_prefill, gpus_per_decode=r.gpus_per_decode, gpus_per_agg=r.gpus_per_agg,
            gpus_per_node=r.gpus_per_node, available_nodes=names, spread_workers=r.spread_workers)
        processes = backend.endpoints_to_processes(endpoints, port_allocator=NodePortAllocator(),
                                                   frontend_type=config.frontend.type)
        model = config.model.path
        runtime = RuntimeContext(
            job_id="1", run_name="check", nodes=Nodes(head=names[0], bench=names[0], infra=names[0], worker=names),
            head_node_ip="10.0.0.1", infra_node_ip="10.0.0.1", log_dir=Path("/tmp/srt-check-logs"),
            model_path=Path(model[3:] if model.startswith("hf:") else model), container_image=Path("image"),
            gpus_per_node=r.gpus_per_node, network_interface=None, is_hf_model=model.startswith("hf:"))
        rows = []
        for p in processes:
            mine = [q for q in processes if q.endpoint_mode == p.endpoint_mode and q.endpoint_index == p.endpoint_index]
            cmd = backend.build_worker_command(p, mine, runtime, frontend_type=config.frontend.type)
            rows.append({"role": p.endpoint_mode, "index": p.endpoint_index, "node": p.node,
                         "gpus": sorted(p.gpu_indices), "node_rank": p.node_rank, "command": cmd,
                         "environment": backend.get_environment_for_mode(p.endpoint_mode)})
        out[path] = {"nodes": len(names), "gpus_per_node": r.gpus_per_node, "processes": rows,
                     "frontend": config.frontend.type}
    return out


def main() -> int:
    mode, target, *paths = sys.argv[1:]
    _offline()
    result = dry_run(paths) if mode == "dry-run" else workers(paths)
    Path(target).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
