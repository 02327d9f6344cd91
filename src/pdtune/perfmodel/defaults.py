"""Which factors a prediction uses when no calibration file is given, GPU by GPU, and where they came from.

``data/perfmodel/defaults.csv`` holds one row per GPU with the factors of
:class:`~pdtune.perfmodel.efficiency.Efficiency` and a ``source`` column:

* ``article``: GB300 and GB200 keep the article-tuned :data:`~pdtune.perfmodel.efficiency.DEFAULT_EFFICIENCY`
  (the book's modeled GB300 dataset and the InferenceX check were made with it);
* ``silicon``: H100, H200, B200 and B300 use factors fitted on aiconfigurator's public vLLM measurements
  (``data/clusters/aiconfigurator-silicon/``), every bundled model measured on a GPU of the same architecture
  (:data:`ARCHITECTURES`: H100 and H200 are one Hopper die with two memories, B200 and B300 two Blackwell parts):
  a kernel reaches the same fraction of the peaks ``data/gpus/gpus.csv`` lists on either, and the launch and
  host overheads are the same, so one fit per architecture sees four or five models instead of two to four. How
  they score on a model they were not fitted on is the leave-one-model-out benchmark
  (``benchmarks/bench_validate.py``), which leaves the model out on every GPU.

``data/perfmodel/fit_defaults.py`` rewrites the file from the shipped data; its README says what it was fitted on.
A GPU the file does not list uses the article's factors.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import pandas as pd

from pdtune.errors import InputError, brief
from pdtune.guarded import bundled, read_csv
from pdtune.gpus import load_gpu
from pdtune.model import bundled_models, load_model
from pdtune.paths import clusters_dir, data_dir
from pdtune.perfmodel.efficiency import DEFAULT_EFFICIENCY, EXPERT_KERNELS, FACTORS, Efficiency
from pdtune.perfmodel.fit import Problem, compile_problems, fit_efficiency
from pdtune.perfmodel.prior import PRIOR
from pdtune.perfmodel.repeats import REPEAT_COLUMNS, fold_repeats, measurement_key
from pdtune.perfmodel.validation import model_key, select_rows

#: The GPUs whose defaults are fitted on the public vLLM measurements; the others keep the article's.
SILICON_GPUS = ("h100", "h200", "b200", "b300")

#: GPUs whose defaults are fitted together: the same silicon generation (SMs, tensor cores, kernels), whose
#: differences (HBM bandwidth and size, FP4 peak, NVLink) the GPU table carries.
ARCHITECTURES = {"hopper": ("h100", "h200"), "blackwell": ("b200", "b300")}


def architecture_of(gpu: str) -> tuple[str, ...]:
    """The GPUs fitted together with ``gpu`` (itself alone when it has no listed architecture)."""
    for members in ARCHITECTURES.values():
        if gpu in members:
            return members
    return (gpu,)


def defaults_file(latency_model: str = "steady-state") -> Path:
    """The default factors per GPU for ``latency_model``: ``defaults.csv`` is fitted on the steady-state model's
    form, ``defaults_simulated.csv`` through the scheduler simulation (``fit_defaults.py --simulated``)."""
    name = "defaults_simulated.csv" if latency_model == "simulated" else "defaults.csv"
    return data_dir() / "perfmodel" / name


@dataclass(frozen=True)
class GpuDefaults:
    gpu: str
    efficiency: Efficiency
    source: str  # article | silicon
    note: str


@cache
def _table(path: str) -> dict[str, GpuDefaults]:
    source = Path(path)
    if not source.exists():
        return {}
    with bundled():  # the guarded reader; a broken row is the bundled data's fault
        return _read_table(source)


def _read_table(source: Path) -> dict[str, GpuDefaults]:
    out: dict[str, GpuDefaults] = {}
    _header, rows = read_csv(source)
    for i, row in rows:
        where = f"{source}:{i}"
        values: dict[str, float] = {}
        for name in FACTORS:
            text = (row.get(name) or "").strip()
            if text:
                try:
                    values[name] = float(text)
                except ValueError:
                    raise InputError(where, name, f"expected a number, got {brief(text)}") from None
        gpu = (row.get("gpu") or "").strip().lower()
        if not gpu:
            raise InputError(where, "gpu", "empty")
        out[gpu] = GpuDefaults(gpu, Efficiency(**values), (row.get("source") or "").strip(),
                               (row.get("note") or "").strip())
    return out


def gpu_defaults(gpu: str, latency_model: str = "steady-state") -> GpuDefaults:
    """The default factors for ``gpu`` and their source; a simulated prediction takes the factors fitted through the
    simulation where the GPU has them (the silicon GPUs), else the steady-state model's."""
    key = gpu.strip().lower()
    found = _table(str(defaults_file(latency_model))).get(key) or _table(str(defaults_file())).get(key)
    if found is not None:
        return found
    return GpuDefaults(gpu, DEFAULT_EFFICIENCY, "article", "not in data/perfmodel/defaults.csv: the article's factors")


def silicon_file() -> Path:
    return clusters_dir() / "aiconfigurator-silicon" / "silicon_sample.csv"


def silicon_problems(
    df: pd.DataFrame, gpus: Iterable[str] = SILICON_GPUS, *, fold: bool = True
) -> dict[tuple[str, str], Problem]:
    """The vLLM aggregated rows of every bundled model, per (model, GPU): what the defaults are fitted on.

    With ``fold`` (the default) a measurement repeated under another id is one row
    (:func:`pdtune.perfmodel.repeats.fold_repeats`); :func:`silicon_repeats` lists the rows that folds away."""
    bundled = {name.lower(): name for name in bundled_models()}
    rows = df[(df.get("backend") == "vllm") & (df["mode"] == "agg")]
    out: dict[tuple[str, str], Problem] = {}
    for key in sorted({model_key(m) for m in rows["model"]}):
        if key not in bundled:
            continue
        spec = load_model(bundled[key])
        for gpu in gpus:
            sel = select_rows(rows, key, gpu)
            if sel.used:
                kept = fold_repeats(sel.rows).rows if fold else sel.rows
                out[(key, gpu)] = Problem(spec, load_gpu(gpu), kept)
    return out


def silicon_repeats(problems: dict[tuple[str, str], Problem]) -> pd.DataFrame:
    """The rows of unfolded ``problems`` (``silicon_problems(..., fold=False)``) that repeat another row's
    measurement, with the model and GPU, and the id of the row each repeats."""
    frames = []
    for (model, gpu), problem in sorted(problems.items()):
        folded = fold_repeats(problem.rows).repeats
        if len(folded):
            frames.append(folded.assign(model_key=model, gpu_name=gpu))
    columns = ["model_key", "gpu_name", *REPEAT_COLUMNS]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


#: Folders of ``data/clusters/`` that hold measurements kept out of every fit of the defaults, so that pdtune can
#: be scored on deployments no part of it was fitted on (``benchmarks/bench_heldout.py``).
HELD_OUT_CLUSTERS = ("inferencex-h200-isl-sweep",)


def held_out_folders() -> tuple[Path, ...]:
    return tuple(clusters_dir() / name for name in HELD_OUT_CLUSTERS)


def is_held_out(path: object) -> bool:
    """Whether a result file lies in one of :data:`HELD_OUT_CLUSTERS` (resolved, so links do not hide it)."""
    try:
        where = Path(str(path)).resolve()
    except (OSError, RuntimeError):
        return False
    return any(where == folder.resolve() or folder.resolve() in where.parents for folder in held_out_folders())


def _refuse_held_out(problems: Sequence[Problem]) -> None:
    for problem in problems:
        paths = problem.rows["path"] if "path" in problem.rows.columns else pd.Series(dtype=object)
        for path in paths.dropna().unique():
            if is_held_out(path):
                raise InputError(str(path), "path", "is held-out data (HELD_OUT_CLUSTERS): never fitted on")


def fit_gpu_defaults(
    problems: dict[tuple[str, str], Problem], gpu: str, *, exclude: Sequence[str] = (),
    unpulled: frozenset[str] = frozenset(), latency_model: str = "steady-state",
    rows: Callable[[pd.DataFrame], pd.Series] | None = None,
) -> tuple[Efficiency, list[str]]:
    """Factors for ``gpu`` fitted on every problem of its architecture (:func:`architecture_of`) whose model is
    not in ``exclude`` (all GPUs' such problems when the architecture has none), and the models they came from.
    Rows from the held-out folders (:data:`HELD_OUT_CLUSTERS`) are refused. Every factor is pulled towards
    :data:`pdtune.perfmodel.prior.PRIOR` but those in ``unpulled`` (``benchmarks/bench_prior.py`` measures that
    choice for the hand-set ones). ``latency_model`` ``"simulated"`` fits through the scheduler simulation;
    ``rows`` (a mask of a problem's rows) keeps only some rows in the fit."""
    members = architecture_of(gpu)
    mine = [(m, p) for (m, g), p in problems.items() if g in members and m not in exclude]
    if not mine:
        mine = [(m, p) for (m, g), p in problems.items() if m not in exclude]
    if not mine:
        raise InputError("defaults", "models", f"nothing to fit {gpu}'s defaults on")
    if rows is not None:
        mine = [(m, replace(p, rows=p.rows[rows(p.rows)])) for m, p in mine]
        mine = [(m, p) for m, p in mine if len(p.rows)]
        if not mine:
            raise InputError("defaults", "rows", f"no row of {gpu}'s architecture is selected to fit on")
    _refuse_held_out([p for _, p in mine])
    result = fit_efficiency([p for _, p in mine], start=PRIOR, unpulled=unpulled, latency_model=latency_model)
    return result.efficiency, sorted({m for m, _ in mine})


#: A fit's key: the architecture's GPUs and the models whose rows it used (two fits of one key are the same fit).
FitKey = tuple[tuple[str, ...], tuple[str, ...]]
#: Fits per architecture, each with the models it used.
Fits = dict[tuple[str, ...], tuple[Efficiency, list[str]]]


def fit_key(problems: dict[tuple[str, str], Problem], gpu: str, exclude: Sequence[str] = ()) -> FitKey:
    """What :func:`fit_gpu_defaults` fits ``gpu`` on: its architecture and the models left in it."""
    members = architecture_of(gpu)
    return members, tuple(sorted({m for m, g in problems if g in members and m not in exclude}))


def fit_architectures(
    problems: dict[tuple[str, str], Problem], *, exclude: Sequence[str] = (), gpus: Iterable[str] = SILICON_GPUS,
    cache: dict[FitKey, tuple[Efficiency, list[str]]] | None = None, unpulled: frozenset[str] = frozenset(),
    latency_model: str = "steady-state", rows: Callable[[pd.DataFrame], pd.Series] | None = None,
) -> Fits:
    """One :func:`fit_gpu_defaults` per architecture of ``gpus``, the models in ``exclude`` left out (``unpulled``,
    ``latency_model`` and ``rows`` as there), with the expert kernels each architecture's rows never ran carried
    over from the others' (:func:`carry_kernels`). ``cache`` keeps fits by :func:`fit_key` (one cache per choice of
    the other arguments; a caller may fill it beforehand, in parallel): leaving out a model an architecture never
    measured is that architecture's whole fit."""
    cache = {} if cache is None else cache
    fits: Fits = {}
    for gpu in gpus:
        key = fit_key(problems, gpu, exclude)
        if key not in cache:
            cache[key] = fit_gpu_defaults(problems, gpu, exclude=exclude, unpulled=unpulled,
                                          latency_model=latency_model, rows=rows)
        fits[key[0]] = cache[key]
    return carried(fits)


def carried(fits: Fits) -> Fits:
    """:func:`carry_kernels` on fits that carry the models they used."""
    factors = carry_kernels({members: eff for members, (eff, _) in fits.items()})
    return {members: (factors[members], models) for members, (_, models) in fits.items()}


def carry_kernels(fits: dict[tuple[str, ...], Efficiency]) -> dict[tuple[str, ...], Efficiency]:
    """Each architecture's factors with the expert kernel families its rows never ran but another's did: such a
    kernel keeps, relative to the architecture's generic expert fractions, the ratio it has on the other
    (MiniMax-M2.5 left out, Blackwell's rows run no FP8 experts: they take Hopper's ratio of FP8 to generic
    expert fractions, where they used to fall back to the generic ones, a ratio of 1). FP4 is carried only to GPUs
    with FP4 tensor cores (elsewhere FP4 weights run in the ``w4a16`` kernel). The first architecture that has the
    kernel gives the ratio; an architecture whose own rows ran the kernel keeps its fit."""
    out = {}
    for members, eff in fits.items():
        native_fp4 = "fp4" in load_gpu(members[0]).dense_flops
        changes: dict[str, float] = {}
        for kernel in EXPERT_KERNELS:
            if getattr(eff, f"expert_compute_{kernel}") is not None or kernel == "fp4" and not native_fp4:
                continue
            donor = next((o for m, o in fits.items() if m != members and getattr(o, f"expert_compute_{kernel}")
                          is not None), None)
            if donor is None:
                continue
            for part, generic in (("compute", "experts"), ("hbm", "experts_hbm")):
                name = f"expert_{part}_{kernel}"
                ratio = getattr(donor, name) / getattr(donor, generic)
                changes[name] = min(1.0, getattr(eff, generic) * ratio)
        out[members] = replace(eff, **changes)
    return out


def fitted_rows_file() -> Path:
    return data_dir() / "perfmodel" / "fitted_rows.csv"


def measurement_digest(row: pd.Series | dict) -> str:
    """A short, stable name of one measurement (:func:`pdtune.perfmodel.repeats.measurement_key`)."""
    return hashlib.sha256(measurement_key(row).encode()).hexdigest()[:16]


def fitted_problem_rows(problems: Sequence[Problem], clustering: float) -> pd.DataFrame:
    """The rows of ``problems`` a fit at ``clustering`` is made of: those :func:`pdtune.perfmodel.fit.compile_problems`
    plans (aggregated, predictable, plannable), not the rows it lists as unpredicted (the client-bug rows, for one)."""
    skipped = compile_problems(problems, clustering).unpredicted
    kept = [p.rows.drop(index=[r for (n, r) in skipped if n == i]) for i, p in enumerate(problems)]
    return pd.concat(kept) if kept else pd.DataFrame()


def write_fitted_rows(path: Path, fitted: dict[str, pd.DataFrame]) -> None:
    """Which measurements each GPU's defaults were fitted on (``fit_defaults.py`` writes it; ``pdtune validate``
    marks those rows as in-sample): one line per GPU and row, with the row's id and measurement digest."""
    lines = ["# the measurements each GPU's silicon defaults were fitted on; written by fit_defaults.py",
             "gpu,source_id,measurement"]
    for gpu, rows in fitted.items():
        for _, row in rows.iterrows():
            lines.append(f"{gpu},{_quote(str(row.get('source_id') or ''))},{measurement_digest(row)}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@cache
def _fitted(path: str) -> dict[str, frozenset[str]]:
    source = Path(path)
    if not source.exists():
        return {}
    with bundled():
        _header, rows = read_csv(source)
        out: dict[str, set[str]] = {}
        for i, row in rows:
            gpu, digest = (row.get("gpu") or "").strip().lower(), (row.get("measurement") or "").strip()
            if not gpu or not digest:
                raise InputError(f"{source}:{i}", "gpu" if not gpu else "measurement", "empty")
            out.setdefault(gpu, set()).add(digest)
    return {gpu: frozenset(d) for gpu, d in out.items()}


def fitted_measurements(gpu: str) -> frozenset[str]:
    """The measurement digests ``gpu``'s shipped defaults were fitted on (empty for the article's factors)."""
    return _fitted(str(fitted_rows_file())).get(gpu.strip().lower(), frozenset())


def write_defaults(path: Path, rows: list[GpuDefaults], header_note: str) -> None:
    """The CSV :func:`gpu_defaults` reads (``fit_defaults.py`` writes it)."""
    names = list(FACTORS)
    lines = [f"# {line}" for line in header_note.splitlines()]
    lines.append(",".join(["gpu", *names, "source", "note"]))
    for r in rows:
        values = r.efficiency.to_dict()
        cells = [r.gpu] + [_fmt(values.get(n)) for n in names] + [r.source, _quote(r.note)]
        lines.append(",".join(cells))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def _quote(text: str) -> str:
    return '"' + text.replace('"', "'") + '"' if ("," in text or '"' in text) else text
