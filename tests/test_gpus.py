"""The bundled GPU table: published numbers, dense not sparse, and what torch reports."""

from __future__ import annotations

import pytest

from pdtune.errors import InputError
from pdtune.gpus import bundled_gpus, load_gpu
from pdtune.units import GiB


def test_bundled() -> None:
    assert bundled_gpus() == ["b200", "b300", "gb200", "gb300", "h100", "h200"]


def test_gb300_is_the_articles() -> None:
    g = load_gpu("GB300")
    assert g.memory_total == round(276.62 * GiB)  # the article: "vLLM sees 276.62 GiB"
    assert g.memory_datasheet_gb == 288
    assert g.hbm_bandwidth == 8.0e12
    assert g.dense_flops == {"bf16": 2.5e15, "fp8": 5.0e15, "fp4": 15.0e15}
    assert g.nvlink_bandwidth == 900e9 and g.nvlink_domain == 72


def test_dense_is_half_of_nvidias_sparse_figures() -> None:
    # GB200 NVL72: FP4 1,440 PFLOPS and FP16/BF16 360 PFLOPS with sparsity, for 72 GPUs.
    g = load_gpu("gb200")
    assert g.dense_flops["fp4"] == pytest.approx(1440e15 / 72 / 2)
    assert g.dense_flops["bf16"] == pytest.approx(360e15 / 72 / 2)
    # H100 SXM: BF16 1,979 TFLOPS with sparsity.
    assert load_gpu("h100").dense_flops["bf16"] == pytest.approx(1979e12 / 2, rel=1e-3)


def test_hopper_runs_fp4_weights_at_its_bf16_rate() -> None:
    # vLLM's FP4 kernels on Hopper (Marlin, triton MXFP4) dequantize the weights and multiply in BF16.
    h = load_gpu("h200")
    assert "fp4" not in h.dense_flops
    assert h.peak_flops("fp4") == h.peak_flops("bf16") == 989.5e12
    assert h.peak_flops("fp8") == 1979e12


def test_every_gpu_is_consistent() -> None:
    for name in bundled_gpus():
        g = load_gpu(name)
        # NVIDIA's "GB" figures behave like GiB of physical memory: what torch sees exceeds the figure in
        # 10^9 B on every part here (B200: 178.35 GiB > 180e9 B) but stays below it in GiB (the driver keeps
        # some).
        if g.torch_total_known:
            assert g.memory_datasheet_gb * 1e9 < g.memory_total < g.memory_datasheet_gb * GiB, name
        else:  # no public log prints it: the smaller reading of the datasheet figure
            assert g.memory_total == round(g.memory_datasheet_gb * 1e9), name
        rates = [g.peak_flops(d) for d in ("bf16", "fp8", "fp4") if d in g.dense_flops]
        assert rates == sorted(rates), name  # narrower tensor-core formats are never slower
        assert g.network_bandwidth < g.nvlink_bandwidth, name


def test_b300_is_hgx_blackwell_ultra() -> None:
    # HGX B300 (8 GPUs): FP4 144 PFLOPS sparse / 108 PFLOPS dense, FP8 72 and BF16 36 PFLOPS sparse, 2.3 TB.
    g = load_gpu("b300")
    assert g.dense_flops == {"bf16": 36e15 / 8 / 2, "fp8": 72e15 / 8 / 2, "fp4": 108e15 / 8}
    assert (g.memory_datasheet_gb, g.nvlink_domain, g.network_bandwidth) == (288, 8, 100e9)
    assert not g.torch_total_known


def test_link_beyond_the_nvlink_domain_is_the_nic() -> None:
    b = load_gpu("b200")
    assert b.link_bandwidth(8) == 900e9
    assert b.link_bandwidth(16) == 50e9
    assert load_gpu("gb300").link_bandwidth(64) == 900e9


def test_memory_override_and_errors() -> None:
    assert load_gpu("h100", memory_gib=79.25).memory_total == round(79.25 * GiB)
    with pytest.raises(InputError) as err:
        load_gpu("a100")
    assert err.value.field == "gpu"
    with pytest.raises(InputError):
        load_gpu("h100", memory_gib=0)
    with pytest.raises(InputError):
        load_gpu("h100").peak_flops("int3")
