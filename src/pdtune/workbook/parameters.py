"""What the workbook runs with: the parameters file, checked in full.

:func:`load_parameters` reads a parameters file into a :class:`~pdtune.scenario.Scenario`, refusing a key
given twice, with every path it names made absolute and checked, the model, the GPU, the vLLM line and
the topologies resolved (:func:`check_inputs`), so bad input stops before anything runs, naming the file
and the key. The chapters it runs them on are :mod:`pdtune.workbook.chapter`'s.
"""

from __future__ import annotations

import os
import typing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any


from pdtune import versions
from pdtune.errors import InputError
from pdtune.guarded import read_yaml
from pdtune.gpus import GpuSpec, load_gpu
from pdtune.model import load_model, models_dir
from pdtune.paths import REPO_ROOT
from pdtune.results import parse_gpus
from pdtune.scenario import COMPUTED_FIELDS, Scenario, fill_defaults
from pdtune.topology import parse_topology


#: Scenario fields that hold paths; a chapter receives them absolute.
PATH_FIELDS: tuple[str, ...] = ("vllm_logs", "prefill_results", "decode_results", "disagg_results")


@dataclass(frozen=True)
class Parameters:
    """A checked parameters file: the scenario as written, and the same with every path made absolute."""

    source: Path
    scenario: Scenario
    resolved: Scenario

    def values(self) -> dict[str, Any]:
        """What a chapter may receive, by parameter name (lists, not tuples: papermill writes literals)."""
        return self.resolved.to_dict()


def load_parameters(path: str | os.PathLike[str]) -> Parameters:
    """Read a parameters file and check it completely; :class:`InputError` names the file and the key.

    Paths in the file are relative to the file's folder, or else to the repository (so the bundled files
    can name ``data/clusters/...``). What the file leaves out is filled in by
    :func:`pdtune.scenario.fill_defaults` (a GPU's own memory, no MTP without a draft layer, the
    article's layouts that fit the model, ...) and listed in the scenario's ``defaults_used``. Then every
    topology is checked against the model (:meth:`Scenario.check_against_model`).
    """
    source = Path(path)
    if not source.exists():
        raise InputError(source, "-", "no such parameters file")
    try:
        # the guarded reader: a regular file, UTF-8, no key twice, no complex keys, aliases and depth bounded
        raw = read_yaml(source)
    except InputError as exc:
        raise InputError(source, exc.field if exc.field.startswith("line") else "-", exc.message) from None
    if raw is None:
        raise InputError(source, "-", "the file is empty; write at least the model (data/params/README.md)")
    if not isinstance(raw, dict):
        raise InputError(source, "-", f"expected 'key: value' lines at the top, got a {type(raw).__name__}")
    values = dict(raw)
    for key in values:
        if not isinstance(key, str):
            raise InputError(source, str(key), "parameter names are words, not numbers")
        if key in COMPUTED_FIELDS:
            raise InputError(source, key, "written by the workbook (what the file leaves out), not by hand")
    if isinstance(values.get("gpu"), str):
        _gpu(source, values["gpu"])
    try:
        scenario = Scenario.from_mapping(values, source=str(source))
    except InputError as exc:
        raise _with_yaml_hint(exc, values) from None
    resolved = _resolve(scenario, source.parent, source)
    from pdtune.switches import vllm_environment

    with vllm_environment(resolved.environment(str(source)), "vllm_env"):  # what every check plans with
        check_inputs(resolved, source)
        given = set(values) | {f"plan.{k}" for k in (values.get("plan") or {}) if isinstance(values.get("plan"), dict)}
        try:
            resolved = fill_defaults(resolved, given, str(source))
        except InputError as exc:
            raise InputError(source, exc.field, exc.message) from None
        resolved.check_against_model(str(source))
    return Parameters(source=source, scenario=scenario, resolved=resolved)


def _gpu(source: Path, name: str) -> GpuSpec:
    try:
        return load_gpu(name)
    except InputError as exc:
        raise InputError(source, "gpu", exc.message) from None


def _with_yaml_hint(exc: InputError, values: dict[str, Any]) -> InputError:
    """YAML reads ``vllm: 0.26`` as a number; say how to write it as text."""
    value = values.get(exc.field)
    text_field = typing.get_type_hints(Scenario).get(exc.field) is str
    if text_field and exc.message.startswith("must be a string") and isinstance(value, (int, float)) \
            and not isinstance(value, bool):
        return InputError(exc.source, exc.field, f"{exc.message}; quote it in YAML: {exc.field}: \"{value}\"")
    return exc


def _resolve(scenario: Scenario, base: Path, source: Path) -> Scenario:
    """The scenario with result paths, logs and a model given as a path made absolute; each must exist."""
    changes: dict[str, Any] = {}
    for name in PATH_FIELDS:
        paths = []
        for text in getattr(scenario, name):
            path = scenario.resolve(text, base=base)
            if not path.exists():
                absolute = Path(text).expanduser().is_absolute()
                where = "" if absolute else f" (looked in {base} and {REPO_ROOT})"
                raise InputError(source, name, f"no such file or folder: {text}{where}")
            if name == "vllm_logs" and not path.is_file():
                raise InputError(source, name, f"a vLLM log is a file, got a folder: {text}")
            paths.append(str(path.resolve()))
        changes[name] = tuple(paths)
    changes["model"] = _model_reference(scenario, base, source)
    if scenario.speculative_model.strip():
        changes["speculative_model"] = _model_reference(scenario, base, source, "speculative_model")
    if scenario.calibration.strip():
        path = scenario.resolve(scenario.calibration, base=base)
        if not path.is_file():
            raise InputError(source, "calibration", f"no such file: {scenario.calibration} (a `pdtune calibrate` "
                                                    "output)")
        changes["calibration"] = str(path.resolve())
    return replace(scenario, **changes)


def _model_reference(scenario: Scenario, base: Path, source: Path, key: str = "model") -> str:
    """A bundled model stays a name (chapters print it); anything else becomes an absolute path."""
    model = getattr(scenario, key).strip()
    local = Path(model).expanduser()
    bundled = (models_dir() / model / "config.json").is_file()
    if bundled and not local.is_absolute() and not (base / local).exists():
        return model
    path = scenario.resolve(model, base=base)
    if not path.exists():
        bundled = ", ".join(sorted(p.parent.name for p in models_dir().glob("*/config.json")))
        raise InputError(source, key, f"{model!r} is neither a file or folder (relative to {base}) nor a "
                                      f"bundled model ({bundled})")
    return str(path.resolve())


def check_inputs(scenario: Scenario, source: Path) -> None:
    """Everything a chapter would trip over, checked once, before any chapter runs."""
    spec = scenario.model_spec(str(source))
    _gpu(source, scenario.gpu)
    versions.check(scenario.vllm, str(source), "vllm")
    for name in ("prefill_topologies", "decode_topologies"):
        for text in getattr(scenario, name):
            try:
                parse_topology(text, str(source))
            except InputError as exc:
                raise InputError(source, name, exc.message) from None
    if scenario.gpus.strip():
        try:
            parse_gpus(scenario.gpus, str(source))
        except InputError as exc:
            raise InputError(source, "gpus", exc.message) from None
    _check_workload(scenario, spec, source)
    _check_extras(scenario, spec, source)
    _check_plan(scenario, spec, source)


def _check_extras(scenario: Scenario, spec: Any, source: Path) -> None:
    """The draft model, DCP and the calibration file, read as ``pdtune state`` and ``pdtune plan`` read them."""
    from pdtune.perfmodel.calibrate import load_calibration
    from pdtune.state import plan_state

    draft = None
    if scenario.speculative_model.strip():
        try:
            draft = load_model(scenario.speculative_model)
        except InputError as exc:
            raise InputError(source, "speculative_model",
                             f"{scenario.speculative_model}: {exc.field}: {exc.message}") from None
    if draft is not None or scenario.decode_context_parallel_size > 1:
        try:
            plan_state(spec, max_model_len=scenario.isl + scenario.osl, kv_cache_dtype=scenario.kv_cache_dtype,
                       vllm=scenario.vllm, tp=scenario.decode_context_parallel_size, speculative_model=draft,
                       num_speculative_tokens=scenario.num_speculative_tokens if draft is not None else 0,
                       decode_context_parallel_size=scenario.decode_context_parallel_size)
        except InputError as exc:
            key = exc.field if exc.field in ("speculative_model", "decode_context_parallel_size",
                                             "num_speculative_tokens") else (
                "speculative_model" if draft is not None else "decode_context_parallel_size")
            raise InputError(source, key, exc.message) from None
    if scenario.calibration.strip():
        pools = sorted({scenario.gpu.strip().lower(), (scenario.plan.decode_gpu or scenario.gpu).strip().lower()})
        try:
            cal = load_calibration(scenario.calibration, model=scenario.model)
        except InputError as exc:
            raise InputError(source, "calibration", f"{exc.source}: {exc.field}: {exc.message}") from None
        if cal.gpu not in pools:
            raise InputError(source, "calibration", f"{scenario.calibration} is calibrated for {cal.gpu}, not "
                                                    f"{' or '.join(pools)} (the GPUs of this parameters file)")


def _check_plan(scenario: Scenario, spec: Any, source: Path) -> None:
    """The ``plan:`` section against the GPU table and the model, before anything runs (the search itself
    runs before the first chapter, :func:`pdtune.workbook.running.run_workbook`)."""
    from pdtune.scenario import layout_problem

    p = scenario.plan
    if p.decode_gpu.strip():
        try:
            load_gpu(p.decode_gpu)
        except InputError as exc:
            raise InputError(source, "plan.decode_gpu", exc.message) from None
    for name in ("prefill_topologies", "decode_topologies"):
        for text in getattr(p, name):
            problem = layout_problem(spec, text, max_model_len=scenario.isl + scenario.osl,
                                     kv_cache_dtype=scenario.kv_cache_dtype, vllm=scenario.vllm, source=str(source))
            if problem:
                raise InputError(source, f"plan.{name}", f"{text.strip()}: {problem}")


def _check_workload(scenario: Scenario, spec: Any, source: Path) -> None:
    """The workload against the model, blamed on the key that is wrong: ISL + OSL longer than the model's length
    (or a KV dtype vLLM does not know) would otherwise surface as every topology failing
    (:meth:`Scenario.check_against_model` checks the topologies)."""
    from pdtune.state import plan_state

    try:
        plan_state(spec, max_model_len=scenario.isl + scenario.osl, kv_cache_dtype=scenario.kv_cache_dtype,
                   vllm=scenario.vllm)
    except InputError as exc:
        field = exc.field if exc.field in ("kv_cache_dtype", "vllm") else "isl"
        raise InputError(source, field, f"isl + osl = {scenario.isl + scenario.osl:,}: {exc.message}") from None
