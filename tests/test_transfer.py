"""KV transfer between the pools: bytes per request, re-sharding, the link, the block-size fix."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from pdtune.errors import DataError, InputError
from pdtune.gpus import bundled_gpus, load_gpu
from pdtune.model import load_model
from pdtune.state import plan_state
from pdtune.topology import parse_topology
from pdtune.transfer import (
    NVLINK,
    SCALE_OUT,
    _links,
    block_sizes,
    link_table,
    links_file,
    load_link,
    pool_link,
    request_transfer,
    transfer_bytes,
)
from pdtune.units import MiB

ARTICLE = load_model("qwen3.8-2.4t")


def _transfer(spec: str, p: str, d: str, *, gpu: str = "gb200", scope: str = NVLINK, isl: int = 8192,
              mtp: int = 0):
    return request_transfer(load_model(spec), parse_topology(p), parse_topology(d), load_link(gpu, scope),
                            isl=isl, osl=1024, kv_cache_dtype="fp8", vllm="0.33.0", num_speculative_tokens=mtp)


def test_the_articles_request_is_759_mib_and_its_prompt_664() -> None:
    """Article: 23 attention layers x ceil(tokens / 2112) blocks + 69 GDN layers x 1 block, 4.125 MiB each.

    At ISL + OSL (+ template) = 9216 tokens: 23 x 5 + 69 = 184 blocks = 759 MiB (the article's figure). What
    moves after prefill is the prompt's: 23 x ceil(8192 / 2112) = 23 x 4, + 69 = 161 blocks = 664.125 MiB.
    """
    whole = plan_state(ARTICLE, max_model_len=9216, tp=1, kv_cache_dtype="fp8", vllm="0.11")
    assert transfer_bytes(whole) == 184 * 2112 * 2048 == whole.bytes_per_request
    assert transfer_bytes(whole) / MiB == 759.0
    prompt = plan_state(ARTICLE, max_model_len=8192, tp=1, kv_cache_dtype="fp8", vllm="0.33.0")
    assert transfer_bytes(prompt) == 161 * 2112 * 2048


def test_worked_number_759_mib_over_nvlink_and_over_400_gbps() -> None:
    """759 MiB = 795,869,184 B: at 900 GB/s 0.884 ms (+ 2 µs); at 400 Gb/s = 50 GB/s 15.92 ms (+ 20 µs)."""
    n = 759 * MiB
    assert n == 795_869_184
    nvlink, nic = load_link("gb300", NVLINK), load_link("gb200", SCALE_OUT)
    assert nvlink.bandwidth == 900e9 and nic.bandwidth == 50e9
    assert nvlink.seconds(n) == pytest.approx(n / 900e9 + 2e-6)
    assert 1000 * nvlink.seconds(n) == pytest.approx(0.886, abs=0.001)
    assert 1000 * nic.seconds(n) == pytest.approx(15.92 + 0.02, abs=0.005)  # + 20 µs


def test_gqa_resharding_moves_every_decode_ranks_share() -> None:
    """Llama-3.1-70B, fp8: 8 KV heads x 128 x 2 (K, V) = 2048 B per token per layer, 80 layers, 8192 tokens:
    1280 MiB per request at TP1. TP2 prefill ranks hold 640 MiB each, TP8 decode ranks need 160 MiB each;
    8 x 160 = 1280 MiB cross; the busiest GPU is a prefill rank sending 640 MiB."""
    t = _transfer("llama-3.1-70b", "TP2", "TP8")
    assert t.prefill_bytes_per_rank == 640 * MiB and t.decode_bytes_per_rank == 160 * MiB
    assert t.bytes_total == 1280 * MiB
    assert t.send_bytes_per_gpu == 640 * MiB and t.bottleneck_bytes == 640 * MiB
    back = _transfer("llama-3.1-70b", "TP8", "TP2")  # now a decode rank receives 640 MiB
    assert back.bottleneck_bytes == 640 * MiB and back.bytes_total == 1280 * MiB


def test_mla_latent_is_replicated_so_every_decode_rank_reads_it_whole() -> None:
    """DeepSeek-V3, fp8 MLA: 576 B per token per layer on every rank (no head sharding), 61 layers:
    8192 x 61 x 576 = 287,834,112 B per rank. TP1 -> TP8: 8 copies leave the one prefill GPU."""
    t = _transfer("deepseek-v3", "TP1", "TEP8")
    per_rank = 8192 * 61 * 576
    assert t.prefill_bytes_per_rank == t.decode_bytes_per_rank == per_rank
    assert t.bytes_total == 8 * per_rank and t.send_bytes_per_gpu == 8 * per_rank
    down = _transfer("deepseek-v3", "TEP8", "TP1")
    assert down.send_bytes_per_gpu == per_rank == down.bottleneck_bytes
    with_mtp = _transfer("deepseek-v3", "TEP8", "TEP8", mtp=3)  # the MTP layer's KV moves too: 62 layers
    assert with_mtp.decode_bytes_per_rank == 8192 * 62 * 576


def test_hybrid_block_sizes_differ_with_tp_and_the_fix_is_the_larger() -> None:
    """Qwen3.8: 4 KV heads. TP2: 2 heads and half the GDN state per rank -> the same 2112-token block as TP1;
    TP8: KV heads replicated (1 per rank) while the GDN state is an eighth -> 1056. NIXL needs one: 2112."""
    b = block_sizes(ARTICLE, 2, 8, max_model_len=9216, kv_cache_dtype="fp8", vllm="0.33.0")
    assert (b.prefill, b.decode, b.match, b.to_set) == (2112, 1056, False, 2112)
    same = block_sizes(ARTICLE, 2, 4, max_model_len=9216, kv_cache_dtype="fp8", vllm="0.33.0")
    assert same.match and same.to_set is None
    t = _transfer("qwen3.8-2.4t", "TP2", "TP8", gpu="gb300")
    assert t.blocks.to_set == 2112
    # The forced block is what both sides then use: TP8 pages of 2112 tokens x 512 B.
    forced = plan_state(ARTICLE, max_model_len=8192, tp=8, kv_cache_dtype="fp8", vllm="0.33.0", block_size=2112)
    assert t.decode_bytes_per_rank == transfer_bytes(forced)
    dense = block_sizes(load_model("llama-3.1-70b"), 2, 8, max_model_len=9216, kv_cache_dtype="fp8", vllm="0.33.0")
    assert dense.match


def test_the_link_between_the_pools() -> None:
    gb200, h200, b200 = load_gpu("gb200"), load_gpu("h200"), load_gpu("b200")
    assert pool_link(gb200, gb200, 72).scope == NVLINK  # one NVL72 rack
    assert pool_link(gb200, gb200, 73).scope == SCALE_OUT  # two racks
    assert pool_link(h200, h200, 8).scope == NVLINK  # one HGX board
    mixed = pool_link(b200, h200, 8)
    assert mixed.scope == SCALE_OUT and mixed.bandwidth == 50e9  # GPU kinds never share NVLink
    assert pool_link(h200, h200, 16).bandwidth == 50e9  # two HGX nodes: ConnectX-7, 400 Gb/s


def test_bandwidths_and_domains_come_from_the_gpu_table_only() -> None:
    """One source: links.csv holds names, latencies and sources; NVLink and NIC bandwidths and the NVLink
    domain are gpus.csv's (a change there moves every transfer), and every bundled GPU has both links."""
    header = next(csv.reader(links_file().read_text(encoding="utf-8").splitlines()))
    assert not {"bandwidth_gb_s", "domain_gpus"} & set(header)
    for name in bundled_gpus():
        gpu = load_gpu(name)
        nvlink, nic = load_link(name, NVLINK), load_link(name, SCALE_OUT)
        assert nvlink.bandwidth == gpu.nvlink_bandwidth and nvlink.domain_gpus == gpu.nvlink_domain, name
        assert nic.bandwidth == gpu.network_bandwidth and nic.domain_gpus is None, name
        assert nvlink.source and nic.source, name


def test_bad_links_file_names_the_field(tmp_path: Path) -> None:
    rows = list(csv.reader(links_file().read_text(encoding="utf-8").splitlines()))
    bad = tmp_path / "links.csv"

    def write(edit: tuple[int, int, str]) -> str:
        copy = [list(r) for r in rows]
        copy[edit[0]][edit[1]] = edit[2]
        bad.write_text("\n".join(",".join(f'"{c}"' for c in r) for r in copy), encoding="utf-8")
        return str(bad)

    latency, gpu = rows[0].index("latency_us"), rows[0].index("gpu")
    # a bundled table: the data's fault, not the input's (DataError)
    with pytest.raises(DataError, match=r"links.csv:2: latency_us: expected a number, got 'fast'"):
        _links(write((1, latency, "fast")))
    with pytest.raises(DataError, match=r"links.csv:3: gpu: 'mi300x' is not a GPU of .*gpus.csv"):
        _links(write((2, gpu, "mi300x")))
    with pytest.raises(InputError, match="no scale_out link for GPU 'mi300x'"):
        load_link("mi300x", SCALE_OUT)


def test_link_table_gives_the_worked_number_for_every_link() -> None:
    rows = {(r["gpu"], r["scope"]): r for r in link_table(759 * MiB)}
    assert rows[("gb300", NVLINK)]["ms"] == pytest.approx(0.886, abs=0.001)
    assert rows[("h200", SCALE_OUT)]["ms"] == pytest.approx(15.94, abs=0.005)
    assert rows[("gb300", SCALE_OUT)]["ms"] == pytest.approx(7.98, abs=0.005)  # ConnectX-8, 800 Gb/s
