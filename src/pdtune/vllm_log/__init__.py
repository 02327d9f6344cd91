"""Read a vLLM start-up log (0.11 to 0.33) into per-worker figures and the memory waterfall.

vLLM prints what it measured while starting: the weights it loaded, the CUDA graphs it profiled, the
memory left for the KV cache, the KV cache size in tokens and the concurrency it allows. Every line comes
from one process, named by the prefix vLLM puts in front of it::

    (EngineCore_DP0 pid=2201) INFO 10-14 09:12:41 [gpu_worker.py:298] Available KV cache memory: 61.41 GiB
    (Worker_TP1 pid=2342) INFO 10-14 09:12:41 [gpu_worker.py:298] Available KV cache memory: 61.39 GiB

0.11 adds the prefix by wrapping stdout, 0.33 puts it in the log format; lines without one belong to
``main``. Each process keeps its own record, so TP ranks and DP engines never mix: workers
(``Worker_TP1``, ``Worker_DP1_TP0``) report memory, engine cores (``EngineCore``, ``EngineCore_DP1``)
report the KV cache size and concurrency for the ranks they drive (in-process when TP=1).

The lines read, with the vLLM source that prints them (format strings checked in 0.11, 0.20, 0.26, 0.33):

- ``Model loading took X GiB [memory] and Y seconds`` (``gpu_model_runner.py``)
- ``Setting attention block size to N tokens ...``, ``Padding mamba page size by P% ...`` (hybrid models;
  ``model_executor/models/config.py`` in 0.11, ``platforms/interface.py`` later)
- ``Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)`` and
  ``Estimated CUDA graph memory: X GiB total`` (0.20+); the warning that the estimate is *not* applied
- ``Available KV cache memory: X GiB`` (``gpu_worker.py``)
- ``GPU KV cache size: N tokens`` + ``Maximum concurrency for L tokens per request: Cx`` (two lines up
  to 0.27, one line ``... tokens, Maximum concurrency ...`` from 0.28; other devices print their own name;
  0.11 prints one pair per TP rank, from that rank's memory, before every rank is cut to the smallest)
- ``Graph capturing finished in S secs, took X GiB`` and ``CUDA graph pool memory: X GiB (actual), Y GiB
  (estimated), difference: ...`` (0.20+)
- ``init engine (profile, create kv cache, warmup model) took S seconds|s`` (``v1/engine/core.py``)
- ``Free memory on device (F/T GiB) on startup. Desired GPU memory utilization is (U, R GiB). Actual
  usage is ...`` (INFO from 0.26, DEBUG before): the GPU's total memory and the split of the overhead
- DEBUG ``Memory profiling takes ...`` and ``worker init memory snapshot: ...total_memory=...``
- the config banner ``Initializing a V1 LLM engine (vX) with config: model=..., ...``, ``non-default args:
  {...}``, ``vLLM API server version X`` / ``vLLM server version X, serving model M``, and collect_env's
  ``vLLM Version : X`` table row (no logger prefix)
- ``Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: N``
  (``v1/metrics/loggers.py``; INFO in 0.11, DEBUG from 0.20)
- ``Add N padding layers, may waste at most P% KV cache memory`` (groups padded to one size)
- ``Updating mamba_ssm_cache_dtype to 'float32' for NemotronH model`` (0.20+)
- ``Multiplying the GPU KV cache size by the dcp_world_size N.`` (0.11) / ``... by the cp_world_size N
  (pcp_world_size P * dcp_world_size D).`` (0.20; later lines shard the tokens instead and print nothing)
- ``Chunked prefill is enabled with max_num_batched_tokens=N.`` (``config/scheduler.py``) and
  ``Asynchronous scheduling is enabled|disabled.``

Figures are GiB rounded to two decimals as vLLM prints them; they become bytes here and stay approximate
to that rounding (about 5 MiB); :func:`cross_check` turns that rounding into a token range.

The modules: :mod:`.records` (what one process logged), :mod:`.patterns` (one anchored pattern per message),
:mod:`.parse` (lines into records, :class:`VllmLog`), :mod:`.crosscheck` (beside :mod:`pdtune.state`).
Every pattern is linear in the line's length; the process-to-engine index is built once per log.
"""

from __future__ import annotations

from pdtune.vllm_log.crosscheck import FOLLOWED_LINES, KvCheck, cross_check
from pdtune.vllm_log.parse import DEFAULT_GPU_MEMORY_UTILIZATION, VllmLog, parse_log, parse_log_text, split_header
from pdtune.vllm_log.records import MAIN, CudaGraphGroup, EngineConfig, KvCacheReport, WorkerLog

__all__ = [
    "DEFAULT_GPU_MEMORY_UTILIZATION", "FOLLOWED_LINES", "MAIN", "CudaGraphGroup", "EngineConfig", "KvCacheReport",
    "KvCheck", "VllmLog", "WorkerLog", "cross_check", "parse_log", "parse_log_text", "split_header",
]
