"""The time of one simulated step, from pdtune's per-step cost model, cached so thousands of steps stay cheap.

A step's cost is :meth:`pdtune.perfmodel.engine.Engine.stage_terms` of its :class:`~pdtune.perfmodel.engine.Batch`
(each pipeline stage's :class:`~pdtune.perfmodel.engine.StepTerms`), timed with the efficiency factors. Building
the terms takes ~100 µs; a closed-loop run has thousands of steps, each with another context length. Two facts
make a cache exact:

* the terms split into a *key* that repeats (tokens, sequences, prefill tokens, logits, EP tokens, recurrent
  state writes, draft passes) and three fields that change every step, ``attn_pairs``, ``decode_pairs`` and
  ``kv_tokens_read``;
* for a fixed key, every piece of work's compute and memory seconds is affine in those three fields (pair FLOPs
  and KV bytes per token are constants of the model), so the terms at the key plus the slopes give the terms at
  any point, exactly (to rounding).

:class:`StepCost` builds the terms once per key and the slopes once per kind of step (with or without prefill,
number of draft passes), checks them against a direct evaluation at a second point, and then times a step as
``const + sum over kinds of max(compute_s / compute, memory_s / hbm)``: :meth:`StepTerms.seconds` with the
efficiency factors of each kind (``Efficiency.fractions``). A model with sliding-window layers is not affine in
those three fields (a window's share of the context is a ratio), but it is in six: the three and the window's
own (:func:`pdtune.perfmodel.engine.window_fields`: prompt pairs inside the window, decode pairs and KV tokens
inside it), which :meth:`Engine.stage_terms` takes apart, so it is cached the same way. A model that fails the
affinity check is timed exactly, one :meth:`Engine.stage_terms` per distinct batch.
:meth:`StepCost.with_efficiency` re-times with other factors and keeps the terms (calibration);
:meth:`StepCost.decode_run_seconds` and :meth:`StepCost.run_seconds` time a run of decode steps at once (numpy), for
the fast paths;
:meth:`StepCost.terms` gives a step's :class:`StepTerms` from the cache (the simulated fit's linearisation).
``tests/test_sim_stepcost.py`` checks the cache equals :meth:`Engine.step_time` on random batches.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from pdtune.perfmodel.efficiency import Efficiency
from pdtune.perfmodel.engine import Batch, Engine, StepTerms, window_fields

#: The fields that change every step, in this order; a sliding-window model adds the window's three
#: (:func:`pdtune.perfmodel.engine.window_fields`).
AFFINE = ("attn_pairs", "decode_pairs", "kv_tokens_read")
WINDOW = ("pre_window", "decode_pairs_in_window", "kv_tokens_in_window")
_PROBE = float(2**20)


@dataclass(frozen=True)
class _StageBase:
    kinds: tuple[str, ...]
    compute: tuple[float, ...]
    memory: tuple[float, ...]
    const: float  # everything but the kinds' roofline terms, at the factors of the cache


class StepCost:
    """Seconds of a step on one engine for one set of efficiency factors (see the module)."""

    def __init__(self, engine: Engine, efficiency: Efficiency, *, _terms: dict | None = None,
                 _slopes: dict | None = None, _exact: bool | None = None, _exact_terms: dict | None = None) -> None:
        self.engine = engine
        self.eff = efficiency
        self.stages = len(engine.stages)
        kernel = engine.expert_kernel
        self._fractions = {k: efficiency.fractions(k, kernel) for k in
                           ("dense", "experts", "attention", "recurrent", "lm_head", "mtp_draft")}
        self._terms: dict[tuple, list[StepTerms]] = _terms if _terms is not None else {}  # key -> terms at 0
        self._slopes: dict[tuple, list[tuple[tuple[tuple[float, ...], ...], ...]]] = (
            _slopes if _slopes is not None else {})
        self._base: dict[tuple, list[_StageBase]] = {}
        self.window = engine.sliding_window
        self.fields = len(AFFINE) + (len(WINDOW) if self.window else 0)
        self.exact = bool(_exact)
        self._exact_cache: dict[Batch, tuple[float, ...]] = {}  # seconds at these factors
        self._exact_terms: dict[Batch, list[StepTerms]] = _exact_terms if _exact_terms is not None else {}
        self.evaluations = 0  # Engine.stage_terms calls made (the expensive part)

    def with_efficiency(self, efficiency: Efficiency) -> StepCost:
        """The same engine at other factors, sharing the cached terms (what a calibration loop wants)."""
        return StepCost(self.engine, efficiency, _terms=self._terms, _slopes=self._slopes, _exact=self.exact,
                        _exact_terms=self._exact_terms)

    # --------------------------------------------------------------------------------------- terms

    def _stage_terms(self, batch: Batch, window: tuple[float, float, float] | None = None) -> list[StepTerms]:
        self.evaluations += 1
        if self.window:
            if window is None:
                window = window_fields(self.window, batch.seqs, batch.prefill_tokens, batch.attn_pairs,
                                       batch.decode_pairs, batch.kv_tokens_read)
            return self.engine.stage_terms(batch, window)
        return self.engine.stage_terms(batch)

    def _at(self, key: tuple, x: list[float]) -> list[StepTerms]:
        """The engine's terms at the affine fields ``x`` (three, or six with a window held apart)."""
        return self._stage_terms(_batch(key, x[:3]), tuple(x[3:]) if self.window else None)  # type: ignore[arg-type]

    def _slopes_for(self, cls: tuple, key: tuple) -> list[tuple[tuple[tuple[float, ...], ...], ...]]:
        """Per stage, per kind: the compute and memory seconds per unit of each affine field."""
        slopes = self._slopes.get(cls)
        if slopes is not None:
            return slopes
        base = self._zero_terms(key)
        n = self.fields
        probes = []
        for j in range(n):
            x = [0.0] * n
            x[j] = _PROBE
            probes.append(self._at(key, x))
        out = []
        for s in range(self.stages):
            per_kind_c = []
            per_kind_m = []
            for k in range(len(base[s].kinds)):
                per_kind_c.append(tuple((probes[j][s].compute_s[k] - base[s].compute_s[k]) / _PROBE for j in range(n)))
                per_kind_m.append(tuple((probes[j][s].memory_s[k] - base[s].memory_s[k]) / _PROBE for j in range(n)))
            out.append((tuple(per_kind_c), tuple(per_kind_m)))
        # Check affinity at another point; a model that is not affine is timed exactly from now on.
        x = [_PROBE / d for d in (3, 7, 5, 11, 13, 17)[:n]]
        direct = self._at(key, x)
        for s in range(self.stages):
            for k in range(len(base[s].kinds)):
                c = base[s].compute_s[k] + sum(a * b for a, b in zip(out[s][0][k], x, strict=True))
                m = base[s].memory_s[k] + sum(a * b for a, b in zip(out[s][1][k], x, strict=True))
                if not (_close(c, direct[s].compute_s[k]) and _close(m, direct[s].memory_s[k])):
                    self.exact = True
        self._slopes[cls] = out
        return out

    def _zero_terms(self, key: tuple) -> list[StepTerms]:
        terms = self._terms.get(key)
        if terms is None:
            terms = self._terms[key] = self._at(key, [0.0] * self.fields)
        return terms

    def _stage_base(self, key: tuple) -> list[_StageBase]:
        base = self._base.get(key)
        if base is not None:
            return base
        out = []
        for t in self._zero_terms(key):
            roof = sum(max(c / self._fractions[k][0], m / self._fractions[k][1])
                       for k, c, m in zip(t.kinds, t.compute_s, t.memory_s, strict=True))
            out.append(_StageBase(t.kinds, t.compute_s, t.memory_s, t.seconds(self.eff) - roof))
        self._base[key] = out
        return out

    def _fields(self, seqs: float, prefill_tokens: float, attn_pairs: float, decode_pairs: float,
                kv_tokens_read: float) -> tuple[float, ...]:
        if not self.window:
            return (attn_pairs, decode_pairs, kv_tokens_read)
        return (attn_pairs, decode_pairs, kv_tokens_read,
                *window_fields(self.window, seqs, prefill_tokens, attn_pairs, decode_pairs, kv_tokens_read))

    def terms(self, batch: Batch) -> StepTerms:
        """The step's :class:`StepTerms` (every stage in turn), from the cached terms and slopes: what
        :meth:`seconds` times, for a fit that re-times many steps at once (:mod:`pdtune.perfmodel.simulated`)."""
        key = (batch.tokens, batch.seqs, batch.prefill_tokens, batch.logits, batch.ep_tokens, batch.state_writes,
               batch.draft_passes)
        x = self._fields(batch.seqs, batch.prefill_tokens, batch.attn_pairs, batch.decode_pairs,
                         batch.kv_tokens_read)
        if self.exact:
            stages = self._at(key, list(x))
        else:
            base = self._zero_terms(key)
            slopes = self._slopes_for((batch.prefill_tokens > 0, batch.draft_passes, tuple(b.kinds for b in base)),
                                      key)
            if self.exact:
                stages = self._at(key, list(x))
            else:
                stages = []
                for t, (cs, ms) in zip(base, slopes, strict=True):
                    comp = tuple(c0 + sum(a * b for a, b in zip(c, x, strict=True))
                                 for c0, c in zip(t.compute_s, cs, strict=True))
                    mem = tuple(m0 + sum(a * b for a, b in zip(m, x, strict=True))
                                for m0, m in zip(t.memory_s, ms, strict=True))
                    stages.append(replace(t, compute_s=comp, memory_s=mem))
        total = stages[0]
        for t in stages[1:]:
            total = total + t
        return total

    # ------------------------------------------------------------------------------------- timing

    def stage_seconds(self, tokens: float, seqs: float, prefill_tokens: float, attn_pairs: float,
                      decode_pairs: float, kv_tokens_read: float, logits: float, ep_tokens: float,
                      state_writes: int = 1, draft_passes: int = 0) -> tuple[float, ...]:
        """Each pipeline stage's seconds for the step (one element without PP)."""
        key = (tokens, seqs, prefill_tokens, logits, ep_tokens, state_writes, draft_passes)
        if not self.exact:
            base = self._stage_base(key)
            cls = (prefill_tokens > 0, draft_passes, tuple(b.kinds for b in base))
            slopes = self._slopes_for(cls, key)
        if self.exact:
            batch = _batch(key, [attn_pairs, decode_pairs, kv_tokens_read])
            hit = self._exact_cache.get(batch)
            if hit is None:
                terms = self._exact_terms.get(batch)
                if terms is None:
                    terms = self._stage_terms(batch)
                    if len(self._exact_terms) > 200_000:
                        self._exact_terms.clear()
                    self._exact_terms[batch] = terms
                hit = tuple(t.seconds(self.eff) for t in terms)
                if len(self._exact_cache) > 200_000:
                    self._exact_cache.clear()
                self._exact_cache[batch] = hit
            return hit
        fractions = self._fractions
        out = []
        if self.window:
            x = self._fields(seqs, prefill_tokens, attn_pairs, decode_pairs, kv_tokens_read)
            for stage, (cs, ms) in zip(base, slopes, strict=True):
                total = stage.const
                for kind, c0, m0, c, m in zip(stage.kinds, stage.compute, stage.memory, cs, ms, strict=True):
                    compute, hbm = fractions[kind]
                    cc = c0 + sum(a * b for a, b in zip(c, x))
                    mm = m0 + sum(a * b for a, b in zip(m, x))
                    total += max(cc / compute, mm / hbm)
                out.append(total)
            return tuple(out)
        for stage, (cs, ms) in zip(base, slopes, strict=True):
            total = stage.const
            for kind, c0, m0, c, m in zip(stage.kinds, stage.compute, stage.memory, cs, ms, strict=True):
                compute, hbm = fractions[kind]
                cc = c0 + c[0] * attn_pairs + c[1] * decode_pairs + c[2] * kv_tokens_read
                mm = m0 + m[0] * attn_pairs + m[1] * decode_pairs + m[2] * kv_tokens_read
                total += max(cc / compute, mm / hbm)
            out.append(total)
        return tuple(out)

    def decode_run_seconds(self, n: int, kv0: float, k: int, ep_tokens: float, state_writes: int = 1) -> np.ndarray:
        """Seconds of ``k`` pure decode steps of ``n`` sequences, one token each, the ``j``-th reading
        ``kv0 + n j`` cached tokens (a one-stage engine): :meth:`stage_seconds` of each, at once."""
        j = np.arange(k, dtype=float)
        kv = kv0 + n * j
        return self.run_seconds(n, n, n, ep_tokens, state_writes, 0, kv + n, kv)

    def run_seconds(self, tokens: int, seqs: int, logits: int, ep_tokens: float, state_writes: int,
                    draft_passes: int, pairs: np.ndarray, kv: np.ndarray) -> np.ndarray:
        """Seconds of decode steps that share one key (no prefill) and differ in their attention pairs (``pairs``,
        every one a decode pair) and cached tokens read (``kv``), one step per element: :meth:`stage_seconds` of
        each, at once (a one-stage engine)."""
        key = (tokens, seqs, 0, logits, ep_tokens, state_writes, draft_passes)
        if not self.exact:
            base = self._stage_base(key)
            slopes = self._slopes_for((False, draft_passes, tuple(b.kinds for b in base)), key)
        if self.exact:
            return np.array([sum(self.stage_seconds(tokens, seqs, 0, float(p), float(p), float(c), logits,
                                                    ep_tokens, state_writes, draft_passes))
                             for p, c in zip(pairs, kv, strict=True)])
        x = [pairs, pairs, kv]
        if self.window:
            share = np.where(kv > self.window * seqs, self.window * seqs / np.maximum(kv, 1e-300), 1.0)
            x += [np.zeros(len(kv)), pairs * share, kv * share]
        total = np.zeros(len(kv))
        for stage, (cs, ms) in zip(base, slopes, strict=True):
            total += stage.const
            for kind, c0, m0, c, m in zip(stage.kinds, stage.compute, stage.memory, cs, ms, strict=True):
                compute, hbm = self._fractions[kind]
                # The same operations in the same order as stage_seconds, so a run equals its steps exactly.
                if self.window:
                    cc = c0 + sum(a * b for a, b in zip(c, x))
                    mm = m0 + sum(a * b for a, b in zip(m, x))
                else:
                    cc = c0 + c[0] * x[0] + c[1] * x[1] + c[2] * x[2]
                    mm = m0 + m[0] * x[0] + m[1] * x[1] + m[2] * x[2]
                total += np.maximum(cc / compute, mm / hbm)
        return total

    def seconds(self, batch: Batch) -> float:
        """The step's latency (every stage in turn) for a :class:`Batch`."""
        return sum(self.stage_seconds(batch.tokens, batch.seqs, batch.prefill_tokens, batch.attn_pairs,
                                      batch.decode_pairs, batch.kv_tokens_read, batch.logits, batch.ep_tokens,
                                      batch.state_writes, batch.draft_passes))


def _batch(key: tuple, x: list[float]) -> Batch:
    tokens, seqs, prefill, logits, ep, writes, drafts = key
    return Batch(tokens=tokens, seqs=seqs, prefill_tokens=prefill, attn_pairs=x[0], decode_pairs=x[1],
                 kv_tokens_read=x[2], logits=logits, state_writes=writes, ep_tokens=ep, draft_passes=drafts)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1e-12)
