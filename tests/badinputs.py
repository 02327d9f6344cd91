"""The bad-input corpus: hand-written hostile inputs for every subcommand, and the runner that checks each one
(imported by ``test_bad_inputs.py``, the one test module that runs it; ``python tests/badinputs.py ROOT OUT.jsonl
CASES.json ID...`` runs cases, read from the listing its parent wrote, in a child process under an address-space
limit). Issue 22's causes are numbered 2201 to 2211 (cause 4 is 2204); the broken fixture files under
``tests/fixtures/*/bad`` are cause 0 cases named ``fixture-*``.

:func:`build` writes every fixture below a root folder and returns the :class:`Case` list. A case is the
``pdtune`` command line of one bad input, the issue's cause it exercises (1-14, see ``/work/notes/issue-14.md``;
0 for bad input the issue did not list; 2200 + N for cause N of issue 22, see :func:`_issue22` and
:func:`_issue22_plan_files`), and what the error line must name. Every case must end with exit
status 2, exactly one line on stderr (``pdtune COMMAND: error: ...``), nothing on stdout, no traceback, no file
created or changed anywhere below the root, within its time limit and under the memory limit. Cases are grouped per cause and run in one child process per group
(``in_child``), each with its own SIGALRM deadline, so a hang or a memory blow-up fails that case only; cases
that change the environment run as their own ``pdtune`` process (``own_process``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from dataclasses import field as dc_field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
MODELS = REPO / "data" / "models"
#: Address space of a child running cases (numpy/pandas reserve much more than they touch).
ADDRESS_SPACE = 4 << 30
#: Peak resident memory one case may add.
CASE_RSS = 400 << 20


@dataclass(frozen=True)
class Case:
    id: str
    cause: int
    argv: tuple[str, ...]
    names: str = ""  # must appear in the error line (the file, the flag)
    field: str = ""  # must appear as ": <field>:" (the key, column, line), when given
    own_process: bool = False  # a pdtune process of its own (environment changes, the installed script)
    says: str = ""  # more the error line must contain, when given
    env: dict[str, str] = dc_field(default_factory=dict)
    timeout: float = 20.0
    # own processes only: stdout "full" (/dev/full), "closed" (>&-) or "gone" (a pipe whose reader has left);
    # fsize: the largest file the process may write (RLIMIT_FSIZE, SIGXFSZ ignored): a full disk for any writer
    stdout: str = ""
    fsize: int | None = None

    @property
    def group(self) -> str:
        return "own" if self.own_process else f"cause{self.cause:02d}"


# ------------------------------------------------------------------------------------------ fixture helpers


def deep_json(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


def deep_yaml(depth: int) -> str:
    return "[" * depth + "]" * depth


def laughs(levels: int = 8, width: int = 9) -> str:
    """A billion-laughs YAML value: ``width ** levels`` strings once expanded."""
    parts = ['&a0 [' + ", ".join(['"lol"'] * width) + "]"]
    parts += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "[" + ", ".join(parts) + "]"


def write(path: Path, text: str | bytes) -> Path:
    """Write a fixture once (the corpus is deterministic: a second build finds it in place)."""
    if path.exists() or path.is_symlink():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        os.mkfifo(path)
    return path


def vllm_record(**changes: Any) -> dict[str, Any]:
    record = json.loads((FIXTURES / "results" / "vllm_bench" / "qwen3-32b-c16-percentiles.json").read_text())
    record.update(changes)
    return record


def config(name: str, **changes: Any) -> dict[str, Any]:
    raw = json.loads((MODELS / name / "config.json").read_text())
    for key, value in changes.items():
        if "." in key:
            outer, inner = key.split(".", 1)
            raw[outer] = {**raw.get(outer, {}), inner: value}
        else:
            raw[key] = value
    return raw


def dump(obj: Any) -> str:
    return json.dumps(obj)


#: A disaggregated and an aggregated row of a plan file, valid for qwen3-32b on 16 H100 (written here by hand in
#: the format `pdtune plan --json` writes, format 1; the cases below break one key each).
PLAN_ROWS = [
    {"row": 0, "mode": "disagg", "deployment": "1xTP2 : 1xTP2", "gpus_total": 4, "concurrency": 64,
     "tps_per_gpu": 1000.0, "tps_per_user": 30.0, "ttft_ms_p50": 300.0, "tpot_ms_p50": 33.3, "kv_transfer_ms": 1.0,
     "mtp_tokens": 0, "curve_concurrencies": [16, 64], "network_groups": "", "prefill_topology": "TP2",
     "decode_topology": "TP2", "n_prefill_workers": 1, "n_decode_workers": 1, "gpus_prefill": 2, "gpus_decode": 2,
     "prefill_concurrency": 8, "decode_concurrency": 64, "curve_prefill_concurrency_max": 8,
     "curve_decode_concurrency_max": 64, "kv_link": "nvlink", "prefill_block_tokens": 16,
     "decode_block_tokens": 16, "block_size_to_set": None},
    {"row": 1, "mode": "agg", "deployment": "8xTP2", "gpus_total": 16, "concurrency": 256, "tps_per_gpu": 900.0,
     "tps_per_user": 35.0, "ttft_ms_p50": 250.0, "tpot_ms_p50": 28.5, "kv_transfer_ms": 0.0, "mtp_tokens": 0,
     "curve_concurrencies": [64, 256], "network_groups": "", "topology": "TP2", "agg_replicas": 8,
     "server_concurrency": 32, "curve_server_concurrency_max": 32, "kv_link": "none"},
]


def plan_file(rows: list[dict[str, Any]] | None = None, **sections: Any) -> dict[str, Any]:
    """A plan file ``pdtune recipe`` accepts (``rows`` none by default); ``sections`` replace whole sections."""
    gpu = {"name": "h100", "gpus_per_node": 8, "nvlink_domain_gpus": 8}
    plan = {"pdtune_plan": 1, "generator": "pdtune plan", "rows": rows or [],
            "settings": {"isl": 1024, "osl": 128, "max_gpus": 16, "max_num_batched_tokens": 8192,
                         "gpu_memory_utilization": 0.92, "kv_cache_dtype": "fp8", "vllm": "0.33.0"},
            "model": {"name": "qwen3-32b", "source": "qwen3-32b", "precision": "bfloat16", "num_mtp_layers": 0,
                      "hub_id": "Qwen/Qwen3-32B"},
            "gpus": {"prefill": dict(gpu), "decode": dict(gpu)}}
    plan.update(sections)
    return plan


def device(path: Path, minor: int) -> Path | None:
    """A character device of the memory driver (``/dev/null`` is minor 3, ``/dev/zero`` 5) made in the corpus, so
    that no case ever points at the machine's own; None where pdtune's tests may not make one (not root)."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    except (OSError, AttributeError):
        return None
    return path


def immutable(folder: Path) -> bool:
    """Make ``folder`` unwritable even for root (chattr +i); False where that is not possible."""
    folder.mkdir(parents=True, exist_ok=True)
    if shutil.which("chattr") and subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0:
        return True
    if os.geteuid() != 0:
        folder.chmod(0o500)
        return True
    return False


def release_immutable(root: Path) -> None:
    folder = root / "out" / "immutable"
    if folder.exists() and shutil.which("chattr"):
        subprocess.run(["chattr", "-i", str(folder)], capture_output=True)
    with contextlib.suppress(OSError):
        folder.chmod(0o700)


#: Lock files of output folders "a live run is writing", held for as long as the process that built the corpus.
_HELD: dict[str, int] = {}


def held(folder: Path) -> Path:
    """``folder`` as a live pdtune run writing it holds it: its lock (as :class:`pdtune.io.FolderSwap` takes it)
    is held by this process, or already by another of the campaign's."""
    import fcntl

    from pdtune.io import beside

    lock = beside(folder, "lock")
    if str(lock) not in _HELD:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fresh = not lock.exists()
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        if fresh:
            os.write(fd, f"{os.getpid()}\n".encode())
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _HELD[str(lock)] = fd
        except OSError:
            os.close(fd)
    return folder


def planned_rows(path: Path) -> Path:
    """A real ``pdtune plan --json`` output with rows (qwen3-32b on up to 8 H100), made once."""
    if not path.exists():
        from pdtune.cli import main

        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            assert main(["plan", "qwen3-32b", "--gpu", "h100", "--max-gpus", "8", "--isl", "1024", "--osl", "128",
                         "--json"]) == 0
        write(path, text.getvalue())
    return path


def recipe_names(plan_file: Path, row: int) -> list[str]:
    from pdtune.recipe import row_recipes

    data = json.loads(plan_file.read_text(encoding="utf-8"))
    return [r.file_name for r in row_recipes(data, next(r for r in data["rows"] if r["row"] == row))]


# ------------------------------------------------------------------------------------------ the corpus


def build(root: Path) -> list[Case]:
    """Write every fixture below ``root`` (idempotent) and return the cases."""
    root.mkdir(parents=True, exist_ok=True)
    cases: list[Case] = []

    seen: dict[str, int] = {}

    def add(cause: int, name: str, *argv: str | Path, names: str | Path = "", field: str = "", **kw: Any) -> None:
        seen[name] = seen.get(name, 0) + 1
        case_id = name if seen[name] == 1 else f"{name}-{seen[name]}"
        cases.append(Case(case_id, cause, tuple(str(a) for a in argv), str(names), field, **kw))

    m = root / "models"
    r = root / "results"
    lg = root / "logs"
    p = root / "params"
    out = root / "out"
    sp = root / "special"
    out.mkdir(exist_ok=True)
    write(out / "a-file", "not a folder\n")
    (out / "a-folder").mkdir(exist_ok=True)
    can_lock = immutable(out / "immutable")
    good_result = str(FIXTURES / "results" / "vllm_bench" / "qwen3-32b-c16-percentiles.json")
    qwen32 = str(FIXTURES / "logs" / "models" / "qwen3-32b")
    log33 = FIXTURES / "logs" / "v0.33_tp2_qwen3-32b_fp8kv.log"
    params_ok = REPO / "data" / "params" / "qwen3-next-80b-h200.yaml"
    state = ("state", "--isl", "1024", "--osl", "128")
    predict = ("--topology", "TEP8", "--mode", "decode", "--gpu", "h200")

    # ---------------------------------------------------------------- 1: parser errors (depth, digits, keys)
    write(m / "deep" / "config.json", '{"model_type": "llama", "x": ' + deep_json(5000) + "}")
    write(m / "bigint" / "config.json", dump(config("llama-3.1-8b"))[:-1] + ', "vocab_size": ' + "7" * 5000 + "}")
    write(m / "dupkey" / "config.json", dump(config("llama-3.1-8b"))[:-1] + ', "hidden_size": 1}')
    write(m / "deeplist" / "config.json", '{"model_type": "llama", "x": ' + "[" * 100000 + "]" * 100000 + "}")
    for model in ("deep", "bigint", "dupkey", "deeplist"):
        add(1, f"state-config-{model}", *state, m / model, names=f"{model}/config.json")
        add(1, f"predict-config-{model}", "predict", m / model, *predict, names=f"{model}/config.json")
        add(1, f"plan-config-{model}", "plan", m / model, "--gpu", "h200", "--max-gpus", "16", "--isl", "1024",
            "--osl", "128", names=f"{model}/config.json")
        add(1, f"log-model-{model}", "log", log33, "--model", m / model, names=f"{model}/config.json")
        add(1, f"state-draft-{model}", *state, "llama-3.1-8b", "--speculative-model", m / model,
            names=f"{model}/config.json")
    add(1, "dataset-model-deep", "dataset", "generate", "--model", m / "deep", "--out", out / "ds",
        names="deep/config.json")
    write(r / "deep.json", deep_json(20000))
    write(r / "bigint.json", dump(vllm_record())[:-1] + ', "completed": ' + "9" * 5000 + "}")
    write(r / "dupkey.json", dump(vllm_record())[:-1] + ', "max_concurrency": 32}')
    write(r / "deepline.jsonl", dump(vllm_record()) + "\n" + deep_json(20000) + "\n")
    write(r / "bigline.jsonl", dump(vllm_record()) + "\n" + '{"max_concurrency": ' + "1" * 6000 + "}\n")
    for name in ("deep.json", "bigint.json", "dupkey.json", "deepline.jsonl", "bigline.jsonl"):
        add(1, f"results-{name}", "results", r / name, "--gpus", "8", names=name)
        add(1, f"frontier-{name}", "frontier", r / name, "--gpus", "8", names=name)
        add(1, f"plan-results-{name}", "plan", "qwen3-32b", "--gpu", "h100", "--max-gpus", "16", "--isl", "1024",
            "--osl", "128", "--decode-results", r / name, names=name)
    # srt-slurm job metadata and a rollup's JSON twin nested deep
    job = r / "srt-deepmeta" / "outputs" / "5550001"
    _copytree(FIXTURES / "results" / "srt_slurm" / "agg" / "outputs" / "4411377" / "logs", job / "logs",
                    dirs_exist_ok=True)
    write(job / "5550001.json", deep_json(20000))
    add(1, "results-srt-metadata-deep-explicit", "results", job / "5550001.json", names="5550001.json")
    rollup = r / "srt-deeptwin" / "logs"
    write(rollup / "benchmark-rollup.csv", "Concurrency,Total Token Throughput,Output Token Throughput,Median TPOT,"
          "Total GPU Count\n8,1000,500,10,8\n")
    write(rollup / "benchmark-rollup.json", deep_json(20000))
    add(1, "results-rollup-twin-deep", "results", rollup, names="benchmark-rollup.json")
    # sidecars and workbook files nested thousands deep, with complex and duplicate keys
    for name, text, field_ in (("deep", "total: " + deep_yaml(5000), "gpus"), ("complex", "? [a, b]\n: 1\n", "gpus"),
                               ("dup", "total: 8\ntotal: 16\n", "gpus"),
                               ("bigint", "total: " + "9" * 5000 + "\n", "gpus"),
                               ("recursive", "total: &a [*a]\n", "gpus")):
        folder = r / f"sidecar-{name}"
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(good_result, folder / "run.json")
        write(folder / "pdtune-gpus.yaml", text)
        add(1, f"results-sidecar-{name}", "results", folder, names="pdtune-gpus.yaml", field=field_ or "")
        add(1, f"frontier-sidecar-{name}", "frontier", folder, names="pdtune-gpus.yaml")
    base = params_ok.read_text()
    for name, text in (("deep", base + "title: " + deep_yaml(5000) + "\n"),
                       ("complex", "? [a, b]\n: 1\n" + base),
                       ("dup", base + "isl: 4096\n"),
                       ("bigint", base.replace("isl: 8192", "isl: " + "9" * 5000)),
                       ("tags", base + "title: !!python/object:os.system ls\n")):
        add(1, f"workbook-params-{name}", "workbook", write(p / f"{name}.yaml", text), "--out", out / "wb",
            names=f"{name}.yaml")
    for name, text in (("deep", deep_yaml(5000)), ("complex", "? [a]\n: 1\n"), ("dup", "model: x\nmodel: y\n"),
                       ("bigint", "mtp_tokens: " + "9" * 5000)):
        add(1, f"dataset-params-{name}", "dataset", "generate", "--params", write(p / f"ds-{name}.yaml", text),
            "--out", out / "ds", names=f"ds-{name}.yaml")
        add(1, f"dataset-params-json-{name}", "dataset", "generate", "--params",
            write(p / f"ds-{name}.json", deep_json(5000) if name == "deep" else '{"model": 1, "model": 2}'
                  if name == "dup" else '{"mtp_tokens": ' + "9" * 5000 + "}" if name == "bigint" else "[1]"),
            "--out", out / "ds", names=f"ds-{name}.json")
    valid_plan = plan_file()
    plan_ok = write(root / "plans" / "plan.json", json.dumps(valid_plan))
    for name, text in (("deep", deep_json(5000)), ("bigint", '{"generator": "pdtune plan", "rows": ' + "9" * 5000 + "}"),
                       ("dup", '{"generator": "pdtune plan", "generator": "x"}'), ("list", "[1, 2]")):
        add(1, f"recipe-plan-{name}", "recipe", write(root / "plans" / f"{name}.json", text), "--row", "0",
            "--out", out / "rec", names=f"{name}.json")
    add(1, "results-srt-recipe-copy-deep", "results", _recipe_job(r / "srt-deeprecipe", "name: x\nmodel: "
                                                                   + deep_yaml(5000) + "\n"), names="config.yaml")
    book = root / "book-garbage"
    write(book / "_toc.yml", "root: [\n  foo: {\n")
    add(10, "workbook-toc-garbage", "workbook", params_ok, "--out", out / "wb", "--book", book, names="_toc.yml")
    write(root / "book-deep" / "_toc.yml", "root: " + deep_yaml(5000) + "\n")
    add(1, "workbook-toc-deep", "workbook", params_ok, "--out", out / "wb", "--book", root / "book-deep",
        names="_toc.yml")

    # ---------------------------------------------------------------- 2: huge, tiny, NaN floats in conversions
    for flag, value in (("--kv-cache-gib", "1e308"), ("--kv-cache-gib", "inf"), ("--kv-cache-gib", "nan"),
                        ("--kv-cache-gib", "-1"), ("--gpu-memory-gib", "1e300"), ("--gpu-memory-gib", "1e-300")):
        add(2, f"state-{flag}-{value}", *state, "qwen3.8-2.4t", flag, value, names=flag)
    for flag in ("--total-gib", "--weights-gib", "--non-torch-gib", "--activation-gib", "--graphs-gib",
                 "--cuda-context-gib"):
        argv = {"--total-gib": "276", "--weights-gib": "100"}
        for value in ("1e308", "nan", "inf"):
            add(2, f"memory-{flag}-{value}", "memory", *[x for k, v in {**argv, flag: value}.items() for x in (k, v)],
                names=flag)
    for value in ("1e-9", "1e-300", "0", "nan", "1e308"):
        add(2, f"memory-per-request-{value}", "memory", "--total-gib", "276", "--weights-gib", "100",
            "--per-request-mib", value, names="per-request-mib")
    for flag in ("--first-graph-mib", "--per-graph-mib"):
        for value in ("1e308", "nan", "1e-300"):
            add(2, f"graphs-{flag}-{value}", "graphs", "--max-num-seqs", "64", "--first-graph-mib", "100", flag, value,
                names=flag)
    for value in ("1e308", "nan", "inf"):
        add(2, f"log-total-gib-{value}", "log", log33, "--total-gib", value, names="--total-gib")
        add(2, f"predict-gpu-memory-{value}", "predict", "qwen3-32b", *predict, "--gpu-memory-gib", value,
            names="--gpu-memory-gib")
    add(2, "state-max-model-len-400-digits", *state[:1], "qwen3.8-2.4t", "--max-model-len", "9" * 400,
        names="--max-model-len")
    for key, value in (("gpu_memory_gib", ".inf"), ("gpu_memory_gib", ".nan"), ("gpu_memory_gib", "1e300"),
                       ("min_tps_per_user", ".nan"), ("non_torch_gib", ".inf"), ("mtp_acceptance", ".nan"),
                       ("accuracy_threshold", ".nan"), ("activation_peak_gib", "1e300")):
        text = "\n".join(ln for ln in base.splitlines() if not ln.startswith(f"{key}:")) + f"\n{key}: {value}\n"
        add(2, f"workbook-{key}-{value}", "workbook", write(p / f"{key}-{value.strip('.')}.yaml", text), "--out",
            out / "wb", names=f"{key}-{value.strip('.')}.yaml", field=key)
    for name, changes in (("rope-nan", {"rope_scaling": {"rope_type": "linear", "factor": float("nan")}}),
                          ("rope-inf", {"rope_scaling": {"rope_type": "linear", "factor": 1e400}}),
                          ("rope-text", {"rope_scaling": {"rope_type": "linear", "factor": "big"}})):
        write(m / name / "config.json", json.dumps(config("llama-3.1-8b", **changes)).replace("Infinity", "1e400"))
        add(2, f"state-config-{name}", *state, m / name, names=f"{name}/config.json", field="rope_scaling.factor")
    for value in ("nan", "inf", "1e400"):
        add(2, f"plan-min-tps-{value}", "plan", "qwen3-32b", "--gpu", "h100", "--max-gpus", "16", "--isl", "1024",
            "--osl", "128", "--min-tps-per-user", value, names="--min-tps-per-user")
        add(2, f"plan-max-ttft-{value}", "plan", "qwen3-32b", "--gpu", "h100", "--max-gpus", "16", "--isl", "1024",
            "--osl", "128", "--max-ttft-ms", value, names="--max-ttft-ms")
        add(2, f"frontier-min-tps-{value}", "frontier", good_result, "--gpus", "8", "--min-tps-per-user", value,
            names="--min-tps-per-user")
        add(2, f"predict-acceptance-{value}", "predict", "qwen3-32b", *predict, "--acceptance", value,
            names="--acceptance")
    for key, value in (("acceptance", ".nan"), ("accuracy", ".inf")):
        add(2, f"dataset-{key}-{value}", "dataset", "generate", "--params",
            write(p / f"ds-{key}.yaml", f"{key}: {value}\n"), "--out", out / "ds", names=f"ds-{key}.yaml", field=key)

    # ---------------------------------------------------------------- 3: big integers before pandas
    for name, record in (("conc-1e20", vllm_record(max_concurrency=10**20)),
                         ("conc-1e30", vllm_record(max_concurrency=10**30)),
                         ("completed-1e25", vllm_record(completed=10**25)),
                         ("isl-1e20", vllm_record(isl=10**20)),
                         ("throughput-400-digits", None),
                         ("throughput-1e300", vllm_record(output_throughput=1e300)),
                         ("tokens-1e30", vllm_record(total_output_tokens=10**30))):
        text = (dump(vllm_record())[:-1] + ', "output_throughput": ' + "9" * 400 + "}") if record is None \
            else dump(record)
        if record is None:
            text = text.replace('"output_throughput": 1004.6795603331491, ', "")
        add(3, f"results-{name}", "results", write(r / f"{name}.json", text), "--gpus", "8", names=f"{name}.json")
        add(3, f"frontier-{name}", "frontier", r / f"{name}.json", "--gpus", "8", names=f"{name}.json")
    name_dir = r / "srt-bignames" / "logs" / "sa-bench_isl_1024_osl_1024"
    src = FIXTURES / "results" / "srt_slurm" / "agg" / "outputs" / "4411377" / "logs" / "sa-bench_isl_1024_osl_1024"
    for fname in (f"results_concurrency_{10**20}_gpus_8.json", f"results_concurrency_8_gpus_{10**25}.json",
                  f"results_concurrency_8_gpus_{10**22}_ctx_{10**21}_gen_{9 * 10**21}.json"):
        target = write(name_dir / fname, (src / "results_concurrency_8_gpus_8.json").read_text().replace(
            '"max_concurrency": 8', f'"max_concurrency": {fname.split("_")[2]}'))
        add(3, f"results-file-name-{fname[:40]}", "results", target, names=fname[:20])
    folder = r / f"isl_{10**30}_osl_1024"
    write(folder / "concurrency_8.json", dump(vllm_record(max_concurrency=8)))
    add(3, "results-folder-name-isl-1e30", "results", folder, "--gpus", "8", names=f"isl_{10**30}")
    aiperf_src = FIXTURES / "results" / "aiperf" / "top-level-layout" / "profile_export_aiperf.json"
    aip = json.loads(aiperf_src.read_text())
    for name, cli in (("conc-1e30", f"aiperf profile --concurrency {10**30}"),
                      ("conc-5000-digits", "aiperf profile --concurrency " + "9" * 5000)):
        rec = {k: v for k, v in aip.items() if k not in ("input_config",)}
        rec["run_info"] = {"cli_command": cli}
        add(3, f"results-aiperf-{name}", "results", write(r / f"aiperf-{name}" / "profile_export_aiperf.json",
                                                          dump(rec)), "--gpus", "8", names="profile_export_aiperf.json")
    for value in (str(10**20), str(10**30), "9" * 400, "prefill=" + str(10**25) + ",decode=8"):
        add(3, f"results-gpus-flag-{value[:12]}", "results", good_result, "--gpus", value, names="--gpus")
        add(3, f"frontier-gpus-flag-{value[:12]}", "frontier", good_result, "--gpus", value, names="--gpus")
    ix = (FIXTURES / "results" / "inferencex" / "InferenceX_synthetic_gb200.csv").read_text().splitlines()
    header_at = next(i for i, ln in enumerate(ix) if ln.startswith("Model,"))
    cols = ix[header_at].split(",")
    row = ix[header_at + 1].split(",")
    for name, col, value in (("tp-1e20", "TP", str(10**20)), ("conc-1e30", "Concurrency", str(10**30)),
                             ("tput-400-digits", "Throughput/GPU (tok/s)", "9" * 400),
                             ("tput-inf", "Throughput/GPU (tok/s)", "inf"), ("isl-1e20", "ISL", "1e20")):
        changed = list(row)
        changed[cols.index(col)] = value
        add(3, f"results-inferencex-{name}", "results",
            write(r / f"ix-{name}.csv", "\n".join(ix[: header_at + 1] + [",".join(changed)]) + "\n"),
            names=f"ix-{name}.csv", field=col if name != "tp-1e20" else "")
    for value in (str(10**20), "9" * 30):
        add(3, f"predict-concurrency-{value[:8]}", "predict", "qwen3-32b", *predict, "--concurrency", value,
            names="--concurrency")
        add(3, f"dataset-concurrency-{value[:8]}", "dataset", "generate", "--concurrency", value, "--out", out / "ds",
            names="concurrenc")

    # ---------------------------------------------------------------- 4: unvalidated fields
    for name, value in (("zero", [0, 128]), ("text", "abc"), ("one", [128]), ("nested", [[128], [128]]),
                        ("float", [128.5, 128]), ("huge", [10**30, 128]), ("negative", [-128, 128])):
        write(m / f"fp8-{name}" / "config.json",
              json.dumps(config("deepseek-v3", **{"quantization_config.weight_block_size": value})))
        add(4, f"predict-fp8-block-{name}", "predict", m / f"fp8-{name}", *predict, names=f"fp8-{name}",
            field="quantization_config.weight_block_size")
        add(4, f"plan-fp8-block-{name}", "plan", m / f"fp8-{name}", "--gpu", "h200", "--max-gpus", "16",
            "--isl", "1024", "--osl", "128", names=f"fp8-{name}")
    for name, value in (("int", 5), ("nested", [[1], [2]]), ("text", "all"), ("out-of-range", [99999]),
                        ("negative", [-1]), ("bool", [True])):
        write(m / f"mlp-only-{name}" / "config.json", json.dumps(config("qwen3-next-80b-a3b", mlp_only_layers=value)))
        add(4, f"state-mlp-only-{name}", *state, m / f"mlp-only-{name}", names=f"mlp-only-{name}",
            field="mlp_only_layers")
        add(4, f"predict-mlp-only-{name}", "predict", m / f"mlp-only-{name}", *predict, names=f"mlp-only-{name}")
    for name, changes in (("heads-text", {"num_attention_heads": "32"}), ("heads-float", {"num_attention_heads": 32.0}),
                          ("heads-bool", {"num_attention_heads": True}), ("heads-zero", {"num_attention_heads": 0}),
                          ("kv-negative", {"num_key_value_heads": -8}), ("dtype-list", {"torch_dtype": ["bf16"]}),
                          ("layer-types-nested", {"layer_types": [["full_attention"]] * 32}),
                          ("model-type-list", {"model_type": ["llama"]}), ("hidden-huge", {"hidden_size": 10**20}),
                          ("no-rope-text", {"model_type": "llama4", "no_rope_layers": "yes"})):
        write(m / name / "config.json", json.dumps(config("llama-3.1-8b", **changes)))
        add(4, f"state-config-{name}", *state, m / name, names=f"{name}/config.json")
    detail = json.loads((FIXTURES / "results" / "vllm_bench" / "qwen3-32b-c4-detailed.json").read_text())
    for name, key, value in (("output-lens-nested", "output_lens", [[x] for x in detail["output_lens"]]),
                             ("ttfts-nested", "ttfts", [[x, x] for x in detail["ttfts"]]),
                             ("latencies-text", "latencies", ["fast"] * len(detail["latencies"])),
                             ("ttfts-short", "ttfts", detail["ttfts"][:2]),
                             ("output-lens-dict", "output_lens", {"a": 1})):
        add(4, f"results-detail-{name}", "results", write(r / f"detail-{name}.json", dump({**detail, key: value,
            "median_tpot_ms": None, "median_ttft_ms": None, "p99_ttft_ms": None})), "--gpus", "8",
            names=f"detail-{name}.json")
    for name, text in (("superscript", 'total: "²"\n'), ("arabic", 'total: "٣"\n'), ("float", "total: 8.5\n"),
                       ("list", "total: [8]\n"), ("text", "total: eight\n"), ("zero", "total: 0\n"),
                       ("huge", f"total: {10**30}\n"), ("huge-text", f'total: "{10**30}"\n'),
                       ("negative", "prefill: -8\ndecode: 16\n"), ("laughs", "total: " + laughs() + "\n")):
        folder = r / f"sidecar-{name}"
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(good_result, folder / "run.json")
        write(folder / "pdtune-gpus.yaml", text)
        add(4 if name != "laughs" else 10, f"results-sidecar-{name}", "results", folder, names="pdtune-gpus.yaml")
    for name, value in (("text", '"x"'), ("nested", "[[8]]"), ("huge", str(10**30)), ("zero", "0")):
        add(4, f"dataset-concurrencies-{name}", "dataset", "generate", "--params",
            write(p / f"ds-conc-{name}.yaml", f"concurrencies: [{value}]\n"), "--out", out / "ds",
            names=f"ds-conc-{name}.yaml", field="concurrencies")
    for name, text in (("workload-text", "prefill_workload: {isl: x, osl: 2}\n"),
                       ("workload-huge", f"decode_workload: {{isl: {10**30}, osl: 2}}\n"),
                       ("topology-list", "prefill_topologies: [[TP2]]\n"), ("disagg-number", "disagg_configs: [5]\n"),
                       ("mtp-text", "mtp_tokens: many\n"), ("model-number", "model: 5\n"),
                       ("unknown-key", "modle: x\n"), ("not-mapping", "- 1\n- 2\n")):
        add(4, f"dataset-params-{name}", "dataset", "generate", "--params", write(p / f"ds-{name}.yaml", text),
            "--out", out / "ds", names=f"ds-{name}.yaml")
    for name, changes_ in (("rows-text", {"rows": "x"}), ("row-no-number", {"rows": [{"deployment": "1xTP2:1xTP2"}]}),
                           ("row-number-text", {"rows": [{"row": "zero", "deployment": "1xTP2:1xTP2"}]}),
                           ("row-huge", {"rows": [{"row": 10**30, "deployment": "1xTP2:1xTP2"}]}),
                           ("settings-list", {"settings": []}), ("rows-dicts-of-lists", {"rows": [[1, 2]]})):
        plan = {**valid_plan, **changes_}
        add(4, f"recipe-{name}", "recipe", write(root / "plans" / f"{name}.json", json.dumps(plan)), "--row", "0",
            "--out", out / "rec", names=f"{name}.json")

    # ---------------------------------------------------------------- 5: one number drives memory
    for name, value in (("layers-1e18", 10**18), ("layers-1e9", 10**9), ("layers-5000", 5000),
                        ("experts-1e12", None), ("vocab-1e15", None), ("heads-1e9", None)):
        changes: dict[str, Any] = {"num_hidden_layers": value} if value else {}
        if name.startswith("experts"):
            changes = {"num_experts": 10**12}
        if name.startswith("vocab"):
            changes = {"vocab_size": 10**15}
        if name.startswith("heads"):
            changes = {"num_attention_heads": 10**9, "num_key_value_heads": 10**9}
        write(m / name / "config.json", json.dumps(config("qwen3-next-80b-a3b", **changes)))
        add(5, f"state-config-{name}", *state, m / name, names=f"{name}/config.json")
        add(5, f"predict-config-{name}", "predict", m / name, *predict, names=f"{name}/config.json")
        add(5, f"plan-config-{name}", "plan", m / name, "--gpu", "h200", "--max-gpus", "16", "--isl", "1024",
            "--osl", "128", names=f"{name}/config.json")
        add(5, f"log-model-{name}", "log", log33, "--model", m / name, names=f"{name}/config.json")
    for value in ("1000000000", "100000", str(10**18)):
        add(5, f"graphs-max-num-seqs-{value[:10]}", "graphs", "--max-num-seqs", value, names="--max-num-seqs")
        add(5, f"predict-max-num-seqs-{value[:10]}", "predict", "qwen3-32b", *predict, "--max-num-seqs", value,
            names="--max-num-seqs")
    for flag, value in (("--max-capture-size", str(10**9)), ("--max-num-batched-tokens", str(10**12)),
                        ("--num-speculative-tokens", "100000")):
        add(5, f"graphs-{flag}", "graphs", "--max-num-seqs", "8", flag, value, names=flag)
    for flag, value in (("--tp", str(10**9)), ("--max-model-len", str(10**12)), ("--block-size", str(10**9)),
                        ("--max-num-batched-tokens", str(10**10)), ("--num-speculative-tokens", str(10**6)),
                        ("--decode-context-parallel-size", str(10**7)), ("--template-tokens", str(10**15))):
        add(5, f"state-{flag}", "state", "qwen3.8-2.4t", "--isl", "1024", "--osl", "128", flag, value, names=flag) \
            if flag != "--max-model-len" else add(5, f"state-{flag}", "state", "qwen3.8-2.4t", flag, value, names=flag)
    for flag, value in (("--max-gpus", str(10**12)), ("--isl", str(10**12)), ("--mtp", "1000"),
                        ("--max-num-batched-tokens", str(10**11))):
        add(5, f"plan-{flag}", "plan", "qwen3-32b", "--gpu", "h100", "--max-gpus", "16", "--isl", "1024", "--osl",
            "128", flag, value, names=flag)
    for flag, value in (("--tp", str(10**9)), ("--max-model-len", str(10**13))):
        add(5, f"log-{flag}", "log", log33, "--model", qwen32, flag, value, names=flag)
    add(5, "recipe-row-1e30", "recipe", plan_ok, "--row", str(10**30), "--out", out / "rec", names="--row")
    for key, value in (("max_num_seqs", f"[{10**9}]"), ("isl", str(10**30)), ("osl", str(10**12)),
                       ("num_speculative_tokens", str(10**6)), ("decode_topologies", "[" + ",".join(["TEP8"] * 5000) + "]")):
        text = "\n".join(ln for ln in base.splitlines() if not ln.startswith(f"{key}:")) + f"\n{key}: {value}\n"
        add(5 if key != "isl" else 13, f"workbook-{key}-huge", "workbook", write(p / f"huge-{key}.yaml", text),
            "--out", out / "wb", names=f"huge-{key}.yaml", field=key)

    # ---------------------------------------------------------------- 6: output paths
    # Never the machine's own /dev/null: code that replaces its output (the bug) would replace it for everyone.
    null = device(sp / "null", 3)
    targets = (("below-a-file", out / "a-file" / "x.csv"), ("a-folder", out / "a-folder"),
               ("proc", Path("/proc/pdtune-test/x.csv")), ("proc-self", Path("/proc/self/status")),
               ("fifo", fifo(sp / "out-fifo")))
    if null is not None:
        targets += (("device", null),)
    if can_lock:
        targets += (("immutable", out / "immutable" / "x.csv"),)
    for name, target in targets:
        add(6, f"results-o-{name}", "results", good_result, "--gpus", "8", "--csv", "-o", target, names=target.name)
    folders = (("below-a-file", out / "a-file" / "wb"), ("a-file", out / "a-file"),
               ("proc", Path("/proc/pdtune-test")), ("fifo", sp / "out-fifo"))
    if can_lock:
        folders += (("immutable", out / "immutable" / "wb"),)
    for name, target in folders:
        add(6, f"workbook-out-{name}", "workbook", params_ok, "--out", target, "--force", names=target.name)
        add(6, f"dataset-out-{name}", "dataset", "generate", "--params", write(p / "ds-ok.yaml", "concurrencies: [1]\n"),
            "--out", target, names=target.name)
        add(6, f"plan-recipes-{name}", "plan", "qwen3-32b", "--gpu", "h100", "--max-gpus", "16", "--isl", "1024",
            "--osl", "128", "--recipes", target, names=target.name)
    # a broken link as the output folder, and a link below which nothing can be created
    link = out / "dangling-link"
    if not link.is_symlink():
        link.symlink_to(root / "nowhere" / "at-all")
    add(6, "workbook-out-dangling-link", "workbook", params_ok, "--out", link, names="dangling-link")

    # ---------------------------------------------------------------- 7: FIFOs and special files as input
    zero = device(sp / "zero", 5)
    for name, path in (("fifo", fifo(sp / "in.fifo")), ("folder", sp / "a-folder"),
                       *((("device", zero),) if zero is not None else ())):
        (sp / "a-folder").mkdir(parents=True, exist_ok=True)
        add(7, f"log-{name}", "log", path, names=path.name)
        add(7, f"state-model-{name}", *state, path, names=path.name) if name != "folder" else None
        add(7, f"workbook-params-{name}", "workbook", path, "--out", out / "wb", names=path.name) \
            if name != "folder" else None
        add(7, f"recipe-plan-{name}", "recipe", path, "--row", "0", "--out", out / "rec", names=path.name)
        add(7, f"dataset-params-{name}", "dataset", "generate", "--params", path, "--out", out / "ds",
            names=path.name)
        add(7, f"results-{name}", "results", path, "--gpus", "8", names=path.name) if name != "folder" else None
    walk = r / "fifo-in-folder"
    fifo(walk / "x.json")
    fifo(walk / "results_concurrency_8_gpus_8.json")
    add(7, "results-folder-with-fifos", "results", walk, "--gpus", "8", names="fifo-in-folder", field="results")
    add(7, "frontier-folder-with-fifos", "frontier", walk, "--gpus", "8", names="fifo-in-folder")
    side = r / "sidecar-fifo"
    side.mkdir(parents=True, exist_ok=True)
    shutil.copy(good_result, side / "run.json")
    fifo(side / "pdtune-gpus.yaml")
    add(7, "results-sidecar-fifo", "results", side, names="pdtune-gpus.yaml")
    cfgfifo = m / "config-fifo"
    fifo(cfgfifo / "config.json")
    add(7, "state-config-json-fifo", *state, cfgfifo, names="config.json")
    meta_fifo = r / "srt-meta-fifo" / "outputs" / "5550003"
    _copytree(FIXTURES / "results" / "srt_slurm" / "agg" / "outputs" / "4411377" / "logs", meta_fifo / "logs",
                    dirs_exist_ok=True)
    fifo(meta_fifo / "5550003.json")
    add(7, "results-srt-metadata-fifo", "results", meta_fifo / "5550003.json", names="5550003.json")

    # ---------------------------------------------------------------- 8: regex backtracking in pdtune log
    head = "(EngineCore_DP0 pid=1) INFO 10-14 09:12:41 [gpu_worker.py:298] "
    for name, line in (("free-memory-digits", head + "Free memory on device (" + "1" * 20000 + "/1 GiB) on startup. "
                        "Desired GPU memory utilization is (0.9, 1 GiB). Actual usage is"),
                       ("letters-before-kv", head + "a" * 200000 + " KV cache size: x"),
                       ("capitals-after-profiling", head + "Profiling CUDA graph memory: " + "A" * 200000),
                       ("unclosed-prefixes", "(a pid=1 " * 200000 + "INFO 10-14 09:12:41 [x.py:1] hello"),
                       ("endless-number", head + "Free memory on device (" + "9," * 100000),
                       ("args-braces", head + "non-default args: " + "{" * 100000),
                       ("graph-groups", head + "Profiling CUDA graph memory: " + "FULL=1 (largest=" * 20000),
                       ("enabled-repeats", head + "CUDA graph memory profiling is enabled " * 5000),
                       ("snapshot-repeats", head + "worker init memory snapshot: " * 8000),
                       ("one-huge-line", "x" * (8 << 20))):
        add(8, f"log-{name}", "log", write(lg / f"{name}.log", line + "\n"), names=f"{name}.log", timeout=10)
    # lines each a few tens of KB, repeated: a per-line cost quadratic in the line's length adds up to minutes
    for name, message in (("args-repeated", "non-default args: {" * 3000),
                          ("spec-repeated", "Initializing a V1 LLM engine (v0.33.0) with config: "
                           + "speculative_config=SpeculativeConfig(" * 1500),
                          ("server-version", "vLLM server version " + "x" * 50000)):
        add(8, f"log-{name}-lines", "log", write(lg / f"{name}.log", (head + message + "\n") * 150),
            names=f"{name}.log", timeout=10)

    # ---------------------------------------------------------------- 9: many processes (a crash loop)
    lines = log33.read_text().splitlines()
    loop = []
    for k in range(3000):  # 3,000 restarts, each with new pids, and none that finished starting
        for ln in lines[:10]:
            loop.append(ln.replace("pid=", f"pid={k}0"))
    add(9, "log-crash-loop-no-kv", "log", write(lg / "crash-loop.log", "\n".join(loop) + "\n"), names="crash-loop.log",
        timeout=15)
    neg = [ln.replace("Available KV cache memory: 36.74 GiB", "Available KV cache memory: -3.50 GiB") for ln in lines]
    loop = [ln.replace("pid=", f"pid={k}0") for k in range(2000) for ln in neg]
    add(9, "log-crash-loop-negative-kv", "log", write(lg / "crash-loop-negative.log", "\n".join(loop) + "\n"),
        "--model", qwen32, names="crash-loop-negative.log", field="Available KV cache memory", timeout=20)

    # ---------------------------------------------------------------- 10: errors that are not one line
    for name, where in (("title", "title"), ("gpus", "gpus"), ("model", "model"), ("isl", "isl"),
                        ("decode", "decode_topologies"), ("vllm", "vllm")):
        text = "\n".join(ln for ln in base.splitlines() if not ln.startswith(f"{where}:")) + f"\n{where}: {laughs()}\n"
        add(10, f"workbook-laughs-{name}", "workbook", write(p / f"laughs-{name}.yaml", text), "--out", out / "wb",
            names=f"laughs-{name}.yaml")
    for name, text in (("model", f"model: {laughs()}\n"), ("concurrencies", f"concurrencies: {laughs()}\n"),
                       ("key", f"? {laughs()}\n: 1\n")):
        add(10, f"dataset-laughs-{name}", "dataset", "generate", "--params", write(p / f"ds-laughs-{name}.yaml", text),
            "--out", out / "ds", names=f"ds-laughs-{name}.yaml")
    add(10, "results-recipe-laughs", "results", _recipe_job(r / "srt-laughs", f"name: x\nmodel: {laughs()}\n"),
        names="config.yaml")
    for name, value in (("megabyte-string", "x" * (2 << 20)), ("many-lines", "a\n" * 1000)):
        add(10, f"results-mode-{name}", "results", write(r / f"mode-{name}.json", dump(vllm_record(mode=value))),
            "--gpus", "8", names=f"mode-{name}.json", field="mode")
        add(10, f"state-dtype-{name}", *state, write(m / f"dtype-{name}" / "config.json",
                                                      json.dumps(config("llama-3.1-8b", torch_dtype=value))),
            names=f"dtype-{name}")
    add(10, "state-kv-dtype-megabyte", *state, "qwen3-32b", "--kv-cache-dtype", "f" * (1 << 20), names="kv_cache_dtype")
    add(10, "predict-topology-megabyte", "predict", "qwen3-32b", "--topology", "T" * (1 << 20), "--mode", "decode",
        names="topology")
    add(10, "state-vllm-megabyte", *state, "qwen3-32b", "--vllm", "v" * (1 << 20), names="--vllm")

    # ---------------------------------------------------------------- 0: --vllm-env / vllm_env (issue 24)
    chunked = "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"
    for name, value, field_ in (("unknown-name", "VLLM_NOT_A_SWITCH=1", "VLLM_NOT_A_SWITCH"),
                                ("bad-value", f"{chunked}=yes", chunked),
                                ("no-equals", chunked, "vllm_env"),
                                ("not-in-line", "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0", "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"),
                                ("twice", f"{chunked}=0", chunked)):
        extra = ("--vllm", "0.11") if name == "not-in-line" else ()
        again = ("--vllm-env", f"{chunked}=1") if name == "twice" else ()
        add(0, f"state-vllm-env-{name}", *state, "qwen3-32b", *extra, "--vllm-env", value, *again, names="--vllm-env",
            field=field_)
    add(0, "predict-vllm-env-unknown", "predict", "qwen3-32b", *predict, "--vllm-env", "VLLM_NOPE=1",
        names="--vllm-env", field="VLLM_NOPE")
    add(0, "plan-vllm-env-bad-value", "plan", "qwen3-32b", "--gpu", "h100", "--max-gpus", "16", "--isl", "1024",
        "--osl", "128", "--vllm-env", f"{chunked}=2", names="--vllm-env", field=chunked)
    add(0, "log-vllm-env-unknown", "log", log33, "--model", qwen32, "--vllm-env", "VLLM_NOPE=1", names="--vllm-env",
        field="VLLM_NOPE")
    for name, text in (("unknown", "vllm_env:\n  VLLM_NOPE: 1\n"), ("value", f"vllm_env:\n  {chunked}: 7\n"),
                       ("list-no-equals", f"vllm_env: [{chunked}]\n")):
        add(0, f"workbook-vllm-env-{name}", "workbook", write(p / f"vllm-env-{name}.yaml",
                                                             base.replace("vllm_env: {}\n", text)), "--out",
            out / "wb", names=f"vllm-env-{name}.yaml", field="vllm_env")

    # ---------------------------------------------------------------- 11: bundled data (own processes)
    broken = root / "data-broken"
    if not broken.exists():
        shutil.copytree(REPO / "data", broken, ignore=shutil.ignore_patterns("clusters"))
        (broken / "gpus" / "gpus.csv").write_bytes(b"name,descr\x00\xff\xfe\n")
        (broken / "article" / "table3_memory_per_engine.csv").unlink()
        (broken / "vllm" / "engine-args-0.33.0.txt").write_bytes(b"\xff\xfe\xfd binary\n")
        (broken / "gpus" / "links.csv").write_text("gpu,scope\n", encoding="utf-8")
    for name, argv in (("predict", ("predict", "qwen3-32b", "--topology", "TEP8", "--mode", "decode")),
                       ("state-gpu", (*state, "qwen3-32b", "--gpu", "h100")),
                       ("plan", ("plan", "qwen3-32b", "--gpu", "h100", "--max-gpus", "16", "--isl", "1024", "--osl",
                                 "128")),
                       ("dataset-inferencex", ("dataset", "inferencex")),
                       ("workbook", ("workbook", params_ok, "--out", out / "wb"))):
        add(11, f"broken-data-{name}", *argv, names="data-broken", own_process=True, env={"PDTUNE_DATA": str(broken)})
    for name, argv in (("state", (*state, "qwen3-32b")), ("predict", ("predict", "qwen3-32b", *predict)),
                       ("dataset-inferencex", ("dataset", "inferencex")),
                       ("workbook", ("workbook", params_ok, "--out", out / "wb"))):
        add(11, f"no-data-{name}", *argv, own_process=True, env={"PDTUNE_DATA": str(root / "no-data")})
    noart = root / "data-no-article"
    if not noart.exists():
        shutil.copytree(REPO / "data", noart, ignore=shutil.ignore_patterns("article"))
    add(11, "no-article-table-plan", "plan", "qwen3-32b", "--gpu", "h100", "--max-gpus", "16", "--isl", "1024",
        "--osl", "128", names="table3_memory_per_engine.csv", own_process=True, env={"PDTUNE_DATA": str(noart)})
    # TP8: a dense model takes no +EP layout (that is refused before any data is read)
    add(11, "no-article-table-predict", "predict", "qwen3-32b", "--topology", "TP8", *predict[2:],
        names="table3_memory_per_engine.csv",
        own_process=True, env={"PDTUNE_DATA": str(noart)})
    for name, data in (("binary", b"Model,ISL\n\x00\x01\x02\n"), ("latin1", b"Model,ISL,OSL,TP,Concurrency,"
                       b"Throughput/GPU (tok/s),Output Throughput/GPU (tok/s),Median TPOT (ms)\n\xe9t\xe9,1\n"),
                       ("utf16", "Model,ISL\n".encode("utf-16"))):
        add(11, f"results-inferencex-{name}", "results", write(r / f"ix-enc-{name}.csv", data),
            names=f"ix-enc-{name}.csv", field="file")

    # ---------------------------------------------------------------- 13: values a chapter would fail on
    for key, value in (("decode_topologies", "[TP3]"), ("prefill_topologies", "[TP5, TP2]"),
                       ("decode_topologies", "[TP32]"), ("isl", "300000"), ("kv_cache_dtype", "fp7"),
                       ("decode_topologies", "[]"), ("prefill_topologies", "[XYZ]"), ("gpus", "prefill=0"),
                       ("max_num_seqs", "[0]"), ("gpu_memory_utilization", "1.5")):
        text = "\n".join(ln for ln in base.splitlines() if not ln.startswith(f"{key}:")) + f"\n{key}: {value}\n"
        add(13, f"workbook-{key}-{value.strip('[]')}", "workbook",
            write(p / f"chap-{key}-{value.strip('[]').replace(', ', '-') or 'empty'}.yaml", text),
            "--out", out / "wb", names="chap-", field=key)

    # the workbook's plan section, draft model, DCP and calibration: refused before anything runs
    head = base.split("\nplan:", 1)[0]
    for name, plan, key in (("plan-not-a-map", "plan: 16", "plan"),
                            ("plan-max-gpus-0", "plan: {max_gpus: 0}", "plan.max_gpus"),
                            ("plan-max-gpus-text", "plan: {max_gpus: many}", "plan.max_gpus"),
                            ("plan-max-gpus-huge", "plan: {max_gpus: 1e400}", "plan.max_gpus"),
                            ("plan-floor-negative", "plan: {min_tps_per_user: [-5]}", "plan.min_tps_per_user"),
                            ("plan-floor-empty", "plan: {min_tps_per_user: []}", "plan.min_tps_per_user"),
                            ("plan-ttft-nan", "plan: {max_ttft_ms: .nan}", "plan.max_ttft_ms"),
                            ("plan-decode-gpu", "plan: {decode_gpu: tpu9}", "plan.decode_gpu"),
                            ("plan-topology", "plan: {decode_topologies: [TP3]}", "plan.decode_topologies"),
                            ("plan-recipes-text", "plan: {recipes: yes please}", "plan.recipes"),
                            ("plan-unknown-key", "plan: {max_gpu: 16}", "plan.max_gpu")):
        add(13, f"workbook-{name}", "workbook", write(p / f"{name}.yaml", f"{head}\n{plan}\n"), "--out", out / "wb",
            names=f"{name}.yaml", field=key)
    # A budget nothing fits: 2 H200s at half their memory hold no server of Qwen3-Next-80B's 151 GiB of BF16
    # weights, let alone a prefill/decode pair (at full memory one aggregated TP2 server would fit).
    half = re.sub(r"^gpu_memory_utilization:.*$", "gpu_memory_utilization: 0.5", head, flags=re.M)
    add(13, "workbook-plan-budget-too-small", "workbook",
        write(p / "plan-budget-too-small.yaml", f"{half}\nplan: {{max_gpus: 2}}\n"), "--out", out / "wb",
        names="plan-budget-too-small.yaml", field="plan.max_gpus")
    write(p / "calibration-gpt-oss.yaml", CALIBRATION)
    for name, line, key in (("draft-unknown", "speculative_model: no-such-draft", "speculative_model"),
                            ("dcp-zero", "decode_context_parallel_size: 0", "decode_context_parallel_size"),
                            ("dcp-3", "decode_context_parallel_size: 3", "decode_context_parallel_size"),
                            ("cal-missing", "calibration: no-such-calibration.yaml", "calibration"),
                            ("cal-other-model", "calibration: calibration-gpt-oss.yaml", "calibration")):
        key_name = line.split(":", 1)[0]
        text = "\n".join(ln for ln in head.splitlines() if not ln.startswith(f"{key_name}:")) + f"\n{line}\n"
        add(13, f"workbook-{name}", "workbook", write(p / f"{name}.yaml", text), "--out", out / "wb",
            names=f"{name}.yaml", field=key)

    # ---------------------------------------------------------------- 14: silently accepted or wrongly blamed
    for cmd in (("state", "qwen3.8-2.4t", "--isl", "1024", "--osl", "128"),
                ("memory", "--total-gib", "276", "--weights-gib", "100"),
                ("predict", "qwen3-32b", *predict), ("log", log33, "--model", qwen32),
                ("plan", "qwen3-32b", "--gpu", "h100", "--max-gpus", "16", "--isl", "1024", "--osl", "128")):
        for version in ("99.0", "0.34", "1.0", "0.5", "0.10.2", "nightly"):
            add(14, f"{cmd[0]}-vllm-{version}", *cmd, "--vllm", version, names="--vllm", field="vllm")
    for name, text in (("vllm-0.5", 'vllm: "0.5"'), ("vllm-99", 'vllm: "99.0"'), ("vllm-number", "vllm: 0.33")):
        t = "\n".join(ln for ln in base.splitlines() if not ln.startswith("vllm:")) + f"\n{text}\n"
        add(14, f"workbook-{name}", "workbook", write(p / f"{name}.yaml", t), "--out", out / "wb",
            names=f"{name}.yaml", field="vllm")
    for name, record in (("total-below-output", vllm_record(total_token_throughput=500.0)),
                         ("p99-tpot-below-median", vllm_record(p99_tpot_ms=1.0)),
                         ("p99-ttft-below-median", vllm_record(p99_ttft_ms=1.0)),
                         ("throughput-100x", vllm_record(output_throughput=100 * 1004.6795603331491,
                                                         total_token_throughput=200 * 9042.1)),
                         ("throughput-tenth", vllm_record(output_throughput=100.0, total_token_throughput=9042.1)),
                         ("concurrency-zero", vllm_record(max_concurrency=0)),
                         ("concurrency-negative", vllm_record(max_concurrency=-4))):
        add(14, f"results-{name}", "results", write(r / f"{name}.json", dump(record)), "--gpus", "8",
            names=f"{name}.json")
        add(14, f"frontier-{name}", "frontier", r / f"{name}.json", "--gpus", "8", names=f"{name}.json")
    sg = (FIXTURES / "results" / "sglang" / "bench_serving.jsonl").read_text().splitlines()[0]
    sgr = json.loads(sg.replace("Infinity", "1e999"))
    sgr["request_rate"] = None
    add(14, "results-sglang-total-below-output", "results",
        write(r / "sglang-low-total.jsonl", json.dumps({**sgr, "total_throughput": 1.0})), "--gpus", "8",
        names="sglang-low-total.jsonl", field="total_throughput")
    for name, changes in (("concurrency-zero-config", {"input_config": {"loadgen": {"concurrency": 0}}}),
                          ("concurrency-zero-cli", {"run_info": {"cli_command": "aiperf profile --concurrency 0"}}),
                          ("p99-below-median", None)):
        rec = {k: v for k, v in json.loads(aiperf_src.read_text()).items() if k not in ("input_config", "run_info")}
        if changes is None:
            rec["time_to_first_token"] = {**rec["time_to_first_token"], "p99": 0.001}
        else:
            rec.update(changes)
        add(14, f"results-aiperf-{name}", "results", write(r / f"aiperf14-{name}" / "profile_export_aiperf.json",
                                                           dump(rec)), "--gpus", "8", names="profile_export_aiperf.json")
    zero_dir = r / "aiperf-concurrency0" / "Qwen3-32B-openai-chat-concurrency0"
    rec = {k: v for k, v in json.loads(aiperf_src.read_text()).items() if k not in ("input_config", "run_info")}
    add(14, "results-aiperf-folder-concurrency0", "results", write(zero_dir / "profile_export_aiperf.json", dump(rec)),
        "--gpus", "8", names="concurrency0")
    dup = ix[: header_at] + [ix[header_at] + ",Concurrency", ix[header_at + 1] + ",64"]
    add(14, "results-inferencex-duplicated-header", "results", write(r / "ix-dup-header.csv", "\n".join(dup) + "\n"),
        names="ix-dup-header.csv", field="Concurrency")
    low = list(row)
    low[cols.index("Output Throughput/GPU (tok/s)")] = str(float(row[cols.index("Throughput/GPU (tok/s)")]) * 10)
    add(14, "results-inferencex-total-below-output", "results",
        write(r / "ix-low-total.csv", "\n".join(ix[: header_at + 1] + [",".join(low)]) + "\n"), names="ix-low-total.csv")
    neg_log = write(lg / "negative-kv.log", "\n".join(neg) + "\n")
    add(14, "log-negative-kv-blames-the-log", "log", neg_log, "--model", qwen32, names="negative-kv.log",
        field="Available KV cache memory")
    add(14, "log-negative-kv-with-kv-flag", "log", neg_log, "--model", qwen32, "--kv-cache-dtype", "fp8",
        names="negative-kv.log", field="Available KV cache memory")
    old = write(lg / "vllm-0.5.log", log33.read_text().replace("v0.33.0", "v0.5.0").replace("version 0.33.0",
                                                                                                  "version 0.5.0"))
    add(14, "log-vllm-0.5-blames-the-log", "log", old, "--model", qwen32, names="vllm-0.5.log", field="version")
    huge_len = write(lg / "huge-len.log", log33.read_text().replace("max_seq_len=32768", f"max_seq_len={10**13}")
                     .replace("Maximum concurrency for 32,768", f"Maximum concurrency for {10**13:,}")
                     .replace("'max_model_len': 32768", f"'max_model_len': {10**13}"))
    add(14, "log-huge-max-model-len-blames-the-log", "log", huge_len, "--model", qwen32, names="huge-len.log",
        field="max_model_len")

    # ---------------------------------------------------------------- validate, calibrate, --calibration files
    silicon = REPO / "data" / "clusters" / "aiconfigurator-silicon"
    sel = ("--model", "gpt-oss-120b", "--gpu", "h200")
    validate = ("validate", silicon, *sel)
    calibrate = ("calibrate", silicon, *sel)
    cal_ok = CALIBRATION
    cal_variants = {
        "deep": "pdtune_calibration: 1\nmodel: " + deep_yaml(5000) + "\n", "complex": "? [a]\n: 1\n" + cal_ok,
        "dup": cal_ok + "gpu: h100\n", "bigint": cal_ok.replace("compute: 0.64", "compute: " + "9" * 5000),
        "recursive": cal_ok.replace("vllm:\n- 0.18.0", "vllm: &v [*v]"),
        "laughs": cal_ok.replace("vllm:\n- 0.18.0", f"vllm: {laughs()}"),
        "factor-nan": cal_ok.replace("compute: 0.64", "compute: .nan"),
        "factor-inf": cal_ok.replace("hbm: 0.80", "hbm: .inf"),
        "factor-text": cal_ok.replace("link: 0.37", "link: fast"),
        "factor-unknown": cal_ok.replace("link: 0.37", "speed: 0.37"),
        "rows-text": cal_ok.replace("rows: 57", "rows: many"),
        "rows-huge": cal_ok.replace("rows: 57", f"rows: {10**30}"),
        "model-list": cal_ok.replace("model: gpt-oss-120b", "model: [gpt-oss-120b]"),
        "fitted-list": cal_ok.replace("fitted_on:\n", "fitted_on: [1]\nx_fitted:\n"),
        "vllm-text": cal_ok.replace("vllm:\n- 0.18.0", "vllm: 0.18.0"),
        "holdout-by": cal_ok + "holdout_by: model\n", "latency-model": cal_ok + "latency_model: oracle\n",
        "prior-text": cal_ok + "prior: 'no'\n",
        "groups-text": cal_ok.replace("fitted_on:\n",
                                                                                     "fitted_on:\n  groups: isl\n"),
        "not-calibration": "model: x\n", "binary": "\x00\x01",
    }
    # The field each variant's line must blame: a variant refused for another reason (a file that is not read as
    # a calibration at all) tests nothing of its own.
    cal_fields = {"factor-nan": "factors.compute", "factor-inf": "factors.hbm", "factor-text": "factors.link",
                  "factor-unknown": "factors.speed", "rows-text": "fitted_on.rows", "rows-huge": "fitted_on.rows",
                  "model-list": "model", "fitted-list": "fitted_on", "vllm-text": "vllm", "holdout-by": "holdout_by",
                  "latency-model": "latency_model", "prior-text": "prior", "groups-text": "fitted_on.groups",
                  "not-calibration": "pdtune_calibration"}
    for name, text in cal_variants.items():
        path = write(p / f"cal-{name}.yaml", text.encode("latin-1") if name == "binary" else text)
        cause = {"laughs": 10, "factor-nan": 2, "factor-inf": 2, "rows-huge": 3, "binary": 0}.get(name, 1 if name in (
            "deep", "complex", "dup", "bigint", "recursive") else 4)
        add(cause, f"validate-calibration-{name}", *validate, "--calibration", path, names=f"cal-{name}.yaml",
            field=cal_fields.get(name, ""))
        if name in ("deep", "laughs", "factor-nan", "rows-text", "binary"):
            add(cause, f"predict-calibration-{name}", "predict", "gpt-oss-120b", "--topology", "TP1", "--mode",
                "decode", "--gpu", "h200", "--calibration", path, names=f"cal-{name}.yaml")
            add(cause, f"dataset-calibration-{name}", "dataset", "generate", "--params", p / "ds-ok.yaml",
                "--calibration", path, "--out", out / "ds", names=f"cal-{name}.yaml")
    add(7, "validate-calibration-fifo", *validate, "--calibration", sp / "in.fifo", names="in.fifo")
    for name in ("deep.json", "bigint.json", "dupkey.json", "deepline.jsonl"):
        add(1, f"validate-results-{name}", "validate", r / name, *sel, names=name)
        add(1, f"calibrate-results-{name}", "calibrate", r / name, *sel, "--out", out / "cal.yaml", names=name)
    for name in ("total-below-output", "p99-tpot-below-median", "throughput-100x", "concurrency-zero"):
        add(14, f"validate-{name}", "validate", r / f"{name}.json", *sel, "--gpus", "8", names=f"{name}.json")
        add(14, f"calibrate-{name}", "calibrate", r / f"{name}.json", *sel, "--gpus", "8", "--out", out / "cal.yaml",
            names=f"{name}.json")
    add(7, "validate-results-fifo", "validate", sp / "in.fifo", *sel, names="in.fifo")
    add(7, "validate-folder-with-fifos", "validate", walk, *sel, names="fifo-in-folder")
    add(10, "validate-sidecar-laughs", "validate", r / "sidecar-laughs", *sel, names="pdtune-gpus.yaml")
    for value in (str(10**30), "9" * 400, "0"):
        add(3 if value != "0" else 0, f"validate-gpus-{value[:8]}", *validate, "--gpus", value, names="--gpus")
        add(3 if value != "0" else 0, f"calibrate-gpus-{value[:8]}", *calibrate, "--gpus", value, "--out",
            out / "cal.yaml", names="--gpus")
    for value in ("nan", "1.5", "-1", "inf"):
        add(2, f"calibrate-holdout-{value}", *calibrate, "--holdout", value, "--out", out / "cal.yaml",
            names="--holdout")
    add(2, "calibrate-holdout-by-model", *calibrate, "--holdout-by", "model", "--out", out / "cal.yaml",
        names="--holdout-by")
    cal_targets = (("below-a-file", out / "a-file" / "cal.yaml"), ("a-folder", out / "a-folder"),
                   ("proc", Path("/proc/pdtune-test/cal.yaml")), ("fifo", sp / "out-fifo"))
    if null is not None:
        cal_targets += (("device", null),)
    if can_lock:
        cal_targets += (("immutable", out / "immutable" / "cal.yaml"),)
    for name, target in cal_targets:
        add(6, f"calibrate-out-{name}", *calibrate, "--out", target, names=target.name)
    for name in ("deep", "fp8-zero", "layers-1e18", "mlp-only-int"):
        add({"deep": 1, "fp8-zero": 4, "layers-1e18": 5, "mlp-only-int": 4}[name], f"validate-model-{name}",
            "validate", silicon, "--model", m / name, "--gpu", "h200", names=f"{name}/config.json")
    for argv, names in (((*validate[:2], "--model", "gpt-oss-120b", "--gpu", "gpu9000"), "gpu"),
                        ((*validate, "--topology", "TPX"), "topology"),
                        ((*validate, "--topology", "TP2", "--gpus", "4"), "topology"),
                        (("validate", silicon, "--model", "no-such-model", "--gpu", "h200"), "no-such-model"),
                        (("validate", silicon, "--model", "qwen3-32b", "--gpu", "h200"), "model"),
                        (("calibrate", r / "no-such-folder", *sel, "--out", out / "cal.yaml"), "no-such-folder")):
        add(0, f"{argv[0]}-{'-'.join(a.name if isinstance(a, Path) else str(a) for a in argv[1:])[-50:]}", *argv,
            names=names)
    add(11, "broken-data-validate", *validate, names="data-broken", own_process=True,
        env={"PDTUNE_DATA": str(root / "data-broken")})

    # ---------------------------------------------------------------- results and logs (tests/fixtures/*/bad)
    # The hand-made broken files of tests/fixtures/results/bad and tests/fixtures/logs/bad, each blaming its field.
    bad, good, logs = FIXTURES / "results" / "bad", FIXTURES / "results", FIXTURES / "logs"
    for argv, names, blamed in (
            (("results", bad / "truncated.json", "--gpus", "8"), "truncated.json", "json"),
            (("results", bad / "nan-median-tpot.json", "--gpus", "8"), "nan-median-tpot.json", "median_tpot_ms"),
            (("results", bad / "missing-median-tpot.json", "--gpus", "8"), "missing-median-tpot.json",
             "median_tpot_ms"),
            (("results", bad / "missing-throughput.json", "--gpus", "8"), "missing-throughput.json",
             "output_throughput"),
            (("results", bad / "request-rate-run.json", "--gpus", "8"), "request-rate-run.json", "max_concurrency"),
            (("results", bad / "no-completed-requests.json", "--gpus", "8"), "no-completed-requests.json",
             "completed"),
            (("results", bad / "negative-throughput.json", "--gpus", "8"), "negative-throughput.json",
             "output_throughput"),
            (("results", bad / "infinite-ttft.json", "--gpus", "8"), "infinite-ttft.json", "median_ttft_ms"),
            (("results", bad / "modeled-not-bool.json", "--gpus", "8"), "modeled-not-bool.json", "modeled"),
            (("results", bad / "garbage.json"), "garbage.json", "file"),
            (("results", bad / "empty.json"), "empty.json", "file"),
            (("results", bad / "not-results.json"), "not-results.json", "format"),
            (("results", bad / "aiperf-no-concurrency", "--gpus", "8"), "profile_export_aiperf.json", "concurrency"),
            (("results", bad / "aiperf-bad-unit-concurrency16", "--gpus", "8"), "profile_export_aiperf.json",
             "inter_token_latency.unit"),
            (("results", bad / "aiperf-missing-itl-concurrency16", "--gpus", "8"), "profile_export_aiperf.json",
             "inter_token_latency.p50"),
            (("results", bad / "srt-zero-gpus"), "results_concurrency_64_gpus_0.json", "gpus"),
            (("results", bad / "srt-ctx-gen-mismatch"), "results_concurrency_64_gpus_24_ctx_8_gen_8.json", "gpus"),
            (("results", bad / "srt-mixed-workload"), "results_concurrency_64_gpus_24_ctx_8_gen_16.json", "isl"),
            (("results", bad / "srt-concurrency-mismatch"), "results_concurrency_128_gpus_8.json", "max_concurrency"),
            (("results", bad / "srt-mode-mismatch"), "results_concurrency_64_gpus_8.json", "mode"),
            (("results", bad / "srt-job-metadata" / "5550002.json"), "5550002.json", "job_id"),
            (("results", bad / "inferencex-missing-decode-gpus.csv"), "inferencex-missing-decode-gpus.csv",
             "Num Decode GPUs"),
            (("results", bad / "inferencex-tp-mismatch.csv"), "inferencex-tp-mismatch.csv", "TP"),
            (("results", bad / "inferencex-missing-column.csv"), "inferencex-missing-column.csv", "Concurrency"),
            (("results", bad / "rollup-missing-column"), "benchmark-rollup.csv", "Median TPOT"),
            (("results", bad / "sglang-broken-line.jsonl", "--gpus", "8"), "sglang-broken-line.jsonl", "line 2"),
            (("results", bad / "bad-sidecar"), "pdtune-gpus.yaml", "gpus"),
            # seconds-keyed vllm bench JSON: a latency key that names no unit; ms and s spellings that disagree
            (("results", bad / "seconds-no-unit.json", "--gpus", "4"), "seconds-no-unit.json", "ttft"),
            (("results", bad / "seconds-and-ms-disagree.json", "--gpus", "4"), "seconds-and-ms-disagree.json",
             "median_ttft"),
            # no GPU counts anywhere: a per-GPU figure would be a guess
            (("results", good / "vllm_bench" / "qwen3-32b-c64-no-percentiles.json"),
             "qwen3-32b-c64-no-percentiles.json", "gpus"),
            # a sidecar and the flag disagree
            (("results", good / "sglang", "--gpus", "8"), "pdtune-gpus.yaml", "gpus"),
            # two workloads where one is expected
            (("results", good / "vllm_bench", "--gpus", "8", "--single-workload"), ".json", "isl/osl"),
            (("results", good / "no-such-folder"), "no-such-folder", "path"),
            (("log", logs / "bad" / "no-kv-line.log"), "no-kv-line.log", "KV cache size"),
            (("log", logs / "bad" / "garbage.log"), "garbage.log", "file"),
            (("log", logs / "bad" / "empty.log"), "empty.log", "log"),
            (("log", logs / "bad" / "nginx-access.log"), "nginx-access.log", "log"),
            (("log", logs / "missing.log"), "missing.log", "file"),
            (("log", logs / "v0.26_tp2_qwen3-32b.log", "--model", "no-such-model"), "no-such-model", "model"),
            (("log", logs / "v0.26_tp2_qwen3-32b.log", "--model", qwen32, "--vllm", "0.5"), "--vllm", "vllm")):
        add(0, f"fixture-{argv[0]}-{Path(argv[1]).name}", *argv, names=names, field=blamed)
    empty = r / "empty-folder"
    empty.mkdir(parents=True, exist_ok=True)
    add(0, "results-empty-folder", "results", empty, names=empty, field="results", says="no benchmark results found")
    for value in ("0", "prefill=0,decode=0", "prefill=8", "two"):
        add(0, f"results-gpus-{value}", "results", good / "srt_slurm" / "agg", "--gpus", value, names="--gpus")
    mixed = r / "mixed-broken"
    _copytree(good / "srt_slurm" / "agg", mixed / "agg")
    write(mixed / "broken.json", (bad / "nan-median-tpot.json").read_text(encoding="utf-8"))
    add(0, "results-csv-o-of-a-broken-folder", "results", mixed, "--gpus", "8", "--csv", "-o", out / "table.csv",
        names="broken.json", field="median_tpot_ms")  # and no table.csv: nothing may be created
    add(0, "results-installed-entry-point", "results", bad / "nan-median-tpot.json", "--gpus", "8",
        names="nan-median-tpot.json", field="median_tpot_ms", says="is NaN", own_process=True)

    # ---------------------------------------------------------------- issue 22, 4 and 11: outputs whole or absent
    # 2211: a second run into an --out a live run is writing (its lock held by this process, as FolderSwap
    # takes it) is refused before it writes anything, and a previous output there stays as it was.
    rows_plan = planned_rows(root / "plans" / "plan-rows.json")
    ds_ok = write(p / "ds-ok.yaml", "concurrencies: [1]\n")
    previous = held(out / "busy-previous")
    write(previous / "summary.json", "{}")
    for name, argv in (("workbook", ("workbook", params_ok, "--out", held(out / "busy-wb"))),
                       ("workbook-previous", ("workbook", params_ok, "--out", previous, "--force")),
                       ("dataset", ("dataset", "generate", "--params", ds_ok, "--out", held(out / "busy-ds"))),
                       ("recipe", ("recipe", rows_plan, "--row", "0", "--out", held(out / "busy-rec"))),
                       ("recipe-previous", ("recipe", rows_plan, "--row", "0", "--out", previous)),
                       ("plan-recipes", ("plan", "qwen3-32b", "--gpu", "h100", "--max-gpus", "8", "--isl", "1024",
                                         "--osl", "128", "--recipes", held(out / "busy-plan")))):
        flag = "--recipes" if name == "plan-recipes" else "--out"
        add(2211, f"busy-{name}", *argv, names=Path(argv[argv.index(flag) + 1]).name, field=flag)
    # 2204: recipes refused half-way (a recipe's name taken by a folder or a FIFO in --out) leave the folder as
    # it was: the recipes of an earlier run in it included.
    deploy = recipe_names(rows_plan, 0)[0]
    for name in ("folder", "fifo"):
        folder = out / f"rec-in-the-way-{name}"
        write(folder / "deploy-row9-earlier.yaml", "name: earlier\n")
        (folder / deploy).mkdir(parents=True, exist_ok=True) if name == "folder" else fifo(folder / deploy)
        add(2204, f"recipe-in-the-way-{name}", "recipe", rows_plan, "--row", "0", "--out", folder, names=deploy,
            field="--out")

    # ---------------------------------------------------------------- 0: more bad input per subcommand
    for name, data in (("binary", b"\x00\x01binary"), ("latin1", b'{"a": "\xe9"}'), ("empty", b""),
                       ("bom-garbage", "\ufeff{garbage".encode()), ("utf16", '{"a": 1}'.encode("utf-16"))):
        add(0, f"results-{name}", "results", write(r / f"enc-{name}.json", data), "--gpus", "8",
            names=f"enc-{name}.json")
        add(0, f"state-config-{name}", *state, write(m / f"enc-{name}" / "config.json", data),
            names=f"enc-{name}/config.json")
        add(0, f"log-{name}", "log", write(lg / f"enc-{name}.log", data), names=f"enc-{name}.log")
        add(0, f"workbook-{name}", "workbook", write(p / f"enc-{name}.yaml", data), "--out", out / "wb",
            names=f"enc-{name}.yaml")
        add(0, f"recipe-{name}", "recipe", write(root / "plans" / f"enc-{name}.json", data), "--row", "0",
            "--out", out / "rec", names=f"enc-{name}.json")
        add(0, f"dataset-{name}", "dataset", "generate", "--params", write(p / f"ds-enc-{name}.yaml", data),
            "--out", out / "ds", names=f"ds-enc-{name}.yaml")
    for argv, names in ((("graphs", "--max-num-seqs", "-1"), "--max-num-seqs"),
                        (("graphs", "--max-num-seqs", "1e9"), "--max-num-seqs"),
                        (("graphs", "--max-num-seqs", "8", "--mode", "weird"), "--mode"),
                        (("memory", "--total-gib", "276"), "--weights-gib"),
                        (("memory", "--total-gib", "276", "--weights-gib", "1", "--gpu-memory-utilization", "nan"),
                         "--gpu-memory-utilization"),
                        (("state", "qwen3.8-2.4t"), "max_model_len"),
                        (("state", "qwen3.8-2.4t", "--isl", "0", "--osl", "1"), "--isl"),
                        (("state", "qwen3.8-2.4t", "--isl", "1", "--osl", "1", "--tp", "3"), "num_attention_heads"),
                        (("predict", "qwen3-32b", "--topology", "TEP8"), "--mode"),
                        (("predict", "qwen3-32b", "--topology", "TP9X", "--mode", "decode"), "topology"),
                        (("predict", "qwen3-32b", *predict[:-1], "gpu9000"), "gpu"),
                        (("plan", "qwen3-32b", "--gpu", "h100", "--max-gpus", "0", "--isl", "1", "--osl", "1"),
                         "--max-gpus"),
                        (("recipe", plan_ok, "--out", out / "rec"), "--row"),
                        (("recipe", plan_ok, "--row", "3", "--out", out / "rec"), "row"),
                        (("results", r / "no-such.json"), "no-such.json"),
                        (("frontier", r / "no-such-folder"), "no-such-folder"),
                        (("workbook", p / "no-such.yaml", "--out", out / "wb"), "no-such.yaml"),
                        (("workbook", params_ok, "--out", out / "wb", "--jobs", "0"), "--jobs"),
                        (("workbook", params_ok, "--out", out / "wb", "--timeout", str(10**20)), "--timeout"),
                        (("dataset", "generate", "--model", "no-such-model", "--out", out / "ds"), "no-such-model"),
                        (("dataset", "generate", "--disagg", "1xTP2", "--out", out / "ds"), "disagg"),
                        (("dataset", "generate", "--prefill-topologies", "TP2,TPX", "--out", out / "ds"), "TPX"),
                        (("dataset", "generate", "--gpu", "gpu9000", "--out", out / "ds"), "gpu"),
                        (("log", log33, "--model", "no-such-model"), "no-such-model"),
                        (("log", log33, "--model", qwen32, "--speculative-model", "no-such"), "no-such")):
        label = "-".join(a.name if isinstance(a, Path) else str(a) for a in argv[1:])
        add(0, f"{argv[0]}-{label[-50:]}", *argv, names=names)

    # pdtune simulate (issue 23): workload flags, trace files, the per-request CSV.
    sim = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--topology", "TP1")
    tr = root / "traces"
    bad_traces = {
        "decreasing": ("arrival_s,isl,osl\n1,100,10\n0.5,100,10\n", "row 2: arrival_s"),
        "no-osl": ("arrival_s,isl\n0,100\n", "osl"),
        "fraction": ("arrival_s,isl,osl\n0,10.5,4\n", "row 1: isl"),
        "nan": ("arrival_s,isl,osl\nnan,100,4\n", "row 1: arrival_s"),
        "zero-osl": ("arrival_s,isl,osl\n0,100,0\n", "osl"),
        "empty": ("arrival_s,isl,osl\n", "rows"),
        "huge-isl": (f"arrival_s,isl,osl\n0,{2**40},4\n", "isl"),
    }
    for name, (text, field) in bad_traces.items():
        path = write(tr / f"{name}.csv", text)
        add(0, f"simulate-trace-{name}", *sim, "--trace", path, names=path.name, field=field)
    add(0, "simulate-trace-fifo", *sim, "--trace", fifo(tr / "fifo.csv"), names="fifo.csv")
    add(0, "simulate-trace-folder", *sim, "--trace", tr, names="traces")
    add(0, "simulate-trace-with-isl", *sim, "--trace", write(tr / "ok.csv", "arrival_s,isl,osl\n0,100,4\n"),
        "--isl", "10", names="--trace")
    for argv, names in ((("--concurrency", "0", "--isl", "10", "--osl", "4"), "--concurrency"),
                        (("--concurrency", "4", "--isl", "10"), "--osl"),
                        (("--concurrency", "4", "--rate", "2", "--isl", "10", "--osl", "4"), "--rate"),
                        (("--rate", "0", "--isl", "10", "--osl", "4"), "--rate"),
                        (("--rate", "nan", "--isl", "10", "--osl", "4"), "--rate"),
                        (("--concurrency", "4", "--isl", "10", "--osl", "4", "--range-ratio", "1.5"), "--range-ratio"),
                        (("--concurrency", "4", "--isl", "10", "--osl", "4", "--acceptance", "2"), "--acceptance"),
                        (("--concurrency", "4", "--isl", "10", "--osl", "4", "--harness", "locust"), "--harness"),
                        (("--concurrency", "4", "--isl", "1000", "--osl", "40", "--max-model-len", "500"),
                         "--max-model-len"),
                        (("--concurrency", "4", "--isl", "10", "--osl", "4", "--max-concurrency", "2"),
                         "--max-concurrency"),
                        (("--concurrency", "1e30", "--isl", "10", "--osl", "4"), "--concurrency"),
                        (("--concurrency", "4", "--isl", str(2**40), "--osl", "4"), "--isl")):
        add(0, f"simulate-{'-'.join(argv)[-50:]}", *sim, *argv, names=names)
    add(0, "simulate-disagg-osl-1", "simulate", "llama-3.1-8b", "--gpu", "h100", "--topology", "1xTP1:1xTP1",
        "--concurrency", "2", "--isl", "64", "--osl", "1", names="--osl")
    add(0, "simulate-csv-below-a-file", *sim, "--concurrency", "2", "--isl", "64", "--osl", "4", "--num-prompts", "2",
        "--csv", out / "a-file" / "requests.csv", names="a-file")
    add(0, "simulate-csv-folder", *sim, "--concurrency", "2", "--isl", "64", "--osl", "4", "--num-prompts", "2",
        "--csv", out / "a-folder", names="a-folder")
    _issue22_plan_files(root, add)
    _issue22(add, root, base=base, log33=log33, qwen32=qwen32, good_result=good_result, silicon=silicon,
             params_ok=params_ok)
    return [c for c in cases if c is not None]


def _issue22_plan_files(root: Path, add: Any) -> None:
    """Issue 22, causes 2 and 3 (numbered 2202 and 2203: 2200 + the cause of issue 22): `pdtune recipe` on plan
    files whose keys are missing or of the wrong kind (2), or whose values vLLM or pdtune's bounds refuse (3).
    Each file is a valid plan (:func:`plan_file`) with one thing broken; the line must name the file and the key."""
    folder = root / "plans" / "issue22"
    out = root / "out" / "rec22"

    def case(cause: int, name: str, data: dict[str, Any] | str, field: str) -> None:
        path = write(folder / f"{name}.json", data if isinstance(data, str) else json.dumps(data))
        add(cause, f"recipe22-{name}", "recipe", path, "--row", "0", "--row", "1", "--out", out, names=path.name,
            field=field)

    def row(k: int, **changes: Any) -> list[dict[str, Any]]:
        rows = json.loads(json.dumps(PLAN_ROWS))
        for key, value in changes.items():
            if value is _DROP:
                rows[k].pop(key)
            else:
                rows[k][key] = value
        return rows

    def settings(**changes: Any) -> dict[str, Any]:
        return {**plan_file()["settings"], **changes}

    base = plan_file(PLAN_ROWS)
    # cause 2: keys the recipes read that the schema did not check
    for key in ("gpus_total", "prefill_concurrency", "kv_link", "ttft_ms_p50", "n_decode_workers", "deployment"):
        case(2202, f"row-missing-{key}", plan_file(row(0, **{key: _DROP})), f"rows[0].{key}")
    for key in ("server_concurrency", "agg_replicas", "topology"):
        case(2202, f"agg-missing-{key}", plan_file(row(1, **{key: _DROP})), f"rows[1].{key}")
    for key, value in (("tps_per_gpu", "fast"), ("gpus_total", "4"), ("concurrency", 6.5), ("kv_link", 7),
                       ("curve_concurrencies", "16x64"), ("curve_concurrencies", [16, 0]), ("mode", "hybrid"),
                       ("block_size_to_set", True), ("ttft_ms_p50", -1.0), ("network_groups", ["x"])):
        case(2202, f"row-{key}-{str(value)[:12]}", plan_file(row(0, **{key: value})), f"rows[0].{key}")
    case(2202, "gpus-per-node-0", plan_file(PLAN_ROWS, gpus={"prefill": {"name": "h100", "gpus_per_node": 0,
                                                                         "nvlink_domain_gpus": 8},
                                                            "decode": base["gpus"]["decode"]}),
         "gpus.prefill.gpus_per_node")
    case(2202, "nvlink-domain-missing", plan_file(PLAN_ROWS, gpus={"prefill": {"name": "h100", "gpus_per_node": 8},
                                                                  "decode": base["gpus"]["decode"]}),
         "gpus.prefill.nvlink_domain_gpus")
    case(2202, "gpu-unknown", plan_file(PLAN_ROWS, gpus={"prefill": base["gpus"]["prefill"],
                                                        "decode": {"name": "tpu9", "gpus_per_node": 8,
                                                                   "nvlink_domain_gpus": 8}}), "gpus.decode.name")
    case(2202, "no-format", {k: v for k, v in base.items() if k != "pdtune_plan"}, "pdtune_plan")
    case(2202, "format-2", {**base, "pdtune_plan": 2}, "pdtune_plan")
    case(2202, "format-text", {**base, "pdtune_plan": "1"}, "pdtune_plan")
    case(2202, "settings-isl-text", plan_file(PLAN_ROWS, settings=settings(isl="1024")), "settings.isl")
    case(2202, "settings-vllm-missing", plan_file(PLAN_ROWS, settings={k: v for k, v in settings().items()
                                                                      if k != "vllm"}), "settings.vllm")
    case(2202, "settings-vllm-99", plan_file(PLAN_ROWS, settings=settings(vllm="99.0")), "settings.vllm")
    case(2202, "model-unreadable", plan_file(PLAN_ROWS, model={**base["model"], "name": "no-such-model",
                                                              "source": "/nonexistent/config.json"}), "model.source")
    case(2202, "model-mtp-count", plan_file(PLAN_ROWS, model={**base["model"], "num_mtp_layers": 1}),
         "model.num_mtp_layers")
    case(2202, "row-twice", plan_file([PLAN_ROWS[0], {**PLAN_ROWS[1], "row": 0}]), "rows[1].row")
    case(2202, "candidate-concurrencies", plan_file(PLAN_ROWS, candidates=[{"role": "decode", "topology": "TP2",
                                                                           "mtp_tokens": 0,
                                                                           "sweep_concurrencies": "all"}]),
         "candidates[0].sweep_concurrencies")
    # cause 3: values vLLM (0.33's own choices and bounds) or pdtune's bounds refuse
    case(2203, "kv-cache-dtype-fp7", plan_file(PLAN_ROWS, settings=settings(kv_cache_dtype="fp7")),
         "settings.kv_cache_dtype")
    case(2203, "gpu-memory-utilization-5", plan_file(PLAN_ROWS, settings=settings(gpu_memory_utilization=5.0)),
         "settings.gpu_memory_utilization")
    case(2203, "gpu-memory-utilization-0", plan_file(PLAN_ROWS, settings=settings(gpu_memory_utilization=0)),
         "settings.gpu_memory_utilization")
    case(2203, "max-num-batched-tokens-0", plan_file(PLAN_ROWS, settings=settings(max_num_batched_tokens=0)),
         "settings.max_num_batched_tokens")
    case(2203, "max-num-batched-tokens-huge", plan_file(PLAN_ROWS, settings=settings(max_num_batched_tokens=1 << 40)),
         "settings.max_num_batched_tokens")
    case(2203, "speculative-method", plan_file(PLAN_ROWS, settings=settings(speculative_method="telepathy")),
         "settings.speculative_method")
    case(2203, "block-size-big", plan_file(row(0, block_size_to_set="big")), "rows[0].block_size_to_set")
    case(2203, "block-size-0", plan_file(row(0, block_size_to_set=0)), "rows[0].block_size_to_set")
    case(2203, "max-num-seqs-300-digits",
         '{"pdtune_plan": 1' + json.dumps(plan_file(row(0, curve_decode_concurrency_max="@")))[len('{"pdtune_plan": 1'):]
         .replace('"@"', "9" * 300), "PLAN.json")  # the guarded reader refuses the number itself
    # within every key's bound, but the engine it makes is not: 2^24 requests on one DP rank
    case(2203, "max-num-seqs-over-bound", plan_file(row(0, concurrency=1 << 24, decode_concurrency=1 << 24,
                                                       curve_decode_concurrency_max=1 << 24)), "rows[0].decode")
    case(2203, "mtp-without-module", plan_file(row(0, mtp_tokens=3)), "rows[0].mtp_tokens")
    case(2203, "zero-decode-workers", plan_file(row(0, n_decode_workers=0, gpus_decode=0, gpus_total=2)),
         "rows[0].n_decode_workers")
    case(2203, "zero-replicas", plan_file(row(1, agg_replicas=0, gpus_total=0)), "rows[1].gpus_total")
    case(2203, "tp3-for-64-heads", plan_file(row(0, prefill_topology="TP3", gpus_prefill=3, gpus_total=5)),
         "rows[0].prefill_topology")
    case(2203, "ep-on-dense", plan_file(row(0, decode_topology="TEP2")), "rows[0].decode_topology")
    case(2203, "agg-ep-on-dense", plan_file(row(1, topology="TP2DP2+EP", gpus_total=16, agg_replicas=4)),
         "rows[1].topology")
    case(2203, "gpus-do-not-add-up", plan_file(row(0, gpus_total=5)), "rows[0].gpus_total")
    case(2203, "workers-times-layout", plan_file(row(0, gpus_prefill=3, gpus_total=5)), "rows[0].gpus_prefill")
    case(2203, "over-the-budget", plan_file(row(1, agg_replicas=16, gpus_total=32)), "rows[1].gpus_total")
    case(2203, "nvlink-beyond-domain", plan_file(row(0, n_decode_workers=4, gpus_decode=8, gpus_total=10)),
         "rows[0].kv_link")
    case(2203, "isl-plus-osl", plan_file(PLAN_ROWS, settings=settings(isl=1 << 30, osl=1 << 30)), "settings.osl")


_DROP = object()


#: Issue 22's causes are numbered 2200 + the issue's number (2212: the log's pids that come back).
I22 = 2200


def _issue22(add: Any, root: Path, *, base: str, log33: Path, qwen32: str, good_result: str, silicon: Path,
             params_ok: Path) -> None:
    """Issue 22's hostile inputs, each cause with cases of its own: budgets at cluster scale, outputs that
    cannot be written, models whose counts contradict each other, what ``plan`` used to accept, errors that
    blamed the wrong input, absurd measured values, and a crash loop whose restarts reuse their pids."""
    m, r, lg, p, out = root / "models", root / "results", root / "logs", root / "params", root / "out"

    def add22(cause: int, name: str, *argv: Any, **kw: Any) -> None:
        # A deadline against a hang, not a benchmark: the first case of a child also pays its imports, and the
        # machine may be busy (bench_plan_scale.py holds the time targets).
        kw.setdefault("timeout", 60.0)
        add(cause, name, *argv, **kw)
    plan16 = ("plan", "qwen3-32b", "--gpu", "h100", "--max-gpus", "16", "--isl", "1024", "--osl", "128")
    state = ("state", "--isl", "1024", "--osl", "128")

    def plan_at(budget: int, *extra: str, model: str = "qwen3-32b", gpu: str = "h100") -> tuple[str, ...]:
        return ("plan", model, "--gpu", gpu, "--max-gpus", str(budget), "--isl", "1024", "--osl", "128", *extra)

    # ---------------------------------------------------------------- 2201: plan at cluster scale
    # Each answers (an SLA nothing meets: exit 2, the closest row named) within its deadline and the memory
    # limit; rate matching over workers^2 needed 3.1 GB at 1,024 GPUs and 1.8 TiB at 10^6.
    for name, argv, flag, seconds in (
            ("2e20-floor", plan_at(1 << 20, "--min-tps-per-user", "100000"), "--min-tps-per-user", 60),
            ("2e20-ttft-mixed", plan_at(1 << 20, "--decode-gpu", "h200", "--max-ttft-ms", "0.5"), "--max-ttft-ms", 60),
            ("8192-tpot", plan_at(8192, "--max-tpot-ms-p90", "0.01"), "--max-tpot-ms-p90", 60),
            ("1024-floor-and-ttft", plan_at(1024, "--min-tps-per-user", "50000", "--max-ttft-ms", "1",
                                            model="llama-3.1-70b"), "--min-tps-per-user/--max-ttft-ms", 60),
            ("1024-moe-floor", ("plan", "deepseek-v3", "--gpu", "gb200", "--max-gpus", "1024", "--isl", "8192",
                                "--osl", "1024", "--min-tps-per-user", "100000"), "--min-tps-per-user", 120)):
        add22(I22 + 1, f"i22-plan-scale-{name}", *argv, names=flag, timeout=seconds)
    add22(I22 + 1, "i22-plan-scale-over-the-bound", *plan_at((1 << 20) + 1), names="--max-gpus")
    add22(I22 + 1, "i22-plan-scale-bound-recipes-unwritable", *plan_at(1 << 20, "--recipes", out / "a-file" / "rec"),
        names="a-file", timeout=60)

    # ---------------------------------------------------------------- 2205: stdout that cannot take the output
    predict = ("predict", "qwen3-32b", "--topology", "TP2", "--mode", "decode", "--gpu", "h100", "--concurrency", "8")
    for name, argv, modes in (
            ("plan-json", (*plan16, "--json"), ("full", "closed", "gone")),
            ("results-csv", ("results", good_result, "--gpus", "8", "--csv"), ("full", "closed", "gone")),
            ("log", ("log", log33), ("full", "closed")),
            ("log-json", ("log", log33, "--json"), ("gone",)),
            ("state", (*state, "qwen3-32b"), ("full", "closed")),
            ("graphs", ("graphs", "--max-num-seqs", "64"), ("closed",)),
            ("memory-json", ("memory", "--total-gib", "276", "--weights-gib", "100", "--json"), ("full",)),
            ("predict", predict, ("gone",)),
            ("frontier", ("frontier", good_result, "--gpus", "8"), ("full",)),
            ("help", ("--help",), ("full",)),
            ("version", ("--version",), ("closed",)),
            ("validate-json", ("validate", silicon, "--model", "gpt-oss-120b", "--gpu", "h200", "--json"), ("gone",)),
            ("simulate", ("simulate", "llama-3.1-8b", "--gpu", "h100", "--topology", "TP1", "--concurrency", "2",
                          "--isl", "64", "--osl", "4", "--num-prompts", "2"), ("full", "closed"))):
        for mode in modes:
            add22(I22 + 5, f"i22-stdout-{mode}-{name}", *argv, names="stdout", field="output", own_process=True,
                stdout=mode, timeout=60)

    # ---------------------------------------------------------------- 2206: counts that contradict each other
    for model, key, top_k in (("mixtral-8x7b", "num_local_experts", "num_experts_per_tok"),
                              ("gpt-oss-120b", "num_local_experts", "num_experts_per_tok"),
                              ("qwen3-235b-a22b", "num_experts", "num_experts_per_tok"),
                              ("deepseek-v3", "n_routed_experts", "num_experts_per_tok"),
                              ("glm-4.7", "n_routed_experts", "num_experts_per_tok"),
                              ("minimax-m2.5", "num_local_experts", "num_experts_per_tok"),
                              ("llama-4-scout-17b-16e", "text_config.num_local_experts", "text_config.num_experts_per_tok"),
                              ("jamba-1.5-mini", "num_experts", "num_experts_per_tok"),
                              ("kimi-k2.5", "text_config.n_routed_experts", "text_config.num_experts_per_tok"),
                              ("qwen3-next-80b-a3b", "num_experts", "num_experts_per_tok"),
                              ("qwen3-vl-235b-a22b", "text_config.num_experts", "text_config.num_experts_per_tok")):
        raw = config(model)
        experts = raw.get("text_config", raw)[key.rsplit(".", 1)[-1]]
        folder = write(m / f"i22-topk-{model}" / "config.json", json.dumps(config(model, **{top_k: experts + 1})))
        add22(I22 + 6, f"i22-state-topk-above-experts-{model}", *state, folder.parent, names=f"i22-topk-{model}",
            field=top_k.rsplit(".", 1)[-1])
    for model, key in (("mixtral-8x7b", "num_local_experts"), ("gpt-oss-120b", "num_local_experts"),
                       ("minimax-m2.5", "num_local_experts"), ("deepseek-v3", "n_routed_experts"),
                       ("llama-4-scout-17b-16e", "text_config.num_local_experts")):
        folder = write(m / f"i22-zero-experts-{model}" / "config.json", json.dumps(config(model, **{key: 0})))
        add22(I22 + 6, f"i22-predict-zero-experts-{model}", "predict", folder.parent, "--topology", "TP8", "--mode",
            "decode", "--gpu", "h200", names=f"i22-zero-experts-{model}", field=key.rsplit(".", 1)[-1])
    for model in ("gpt-oss-120b", "deepseek-v3", "jamba-1.5-mini", "nemotron-nano-9b-v2", "qwen3-32b", "kimi-k2.5"):
        raw = config(model)
        text = raw.get("text_config", raw)
        n = text["num_hidden_layers"]
        types = text.get("layer_types") or ["full_attention"] * n
        prefix = "text_config." if "text_config" in raw else ""
        for name, value in (("short", types[:-1]), ("unknown", [*types[:-1], "dense_attention"])):
            folder = write(m / f"i22-layer-types-{name}-{model}" / "config.json",
                           json.dumps(config(model, **{f"{prefix}layer_types": value})))
            add22(I22 + 6, f"i22-state-layer-types-{name}-{model}", *state, folder.parent,
                names=f"i22-layer-types-{name}-{model}", field="layer_types")
    for name, changes, extra, key in (("groups-7", {"n_groups": 7}, (), "n_groups"),
                                      ("groups-3", {"n_groups": 3}, (), "n_groups"),
                                      ("groups-2-tp4", {"n_groups": 2}, ("--tp", "4"), "n_groups")):
        folder = write(m / f"i22-nemotron-{name}" / "config.json", json.dumps(config("nemotron-nano-9b-v2", **changes)))
        add22(I22 + 6, f"i22-state-nemotron-{name}", *state, folder.parent, *extra, names=f"i22-nemotron-{name}",
            field=key)
        if not extra:  # the log's own TP (2) is what its cross-check plans with
            add22(I22 + 6, f"i22-log-model-nemotron-{name}", "log", log33, "--model", folder.parent,
                names=f"i22-nemotron-{name}")
    for model, tp in (("deepseek-v3", "3"), ("kimi-k2.5", "3"), ("deepseek-v3.2", "6"), ("qwen3-next-80b-a3b", "3")):
        add22(I22 + 6, f"i22-state-tp{tp}-{model}", *state, model, "--tp", tp, names=model, field="num_attention_heads")
        add22(I22 + 6, f"i22-predict-tp{tp}-{model}", "predict", model, "--topology", f"TP{tp}", "--mode", "decode",
            "--gpu", "gb200", names=model, field="num_attention_heads")
    add22(I22 + 6, "i22-memory-tp3-deepseek", "memory", "--model", "deepseek-v3", "--topology", "TP3", "--gpu", "gb200",
        names="TP3")
    for model, window in (("mistral-7b-v0.1", 1 << 31), ("gemma-2-9b-it", 1 << 40), ("gpt-oss-120b", 10**12)):
        folder = write(m / f"i22-window-{model}" / "config.json", json.dumps(config(model, sliding_window=window)))
        add22(I22 + 6, f"i22-state-window-{model}", *state, folder.parent, names=f"i22-window-{model}",
            field="sliding_window")
    add22(I22 + 6, "i22-plan-topk-above-experts", "plan", m / "i22-topk-mixtral-8x7b", "--gpu", "h200", "--max-gpus",
        "16", "--isl", "1024", "--osl", "128", names="i22-topk-mixtral-8x7b", field="num_experts_per_tok")
    add22(I22 + 6, "i22-dataset-zero-experts", "dataset", "generate", "--model", m / "i22-zero-experts-deepseek-v3",
        "--out", out / "ds", names="i22-zero-experts-deepseek-v3", field="n_routed_experts")

    # ---------------------------------------------------------------- 2207: plan checks what the rest checks
    for name, argv, field in (
            ("prefill-ep-dense", (*plan16, "--prefill-topologies", "TP2,TP4+EP"), "topology"),
            ("decode-tep-dense", ("plan", "llama-3.1-70b", "--gpu", "h100", "--max-gpus", "32", "--isl", "1024",
                                  "--osl", "128", "--decode-topologies", "TEP4"), "topology"),
            ("decode-tp3-heads", (*plan16, "--decode-topologies", "TP2,TP3"), "topology"),
            ("decode-pp-layers", ("plan", "llama-3.1-8b", "--gpu", "h100", "--max-gpus", "256", "--isl", "1024",
                                  "--osl", "128", "--decode-topologies", "PP64"), "topology")):
        add22(I22 + 7, f"i22-plan-{name}", *argv, names="-topologies", field=field)
    add22(I22 + 7, "i22-predict-ep-dense", *predict[:3], "TP4+EP", *predict[4:], names="TP4+EP", field="topology")
    add22(I22 + 7, "i22-predict-tep-dense", "predict", "llama-3.1-8b", "--topology", "TEP2", "--mode", "prefill", "--gpu",
        "h100", names="TEP2", field="topology")
    add22(I22 + 7, "i22-dataset-ep-dense", "dataset", "generate", "--model", "qwen3-32b", "--prefill-topologies", "TP2",
        "--decode-topologies", "TP2+EP", "--disagg", "1xTP2:1xTP2", "--out", out / "ds", names="decode_topologies")
    clusters = REPO / "data" / "clusters"
    for name, role, folder in (("qwen3-next-decode", "--decode-results", clusters / "h200-qwen3-next-modeled" / "decode"),
                               ("article-decode", "--decode-results", clusters / "gb300-qwen3.8-modeled" / "decode"),
                               ("article-prefill", "--prefill-results", clusters / "gb300-qwen3.8-modeled" / "prefill")):
        add22(I22 + 7, f"i22-plan-another-models-{name}", "plan", "qwen3-32b", "--gpu", "h200", "--max-gpus", "64",
            "--isl", "8192", "--osl", "1024", role, folder, names=folder.name, field="model")
    cal = CALIBRATION.replace("model: gpt-oss-120b", "model: qwen3-32b").replace("gpu: h200", "gpu: h100")
    for version in ("2", "0", "1.0", "true", '"1"', "null"):
        path = write(p / f"i22-cal-format-{version.strip(chr(34))}.yaml",
                     cal.replace("pdtune_calibration: 1", f"pdtune_calibration: {version}"))
        add22(I22 + 7, f"i22-plan-calibration-format-{version.strip(chr(34))}", *plan16, "--calibration", path,
            names=path.name, field="pdtune_calibration")
    path = p / "i22-cal-format-2.yaml"
    add22(I22 + 7, "i22-predict-calibration-format-2", *predict, "--calibration", path, names=path.name,
        field="pdtune_calibration")
    add22(I22 + 7, "i22-validate-calibration-format-0", "validate", silicon, "--model", "qwen3-32b", "--gpu", "h100",
        "--calibration", p / "i22-cal-format-0.yaml", names="i22-cal-format-0.yaml", field="pdtune_calibration")

    # ---------------------------------------------------------------- 2208: the input at fault is named
    add22(I22 + 8, "i22-plan-dcp-3", *plan16, "--decode-context-parallel-size", "3",
        names="--decode-context-parallel-size")
    add22(I22 + 8, "i22-plan-dcp-5-moe", "plan", "deepseek-v3", "--gpu", "gb200", "--max-gpus", "72", "--isl", "8192",
        "--osl", "1024", "--decode-context-parallel-size", "5", names="--decode-context-parallel-size")
    add22(I22 + 8, "i22-plan-unmet-floor-names-its-flag", "plan", "deepseek-v3", "--gpu", "gb200", "--max-gpus", "72",
        "--isl", "8192", "--osl", "1024", "--min-tps-per-user", "5000", names="--min-tps-per-user")
    for name, text, key in (
            ("tp3", "model: qwen3-32b\ngpu: h100\nprefill_topologies: [TP3]\ndecode_topologies: [TP2]\n"
                    "disagg_configs: [1xTP2:1xTP2]\nmtp_tokens: 0\nconcurrencies: [1]\n", "prefill_topologies"),
            ("article-layouts-dense", "model: qwen3-32b\ngpu: h100\nconcurrencies: [1]\n", "prefill_topologies"),
            ("mtp-default-no-module", "model: qwen3-32b\ngpu: h100\nprefill_topologies: [TP2]\n"
                                      "decode_topologies: [TP2]\ndisagg_configs: [1xTP2:1xTP2]\nconcurrencies: [1]\n",
             "mtp_tokens"),
            ("disagg-ep-dense", "model: qwen3-32b\ngpu: h100\nprefill_topologies: [TP2]\ndecode_topologies: [TP2]\n"
                                "disagg_configs: [1xTP2:1xTP4+EP]\nmtp_tokens: 0\nconcurrencies: [1]\n",
             "disagg_configs"),
            ("decode-tp5-moe", "model: qwen3-next-80b-a3b\ngpu: h200\nprefill_topologies: [TP2]\n"
                               "decode_topologies: [TP5]\ndisagg_configs: [1xTP2:1xTP2]\nconcurrencies: [1]\n",
             "decode_topologies")):
        path = write(p / f"i22-ds-{name}.yaml", text)
        add22(I22 + 8, f"i22-dataset-{name}", "dataset", "generate", "--params", path, "--out", out / "ds",
            names=path.name, field=key)

    # ---------------------------------------------------------------- 2209: absurd measured values
    for name, changes in (("tpot-1e-300", {"median_tpot_ms": 1e-300, "mean_tpot_ms": 1e-300, "p99_tpot_ms": 1e-300}),
                          ("ttft-1e-12", {"median_ttft_ms": 1e-12}),
                          ("p99-tpot-5e-324", {"p99_tpot_ms": 5e-324}),
                          ("throughput-1e-9", {"output_throughput": 1e-9}),
                          ("duration-1e-200", {"duration": 1e-200})):
        path = write(r / f"i22-{name}.json", dump(vllm_record(**changes)))
        field = next(iter(changes))
        add22(I22 + 9, f"i22-validate-{name}", "validate", path, "--model", "qwen3-32b", "--gpu", "h100", "--gpus",
            "8", names=path.name, field=field)
        add22(I22 + 9, f"i22-results-{name}", "results", path, "--gpus", "8", names=path.name, field=field)
    add22(I22 + 9, "i22-calibrate-tpot-1e-300", "calibrate", r / "i22-tpot-1e-300.json", "--model", "qwen3-32b",
        "--gpu", "h100", "--gpus", "8", "--out", out / "cal.yaml", names="i22-tpot-1e-300.json")
    add22(I22 + 9, "i22-frontier-ttft-1e-12", "frontier", r / "i22-ttft-1e-12.json", "--gpus", "8",
        names="i22-ttft-1e-12.json")
    ix = (FIXTURES / "results" / "inferencex" / "InferenceX_synthetic_gb200.csv").read_text().splitlines()
    at = next(i for i, ln in enumerate(ix) if ln.startswith("Model,"))
    cols, row = ix[at].split(","), ix[at + 1].split(",")
    for col, value in (("Median TPOT (ms)", "1e-300"), ("Throughput/GPU (tok/s)", "1e-20")):
        changed = list(row)
        changed[cols.index(col)] = value
        path = write(r / f"i22-ix-{value}.csv", "\n".join(ix[: at + 1] + [",".join(changed)]) + "\n")
        add22(I22 + 9, f"i22-results-inferencex-{value}", "results", path, names=path.name, field=col)
    aip = json.loads((FIXTURES / "results" / "aiperf" / "top-level-layout" / "profile_export_aiperf.json").read_text())
    aip["inter_token_latency"] = {**aip.get("inter_token_latency", {}), "p50": 1e-30, "avg": 1e-30}
    path = write(r / "i22-aiperf-itl" / "profile_export_aiperf.json", dump(aip))
    add22(I22 + 9, "i22-results-aiperf-itl-1e-30", "results", path, "--gpus", "8", names="profile_export_aiperf.json")

    # ---------------------------------------------------------------- 2210: files the system will not write
    long = out / ("n" * 5000)
    for name, argv, flag in (
            ("results-o", ("results", good_result, "--gpus", "8", "--csv", "-o", long / "x.csv"), "-o"),
            ("calibrate-out", ("calibrate", silicon, "--model", "gpt-oss-120b", "--gpu", "h200", "--out",
                               out / ("c" * 300 + ".yaml")), "--out"),
            ("dataset-out", ("dataset", "generate", "--params", write(p / "ds-ok.yaml", "concurrencies: [1]\n"),
                             "--out", out / ("d" * 300)), "--out"),
            ("workbook-out", ("workbook", params_ok, "--out", long), "--out"),
            ("plan-recipes", (*plan16, "--recipes", out / ("r" * 300)), "--recipes"),
            ("simulate-csv", ("simulate", "llama-3.1-8b", "--gpu", "h100", "--topology", "TP1", "--concurrency", "2",
                              "--isl", "64", "--osl", "4", "--num-prompts", "2", "--csv", out / ("s" * 300 + ".csv")),
             "--csv")):
        add22(I22 + 10, f"i22-name-too-long-{name}", *argv, field=flag, names="too long")
    # a full disk, for every writer: no file may grow beyond 0 bytes
    for name, argv, target in (
            ("results-o", ("results", good_result, "--gpus", "8", "--csv", "-o", out / "i22-full.csv"), "i22-full.csv"),
            ("dataset-out", ("dataset", "generate", "--params", p / "ds-ok.yaml", "--out", out / "i22-full-ds"),
             "i22-full-ds"),
            ("calibrate-out", ("calibrate", silicon, "--model", "gpt-oss-120b", "--gpu", "h200", "--out",
                               out / "i22-full-cal.yaml"), "i22-full-cal.yaml"),
            ("plan-recipes", (*plan16, "--recipes", out / "i22-full-rec"), "i22-full-rec")):
        add22(I22 + 10, f"i22-full-disk-{name}", *argv, names=target, own_process=True, fsize=0, timeout=60)
    nonutf = r / "i22-nonutf"
    folder = Path(os.fsdecode(bytes(nonutf) + b"/\xff\xfe-results"))
    if not folder.exists():
        folder.mkdir(parents=True)
        shutil.copy(good_result, folder / "run.json")
    add22(I22 + 10, "i22-nonutf-name-to-full-stdout", "results", nonutf, "--gpus", "8", "--csv", names="stdout",
        own_process=True, stdout="full", timeout=60)
    add22(I22 + 10, "i22-nonutf-name-below-a-file", "results", nonutf, "--gpus", "8", "--csv", "-o",
        Path(os.fsdecode(bytes(out / "a-file") + b"/\xff.csv")), names="a-file", field="-o")

    # ---------------------------------------------------------------- 2212: a crash loop that reuses its pids
    # Each restart of the start-up that could not fit its KV cache (negative), with the pids of two (or one,
    # or three) sets in turn: the parse must not grow with how often a pid comes back (645 MB for 20 MB).
    lines = [ln.replace("Available KV cache memory: 36.74 GiB", "Available KV cache memory: -3.50 GiB")
             for ln in log33.read_text().splitlines()]
    pid = re.compile(r"pid=(\d+)")
    for sets, restarts in ((1, 3000), (2, 3000), (3, 2000)):
        path = lg / f"i22-reused-pids-{sets}.log"
        if not path.exists():
            write(path, "".join(pid.sub(lambda hit, k=k: f"pid={int(hit.group(1)) * 10 + k % sets}", ln) + "\n"
                                for k in range(restarts) for ln in lines))
        add22(I22 + 12, f"i22-log-reused-pids-{sets}-sets", "log", path, "--model", qwen32, names=path.name,
            field="Available KV cache memory", timeout=40)


#: A calibration file as ``pdtune calibrate`` writes it (factors rounded), the base of the bad ones.
CALIBRATION = """pdtune_calibration: 1\nmodel: gpt-oss-120b\ngpu: h200\nvllm:\n- 0.18.0\nfactors:\n  compute: 0.64\n  hbm: 0.80\n  link: 0.37\n  collective_latency_s: 1.4e-05\n  step_overhead_s: 0.00047\n  layer_overhead_s: 4.5e-05\n  request_overhead_s: 0.023\n  arrival_clustering: 0.14\n  expert_compute: 0.19\n  expert_hbm: 0.61\nstart: silicon\nfitted_on:\n  deployments:\n  - gpt-oss-120b | h200 | agg | TP2 | fp4 | nvfp4 | nvfp4\n  rows: 57\n  results:\n  - data/clusters/aiconfigurator-silicon\n"""


def _copytree(src: Path, dest: Path, **_kw: Any) -> None:
    if not dest.exists():
        shutil.copytree(src, dest)


def _recipe_job(folder: Path, recipe: str) -> Path:
    job = folder / "outputs" / "5550009"
    _copytree(FIXTURES / "results" / "srt_slurm" / "agg" / "outputs" / "4411377", job, dirs_exist_ok=True)
    meta = json.loads((job / "4411377.json").read_text()) if (job / "4411377.json").exists() else None
    if meta is not None:
        (job / "4411377.json").unlink()
        write(job / "5550009.json", json.dumps({**meta, "job_id": "5550009"}))
    write(job / "config.yaml", recipe)
    return folder


# ------------------------------------------------------------------------------------------ running cases


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every entry below ``root``: path -> (size, mtime_ns); FIFOs are listed, never opened, links not followed.
    Taken twice per case, about 1,700 times a run: scandir's entries carry their own lstat."""
    out: dict[str, tuple[int, int]] = {}
    folders = [os.fspath(root)]
    while folders:
        try:
            entries = os.scandir(folders.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    folders.append(entry.path)
                regular = stat.S_ISREG(info.st_mode)
                out[entry.path] = (info.st_size, info.st_mtime_ns) if regular else (0, 0)
    return out


def changes(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    new = sorted(set(after) - set(before))
    changed = sorted(p for p in set(after) & set(before) if after[p] != before[p])
    return new + changed


class _Timeout(BaseException):
    pass


def _alarm(_signum: int, _frame: Any) -> None:
    raise _Timeout()


def run_in_process(case: Case, root: Path) -> dict[str, Any]:
    """Run one case through :func:`pdtune.cli.main` in this process; what happened, for the test to judge."""
    from pdtune.cli import main

    before = snapshot(root)
    stdout, stderr = io.StringIO(), io.StringIO()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    started = time.monotonic()
    outcome: dict[str, Any] = {"id": case.id}
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, case.timeout)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            outcome["code"] = main(list(case.argv))
    except SystemExit as exc:
        outcome["code"] = exc.code if isinstance(exc.code, int) else 1
    except _Timeout:
        outcome["code"] = "timeout"
    except BaseException as exc:  # what a user would see as a traceback
        outcome["code"] = "exception"
        stderr.write("Traceback (most recent call last):\n" + "".join(traceback.format_exception(exc))[-2000:])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    outcome["seconds"] = time.monotonic() - started
    outcome["rss_growth"] = max(0, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10) - rss)
    err = stderr.getvalue()
    outcome["stderr"] = err if len(err) < 4000 else err[:2000] + f"... [{len(err):,} characters]"
    outcome["stderr_chars"] = len(err)
    outcome["stdout_chars"] = len(stdout.getvalue())
    outcome["changed"] = changes(before, snapshot(root))[:10]
    outcome["outside"] = [a for a in case.argv if a.startswith("/proc/pdtune-test") and os.path.exists(a)]
    return outcome


def run_own_process(case: Case, root: Path) -> dict[str, Any]:
    """Run one case as a ``pdtune`` process of its own (timeout, address-space limit, its environment)."""
    exe = Path(sys.executable).parent / "pdtune"
    before = snapshot(root)
    env = {**os.environ, **case.env}
    started = time.monotonic()
    outcome: dict[str, Any] = {"id": case.id}
    stdout: Any = subprocess.PIPE
    if case.stdout == "full":
        stdout = open("/dev/full", "wb")  # noqa: SIM115 - the child's stdout, closed below
    elif case.stdout == "gone":
        read_end, stdout = os.pipe()
        os.close(read_end)  # the reader has left before the first byte
    try:
        done = subprocess.run([str(exe), *case.argv], stdout=stdout, stderr=subprocess.PIPE, text=True,
                              timeout=case.timeout, env=env, cwd=root, preexec_fn=lambda: _limit_case(case),
                              check=False)
        outcome["code"], err, out = done.returncode, done.stderr, done.stdout or ""
    except subprocess.TimeoutExpired as exc:
        outcome["code"], err, out = "timeout", str(exc.stderr or ""), ""
    finally:
        if case.stdout == "gone":
            os.close(stdout)
        elif case.stdout == "full":
            stdout.close()
    outcome["seconds"] = time.monotonic() - started
    outcome["rss_growth"] = 0
    outcome["stderr"] = err if len(err) < 4000 else err[:2000] + f"... [{len(err):,} characters]"
    outcome["stderr_chars"] = len(err)
    outcome["stdout_chars"] = len(out)
    outcome["changed"] = changes(before, snapshot(root))[:10]
    outcome["outside"] = []
    return outcome


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _limit_case(case: Case) -> None:
    """In the child of an own-process case, before exec: the address-space limit, and what the case asks of\n    stdout and of the files it may write."""
    _limit()
    if case.fsize is not None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # ignored across exec: a write past it fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (case.fsize, case.fsize))
    if case.stdout == "closed":
        os.close(1)


def run_group(cases: list[Case], root: Path) -> dict[str, dict[str, Any]]:
    """Run ``cases`` (one group) and return each one's outcome: in-process cases in child processes under the\n    address-space limit, restarted past a case that kills its child; own-process cases one by one."""
    results: dict[str, dict[str, Any]] = {}
    own = [c for c in cases if c.own_process]
    for case in own:
        results[case.id] = run_own_process(case, root)
    todo = [c.id for c in cases if not c.own_process]
    stem = root / f".outcomes-{os.getpid()}-{time.monotonic_ns()}"
    report, listing = stem.with_suffix(".jsonl"), stem.with_suffix(".cases.json")
    # The child reads the cases from this file: building the corpus again would cost it seconds per group.
    listing.write_text(json.dumps([asdict(c) for c in cases if not c.own_process]), encoding="utf-8")
    while todo:
        with contextlib.suppress(FileNotFoundError):
            report.unlink()
        budget = sum(c.timeout for c in cases if c.id in todo) + 60
        try:
            subprocess.run([sys.executable, __file__, str(root), str(report), str(listing), *todo], timeout=budget,
                           check=False, capture_output=True, preexec_fn=_limit)
        except subprocess.TimeoutExpired:
            pass
        done: dict[str, dict[str, Any]] = {}
        if report.exists():
            for line in report.read_text(encoding="utf-8").splitlines():
                rec = json.loads(line)
                done[rec["id"]] = rec
        results.update(done)
        remaining = [i for i in todo if i not in done]
        if remaining:  # the child died in the first of them: that case failed, the rest go to a new child
            results[remaining[0]] = {"id": remaining[0], "code": "child died", "stderr": "", "stderr_chars": 0,
                                     "stdout_chars": 0, "seconds": 0.0, "rss_growth": 0, "changed": [],
                                     "outside": []}
            remaining = remaining[1:]
        todo = remaining
    for path in (report, listing):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return results


def _child(root: Path, report: Path, listing: Path, ids: list[str]) -> None:
    os.chdir(root)
    by_id = {}
    for fields in json.loads(listing.read_text(encoding="utf-8")):
        case = Case(**{**fields, "argv": tuple(fields["argv"])})
        by_id[case.id] = case
    for case_id in ids:
        outcome = run_in_process(by_id[case_id], root)
        with report.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(outcome) + "\n")


def problems(case: Case, outcome: dict[str, Any]) -> list[str]:
    """What is wrong with ``outcome`` for ``case`` (empty when the input was handled as promised)."""
    found = []
    err = outcome["stderr"]
    lines = err.strip().splitlines()
    if outcome["code"] != 2:
        found.append(f"exit status {outcome['code']}, not 2")
    if outcome["stderr_chars"] > 2000 or len(lines) != 1 or err.count("\n") != 1:
        found.append(f"{len(lines)} lines / {outcome['stderr_chars']:,} characters on stderr, not one short line")
    if "Traceback" in err:
        found.append("a traceback")
    # the command's name as the user typed it ("pdtune dataset generate: error: " from argparse, "pdtune dataset:
    # error: " from pdtune's own checks)
    if lines and not lines[0].startswith((f"pdtune {case.argv[0]}: error: ", f"pdtune {command_of(case)}: error: ")):
        found.append(f"the line does not start with 'pdtune {command_of(case)}: error: '")
    if outcome["stdout_chars"]:
        found.append(f"{outcome['stdout_chars']} characters on stdout")
    if case.names and case.names not in err:
        found.append(f"the line does not name {case.names!r}")
    if case.field and f": {case.field}: " not in err and f"argument {case.field}" not in err:
        found.append(f"the line does not blame the field {case.field!r}")
    if case.says and case.says not in err:
        found.append(f"the line does not say {case.says!r}")
    if outcome["seconds"] > case.timeout:
        found.append(f"took {outcome['seconds']:.1f} s (limit {case.timeout:g} s)")
    if outcome["rss_growth"] > CASE_RSS:
        found.append(f"grew resident memory by {outcome['rss_growth'] >> 20} MB (limit {CASE_RSS >> 20} MB)")
    if outcome["changed"] or outcome["outside"]:
        found.append(f"created or changed files: {outcome['changed'] + outcome['outside']}")
    return found


def command_of(case: Case) -> str:
    """The command a case runs: ``results``, ``dataset generate``."""
    return " ".join(case.argv[:2]) if case.argv[0] == "dataset" else case.argv[0]


def describe(case: Case, outcome: dict[str, Any]) -> str:
    return json.dumps({"case": asdict(case), "outcome": outcome}, indent=1)[:6000]


if __name__ == "__main__":
    _child(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:])
