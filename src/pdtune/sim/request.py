"""One request as vLLM 0.33's scheduler sees it, and what the simulator records about it.

vLLM's ``Request`` (``vllm/v1/request.py``) carries token ids; the scheduler only ever looks at their counts, so
a :class:`SimRequest` keeps counts: prompt tokens, output tokens, the tokens computed so far, the draft tokens
proposed for the next step, and async scheduling's placeholders for outputs still in flight. The names follow
vLLM's fields so that a rule reads the same in both. Timestamps (seconds of simulated time) are the engine
loop's: when the client sent the request, when the scheduler first saw it, and when each batch of output
tokens reached the client.
"""

from __future__ import annotations

from enum import IntEnum


class Status(IntEnum):
    """``RequestStatus`` (vllm/v1/request.py), the states the simulator uses; finished ones compare above
    PREEMPTED, as there."""

    WAITING = 0
    WAITING_FOR_REMOTE_KVS = 1
    RUNNING = 2
    PREEMPTED = 3
    FINISHED = 4


class SimRequest:
    """A request's scheduling state (vLLM's counters) and its timeline."""

    __slots__ = (
        "rid", "index", "num_prompt_tokens", "max_tokens", "prefix_id", "prefix_len", "num_output_tokens",
        "num_computed_tokens", "num_output_placeholders", "num_in_flight_tokens", "num_stale_output_tokens",
        "drop_stale_output", "spec_tokens", "is_prefill_chunk", "hash_floor", "status", "num_preemptions", "remote_prefill",
        "kv_ready", "rank", "t_send", "t_arrive", "t_first", "t_last", "token_times", "token_counts",
        "pending_send", "client", "warmup", "prefill_done_at", "transfer_s", "target", "partner", "front_scale",
        "park_start", "park_expiry",
    )

    def __init__(self, rid: str, num_prompt_tokens: int, max_tokens: int, *, index: int = 0,
                 prefix_id: int | None = None, prefix_len: int = 0) -> None:
        self.rid = rid
        self.index = index
        self.num_prompt_tokens = num_prompt_tokens
        self.max_tokens = max_tokens
        self.prefix_id = prefix_id  # requests with the same prefix_id share their first prefix_len tokens
        self.prefix_len = prefix_len
        self.num_output_tokens = 0
        self.num_computed_tokens = 0
        self.num_output_placeholders = 0  # async scheduling: outputs scheduled but not yet returned
        self.num_in_flight_tokens = 0  # tokens scheduled in steps whose output is not processed yet
        self.num_stale_output_tokens = 0  # in-flight tokens of a preempted request (delivered, not counted)
        self.drop_stale_output = False
        self.spec_tokens = 0  # len(spec_token_ids): draft tokens (or placeholders) for the next step
        self.is_prefill_chunk = False
        self.hash_floor = 0  # KVCacheManager.cache_blocks hashes nothing new below this many tokens (its cache)
        self.status = Status.WAITING
        self.num_preemptions = 0
        self.remote_prefill = False  # P/D decode side: the prompt's KV comes from a prefill engine
        self.kv_ready = False  # P/D decode side: the KV transfer has finished
        self.rank = 0  # the DP rank (or pool engine) serving it
        # Timeline (seconds of simulated time).
        self.t_send = 0.0  # the client sent it
        self.t_arrive = 0.0  # the scheduler saw it (after the front end's request overhead)
        self.t_first = -1.0  # the first output token reached the client
        self.t_last = -1.0  # the last one did
        self.token_times: list[float] = []  # when each batch of output tokens reached the client
        self.token_counts: list[int] = []  # how many tokens each batch held
        self.pending_send = 0.0
        self.client = -1  # closed loop: the client that sent it
        self.warmup = False  # a warm-up request: simulated, left out of the statistics
        self.prefill_done_at = -1.0  # P/D: when the prefill engine produced its token
        self.transfer_s = 0.0  # P/D: the KV transfer's seconds
        self.target = 0  # the DP target inside its engine (the load balancer's index)
        self.partner: SimRequest | None = None  # P/D: the prefill request of a decode request, and back
        self.front_scale = 1.0  # this request's front-end time over the mean (the spread's draw)
        # Parked (Scheduler.park): the first plan it is counted in without its own entry, -1 when not parked;
        # the plan before which it must be stepped again.
        self.park_start = -1
        self.park_expiry = -1

    @property
    def num_tokens(self) -> int:
        """Prompt plus output tokens (``Request.num_tokens``)."""
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def num_tokens_with_spec(self) -> int:
        return self.num_prompt_tokens + self.num_output_tokens + self.spec_tokens

    def is_finished(self) -> bool:
        return self.status > Status.PREEMPTED

    def __repr__(self) -> str:
        return (f"SimRequest({self.rid!r}, prompt={self.num_prompt_tokens}, out={self.num_output_tokens}/"
                f"{self.max_tokens}, computed={self.num_computed_tokens}, {self.status.name})")
