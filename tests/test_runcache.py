"""What one run's chapters compute alike is computed once (pdtune.site.runcache), and only within a run."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from pdtune.site import runcache


def _count(folder: Path, key: str) -> int:
    """A value that counts its computations in ``folder`` (visible across processes)."""
    def compute() -> int:
        with (folder / "computed").open("a") as fh:
            fh.write(key + "\n")
        return len((folder / "computed").read_text().splitlines())
    return runcache.remembered(("test", key), compute)


def _in_child(folder: str, key: str, queue: multiprocessing.Queue) -> None:
    queue.put(_count(Path(folder), key))


def test_outside_a_run_every_call_computes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(runcache.ENV, raising=False)
    assert [_count(tmp_path, "a"), _count(tmp_path, "a")] == [1, 2]


def test_within_a_run_a_key_is_computed_once_in_any_process(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(runcache.ENV, raising=False)
    with runcache.for_run():
        folder = Path(os.environ[runcache.ENV])
        assert _count(tmp_path, "a") == 1
        assert _count(tmp_path, "a") == 1  # kept
        assert _count(tmp_path, "b") == 2  # another key computes
        # a worker started inside the run (spawned, as the workbook's and the book's are) reads the same value
        context = multiprocessing.get_context("spawn")
        queue = context.Queue()
        child = context.Process(target=_in_child, args=(str(tmp_path), "a", queue))
        child.start()
        child.join(60)
        assert queue.get(timeout=5) == 1
        with runcache.for_run():  # an inner run (the workbook's HTML step) keeps the outer folder
            assert os.environ[runcache.ENV] == str(folder)
        assert folder.is_dir()
    assert runcache.ENV not in os.environ and not folder.exists()
    assert _count(tmp_path, "a") == 3  # the run is over: nothing is kept


def test_the_key_is_every_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan's key (pdtune.workbook.planning.timed_plan) spells the settings, the SLAs and the vLLM
    environment in force: a plan searched under one is not served under another."""
    from pdtune import switches
    from pdtune.workbook.planning import plan_settings, plan_slas, timed_plan

    monkeypatch.delenv(runcache.ENV, raising=False)
    settings = plan_settings(model="llama-3.1-70b", gpu="h200", isl=1024, osl=1024, max_gpus=8)
    with runcache.for_run():
        first = timed_plan(settings, plan_slas({}))
        assert timed_plan(settings, plan_slas({})).seconds == first.seconds  # kept, with its search's time
        with switches.vllm_environment((("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "1"),), "vllm_env"):
            other = timed_plan(settings, plan_slas({}))
        assert other.seconds != first.seconds  # searched again (two searches never take the same time)
        wider = timed_plan(plan_settings(model="llama-3.1-70b", gpu="h200", isl=1024, osl=1024, max_gpus=16),
                           plan_slas({}))
        assert wider.plan.settings.max_gpus == 16


def test_a_run_can_keep_its_folder_in_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``pdtune workbook`` keeps it in its staging folder: a killed run's successor removes that folder, and with
    it whatever the cache held (nothing is left in the temporary folder)."""
    monkeypatch.delenv(runcache.ENV, raising=False)
    with runcache.for_run(tmp_path):
        folder = Path(os.environ[runcache.ENV])
        assert folder.parent == tmp_path
    assert list(tmp_path.iterdir()) == []
