"""One tuning scenario: the model, the GPU, the workload and where the measurements are.

Every chapter's ``parameters`` cell assigns a subset of these fields under the same names, and the
workbook's parameters file (``data/params/*.yaml``) is a :class:`Scenario` written out. Validating here,
once, means a typo in a parameters file fails before any notebook runs: :meth:`Scenario.check` checks the
values alone, :meth:`Scenario.check_against_model` checks them against the model (every topology's TP
divides the heads, ``+EP`` has experts to split, MTP has a draft layer).

A file may leave most parameters out. :func:`fill_defaults` says where each value it did not give comes
from (:class:`DefaultUsed`): carried over from the article's setup (its GB300 start-up memory, its
utilization, its 3 MTP tokens ...), derived for the file's model and GPU where a rule exists (the GPU's
memory from ``data/gpus/gpus.csv``, no MTP for a model without a draft layer, the article's layouts that
fit the model, no article results for another model), or pdtune's own default (the vLLM line). The
chapters and the summary list them, so nothing is inherited silently.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from pdtune import limits, versions
from pdtune.errors import InputError, brief
from pdtune.paths import REPO_ROOT

MODELED_CLUSTER = "data/clusters/gb300-qwen3.8-modeled"

#: The three kinds of benchmark results a scenario names (``<kind>_results``), in the order the chapters read them.
RESULT_KINDS: tuple[str, ...] = ("prefill", "decode", "disagg")


#: Interactivity floors (tokens/s per user) the workbook's plan picks for when ``plan.min_tps_per_user`` is left out.
PLAN_FLOORS: tuple[float, ...] = (20.0, 50.0, 100.0)


@dataclass(frozen=True)
class PlanParameters:
    """The workbook's ``plan:`` section: the question ``pdtune plan`` answers, with the same meaning as its flags.

    ``max_gpus`` defaults to the article's NVL72 rack (a file that leaves it out gets :func:`plan_budget` of its
    GPU, listed); ``decode_gpu`` "" the scenario's GPU;
    ``max_ttft_ms`` and ``max_tpot_ms_p90`` None no limit; empty topology lists search every layout the model
    admits; ``recipes`` also writes the srt-slurm recipes of every pick (``pdtune plan --recipes``).
    """

    max_gpus: int = 72
    decode_gpu: str = ""
    min_tps_per_user: tuple[float, ...] = PLAN_FLOORS
    max_ttft_ms: float | None = None
    max_tpot_ms_p90: float | None = None
    prefill_topologies: tuple[str, ...] = ()
    decode_topologies: tuple[str, ...] = ()
    recipes: bool = True

    @classmethod
    def from_mapping(cls, values: Any, *, source: str = "parameters") -> PlanParameters:
        """Names, types and ranges of every key, each error naming ``plan.<key>``."""
        if values is None:
            return cls()
        if not isinstance(values, dict):
            raise InputError(source, "plan", f"must be a mapping of plan settings, got {brief(values)}")
        known = {f.name for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            name = f"plan.{key}"
            if key not in known:
                raise InputError(source, name, f"unknown plan setting; known: {', '.join(sorted(known))}")
            if key in ("max_ttft_ms", "max_tpot_ms_p90"):
                kwargs[key] = None if value is None else _coerce(value, float, source, name)
            elif key == "min_tps_per_user":
                kwargs[key] = _coerce(value, tuple[float, ...], source, name)
            elif key.endswith("_topologies"):
                kwargs[key] = _coerce(value, tuple[str, ...], source, name)
            else:
                kwargs[key] = _coerce(value, typing.get_type_hints(cls)[key], source, name)
        out = cls(**kwargs)
        out.check(source)
        return out

    def check(self, source: str = "parameters") -> None:
        if self.max_gpus > limits.MAX_GPUS:
            raise InputError(source, "plan.max_gpus", f"{self.max_gpus:,} is more than the {limits.MAX_GPUS:,} "
                                                      "pdtune accepts")
        if self.max_gpus < 1:  # one GPU holds an aggregated server (a pair needs two: the plan says so)
            raise InputError(source, "plan.max_gpus", f"must be at least 1 GPU, got {self.max_gpus}")
        if not self.min_tps_per_user:
            raise InputError(source, "plan.min_tps_per_user", "the list is empty; leave the key out for the "
                                                              "default floors")
        for name, values in (("min_tps_per_user", self.min_tps_per_user),
                             ("max_ttft_ms", (self.max_ttft_ms,)), ("max_tpot_ms_p90", (self.max_tpot_ms_p90,))):
            if len(values) > MAX_LIST:
                raise InputError(source, f"plan.{name}", f"{len(values):,} entries are more than the {MAX_LIST:,} "
                                                          "pdtune accepts")
            for v in values:
                if v is not None and not (math.isfinite(v) and 0 < v <= limits.MAX_MEASURE):
                    raise InputError(source, f"plan.{name}", f"must be a positive finite number, got {v:g}")
        for name in ("prefill_topologies", "decode_topologies"):
            if len(getattr(self, name)) > MAX_LIST:
                raise InputError(source, f"plan.{name}", f"more than the {MAX_LIST:,} entries pdtune accepts")

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def plan_budget(gpu: str) -> int:
    """The GPU budget a plan searches when ``plan.max_gpus`` is left out: one NVLink domain of the GPU (an NVL72
    rack), and at least two 8-GPU nodes (an HGX pair), as issue 12 plans Qwen3-235B on two H200 nodes."""
    from pdtune.gpus import load_gpu

    return max(load_gpu(gpu).nvlink_domain, 16)


@dataclass(frozen=True)
class Scenario:
    """Defaults are the article's setup (Qwen3.8-2.4T on GB300, ISL/OSL 8192/1024, its start-up memory),
    except the vLLM line, which is pdtune's :data:`pdtune.versions.DEFAULT_VLLM`; :data:`ORIGINS` says which."""

    model: str = "qwen3.8-2.4t"
    # The checkpoint's weight format when its config says another (Kimi-K2's config says bf16, its weights are
    # FP8): a pdtune.precision format ("fp8", "nvfp4", "dense=bf16,experts=nvfp4"); "": what the config says.
    weights: str = ""
    gpu: str = "gb300"
    gpu_memory_gib: float = 276.62  # what torch reports for one GPU (not the box's marketing capacity)
    gpu_memory_utilization: float = 0.92
    isl: int = 8192
    osl: int = 1024
    kv_cache_dtype: str = "fp8"
    vllm: str = versions.DEFAULT_VLLM  # the vLLM that serves; the article ran 0.26.1 and computed with 0.11
    num_speculative_tokens: int = 3  # MTP draft tokens when a topology runs with MTP
    mtp_acceptance: float = 0.25  # mean fraction of draft tokens accepted (modeled data only; pdtune.perfmodel.DEFAULT_ACCEPTANCE)
    prefill_topologies: tuple[str, ...] = (
        "TP4DP2+EP", "TP2DP4+EP", "TP4DP4+EP", "TP2DP8+EP", "DP16+EP", "TP1PP6+EP", "TP1PP8+EP", "TP8+EP", "TP16+EP",
    )
    decode_topologies: tuple[str, ...] = ("TP2DP4+EP", "TP4DP8+EP", "TEP8", "TEP16", "TP4DP4+EP")
    # Per-engine memory the model cannot predict: measured at start-up (a vLLM log) or assumed.
    non_torch_gib: float = 2.90
    activation_peak_gib: float = 1.83
    cudagraph_estimate_gib: float = 8.29
    max_num_seqs: tuple[int, ...] = (20, 32, 80, 272, 528, 656)
    vllm_logs: tuple[str, ...] = ()
    prefill_results: tuple[str, ...] = (f"{MODELED_CLUSTER}/prefill",)
    decode_results: tuple[str, ...] = (f"{MODELED_CLUSTER}/decode",)
    disagg_results: tuple[str, ...] = (f"{MODELED_CLUSTER}/disagg",)
    gpus: str = ""  # GPU counts for result files that do not record them: "24" or "prefill=8,decode=16"
    accuracy_threshold: float = 0.95
    min_tps_per_user: float = 50.0  # the SLA chapter 7 picks a configuration for
    # A draft beside the model (EAGLE/EAGLE3 head or draft model: its layers join the KV cache, counted with
    # num_speculative_tokens) and decode context parallelism: as `pdtune state --speculative-model
    # --decode-context-parallel-size` count them. "" / 1: none.
    speculative_model: str = ""
    decode_context_parallel_size: int = 1
    # vLLM environment variables the serving engines set, NAME=VALUE (a YAML mapping also reads): as
    # `pdtune state --vllm-env` applies them (pdtune.switches); () is every line's defaults.
    vllm_env: tuple[str, ...] = ()
    calibration: str = ""  # a `pdtune calibrate` file: the factors the plan predicts the calibrated GPU with
    plan: PlanParameters = PlanParameters()  # the `pdtune plan` question chapter 9 answers (see PlanParameters)
    title: str = field(default="", compare=False)  # free text shown in the workbook's summary
    # Written by the workbook, never by hand: one line per parameter the file left out (DefaultUsed.line).
    defaults_used: tuple[str, ...] = field(default=(), compare=False)

    def environment(self, source: str = "parameters") -> tuple[tuple[str, str], ...]:
        """``vllm_env`` as (name, value) pairs, checked for this scenario's vLLM line (bad input otherwise)."""
        from pdtune.switches import check_env, parse_assignments

        pairs = parse_assignments(self.vllm_env, source)
        try:
            return check_env(pairs, self.vllm, source).given
        except InputError as exc:
            raise InputError(source, "vllm_env", f"{exc.field}: {exc.message}") from None

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The parameters a file may write (every field but those the workbook computes)."""
        return tuple(f.name for f in fields(cls) if f.name not in COMPUTED_FIELDS)

    @classmethod
    def from_mapping(cls, values: dict[str, Any], *, source: str = "parameters") -> Scenario:
        """Check names and types of every value; nothing unknown, nothing of the wrong type."""
        known = {f.name: f for f in fields(cls)}
        hints = typing.get_type_hints(cls)
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            if key not in known:
                writable = ", ".join(k for k in known if k not in COMPUTED_FIELDS)
                raise InputError(source, key, f"unknown parameter; known: {writable}")
            if key == "vllm_env" and isinstance(value, dict):  # NAME: VALUE, as a worker's environment block
                value = [f"{k}={_env_value(v)}" for k, v in value.items()]
            kwargs[key] = (PlanParameters.from_mapping(value, source=source) if key == "plan"
                           else _coerce(value, hints[key], source, key))
        scenario = cls(**kwargs)
        scenario.check(source)
        return scenario

    def check(self, source: str = "parameters") -> None:
        _check_bounds(self, source)
        if self.vllm_env:
            self.environment(source)
        for name in ("gpu_memory_gib", "isl", "osl"):
            if getattr(self, name) <= 0:
                raise InputError(source, name, f"must be positive, got {getattr(self, name)}")
        for name in ("gpu_memory_utilization", "mtp_acceptance", "accuracy_threshold"):
            if not 0 < getattr(self, name) <= 1:
                raise InputError(source, name, f"must be in (0, 1], got {getattr(self, name)}")
        for name in ("non_torch_gib", "activation_peak_gib", "cudagraph_estimate_gib", "min_tps_per_user"):
            if getattr(self, name) < 0:
                raise InputError(source, name, f"must not be negative, got {getattr(self, name)}")
        if self.num_speculative_tokens < 0:
            raise InputError(source, "num_speculative_tokens", "must not be negative")
        if not 1 <= self.decode_context_parallel_size <= limits.MAX_PARALLEL:
            raise InputError(source, "decode_context_parallel_size",
                             f"must be a whole number from 1 to {limits.MAX_PARALLEL:,}, got "
                             f"{self.decode_context_parallel_size}")
        if self.speculative_model.strip() and self.num_speculative_tokens < 1:
            raise InputError(source, "num_speculative_tokens",
                             "a speculative_model drafts num_speculative_tokens tokens per step: give at least 1")
        self.plan.check(source)
        if any(n <= 0 for n in self.max_num_seqs):
            raise InputError(source, "max_num_seqs", "every entry must be positive")
        versions.parse(self.vllm, source)

    def check_against_model(self, source: str = "parameters") -> None:
        """What only the model can tell: every topology runs it, and MTP has a draft layer to run.

        vLLM refuses a TP size that does not divide the attention heads (``verify_with_parallel_config``),
        expert parallelism on a model without experts, and a TP size that splits a GDN or Mamba head group;
        :func:`layout_problem` applies the same rules, so a bad layout fails here, before any chapter runs.
        """
        spec = self.model_spec(source)
        if self.num_speculative_tokens and spec.num_mtp_layers == 0 and not self.speculative_model.strip():
            raise InputError(source, "num_speculative_tokens",
                             f"{spec.name} has no MTP layer to draft with; set num_speculative_tokens: 0")
        for name in ("prefill_topologies", "decode_topologies"):
            values = getattr(self, name)
            if not values:
                raise InputError(source, name, "the list is empty")
            for text in values:
                problem = layout_problem(spec, text, max_model_len=self.isl + self.osl,
                                         kv_cache_dtype=self.kv_cache_dtype, vllm=self.vllm, source=source)
                if problem:
                    raise InputError(source, name, f"{text.strip()}: {problem}")

    def model_spec(self, source: str = "parameters") -> Any:
        """The model with the weights it is served with (``weights``, else its config's); errors name the key."""
        from pdtune.model import load_model

        try:
            spec = load_model(self.model)
        except InputError as exc:
            raise InputError(source, "model", f"{self.model}: {exc.field}: {exc.message}") from None
        if self.weights.strip():
            from pdtune.precision import parse_weights_dtype

            spec = parse_weights_dtype(self.weights, spec, source=str(source), field="weights")
        return spec

    def is_article_data(self, kind: str, *, base: Path | None = None) -> bool:
        """True when the ``kind`` results are the article's own (modeled) sweeps, the data the book discusses.

        The chapters compare a sweep with the article's findings and headline numbers only then.
        """
        return is_article_data(getattr(self, f"{kind}_results"), kind, base=base)

    def resolve(self, path: str, *, base: Path | None = None) -> Path:
        """A path as written in a parameters file: absolute, relative to ``base``, or to the repository."""
        candidate = Path(path).expanduser()
        if candidate.is_absolute():
            return candidate
        if base is not None and (base / candidate).exists():
            return base / candidate
        return REPO_ROOT / candidate

    def result_paths(self, kind: str, *, base: Path | None = None) -> list[Path]:
        return [self.resolve(p, base=base) for p in getattr(self, f"{kind}_results")]

    def to_dict(self) -> dict[str, Any]:
        out = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}
        out["plan"] = self.plan.to_dict()
        return out


#: Ceilings of the numeric parameters (:mod:`pdtune.limits`); every float must also be finite, since a NaN
#: passes every comparison the checks below make.
_BOUNDS: dict[str, float] = {
    "gpu_memory_gib": limits.MAX_BYTES / 2**30, "isl": limits.MAX_MODEL_LEN, "osl": limits.MAX_MODEL_LEN,
    "num_speculative_tokens": limits.MAX_SPECULATIVE_TOKENS, "non_torch_gib": limits.MAX_BYTES / 2**30,
    "activation_peak_gib": limits.MAX_BYTES / 2**30, "cudagraph_estimate_gib": limits.MAX_BYTES / 2**30,
    "max_num_seqs": limits.MAX_NUM_SEQS, "min_tps_per_user": limits.MAX_MEASURE,
}
#: Entries of one list parameter.
MAX_LIST = 4096


def _check_bounds(scenario: Scenario, source: str) -> None:
    for f in fields(scenario):
        value = getattr(scenario, f.name)
        values = value if isinstance(value, tuple) else (value,)
        if isinstance(value, tuple) and len(value) > MAX_LIST:
            raise InputError(source, f.name, f"{len(value):,} entries are more than the {MAX_LIST:,} pdtune accepts")
        for v in values:
            if isinstance(v, float) and not math.isfinite(v):
                raise InputError(source, f.name, f"must be a finite number, got {v}")
            if f.name in _BOUNDS and isinstance(v, (int, float)) and v > _BOUNDS[f.name]:
                shown = f"{v:,}" if isinstance(v, int) and v < 10**30 else f"{v:g}"
                raise InputError(source, f.name, f"{shown} is more than the {_BOUNDS[f.name]:,.0f} pdtune accepts")


#: Fields the workbook computes; a parameters file may not set them.
COMPUTED_FIELDS: tuple[str, ...] = ("defaults_used",)


def is_article_data(paths: tuple[str, ...] | list[str], kind: str, *, base: Path | None = None) -> bool:
    """True when ``paths`` name exactly the article's modeled ``kind`` results (relative or absolute)."""
    article = getattr(Scenario(), f"{kind}_results")
    here = Scenario()
    mine = {here.resolve(p, base=base).resolve() for p in paths}
    return bool(paths) and mine == {here.resolve(p).resolve() for p in article}


def layout_rules(spec: Any, layout: Any) -> str:
    """The rules of :func:`layout_problem` that need no state planning (every engine pdtune builds meets them,
    :func:`pdtune.perfmodel.build_engine` included): ``+EP`` needs experts, no more EP ranks than experts,
    at least one layer per pipeline stage. "" when the layout passes."""
    if layout.expert_parallel and spec.moe is None:
        return f"+EP needs experts, and {spec.name} has none (a dense model: drop +EP)"
    if spec.moe is not None and layout.ep > spec.moe.num_experts:
        return f"{layout.ep} expert-parallel ranks for {spec.moe.num_experts} experts"
    if layout.pp > spec.num_layers:
        return f"{layout.pp} pipeline stages for {spec.num_layers} layers"
    return ""


def layout_problem(spec: Any, topology: str, *, max_model_len: int, kv_cache_dtype: str, vllm: str,
                   source: str = "topology") -> str:
    """Why ``topology`` cannot serve ``spec`` (vLLM 0.33's checks), or "" when it can.

    * the name must parse (:func:`pdtune.topology.parse_topology`);
    * TP must divide the attention heads, and split KV heads, GDN and Mamba head groups evenly or replicate
      them (:func:`pdtune.state.plan_state` applies vLLM's rules per layer kind);
    * ``+EP`` needs experts (``ModelConfig._verify_with_expert_parallelism``), and no more EP ranks than
      experts (``determine_expert_map`` gives a rank the remainder, never nothing);
    * pipeline stages need at least one layer each.
    """
    from pdtune.state import plan_state
    from pdtune.topology import parse_topology

    try:
        layout = parse_topology(topology, source)
    except InputError as exc:
        return exc.message
    problem = layout_rules(spec, layout)
    if problem:
        return problem
    try:
        plan_state(spec, tp=layout.tp, max_model_len=max_model_len, kv_cache_dtype=kv_cache_dtype, vllm=vllm)
    except InputError as exc:
        return f"TP{layout.tp} cannot run {spec.name}: {exc.message}"
    return ""


@dataclass(frozen=True)
class DefaultUsed:
    """A parameter the file left out: the value the chapters use, and where it comes from.

    ``origin`` is ``article`` (carried over from the article's setup), ``derived`` (computed for this model
    or GPU by a rule) or ``pdtune`` (pdtune's own choice).
    """

    name: str
    value: Any
    origin: str
    why: str

    def line(self) -> str:
        """``name = value: why``, the form :attr:`Scenario.defaults_used` keeps and the chapters print."""
        return f"{self.name} = {_shown(self.value)}: {self.why}"


def default_name(line: str) -> str:
    """The parameter a :meth:`DefaultUsed.line` is about."""
    return line.split(" = ", 1)[0].strip()


def carried_over(line: str) -> bool:
    """Whether a :meth:`DefaultUsed.line` is one of the article's values: the reasons written for those (origin
    ``article``) say "carried over", and no other reason uses the words."""
    return "carried over" in line


def _shown(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(str(v) for v in value) + "]" if value else "none"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


_RUN7 = "the article's GB300 start-up measurement (table 3, run 7: TP4DP4, no MTP), carried over; measure yours"

#: Where a parameter's default comes from when a file leaves it out: (origin, why). Fields not listed
#: (``title``, ``gpus``, ``vllm_logs``, ``defaults_used``) default to nothing, so nothing is inherited.
ORIGINS: dict[str, tuple[str, str]] = {
    "model": ("article", "the article's model, carried over"),
    "gpu": ("article", "the article's GPU, carried over"),
    "gpu_memory_gib": ("article", "what torch reports for the article's GB300, carried over"),
    "gpu_memory_utilization": ("article", "the article's --gpu-memory-utilization, carried over"),
    "isl": ("article", "the article's workload, carried over"),
    "osl": ("article", "the article's workload, carried over"),
    "kv_cache_dtype": ("article", "the article's KV cache dtype, carried over"),
    "vllm": ("pdtune", "pdtune's default, the newest vLLM line it follows (the article ran 0.26.1)"),
    "num_speculative_tokens": ("article", "the article's MTP draft tokens, carried over"),
    "mtp_acceptance": ("pdtune", "pdtune's assumption for modeled data (the article publishes no rate)"),
    "prefill_topologies": ("article", "the article's prefill layouts, carried over"),
    "decode_topologies": ("article", "the article's decode layouts, carried over"),
    "non_torch_gib": ("article", f"{_RUN7} with `pdtune log`"),
    "activation_peak_gib": ("article", f"{_RUN7} with `pdtune log`"),
    "cudagraph_estimate_gib": ("article", f"{_RUN7} with `pdtune log`"),
    "max_num_seqs": ("article", "the --max-num-seqs of the article's table 1, carried over"),
    "prefill_results": ("article", "the article's sweeps as pdtune models them (modeled, not measured)"),
    "decode_results": ("article", "the article's sweeps as pdtune models them (modeled, not measured)"),
    "disagg_results": ("article", "the article's sweeps as pdtune models them (modeled, not measured)"),
    "accuracy_threshold": ("article", "the article's GSM8K gate, carried over"),
    "min_tps_per_user": ("pdtune", "pdtune's example service-level target"),
}


def fill_defaults(scenario: Scenario, given: set[str] | frozenset[str], source: str = "parameters") -> Scenario:
    """``scenario`` with the values a file left out derived where a rule exists, and :attr:`defaults_used`
    listing every left-out parameter with where its value comes from.

    ``given`` names the keys the file wrote. Rules, for a model or GPU that is not the article's:

    * ``gpu_memory_gib`` follows ``gpu`` (``data/gpus/gpus.csv``), whoever fills it in;
    * ``num_speculative_tokens`` is 0 for a model without an MTP layer;
    * the topology lists keep the article's layouts that can run the model (:func:`layout_problem`), naming
      the ones dropped; none left is an error;
    * the results lists are empty: the article's modeled sweeps are of its own model on GB300.
    """
    from pdtune.model import load_model

    article = Scenario()
    spec = load_model(scenario.model)
    other_model = spec.name != load_model(article.model).name
    other_gpu = scenario.gpu != article.gpu
    changes: dict[str, Any] = {}
    used: list[DefaultUsed] = []
    for name, (origin, why) in ORIGINS.items():
        if name in given:
            continue
        value = getattr(scenario, name)
        if name == "gpu_memory_gib" and other_gpu:
            from pdtune.gpus import load_gpu
            from pdtune.units import GiB

            value = round(load_gpu(scenario.gpu).memory_total / GiB, 2)
            origin, why = "derived", f"what torch reports for one {scenario.gpu} (data/gpus/gpus.csv)"
        elif name == "num_speculative_tokens" and spec.num_mtp_layers == 0:
            value, origin, why = 0, "derived", f"{spec.name} has no MTP layer, so no MTP"
        elif name == "mtp_acceptance" and (changes.get("num_speculative_tokens", value) == 0
                                            or not scenario.num_speculative_tokens):
            continue  # without MTP nothing reads it
        elif name.endswith("_topologies") and other_model:
            value, why = _fitting_layouts(scenario, spec, name, source)
            origin = "derived"
        elif name.endswith("_results") and (other_model or other_gpu):
            value, origin = (), "derived"
            why = (f"the article's modeled sweeps are of its Qwen3.8-2.4T on GB300, not of {spec.name} on "
                   f"{scenario.gpu}, so the chapters start from none")  # not "carried over": that is the article's
        if value != getattr(scenario, name):
            changes[name] = value
        used.append(DefaultUsed(name, value, origin, why))
    plan_changes: dict[str, Any] = {}
    plan_given = {key.split(".", 1)[1] for key in given if key.startswith("plan.")}
    if "max_gpus" not in plan_given:
        budget = plan_budget(scenario.gpu)
        plan_changes["max_gpus"] = budget
        used.append(DefaultUsed("plan.max_gpus", budget, "derived",
                                f"one NVLink domain of {scenario.gpu}, and at least two 8-GPU nodes"))
    if "min_tps_per_user" not in plan_given:
        used.append(DefaultUsed("plan.min_tps_per_user", scenario.plan.min_tps_per_user, "pdtune",
                                "pdtune's example interactivity floors, one pick each"))
    if plan_changes:
        changes["plan"] = dataclasses.replace(scenario.plan, **plan_changes)
    filled = dataclasses.replace(scenario, **changes)
    return dataclasses.replace(filled, defaults_used=tuple(u.line() for u in used))


def _fitting_layouts(scenario: Scenario, spec: Any, name: str, source: str) -> tuple[tuple[str, ...], str]:
    """The article's layouts of ``name`` that can run ``spec``, and a sentence naming the ones dropped.

    A model without experts takes them without ``+EP`` (``TEP8`` is then ``TP8``): the flag has nothing to
    split, and vLLM would refuse it.
    """
    from dataclasses import replace as with_changes

    from pdtune.topology import parse_topology

    kept, dropped = [], []
    names = list(getattr(Scenario(), name))
    if spec.moe is None:
        plain = [with_changes(parse_topology(n), expert_parallel=False, name="").canonical for n in names]
        names = list(dict.fromkeys(plain))
    for text in names:
        problem = layout_problem(spec, text, max_model_len=scenario.isl + scenario.osl,
                                 kv_cache_dtype=scenario.kv_cache_dtype, vllm=scenario.vllm, source=source)
        (dropped if problem else kept).append(text)
    if not kept:
        raise InputError(source, name, f"not given, and none of the article's layouts can run {spec.name}: "
                                       "list your own")
    why = f"the article's layouts that can run {spec.name}"
    if spec.moe is None:
        why += ", without +EP (it has no experts)"
    if dropped:
        why += f" (left out: {', '.join(dropped)})"
    return tuple(kept), why


def _env_value(value: Any) -> str:
    """YAML's ``1``/``true`` as the environment's string."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _coerce(value: Any, hint: Any, source: str, key: str) -> Any:
    origin = typing.get_origin(hint)
    if origin is tuple:
        (inner, _ellipsis) = typing.get_args(hint)
        if isinstance(value, (str, int, float)):
            value = [value]  # one path or one topology given without a list
        if not isinstance(value, (list, tuple)):
            raise InputError(source, key, f"must be a list, got {type(value).__name__}")
        return tuple(_coerce(v, inner, source, key) for v in value)
    if hint is bool or (isinstance(hint, types.UnionType) and bool in typing.get_args(hint)):
        if not isinstance(value, bool):
            raise InputError(source, key, f"must be true or false, got {brief(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(source, key, f"must be a whole number, got {brief(value)}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(source, key, f"must be a number, got {brief(value)}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise InputError(source, key, f"must be a string, got {brief(value)}")
        return value
    raise InputError(source, key, f"unsupported parameter type {hint}")
