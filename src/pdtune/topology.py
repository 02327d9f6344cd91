"""Parallel topologies by name: ``TP4DP2+EP``, ``TEP8``, ``TP1PP6+EP``, and xPyD ``3xTP2DP4+EP:1xTEP8``.

The article names every engine layout by its parallel sizes. The grammar, case-insensitive:

==============  =====================================================================================
``TP<n>``       tensor parallelism of attention (and of dense layers); default 1
``DP<n>``       data-parallel attention ranks; default 1
``PP<n>``       pipeline stages; default 1
``+EP``         experts split over all ``TP x DP`` ranks of a stage (expert parallelism)
``+EP<n>``      experts split into ``n`` expert-parallel groups, each expert sliced over the
                ``TP x DP / n`` GPUs of its group (MoE-TP x MoE-EP, as TensorRT-LLM and SGLang run it)
``TEP<n>``      shorthand for ``TP<n>+EP``: TP-``n`` attention with ``EP<n>`` experts
==============  =====================================================================================

Without ``+EP`` the experts of an MoE layer are TP-sharded instead: each GPU holds a slice of every expert,
which costs the same bytes per GPU (vLLM shards them over ``TP x DP`` ranks when ``DP > 1``). Pipeline stages
never share experts, so ``TP1PP6+EP`` is one expert shard per stage: ``+EP`` there changes nothing, and the
article writes it only because the flag was passed.

A disaggregated (xPyD) deployment is ``<x>x<prefill topology>:<y>x<decode topology>``; the counts default
to 1, whitespace is ignored, ``×`` may stand for ``x``, and the decode side may end in ``+MTP`` (as chart
labels write it).
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field

from pdtune.errors import InputError

#: How pdtune names layouts and deployments, in words: ``pdtune plan --help`` prints it and the book's glossary
#: holds the same text (its entry "layout notation"; a test keeps the two equal).
LAYOUT_NOTATION = (
    "Layouts are named by their parallel sizes. "
    "TPn is tensor parallelism over n GPUs: the attention heads and dense layers are split n ways. "
    "DPn is n data-parallel attention ranks, each with requests of its own. "
    "PPn is n pipeline stages. "
    "A trailing +EP splits the experts of every MoE layer whole over all TP x DP ranks (expert parallelism); "
    "without it each GPU holds a slice of every expert. "
    "TEPn is TPn+EP: n-way tensor-parallel attention with the experts spread over the same n GPUs. "
    "So TP4DP2+EP is one engine on 8 GPUs, two data-parallel ranks of TP4 attention with the experts split over "
    "all 8; DP8+EP is 8 GPUs that each run their own attention rank, the experts split over the 8; TEP64 is one "
    "64-GPU engine. "
    "A disaggregated deployment is written 4xA : 1xB, four prefill engines of layout A feeding one decode engine "
    "of layout B (xPyD, here 4P1D), ending in +MTP when decode drafts tokens with the model's MTP module. "
    "An aggregated deployment is written 4xA, four replicas of one vllm serve server of layout A, each "
    "prefilling and decoding its own requests. "
    "More examples: TP2DP4+EP is 8 GPUs, four data-parallel ranks of TP2 attention; TP1PP6+EP is 6 GPUs in six "
    "pipeline stages of one GPU (stages share no experts, so +EP changes nothing there); TEP8 is TP8+EP on 8 GPUs; "
    "4xTP2DP4+EP : 1xTP4DP4+EP is four 8-GPU prefill engines feeding one 16-GPU decode engine, 48 GPUs in all."
)


def layout_notation(width: int = 110) -> str:
    """:data:`LAYOUT_NOTATION` wrapped for a terminal."""
    return textwrap.fill(LAYOUT_NOTATION, width=width, break_on_hyphens=False, break_long_words=False)


_COMPONENT = re.compile(r"(TEP|TP|DP|PP)(\d+)")


@dataclass(frozen=True)
class Topology:
    """One engine's parallel layout; ``name`` is how it was written, upper-cased (not compared)."""

    tp: int = 1
    dp: int = 1
    pp: int = 1
    expert_parallel: bool = False
    name: str = field(default="", compare=False)
    ep_size: int | None = None  # expert-parallel groups when fewer than TP x DP (``+EP<n>``); None: all

    def __post_init__(self) -> None:
        for key in ("tp", "dp", "pp"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(self.name or "topology", key, f"must be a whole number >= 1, got {value!r}")
        if self.ep_size is not None:
            size = self.ep_size
            if isinstance(size, bool) or not isinstance(size, int) or size < 1 or self.gpus_per_stage % size:
                raise InputError(
                    self.name or "topology",
                    "ep",
                    f"EP{size} must divide the {self.gpus_per_stage} GPUs of a stage (TP x DP)",
                )
            # One spelling per layout: EP over all ranks is plain +EP, EP1 is no expert parallelism.
            if size == self.gpus_per_stage:
                object.__setattr__(self, "ep_size", None)
                object.__setattr__(self, "expert_parallel", True)
            elif size == 1:
                object.__setattr__(self, "ep_size", None)
                object.__setattr__(self, "expert_parallel", False)
            else:
                object.__setattr__(self, "expert_parallel", True)
        if not self.name:
            object.__setattr__(self, "name", self.canonical)

    @property
    def gpus(self) -> int:
        return self.tp * self.dp * self.pp

    @property
    def gpus_per_stage(self) -> int:
        return self.tp * self.dp

    @property
    def ep(self) -> int:
        """Expert-parallel size: GPUs one stage's experts are split over as whole experts (1 without EP)."""
        if not self.expert_parallel:
            return 1
        return self.ep_size if self.ep_size is not None else self.tp * self.dp

    @property
    def moe_tp(self) -> int:
        """GPUs each routed expert is sliced over: ``TP x DP / EP`` (all of them without EP)."""
        return self.gpus_per_stage // self.ep

    @property
    def expert_shards(self) -> int:
        """GPUs one stage's expert bytes are spread over, whole (EP) or sliced (TP): always ``TP x DP``."""
        return self.tp * self.dp

    @property
    def canonical(self) -> str:
        """A name that parses back to this topology (``TEP8`` for TP8 with EP and nothing else)."""
        if self.expert_parallel and self.dp == 1 and self.pp == 1 and self.tp > 1 and self.ep_size is None:
            return f"TEP{self.tp}"
        parts = []
        if self.tp > 1 or (self.dp == 1 and self.pp == 1) or self.pp > 1:
            parts.append(f"TP{self.tp}")
        if self.dp > 1:
            parts.append(f"DP{self.dp}")
        if self.pp > 1:
            parts.append(f"PP{self.pp}")
        suffix = "" if not self.expert_parallel else f"+EP{self.ep_size}" if self.ep_size else "+EP"
        return "".join(parts) + suffix

    def __str__(self) -> str:
        return self.name


def parse_topology(text: str, source: str = "--topology") -> Topology:
    """``TP4DP2+EP`` -> Topology(tp=4, dp=2, pp=1, expert_parallel=True); a bad name is an InputError."""
    if not isinstance(text, str):
        raise InputError(source, "topology", f"expected a name such as TP4DP2+EP, got {text!r}")
    name = re.sub(r"\s+", "", text).upper()
    if not name:
        raise InputError(source, "topology", "empty name; expected e.g. TP4DP2+EP, TEP8 or TP1PP6+EP")
    body, expert_parallel, ep_size = name, False, None
    ep_match = re.search(r"\+EP(\d*)$", body)
    if ep_match:
        body, expert_parallel = body[: ep_match.start()], True
        if ep_match.group(1):
            ep_size = int(ep_match.group(1))
            if ep_size < 1:
                raise InputError(source, "topology", f"{text!r}: EP{ep_match.group(1)} must be at least 1")
    pos = 0
    sizes: dict[str, int] = {}
    for match in _COMPONENT.finditer(body):
        if match.start() != pos:
            break
        key, digits = match.group(1), match.group(2)
        if key in sizes or (key == "TEP" and "TP" in sizes) or (key == "TP" and "TEP" in sizes):
            raise InputError(source, "topology", f"{text!r}: {key} given twice")
        value = int(digits)
        if value < 1:
            raise InputError(source, "topology", f"{text!r}: {key}{digits} must be at least 1")
        sizes[key] = value
        pos = match.end()
    if pos != len(body) or not sizes:
        bad = body[pos:] or name
        raise InputError(
            source,
            "topology",
            f"{text!r}: cannot read {bad!r}; expected TP<n>, DP<n>, PP<n> (any subset, once each) and an "
            "optional +EP or +EP<n>, or TEP<n>",
        )
    if "TEP" in sizes:
        if expert_parallel:
            raise InputError(source, "topology", f"{text!r}: TEP already means expert parallelism; drop +EP")
        return Topology(sizes["TEP"], sizes.get("DP", 1), sizes.get("PP", 1), True, name)
    return Topology(
        sizes.get("TP", 1), sizes.get("DP", 1), sizes.get("PP", 1), expert_parallel, name, ep_size
    )


@dataclass(frozen=True)
class Deployment:
    """``n_prefill`` prefill engines and ``n_decode`` decode engines (xPyD)."""

    prefill: Topology
    n_prefill: int
    decode: Topology
    n_decode: int
    decode_mtp: bool = False  # the name ended in +MTP

    @property
    def gpus_prefill(self) -> int:
        return self.n_prefill * self.prefill.gpus

    @property
    def gpus_decode(self) -> int:
        return self.n_decode * self.decode.gpus

    @property
    def gpus_total(self) -> int:
        return self.gpus_prefill + self.gpus_decode

    @property
    def label(self) -> str:
        mtp = "+MTP" if self.decode_mtp else ""
        return f"{self.n_prefill}x{self.prefill.name}:{self.n_decode}x{self.decode.name}{mtp}"

    def __str__(self) -> str:
        return self.label


_SIDE = re.compile(r"^(?:(?P<n>\d+)[X×\*])?(?P<topo>.+)$")


def parse_deployment(text: str, source: str = "--topology") -> Deployment:
    """``3xTP2DP4+EP:1xTEP8`` -> 3 prefill engines of TP2DP4+EP and 1 decode engine of TEP8."""
    if not isinstance(text, str) or text.count(":") != 1:
        raise InputError(
            source,
            "deployment",
            f"{text!r}: expected <x>x<prefill topology>:<y>x<decode topology>, e.g. 3xTP2DP4+EP:1xTEP8",
        )
    prefill_text, decode_text = (re.sub(r"\s+", "", part).upper() for part in text.split(":"))
    mtp = decode_text.endswith("+MTP")
    if mtp:
        decode_text = decode_text[: -len("+MTP")]
    sides = []
    for role, part in (("prefill", prefill_text), ("decode", decode_text)):
        match = _SIDE.match(part)
        if not match:
            raise InputError(source, "deployment", f"{text!r}: the {role} side is empty")
        count = int(match.group("n")) if match.group("n") else 1
        if count < 1:
            raise InputError(source, "deployment", f"{text!r}: {role} engine count must be at least 1")
        sides.append((count, parse_topology(match.group("topo"), source)))
    (n_p, p), (n_d, d) = sides
    return Deployment(p, n_p, d, n_d, mtp)


def is_deployment(text: str) -> bool:
    """Whether ``text`` names an xPyD deployment (it has a ``:``) rather than one engine."""
    return ":" in text


def deployment_layout(label: str) -> tuple[Topology, bool] | None:
    """(layout, MTP) of a single-engine deployment label, or None when it is not a topology name."""
    text = str(label).strip()
    mtp = text.upper().endswith("+MTP")
    if mtp:
        text = text[: -len("+MTP")]
    try:
        return parse_topology(text), mtp
    except InputError:
        return None
