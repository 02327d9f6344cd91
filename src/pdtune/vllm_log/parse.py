"""The parse: split each line into its process prefix and message, run the rules, gather one record per process."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from pdtune import guarded, versions
from pdtune.errors import InputError
from pdtune.memory import Waterfall
from pdtune.vllm_log.patterns import RULES
from pdtune.vllm_log.records import MAIN, EngineConfig, WorkerLog, kv_reports

#: vLLM 0.11's default ``--gpu-memory-utilization`` (``CacheConfig.gpu_memory_utilization``; 0.92 from 0.20: the
#: table of switches, :func:`default_gpu_memory_utilization`), used only when the log's non-default-args line
#: shows the user did not set it.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


def default_gpu_memory_utilization(version: str) -> float:
    """``EngineArgs.gpu_memory_utilization``'s default in ``version``'s line (data/vllm/switches.csv)."""
    from pdtune import switches

    return switches.default_gpu_memory_utilization(version)

_ANSI = re.compile(r"\x1b\[[0-9;]{0,32}[A-Za-z]")
# "LEVEL MM-DD HH:MM:SS[.fff] [file.py:N] message": every part bounded, so a search is linear in the line.
_LEVEL = re.compile(
    r"(?<![^\s)])(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s{1,8}\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,9})?\s{1,8}"
    r"\[[^\]\s]{1,200}:\d{1,7}\]\s?"
)
# "(Name pid=N[, ip=...]) " right before the level, matched from the last "(" of the prefix.
_PROC = re.compile(r"\((?P<proc>[A-Za-z_][\w.\-]{0,100}) pid=(?P<pid>\d{1,10})[^)]{0,200}\)(?:\^\[\[[0-9;]{0,16}m)?\s*")
_COLLECT_ENV = re.compile(r"vLLM Version\s{0,40}:\s{0,8}(?P<version>v?\d[\w.+\-]{0,80})")


def split_header(line: str) -> tuple[str | None, int | None, str] | None:
    """``(process, pid, message)`` of a vLLM logger line, or None. 0.11 prefixes stdout, 0.33 the format."""
    level = _LEVEL.search(line)
    if level is None:
        return None
    prefix = line[:level.start()]
    proc: str | None = None
    pid: int | None = None
    start = prefix.rfind("(")
    if start >= 0:
        hit = _PROC.fullmatch(prefix, start)
        if hit is not None:
            proc, pid = hit["proc"], int(hit["pid"])
    return proc, pid, line[level.end():]


@dataclass(frozen=True)
class VllmLog:
    """A parsed log: one :class:`WorkerLog` per process, in order of first appearance."""

    path: str
    workers: tuple[WorkerLog, ...]
    config: EngineConfig

    @property
    def names(self) -> list[str]:
        return [w.name for w in self.workers]

    def worker(self, name: str) -> WorkerLog:
        w = self._by_name.get(name)
        if w is not None:
            return w
        raise InputError(self.path, "worker", f"no process {name!r} in the log (have: {', '.join(self.names)})")

    @property
    def engines(self) -> list[WorkerLog]:
        """Processes that logged a KV cache size (engine cores)."""
        return [w for w in self.workers if w.is_engine]

    @property
    def memory_workers(self) -> list[WorkerLog]:
        """Processes that profiled GPU memory (workers, or engine cores running their worker in-process)."""
        return [w for w in self.workers if w.available_kv_cache is not None]

    @cached_property
    def _by_name(self) -> dict[str, WorkerLog]:
        return {w.name: w for w in self.workers}

    @cached_property
    def _engine_index(self) -> dict[str, WorkerLog | None]:
        """Each process's engine, worked out once, in one pass over the processes in order of appearance: the
        engine itself; the one engine of its DP rank; with several (a restart loop gives each start its own
        pid), the one that started last before it; or the only engine of the log."""
        engines = self.engines
        by_dp: dict[int | None, list[WorkerLog]] = {}
        for e in engines:
            by_dp.setdefault(_dp_index(e.name), []).append(e)
        latest: dict[int | None, WorkerLog] = {}  # per DP rank, the engine seen most recently
        index: dict[str, WorkerLog | None] = {}
        for w in sorted(self.workers, key=lambda x: x.first_line):
            dp = _dp_index(w.name)
            if w.is_engine:
                index[w.name] = latest[dp] = w
                continue
            matches = by_dp.get(dp, [])
            if len(matches) == 1:
                index[w.name] = matches[0]
            elif len(matches) > 1:
                index[w.name] = latest.get(dp)
            else:
                index[w.name] = engines[0] if len(engines) == 1 and dp in (None, 0) else None
        return index

    @cached_property
    def _workers_index(self) -> dict[str, list[WorkerLog]]:
        """The memory workers of each engine, from :attr:`_engine_index` (built once, not per engine)."""
        out: dict[str, list[WorkerLog]] = {}
        for w in self.memory_workers:
            engine = self._engine_index.get(w.name)
            if engine is not None:
                out.setdefault(engine.name, []).append(w)
        return out

    def engine_of(self, worker: str | WorkerLog) -> WorkerLog | None:
        w = self.worker(worker) if isinstance(worker, str) else worker
        return self._engine_index.get(w.name)

    def workers_of(self, engine: str | WorkerLog) -> list[WorkerLog]:
        e = self.worker(engine) if isinstance(engine, str) else engine
        return list(self._workers_index.get(e.name, []))

    def config_for(self, worker: str | WorkerLog) -> EngineConfig:
        """The worker's own config lines, then its engine's, then whatever the log says globally."""
        w = self.worker(worker) if isinstance(worker, str) else worker
        conf = w.config
        engine = self.engine_of(w)
        if engine is not None and engine is not w:
            conf = conf.merged(engine.config)
        return conf.merged(self.config)

    def waterfall(
        self,
        worker: str,
        *,
        total: int | None = None,
        gpu_memory_utilization: float | None = None,
    ) -> Waterfall:
        """The worker's memory as a :class:`~pdtune.memory.Waterfall`.

        ``total`` and ``gpu_memory_utilization`` fill in what the log does not say (logs before 0.26 print
        the GPU's total memory only at DEBUG level). When the log does not split the activation peak from
        non-torch memory, their sum (what is left once weights, the CUDA-graph estimate and the KV cache are
        taken from the requested memory) goes to ``activation_peak``, ``non_torch`` is 0, and ``source``
        says so.
        """
        w = self.worker(worker)
        label = f"{self.path} [{w.name}]"
        conf = self.config_for(w)
        total = w.total_memory if total is None else total
        if total is None:
            raise InputError(label, "total memory",
                             "the log does not give the GPU's total memory ('Free memory on device' is INFO from "
                             "vLLM 0.26, DEBUG before): pass it")
        util = gpu_memory_utilization or w.gpu_memory_utilization or conf.gpu_memory_utilization
        notes = [f"vLLM {conf.version or '?'} log, GiB as printed (0.01 GiB)"]
        if util is None:
            if not conf.args_logged:
                raise InputError(label, "gpu_memory_utilization", "not in the log: pass it")
            util = default_gpu_memory_utilization(short_version(conf.version) or versions.CURRENT)
            notes.append(f"gpu_memory_utilization not set: vLLM's default {util}")
        if w.weights is None:
            raise InputError(label, "Model loading took", "no weights line for this process")
        estimate = 0
        if w.cudagraph_estimate is not None and w.cudagraph_estimate_applied is not False:
            estimate = w.cudagraph_estimate
        version = short_version(conf.version) or "0.26"
        base = Waterfall(total=total, gpu_memory_utilization=util, weights=w.weights, activation_peak=0,
                         non_torch=0, cudagraph_estimate=estimate, source=label, version=version)
        if w.consumed is not None and w.peak_activation is not None:
            # 0.33: "consumed" is weights + non-torch; the logged peak includes the applied graph estimate.
            activation, non_torch = w.peak_activation - estimate, w.consumed - w.weights
            notes.append("non-torch = consumed - weights; activation = logged peak - graph estimate")
        elif w.peak_activation is not None and w.non_torch is not None:
            activation, non_torch = w.peak_activation, w.non_torch
        elif w.profile_torch_peak_increase is not None and w.profile_non_torch_increase is not None:
            activation, non_torch = w.profile_torch_peak_increase, w.profile_non_torch_increase
        else:
            if w.available_kv_cache is None:
                raise InputError(label, "Available KV cache memory", "no line for this process")
            activation = base.requested - w.weights - estimate - w.available_kv_cache
            non_torch = 0
            notes.append("activation peak and non-torch not split in the log: activation_peak holds both")
        if activation < 0 or non_torch < 0:
            notes.append("a negative part from rounding was set to 0")
        source = f"{label}: " + "; ".join(notes)
        return replace(base, activation_peak=max(activation, 0), non_torch=max(non_torch, 0), source=source)

    def to_dict(self, *, workers: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "config": {k: v for k, v in self.config.to_dict().items() if v is not None},
        }
        if workers:
            out["workers"] = {w.name: w.to_dict() for w in self.workers}
        return out


def _dp_index(name: str) -> int | None:
    hit = _DP.search(name)
    return int(hit.group(1)) if hit else None


_DP = re.compile(r"_DP(\d{1,6})")


def short_version(version: str | None) -> str | None:
    if not version:
        return None
    hit = re.match(r"v?(\d+)\.(\d+)", version)
    return f"{hit.group(1)}.{hit.group(2)}" if hit else None


#: Record fields never shared between records: unique to one record, or growing with it.
_UNSHARED = frozenset({"first_line", "lines", "pid", "kv_runs", "kv_open"})


class _Builder:
    def __init__(self) -> None:
        self.records: dict[tuple[str, int | None], dict[str, Any]] = {}
        self.stored: dict[tuple[str, int | None], tuple[tuple[str, ...], tuple[Any, ...]]] = {}
        self.current: dict[str, tuple[str, int | None]] = {}  # process name -> its latest (name, pid)
        self._shared: dict[Any, Any] = {}
        self.global_config: dict[str, Any] = {}

    def record(self, process: str, pid: int | None, lineno: int) -> dict[str, Any]:
        key = (process, pid)
        rec = self.records.get(key)
        if rec is None:
            previous = self.current.get(process)
            if previous is not None and previous != key and previous in self.records:
                # the same process name under a new pid: a restart, the old one is done; keep it compact
                self.stored[previous] = self._compact(self.records.pop(previous))
            stored = self.stored.pop(key, None)
            rec = self._expand(stored) if stored is not None else {
                "process": process, "pid": pid, "first_line": lineno, "config": {}, "lines": 0}
            self.records[key] = rec
            self.current[process] = key
        return rec

    def has(self, key: tuple[str, int | None]) -> bool:
        return key in self.records or key in self.stored

    def _compact(self, rec: dict[str, Any]) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        """A finished process's record as (key tuple, values), its figures shared with every equal one seen
        before: a crash loop logs the same figures at every restart, so it costs little more than its pids.
        Only values of bounded size are shared (a figure, a config, one KV report), never what grows with the
        record (its line count, its runs of reports): the shared table must not grow with how often a pid
        comes back."""
        values = dict(rec)
        values["config"] = tuple(sorted(rec["config"].items()))
        if "kv_runs" in rec:
            values["kv_runs"] = tuple((self._share(key), count) for key, count in rec["kv_runs"])
        if rec.get("kv_open") is not None:
            values["kv_open"] = tuple(rec["kv_open"].items())
        names = tuple(values)
        names = self._shared.setdefault(names, names)
        return names, tuple(v if k in _UNSHARED else self._share(v) for k, v in values.items())

    def _share(self, value: Any) -> Any:
        try:
            return self._shared.setdefault((type(value), value), value)  # typed: 1, 1.0 and True stay apart
        except TypeError:  # unhashable: kept as it is
            return value

    @staticmethod
    def _expand(stored: tuple[tuple[str, ...], tuple[Any, ...]]) -> dict[str, Any]:
        rec = dict(zip(*stored, strict=True))
        rec["config"] = dict(rec["config"])
        if "kv_runs" in rec:
            rec["kv_runs"] = [[key, count] for key, count in rec["kv_runs"]]
        if "kv_open" in rec:
            rec["kv_open"] = dict(rec["kv_open"])
        return rec

    def feed(self, lines: Iterable[str]) -> None:
        for lineno, raw in enumerate(lines, start=1):
            line = (_ANSI.sub("", raw) if "\x1b" in raw else raw).rstrip("\r\n")
            header = split_header(line)
            if header is None:
                env = _COLLECT_ENV.match(line)  # collect_env's table has no logger prefix
                if env is not None:
                    self.global_config.setdefault("version", env["version"])
                continue
            proc, pid, msg = header
            for keyword, pattern, handler in RULES:
                if keyword in msg:
                    hit = pattern.search(msg)
                    if hit is None:
                        continue
                    key = (proc or MAIN, pid)
                    fresh = not self.has(key)
                    rec = self.record(*key, lineno)
                    try:
                        handler(rec, hit)
                    except (ValueError, OverflowError):
                        if fresh:  # a number vLLM never prints (1e999): not a line of ours
                            del self.records[key]
                        break
                    rec["lines"] += 1
                    break

    def build(self, path: str) -> VllmLog:
        # A crash loop logs a process per restart: each record is dropped as soon as it is converted, and equal
        # configs are shared, so memory holds one copy of each process, not two.
        per_name: dict[str, int] = {}
        for process, _pid in (*self.records, *self.stored):
            per_name[process] = per_name.get(process, 0) + 1
        order = sorted([(rec["first_line"], key) for key, rec in self.records.items()]
                       + [(values[names.index("first_line")], key) for key, (names, values) in self.stored.items()])
        configs: dict[tuple[tuple[str, Any], ...], EngineConfig] = {}
        workers: list[WorkerLog] = []
        merged: EngineConfig = EngineConfig()
        for _line, key in order:
            live = self.records.pop(key, None)
            rec = live if live is not None else self._expand(self.stored.pop(key))
            name = rec["process"] if per_name[rec["process"]] == 1 else f"{rec['process']} pid={rec['pid']}"
            skip = ("process", "pid", "first_line", "config", "lines", "kv_runs", "kv_open")
            values = {k: v for k, v in rec.items() if k not in skip}
            values["kv_cache_reports"] = kv_reports(rec)
            key = tuple(sorted(rec["config"].items()))
            config = configs.get(key)
            if config is None:
                config = configs[key] = EngineConfig(**rec["config"])
                merged = merged.merged(config)
            workers.append(WorkerLog(name=name, process=rec["process"], pid=rec["pid"],
                                     first_line=rec["first_line"], config=config, lines=rec["lines"], **values))
        merged = merged.merged(EngineConfig(**self.global_config))
        return VllmLog(path=path, workers=tuple(workers), config=merged)


#: Characters of one line the parse looks at: the longest vLLM start-up lines (the config banner, the
#: non-default args of a large deployment) are a few KB; what lies beyond this is never read, so no pattern
#: ever costs more than this per line.
MAX_LINE = 1 << 16


def parse_log_text(text: str, source: str = "<log>", *, require_kv: bool = True) -> VllmLog:
    """Parse log text; see :func:`parse_log`."""
    builder = _Builder()
    builder.feed(line[:MAX_LINE] for line in text.splitlines())
    return _finish(builder, source, require_kv)


def parse_log(path: str | Path, *, require_kv: bool = True) -> VllmLog:
    """Parse a vLLM start-up log file, streamed: memory does not grow with the file, only with its processes.

    Raises :class:`InputError` for a file that is not a regular file (a FIFO is refused, never opened
    blocking), for one that is not a vLLM log, and (with ``require_kv``, the default) for one in which no
    process reached the KV cache lines, e.g. an engine that died while loading.
    """
    p = Path(path)
    builder = _Builder()
    try:
        builder.feed(guarded.iter_lines(p, "file", max_line=MAX_LINE))
    except InputError as exc:
        if "binary data" in exc.message:
            raise InputError(p, "file", "binary data, not a vLLM log") from None
        raise
    return _finish(builder, str(p), require_kv)


def _finish(builder: _Builder, source: str, require_kv: bool) -> VllmLog:
    if not builder.records and not builder.stored:
        raise InputError(source, "log", "no vLLM start-up lines found (expected lines like "
                                        "'INFO 10-14 09:12:41 [gpu_worker.py:298] Available KV cache memory: ...')")
    log = builder.build(source)
    if require_kv and not any(w.available_kv_cache is not None or w.is_engine for w in log.workers):
        raise InputError(source, "KV cache size", "no 'Available KV cache memory' or 'KV cache size' line: "
                                                  "the engine did not finish starting")
    return log
