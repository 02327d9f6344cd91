"""The cross-check: what :mod:`pdtune.state` predicts for each engine of a parsed log, beside what it logged.

vLLM prints ``Available KV cache memory`` rounded to 0.01 GiB (``%.2f`` in 0.11, ``format_gib`` = ``round(b /
GiB, 2)`` from 0.20), so the memory it sized the cache from lies within +-0.005 GiB of the printed figure.
The check turns both ends of that interval into tokens and says whether the logged ``KV cache size`` lies
between them. Settings come from the log; what it lacks comes from the caller (the ``pdtune log`` flags), and
what neither gives is vLLM's default, listed in :attr:`KvCheck.assumed`.

Which ``KV cache size`` formula a log follows is fixed by its version: ``num_blocks // groups x block``
(times the DCP size) up to 0.20, ``int(max_concurrency x max_model_len)`` from 0.21
(``kv_cache_utils.update_kv_cache_capacity``). A development build (``0.20.2rc1.dev129``) or a line pdtune
does not follow (0.12-0.19, newer than the current) may carry either, so there the log's own numbers decide:
the formula whose range holds the logged tokens, reported in the notes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pdtune import limits, switches, versions
from pdtune.errors import InputError
from pdtune.model.spec import LayerKind
from pdtune.units import GiB
from pdtune.vllm_log.parse import VllmLog, short_version
from pdtune.vllm_log.records import EngineConfig, WorkerLog

#: The vLLM lines whose source pdtune follows (their wheels were read).
FOLLOWED_LINES = ("0.11", *(f"0.{minor}" for minor in range(20, 34)))
#: Half the rounding step of the printed "Available KV cache memory" (0.01 GiB).
HALF_STEP_GIB = 0.005
_MAIN_SETTINGS = ("tp", "kv_cache_dtype", "max_model_len", "num_speculative_tokens", "vllm", "prefix_caching",
                  "block_size")
_RULE_NAMES = {"blocks": "num_blocks // groups x block_size (0.11-0.20)",
               "concurrency": "int(max_concurrency x max_model_len) (0.21+)"}


@dataclass(frozen=True)
class KvCheck:
    """One engine's logged KV cache size beside what :mod:`pdtune.state` predicts from its memory."""

    engine: str
    worker: str  # the rank with the least available memory: vLLM sizes every rank's cache by it
    available_kv_cache: int
    max_model_len: int
    num_blocks: int
    logged_kv_cache_tokens: int | None
    predicted_kv_cache_tokens: int
    logged_max_concurrency: float | None
    predicted_max_concurrency: float
    settings: dict[str, Any] = field(default_factory=dict)  # tp, kv dtype, length, spec tokens, vllm, caching, block
    notes: tuple[str, ...] = ()
    tokens_range: tuple[int, int] = (0, 0)  # tokens at -0.005 and +0.005 GiB of the printed memory
    num_blocks_range: tuple[int, int] = (0, 0)
    logged_num_blocks: int | None = None
    rule: str = "concurrency"  # which KV-cache-size formula: blocks | concurrency
    assumed: tuple[str, ...] = ()  # settings neither the log nor the caller gave: vLLM's defaults
    given: tuple[str, ...] = ()  # settings the caller gave (the pdtune log flags)
    settings_extra: dict[str, Any] = field(default_factory=dict)  # DCP, token budget, draft model

    @property
    def tokens_difference(self) -> int | None:
        if self.logged_kv_cache_tokens is None:
            return None
        return self.predicted_kv_cache_tokens - self.logged_kv_cache_tokens

    @property
    def tokens_inside(self) -> bool | None:
        """Whether the logged tokens lie in the range the printed memory's rounding allows."""
        if self.logged_kv_cache_tokens is None:
            return None
        return self.tokens_range[0] <= self.logged_kv_cache_tokens <= self.tokens_range[1]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["available_kv_cache_gib"] = out.pop("available_kv_cache") / GiB
        out["tokens_difference"] = self.tokens_difference
        out["tokens_inside"] = self.tokens_inside
        out["tokens_range"] = list(self.tokens_range)
        out["num_blocks_range"] = list(self.num_blocks_range)
        out["notes"] = list(self.notes)
        out["assumed"] = list(self.assumed)
        out["given"] = list(self.given)
        return out


class _Settings:
    """Each setting from the caller, else the log, else vLLM's default (then listed as assumed)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.values: dict[str, Any] = {}
        self.assumed: list[str] = []
        self.given: list[str] = []
        self.notes: list[str] = []

    def pick(self, name: str, given: Any, logged: Any, default: Any, why: str = "vLLM's default",
             *, matters: bool = True, maximum: int | None = None, minimum: int = 1) -> Any:
        if given is None and maximum is not None and isinstance(logged, int) and not minimum <= logged <= maximum:
            # the log's own number, so the log is to blame (not the flag that was never passed)
            raise InputError(self.path, name, f"the log says {logged:,}, outside the {minimum} to {maximum:,} "
                                              "pdtune accepts")
        if given is not None:
            if logged is not None and logged != given:
                self.notes.append(f"{name}={given} given; the log says {logged}")
            self.given.append(f"{name}={given}")
            value = given
        elif logged is not None:
            value = logged
        else:
            value = default
            if matters:
                self.assumed.append(f"{name}={default} ({why}; not in the log)")
        self.values[name] = value
        return value


def cross_check(
    log: VllmLog,
    model: str,
    *,
    vllm: str | None = None,
    tp: int | None = None,
    kv_cache_dtype: str | None = None,
    num_speculative_tokens: int | None = None,
    max_model_len: int | None = None,
    speculative_model: str | None = None,
    decode_context_parallel_size: int | None = None,
) -> list[KvCheck]:
    """For every engine, the KV cache tokens and max concurrency :mod:`pdtune.state` predicts from the available
    memory the log reports, beside the logged ones.

    vLLM sizes each engine's cache from the smallest available memory among its ranks, so that is the input.
    The keyword arguments fill in (or override) what the log says; see the module docstring for the rest.
    """
    from pdtune.model import load_model

    spec = load_model(model)
    draft = load_model(speculative_model) if speculative_model else None
    engines = log.engines
    if not engines:
        raise InputError(log.path, "KV cache size", "no engine logged its KV cache size: nothing to check")
    overrides = {"vllm": vllm, "tp": tp, "kv_cache_dtype": kv_cache_dtype, "max_model_len": max_model_len,
                 "num_speculative_tokens": num_speculative_tokens, "dcp": decode_context_parallel_size}
    return [_check_engine(log, engine, spec, draft, overrides) for engine in engines]


def _check_engine(log: VllmLog, engine: WorkerLog, spec: Any, draft: Any, given: dict[str, Any]) -> KvCheck:
    from pdtune.memory import vllm_default_max_num_batched_tokens
    from pdtune.state import plan_state

    ranks = log.workers_of(engine)
    if not ranks:
        raise InputError(log.path, "Available KV cache memory", f"no rank of {engine.name} logged it")
    rank = min(ranks, key=lambda w: w.available_kv_cache or 0)
    if (rank.available_kv_cache or 0) < 0:
        raise InputError(log.path, "Available KV cache memory",
                         f"{rank.name} logged {rank.available_kv_cache / GiB:.2f} GiB: no room for a KV cache "
                         "(vLLM refuses to start), nothing to cross-check")
    conf = log.config_for(engine)
    s = _Settings(log.path)
    raw_version = given["vllm"] or conf.version
    version = short_version(raw_version)
    if version is None:
        raise InputError(log.path, "version", "the log does not name the vLLM version: pass --vllm")
    if given["vllm"] is not None:
        s.given.append(f"vllm={given['vllm']}")
    else:
        version = _log_version(log.path, raw_version or version, version, s.notes)
    s.values["vllm"] = version
    length = s.pick("max_model_len", given["max_model_len"], engine.max_concurrency_tokens or conf.max_model_len,
                    None, maximum=limits.MAX_MODEL_LEN)
    if length is None:
        raise InputError(log.path, "max_model_len", "not in the log (banner max_seq_len or the concurrency line): "
                                                    "pass --max-model-len")
    tp = s.pick("tp", given["tp"], conf.tensor_parallel_size, 1, maximum=limits.MAX_PARALLEL)
    kv_dtype = s.pick("kv_cache_dtype", given["kv_cache_dtype"], conf.kv_cache_dtype, "auto")
    spec_tokens = s.pick("num_speculative_tokens", given["num_speculative_tokens"], conf.num_speculative_tokens, 0,
                         maximum=limits.MAX_SPECULATIVE_TOKENS, minimum=0)
    dcp = s.pick("decode_context_parallel_size", given["dcp"], conf.decode_context_parallel_size or
                 engine.kv_size_multiplier, 1, maximum=limits.MAX_PARALLEL)
    prefix_caching = s.pick("prefix_caching", None, conf.enable_prefix_caching, True)
    s.values["block_size"] = conf.block_size
    mnbt_default = vllm_default_max_num_batched_tokens(rank.total_memory, vllm=version, max_model_len=length)
    why = "vLLM's default for the GPU memory logged" if rank.total_memory else "vLLM's default, GPU memory unknown"
    mnbt = s.pick("max_num_batched_tokens", None, conf.max_num_batched_tokens, mnbt_default, why,
                  matters=_has_local_attention(spec), maximum=limits.MAX_TOKENS_PER_STEP)  # sizes sliding layers only
    if conf.block_size is not None and not 1 <= conf.block_size <= limits.MAX_TOKENS_PER_STEP:
        raise InputError(log.path, "block_size", f"the log says {conf.block_size:,}, outside the 1 to "
                                                 f"{limits.MAX_TOKENS_PER_STEP:,} pdtune accepts")
    _check_draft(log.path, conf, draft, s)
    env = _environment(conf, version, s)
    hma = None if conf.disable_hybrid_kv_cache_manager is None else not conf.disable_hybrid_kv_cache_manager
    if hma is not None:
        s.values["hybrid_kv_cache_manager"] = hma
    if conf.kv_connector_without_hma:
        s.values["kv_connector_without_hma"] = True
    with switches.vllm_environment(env, "the log's environment"):
        plan = plan_state(spec, tp=tp, kv_cache_dtype=kv_dtype, max_model_len=length,
                          num_speculative_tokens=spec_tokens, vllm=version, prefix_caching=prefix_caching,
                          block_size=conf.block_size, max_num_batched_tokens=mnbt,
                          mamba_ssm_cache_dtype=conf.mamba_ssm_cache_dtype or "auto", speculative_model=draft,
                          speculative_method=conf.speculative_method if draft else None,
                          decode_context_parallel_size=dcp, async_scheduling=conf.async_scheduling,
                          hybrid_kv_cache_manager=hma, kv_connector_without_hma=bool(conf.kv_connector_without_hma),
                          check_max_model_len=False)
    if plan.hybrid_kv_cache_manager is False and _has_local_attention(spec):
        s.values["hybrid_kv_cache_manager"] = False
    available = rank.available_kv_cache or 0
    half = round(HALF_STEP_GIB * GiB)
    point, low, high = plan.capacity(available), plan.capacity(max(available - half, 0)), plan.capacity(available + half - 1)
    rule = "concurrency" if plan.semantics.tokens_from_concurrency else "blocks"
    notes = list(s.notes)
    logged = engine.kv_cache_tokens
    newer = raw_version is not None and versions.newer_than_current(raw_version)
    if logged is not None and (_is_dev_build(raw_version) or version not in FOLLOWED_LINES or newer):
        rule = _rule_from_numbers(logged, low, high, rule, raw_version or version, notes)
    tokens = {"blocks": lambda c: c.tokens_by_blocks, "concurrency": lambda c: c.tokens_by_concurrency}[rule]
    if engine.num_gpu_blocks is not None and not low.num_blocks <= engine.num_gpu_blocks <= high.num_blocks:
        notes.append(f"logged num_gpu_blocks {engine.num_gpu_blocks:,} is outside the predicted "
                     f"{low.num_blocks:,}-{high.num_blocks:,}")
    return KvCheck(
        engine=engine.name,
        worker=rank.name,
        available_kv_cache=available,
        max_model_len=length,
        num_blocks=point.num_blocks,
        logged_kv_cache_tokens=logged,
        predicted_kv_cache_tokens=tokens(point),
        logged_max_concurrency=engine.max_concurrency,
        predicted_max_concurrency=point.max_concurrency,
        settings={k: s.values.get(k) for k in _MAIN_SETTINGS},
        settings_extra={k: v for k, v in s.values.items() if k not in _MAIN_SETTINGS},
        notes=tuple(notes),
        tokens_range=(tokens(low), tokens(high)),
        num_blocks_range=(low.num_blocks, high.num_blocks),
        logged_num_blocks=engine.num_gpu_blocks,
        rule=rule,
        assumed=tuple(s.assumed),
        given=tuple(s.given),
    )


def _environment(conf: EngineConfig, version: str, s: _Settings) -> dict[str, str]:
    """The vLLM environment the engine ran with, as far as the log shows it, and ``--vllm-env`` over it (the
    flag wins, with a note where the two disagree); each variable recorded in the check's settings."""
    logged: dict[str, str] = {}
    if conf.chunked_local_hma is not None:
        logged[switches.CHUNKED_LOCAL_HMA] = conf.chunked_local_hma
    given = switches.check_env(switches.active(), version).as_dict()
    for name, val in given.items():
        s.given.append(f"{name}={val}")
        if name in logged and logged[name] != val:
            s.notes.append(f"--vllm-env {name}={val} overrides the log, whose warning shows {name}={logged[name]}")
    env = {**logged, **given}
    if env:
        s.values["vllm_env"] = " ".join(f"{k}={v}" for k, v in sorted(env.items()))
    if conf.unknown_env:
        s.notes.append(f"the log names vLLM environment variables pdtune does not model: {', '.join(conf.unknown_env)}")
    return env


def _log_version(path: str, raw: str, version: str, notes: list[str]) -> str:
    """The vLLM line whose rules a log is checked with: its own, or the newest pdtune follows (with a note) for a
    newer log; an older log than pdtune follows is bad input naming the log, not a flag nobody passed."""
    if versions.parse(version)[:2] < versions.parse(versions.OLDEST)[:2]:
        raise InputError(path, "version", f"the log is of vLLM {raw}, older than {versions.OLDEST}, the oldest line "
                                          "pdtune follows: pass --vllm to check it against one")
    if versions.newer_than_current(version):
        notes.append(f"vLLM {raw} is newer than {versions.CURRENT}, the newest line pdtune follows: checked with "
                     f"{versions.CURRENT}'s rules")
        return versions.CURRENT
    return version


def _check_draft(path: str, conf: EngineConfig, draft: Any, s: _Settings) -> None:
    method = conf.speculative_method
    if draft is not None:
        s.values["speculative_model"] = draft.name
        return
    if method in ("eagle", "eagle3", "draft_model") and (conf.num_speculative_tokens or 0) > 0:
        raise InputError(path, "speculative_config", f"the log's {method} draft {conf.speculative_model or '?'} adds "
                                                     "layers to the KV cache: pass --speculative-model with its config")


def _has_local_attention(spec: Any) -> bool:
    return any(layer.kind in (LayerKind.SLIDING_ATTENTION, LayerKind.CHUNKED_ATTENTION) for layer in spec.cache_layers)


def _is_dev_build(version: str | None) -> bool:
    return bool(version) and any(tag in version for tag in ("dev", "rc", "+g"))


def _rule_from_numbers(logged: int, low: Any, high: Any, default: str, version: str, notes: list[str]) -> str:
    fits = [rule for rule, lo, hi in (("blocks", low.tokens_by_blocks, high.tokens_by_blocks),
                                      ("concurrency", low.tokens_by_concurrency, high.tokens_by_concurrency))
            if lo <= logged <= hi]
    known = "a development build" if _is_dev_build(version) else "a line pdtune does not follow"
    if len(fits) == 1:
        notes.append(f"vLLM {version} is {known}: its numbers follow the {_RULE_NAMES[fits[0]]} KV cache size rule")
        return fits[0]
    what = "both rules fit" if fits else "neither rule fits"
    notes.append(f"vLLM {version} is {known}: {what} the logged tokens; its line's {_RULE_NAMES[default]} used")
    return default
