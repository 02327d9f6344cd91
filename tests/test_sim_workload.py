"""pdtune.sim.workload: lengths and phases as vLLM bench serve, sa-bench and AIPerf draw and send them."""

from __future__ import annotations

import numpy as np
import pytest

from pdtune.errors import InputError
from pdtune.sim.workload import (closed_loop, normal_lengths, open_loop, read_trace, sa_bench_lengths,
                                 vllm_bench_lengths)


def test_vllm_bench_random_lengths() -> None:
    """get_sampling_params (vllm/benchmarks/datasets/utils.py, 0.33): integers in [floor(n (1 - r)),
    ceil(n (1 + r))] from default_rng(seed), inputs drawn first: ISL 1000, r 0.5 -> [500, 1500]; OSL 100 ->
    [50, 150]."""
    lengths = vllm_bench_lengths(2000, 1000, 100, 0.5, seed=0)
    rng = np.random.default_rng(0)
    assert [i for i, _ in lengths] == list(rng.integers(500, 1501, size=2000))
    assert [o for _, o in lengths] == list(rng.integers(50, 151, size=2000))
    assert vllm_bench_lengths(3, 1024, 128) == [(1024, 128)] * 3
    # The tokenizer's special tokens come off the sampled length and are added back (the prompt has them).
    assert vllm_bench_lengths(2, 1024, 128, 0.0, special_tokens=1) == [(1024, 128)] * 2


def test_sa_bench_lengths_use_the_older_rule() -> None:
    """sa-bench's benchmark_serving.py (srtctl 0.3.0): randint(int(n r), n + 1) after numpy.random.seed(seed):
    ISL 1000, r 0.8 -> [800, 1000]."""
    lengths = sa_bench_lengths(500, 1000, 100, 0.8, seed=0)
    state = np.random.RandomState(0)
    assert [i for i, _ in lengths] == list(state.randint(800, 1001, size=500))
    assert [o for _, o in lengths] == list(state.randint(80, 101, size=500))


def test_aiperf_lengths_are_normal_and_positive() -> None:
    lengths = normal_lengths(4000, 1000, 100, isl_stddev=200, osl_stddev=0, seed=3)
    isl = np.asarray([i for i, _ in lengths])
    assert abs(isl.mean() - 1000) < 15 and abs(isl.std() - 200) < 10 and isl.min() >= 1
    assert {o for _, o in lengths} == {100}


def test_vllm_bench_phases_repeat_the_first_prompt() -> None:
    """vllm bench serve: an initial test request and --num-warmups copies of the first prompt run before the
    measured requests, all behind the same semaphore; they share the first prompt's content (prefix cache)."""
    w = closed_loop(16, 1024, 128, num_prompts=64, warmups=5)
    names = [p.name for p in w.phases]
    assert names == ["ready check", "warmup", "main"]
    assert len(w.phases[1].requests) == 5 and w.phases[1].concurrency == 16
    first = w.main.requests[0]
    assert first.prefix_id == 0 and first.prefix_len == 1024
    assert all(r.prefix_id == 0 for p in w.phases[:2] for r in p.requests)
    assert all(r.prefix_id is None for r in w.main.requests[1:])


def test_sa_bench_runs_a_warmup_of_twice_the_concurrency_first() -> None:
    w = closed_loop(8, 1024, 128, harness="sa-bench")
    assert [p.name for p in w.phases] == ["ready check", "warmup run", "ready check", "main"]
    assert len(w.phases[1].requests) == 16 and len(w.main.requests) == 80
    assert w.phases[1].requests[0].prefix_id != w.main.requests[0].prefix_id  # two runs, two first prompts


def test_open_loop_send_times_end_at_n_over_rate() -> None:
    w = open_loop(5.0, 100, 10, num_prompts=50)
    ready = w.main.ready
    assert ready[-1] == pytest.approx(50 / 5.0) and all(a <= b for a, b in zip(ready, ready[1:], strict=False))
    uniform = open_loop(5.0, 100, 10, num_prompts=5, burstiness=float("inf"))
    assert uniform.main.ready == pytest.approx((0.2, 0.4, 0.6, 0.8, 1.0))


def test_trace_csv(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,isl,osl\n0,100,10\n0.5,2000,64\n")
    w = read_trace(path)
    assert w.main.ready == (0.0, 0.5) and [r.isl for r in w.main.requests] == [100, 2000]
    path.write_text("arrival_s,isl,osl\n1,100,10\n0.5,200,10\n")
    with pytest.raises(InputError, match="row 2: arrival_s"):
        read_trace(path)
    path.write_text("arrival_s,isl\n1,100\n")
    with pytest.raises(InputError, match="osl"):
        read_trace(path)
    path.write_text("arrival_s,isl,osl\n1,10.5,10\n")
    with pytest.raises(InputError, match="whole number"):
        read_trace(path)


def test_bad_workload_numbers_are_refused() -> None:
    for kwargs in ({"concurrency": 0}, {"isl": 0}, {"osl": -1}):
        args = {"concurrency": 4, "isl": 100, "osl": 10, **kwargs}
        with pytest.raises(InputError):
            closed_loop(args["concurrency"], args["isl"], args["osl"])
    with pytest.raises(InputError, match="range_ratio"):
        closed_loop(4, 100, 10, range_ratio=1.5)
    with pytest.raises(InputError, match="rate"):
        open_loop(0, 100, 10)
