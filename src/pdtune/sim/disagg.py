"""Disaggregated serving: a prefill pool, the KV transfer, and the decode pool's own queue.

vLLM's P/D flow with the NixlConnector (``kv_connector/v1/nixl``), as a proxy such as vLLM's
``toy_proxy_server`` drives it:

1. the proxy sends the request to a prefill engine (round robin over the pool; vLLM's DP load balancer within an
   engine) with ``max_tokens = 1``: the prefill engine schedules the prompt like any request, samples one token
   and finishes, but keeps the prompt's blocks (``request_finished`` delays the free) until the decode side has
   read them;
2. the proxy then sends the request to a decode engine (round robin). The decode scheduler treats it as a
   request whose prompt was computed remotely (``get_num_new_matched_tokens``): when its blocks fit it allocates
   them for the whole prompt and starts an asynchronous load (``WAITING_FOR_REMOTE_KVS``); the load begins with
   the step that allocated the blocks and takes the KV transfer of :mod:`pdtune.transfer` (one request's bytes
   per TP rank, re-sharded between TP sizes, over NVLink or the NIC); the prefill engine's blocks are freed then;
3. once loaded, the request waits among the block-holding requests, which the scheduler takes first
   (``kv_holding_waiting``); the last prompt token is recomputed (``_update_waiting_for_remote_kv``) in a step
   that samples the first output token, which reaches the client at that step's end. The decode engine then
   decodes the rest.

TTFT is the client's: from send to the decode engine's first token (prefill queue, prefill, the proxy's hand-off,
the decode queue, the transfer, the first decode step). Not modeled: the proxy's own latency beyond the front
end's ``request_overhead_s``, contention between concurrent transfers on one link, NIXL's notifications (the
decode side sees a finished load at its next step).
"""

from __future__ import annotations

from collections.abc import Callable

from pdtune.errors import InputError
from pdtune.perfmodel.efficiency import Efficiency
from pdtune.perfmodel.engine import Engine
from pdtune.sim.engine import EngineCore, SpecDecode
from pdtune.sim.request import SimRequest
from pdtune.sim.results import SimResult
from pdtune.sim.router import DPLoadBalancer, RoundRobin
from pdtune.sim.run import Clients, Clock, SimConfig, check_workload, common_value, request_records, build_cores, on_tokens, setup_engine
from pdtune.sim.stepcost import StepCost
from pdtune.sim.workload import Workload
from pdtune.transfer import Link, pool_link, request_transfer


class _Pool:
    """The engines of one pool: their cores, their DP targets, the proxy's round robin and each engine's DP
    load balancer."""

    def __init__(self, name: str, n: int, engine: Engine, config: SimConfig, efficiency: Efficiency, max_len: int,
                 cost: StepCost | None, clock: Clock) -> None:
        self.setup = setup_engine(engine, config, max_len)
        self.cost = cost if cost is not None and cost.engine is engine else StepCost(engine, efficiency)
        if self.cost.eff is not efficiency:
            self.cost = self.cost.with_efficiency(efficiency)
        spec = SpecDecode(self.setup.spec, config.acceptance, config.seed) if self.setup.spec else None
        self.engines: list[tuple[list[EngineCore], list[tuple[int, int]], DPLoadBalancer]] = []
        for i in range(n):
            cores, targets = build_cores(self.setup, self.cost, spec, config, prefix=f"{name}{i}")
            balancer = DPLoadBalancer(len(targets), lambda j, c=cores, t=targets: c[t[j][0]].counts(t[j][1]))
            self.engines.append((cores, targets, balancer))
            for core in cores:
                core.fast = config.fast_path
                clock.add_core(core)
        self.proxy = RoundRobin(n)
        self.clock = clock

    @property
    def cores(self) -> list[EngineCore]:
        return [c for cores, _, _ in self.engines for c in cores]

    def route(self, request: SimRequest, t: float) -> None:
        e = self.proxy.route()
        cores, targets, balancer = self.engines[e]
        j = balancer.route()
        core, rank = targets[j]
        request.rank = e
        request.target = j
        cores[core].submit(t, rank, request)
        if cores[core].asleep or not cores[core].queue:
            self.clock.wake(cores[core], t)

    def done(self, request: SimRequest) -> None:
        self.engines[request.rank][2].done(request.target)

    def scheduler_of(self, request: SimRequest):  # type: ignore[no-untyped-def]
        cores, targets, _ = self.engines[request.rank]
        core, rank = targets[request.target]
        return cores[core], cores[core].ranks[rank]


def simulate_disagg(prefill: Engine, decode: Engine, n_prefill: int, n_decode: int, workload: Workload, *,
                    efficiency: Efficiency, config: SimConfig | None = None, link: Link | None = None,
                    costs: tuple[StepCost | None, StepCost | None] = (None, None)) -> SimResult:
    """Simulate ``workload`` on ``n_prefill`` prefill engines feeding ``n_decode`` decode engines (``xPyD``);
    every number is **modeled**. ``link`` defaults to :func:`pdtune.transfer.pool_link` for the deployment."""
    config = config or SimConfig()
    check_workload(workload, config)
    if n_prefill < 1 or n_decode < 1:
        raise InputError("--topology", "n_prefill/n_decode", "a disaggregated deployment needs at least one "
                         "prefill and one decode engine")
    if prefill.spec is not decode.spec and prefill.spec.name != decode.spec.name:
        raise InputError("--topology", "model", "prefill and decode engines must serve the same model")
    if any(r.osl < 2 for p in workload.phases for r in p.requests):
        raise InputError("--osl", "osl", "a disaggregated request decodes at least one token after prefill")
    template = decode.config.template_tokens
    max_len = config.max_model_len or (workload.max_len + template)
    clock = Clock()
    p_pool = _Pool("prefill", n_prefill, prefill, config, efficiency, max_len, costs[0], clock)
    d_pool = _Pool("decode", n_decode, decode, config, efficiency, max_len, costs[1], clock)
    for core in p_pool.cores:
        for sched in core.ranks:
            sched.hold_finished = True
    gpus_p = n_prefill * prefill.topology.gpus
    gpus_d = n_decode * decode.topology.gpus
    if link is None:
        link = pool_link(prefill.gpu, decode.gpu, gpus_p + gpus_d)
    ec = decode.config
    transfer_cache: dict[int, float] = {}

    def transfer_seconds(isl: int) -> float:
        if isl not in transfer_cache:
            transfer_cache[isl] = request_transfer(
                decode.spec, prefill.topology, decode.topology, link, isl=isl, osl=max(1, max_len - isl),
                kv_cache_dtype=ec.kv_cache_dtype, vllm=ec.vllm,
                num_speculative_tokens=decode.mtp_tokens or ec.num_speculative_tokens, efficiency=efficiency.link,
                speculative_model=ec.speculative_model, decode_context_parallel_size=ec.decode_context_parallel_size,
            ).seconds
        return transfer_cache[isl]

    prefill_of: dict[str, SimRequest] = {}  # decode request id -> its prefill request

    def arrive(request: SimRequest, t: float) -> None:
        if template:
            request.num_prompt_tokens += template
            if request.prefix_id is not None:
                request.prefix_len += template
        p = SimRequest(request.rid + "/p", request.num_prompt_tokens, 1, index=request.index,
                       prefix_id=request.prefix_id, prefix_len=request.prefix_len)
        p.warmup = request.warmup
        p.t_send = request.t_send
        p.partner = request
        prefill_of[request.rid] = p
        p_pool.route(p, t)

    def prefill_finished(p: SimRequest, t: float) -> None:
        """The prefill engine's token is back at the proxy: the decode request goes to a decode engine."""
        p_pool.done(p)
        d = p.partner
        assert d is not None
        d.prefill_done_at = t
        d.remote_prefill = True
        d.transfer_s = transfer_seconds(d.num_prompt_tokens)
        d_pool.route(d, t)

    def load_started(core: EngineCore, rank: int, rid: str, start: float) -> None:
        d = core.ranks[rank].requests[rid]
        clock.at(start + d.transfer_s, load_done, core, d)

    def load_done(core: EngineCore, d: SimRequest) -> None:
        d.kv_ready = True
        p = prefill_of.pop(d.rid)
        p_core, p_sched = p_pool.scheduler_of(p)
        p_sched.release(p.rid)  # finished_sending: the prefill engine frees the prompt's blocks
        if p_core.asleep:
            clock.wake(p_core, clock.now)
        if core.asleep:
            clock.wake(core, clock.now)

    clients = Clients(clock, workload, efficiency.request_overhead_s, arrive, overhead_cv=config.overhead_cv,
                      seed=config.seed)

    def decode_finished(d: SimRequest, t: float) -> None:
        d_pool.done(d)
        clients.finished(d, t)

    for core in p_pool.cores:
        core.on_finish = prefill_finished
    for core in d_pool.cores:
        core.on_tokens = on_tokens
        core.on_finish = decode_finished
        core.on_load = load_started
    cores = p_pool.cores + d_pool.cores
    guard = config.max_steps

    def done() -> bool:
        if sum(c.steps for c in cores) > guard:
            raise InputError("simulate", "max_steps", f"the run took more than {guard:,} steps")
        return clients.finished_all

    clients.start()
    clock.run(done)
    if not clients.finished_all:
        raise InputError("simulate", "kv_cache", "requests can never be scheduled (a prompt needs more KV blocks "
                         "than a prefill or decode engine holds)")
    meta = {
        "label": workload.label, "model": decode.spec.name, "gpu": decode.gpu.name, "mode": "disagg",
        "topology": f"{n_prefill}x{prefill.topology.name}:{n_decode}x{decode.topology.name}",
        "prefill_topology": prefill.topology.name, "decode_topology": decode.topology.name,
        "n_prefill_workers": n_prefill, "n_decode_workers": n_decode, "gpus_prefill": gpus_p, "gpus_decode": gpus_d,
        "mtp_tokens": decode.mtp_tokens, "isl": common_value(r.isl for r in workload.main.requests),
        "osl": common_value(r.osl for r in workload.main.requests), "concurrency": workload.concurrency,
        "max_model_len": max_len, "link": link.name, "async_scheduling": config.async_scheduling,
        "kv_blocks": {c.name: (p_pool if c in p_pool.cores else d_pool).setup.layout.num_blocks * len(c.ranks)
                      for c in cores},
        "kv_blocks_per_rank": d_pool.setup.layout.num_blocks,
        "kv_transfer_ms": {isl: 1000 * s for isl, s in sorted(transfer_cache.items())},
        "request_overhead_s": efficiency.request_overhead_s,
    }
    result = SimResult(
        records=request_records(clients.records, template), duration_s=clients.main_end - clients.main_start,
        gpus=gpus_p + gpus_d, timelines={c.name: c.timeline for c in cores},
        preemptions=sum(s.num_preemptions for c in cores for s in c.ranks), steps=sum(c.steps for c in cores),
        meta=meta, warmup_requests=clients.warmups,
        notes=p_pool.setup.notes + ["prefill engines hold a prompt's blocks until its KV transfer ends"],
        cost=(p_pool.cost, d_pool.cost),
    )
    return result


__all__ = ["Callable", "simulate_disagg"]
