"""Which engine a request goes to: vLLM's DP load balancer, and round robin between pool engines.

``DPLBAsyncMPClient.get_core_engine_for_request`` (``vllm/v1/engine/core_client.py``, 0.33) scores every DP
engine as ``max(client_count x in-flight requests, waiting + running)``, adds ``6 x waiting x max(0,
KV usage - 0.5)`` to an engine with a queue (a queue on a KV-bound engine drains slowly), takes the lowest
score, scanning from a start index that rotates by one per request so that ties go round robin. vLLM reads
waiting and running from the DP coordinator's snapshot (published every 100 ms); here they are the live
counts, and one API server routes every request (``client_count`` 1). Between the engines of a prefill or a
decode pool, the proxy sends requests round robin (vLLM's ``toy_proxy_server``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


class DPLoadBalancer:
    """vLLM's DP load balancer over ``n`` targets; ``counts(i)`` gives (waiting, running, KV usage) of target i."""

    def __init__(self, n: int, counts: Callable[[int], tuple[int, int, float]], client_count: int = 1) -> None:
        self.n = n
        self.counts = counts
        self.client_count = client_count
        self.inflight = [0] * n
        self.start = 0

    def route(self) -> int:
        if self.n == 1:
            self.inflight[0] += 1
            return 0
        best, best_score = 0, float("inf")
        for i in range(self.n):
            idx = (self.start + i) % self.n
            waiting, running, usage = self.counts(idx)
            score = float(max(self.client_count * self.inflight[idx], waiting + running))
            if waiting:
                score += waiting * 6.0 * max(0.0, usage - 0.5)
            if score < best_score:
                best_score = score
                best = idx
        self.start = (self.start + 1) % self.n
        self.inflight[best] += 1
        return best

    def done(self, target: int) -> None:
        self.inflight[target] -= 1


class RoundRobin:
    """The proxy's round robin over the engines of one pool."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.next = 0

    def route(self) -> int:
        i = self.next
        self.next = (self.next + 1) % self.n
        return i

    def done(self, target: int) -> None:  # noqa: ARG002 - the same interface as DPLoadBalancer
        return None


def targets(sizes: Sequence[int]) -> list[tuple[int, int]]:
    """(engine, rank) for every rank of every engine, in order."""
    return [(e, r) for e, n in enumerate(sizes) for r in range(n)]
