"""Each layer's KV cache spec on one TP rank: ``get_kv_cache_spec`` of vLLM 0.33's attention and Mamba layers.

Attention (``layers/attention/attention.py``): ``max(1, kv_heads // tp)`` heads per rank (vLLM replicates
heads once TP exceeds them), ``head_size`` from the config, the page layout of the KV dtype
(:mod:`pdtune.state.dtypes`). MLA (``mla_attention.py``): one head of ``kv_lora_rank + qk_rope_head_dim``,
the same on every rank. Recurrent states (``layers/mamba/mamba_utils.py``, ``MambaStateShapeCalculator``):

- GDN ``gated_delta_net_state_shape``: conv ``(k - 1 + spec, (2 nk dk + nv dv) / tp)``, SSM ``(nv / tp, dv, dk)``
- Mamba2 ``mamba2_state_shape``: conv ``(k - 1 + spec, (I + 2 G' N) / tp)``, SSM ``(H / tp, P, N)``, with
  ``G' = G`` or ``tp`` when the groups do not divide (``extra_groups_for_head_shards``)
- Mamba1 ``mamba1_state_shape``: conv ``(k - 1, I / tp)``, SSM ``(I / tp, N)`` (no speculative rows)
- KDA ``kda_state_shape``: conv ``(k - 1 + spec, 3 H D / tp)`` (speculative rows where the line has them), recurrent ``(H / tp, D, D)`` in float32
- short conv ``short_conv_state_shape``: conv ``(L - 1 + spec, conv_dim / tp)``

Conv states are in ``mamba_cache_dtype`` (auto: the model dtype), SSM states in ``mamba_ssm_cache_dtype``
(auto: the conv dtype; NemotronH float32, KDA float32).
"""

from __future__ import annotations

from dataclasses import dataclass

from pdtune.errors import InputError
from pdtune.model.spec import DTYPE_BYTES, CacheLayer, LayerKind, ModelSpec
from pdtune.state.dtypes import KVDtype
from pdtune.state.semantics import Semantics
from pdtune.state.specs import AttentionPage, MLAPage, PageSpec, RecurrentPage


@dataclass(frozen=True)
class Slot:
    """One layer of the combined stack (target, then draft), with its spec."""

    index: int
    page: PageSpec
    draft: bool = False


def state_dtype(spec: ModelSpec, name: str, source: str) -> int:
    if name == "auto":
        return spec.dtype_bytes
    key = name.lower()
    if key not in DTYPE_BYTES:
        raise InputError(source, source.lstrip("-").replace("-", "_"), f"unknown dtype {name!r}")
    return DTYPE_BYTES[key]


def check_tensor_parallel(spec: ModelSpec, tp: int) -> None:
    """The one TP rule every model meets, MLA and hybrids included: vLLM 0.33's
    ``ModelConfig.verify_with_parallel_config`` (``config/model.py``) refuses a ``tensor_parallel_size`` that
    does not divide ``total_num_attention_heads`` (``hf_text_config.num_attention_heads``, 0 when absent)
    before any layer is built. DeepSeek-V3's 128 heads refuse TP3 as Llama's 64 do."""
    if spec.total_attention_heads % tp:
        raise InputError(spec.source, "num_attention_heads",
                         f"{spec.total_attention_heads} heads do not divide over TP={tp} (vLLM requires it)")


def _divides(spec: ModelSpec, field_name: str, value: int, tp: int) -> None:
    if value % tp:
        raise InputError(spec.source, field_name, f"{value} does not divide over TP={tp}")


def attention_page(spec: ModelSpec, layer: CacheLayer, tp: int, kvd: KVDtype, block: int,
                   dcp: int = 1) -> AttentionPage | MLAPage:
    if layer.kind is LayerKind.MLA:
        m = spec.mla
        if m is None:
            raise InputError(spec.source, "kv_lora_rank", "missing for an MLA layer")
        latent = kvd.mla_bytes_per_token(m.latent_dim)
        indexer = spec.indexer.bytes_per_token if spec.indexer is not None else 0
        return MLAPage(block, m.latent_dim, kvd.element_bytes,
                       latent_bytes_per_token=latent if latent != m.latent_dim * kvd.element_bytes else None,
                       indexer_bytes_per_token=indexer)
    a = spec.attention_for(layer.kind)  # MiMo-V2-Flash's sliding layers have their own heads
    if a is None:
        raise InputError(spec.source, "num_attention_heads", "missing for an attention layer")
    if a.num_heads % tp:
        raise InputError(spec.source, "num_attention_heads", f"{a.num_heads} heads do not divide over TP={tp}")
    if a.num_kv_heads >= tp and a.num_kv_heads % tp:
        raise InputError(spec.source, "num_key_value_heads", f"{a.num_kv_heads} KV heads do not divide over TP={tp}")
    if a.num_kv_heads < tp and tp % a.num_kv_heads:
        raise InputError(spec.source, "num_key_value_heads",
                         f"TP={tp} is not a multiple of {a.num_kv_heads} KV heads (vLLM replicates them evenly)")
    slots, slot_bytes = kvd.attention_head_bytes(a.head_dim, a.v_head_dim)
    plain = slots == 1 and slot_bytes == (a.head_dim + a.v_head_dim) * kvd.element_bytes
    return AttentionPage(
        block_size=block,
        # Below one KV head per rank vLLM replicates heads, so each rank still holds a whole head.
        num_kv_heads=max(1, a.num_kv_heads // tp),
        head_size=a.head_dim,
        dtype_bytes=kvd.element_bytes,
        sliding_window=layer.window if layer.kind is LayerKind.SLIDING_ATTENTION else None,
        chunk_size=layer.window if layer.kind is LayerKind.CHUNKED_ATTENTION else None,
        head_size_v=a.head_dim_v,
        slot_bytes=None if plain else slot_bytes,
        head_slots=slots,
    )


@dataclass(frozen=True)
class StateShapes:
    """A recurrent layer's state tensors, as the layer builds them and as the platform sizes them."""

    page: RecurrentPage
    config_state_bytes: int  # get_mamba_state_shape_from_config: what the hybrid block is aligned to


def recurrent_page(spec: ModelSpec, kind: LayerKind, sem: Semantics, tp: int, num_spec: int,
                   mamba_cache_dtype: str, mamba_ssm_cache_dtype: str, block_size: int) -> StateShapes:
    conv = state_dtype(spec, mamba_cache_dtype, "--mamba-cache-dtype")
    explicit_ssm = mamba_ssm_cache_dtype != "auto"
    ssm = state_dtype(spec, mamba_ssm_cache_dtype, "--mamba-ssm-cache-dtype") if explicit_ssm else conv
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[int, ...]
    config_bytes: int | None = None
    if kind is LayerKind.GDN:
        g = spec.gdn
        assert g is not None
        _divides(spec, "linear_num_value_heads", g.num_v_heads, tp)
        _divides(spec, "linear_num_key_heads", g.num_k_heads, tp)
        if sem.ssm_dtype_configurable and not explicit_ssm and spec.mamba_ssm_dtype:
            ssm = state_dtype(spec, spec.mamba_ssm_dtype, "mamba_ssm_dtype")  # the Qwen3.5 config hook
        elif not sem.ssm_dtype_configurable:
            ssm = conv
        shapes = ((g.conv_kernel - 1 + num_spec, g.conv_dim // tp), (g.num_v_heads // tp, g.head_v_dim, g.head_k_dim))
        dtypes, conv_states = (conv, ssm), 1
    elif kind is LayerKind.MAMBA2:
        m = spec.mamba
        assert m is not None
        _divides(spec, "mamba_num_heads" if spec.model_type == "nemotron_h" else "mamba_n_heads", m.num_heads, tp)
        # Groups that do not divide over TP are replicated up to one per rank (extra_groups_for_head_shards),
        # which MambaMixer2 supports for a single group only (its assertion in layers/mamba/mamba_mixer2.py).
        if m.n_groups % tp and m.n_groups != 1:
            raise InputError(spec.source, "n_groups" if spec.model_type == "nemotron_h" else "mamba_n_groups",
                             f"{m.n_groups} groups do not divide over TP={tp} (vLLM replicates a single group only)")
        n_groups = m.n_groups if m.n_groups % tp == 0 else m.n_groups + tp - m.n_groups
        conv_dim = m.intermediate_size + 2 * n_groups * m.state_size
        _divides(spec, "n_groups", conv_dim, tp)
        if not explicit_ssm and sem.ssm_fp32_for_nemotron and spec.mamba_ssm_cache_dtype_default:
            ssm = state_dtype(spec, spec.mamba_ssm_cache_dtype_default, "mamba_ssm_cache_dtype")
        rows = num_spec if sem.spec_in_recurrent_blocks else 0  # 0.11's Mamba2 conv ignores spec tokens
        shapes = ((m.conv_kernel - 1 + rows, conv_dim // tp), (m.num_heads // tp, m.head_dim, m.state_size))
        dtypes, conv_states = (conv, ssm), 1
    elif kind is LayerKind.MAMBA1:
        m1 = spec.mamba1
        assert m1 is not None
        _divides(spec, "mamba_expand", m1.intermediate_size, tp)
        shapes = ((m1.conv_kernel - 1, m1.intermediate_size // tp), (m1.intermediate_size // tp, m1.state_size))
        dtypes, conv_states = (conv, ssm), 1
    elif kind is LayerKind.KDA:
        k = spec.kda
        assert k is not None
        _divides(spec, "linear_attn_config.num_heads", k.num_heads, tp)
        recurrent = 4
        if explicit_ssm:
            if not sem.kda_ssm_dtype_configurable:
                raise InputError("--mamba-ssm-cache-dtype", "mamba_ssm_cache_dtype",
                                 f"the KDA state is float32 in {sem.label} (configurable from 0.30)")
            if mamba_ssm_cache_dtype not in ("float32", "bfloat16"):
                raise InputError("--mamba-ssm-cache-dtype", "mamba_ssm_cache_dtype",
                                 "KDA recurrent state supports only auto, float32 and bfloat16")
            recurrent = ssm
        proj = k.num_heads * k.head_dim // tp
        state = (k.num_heads // tp, k.head_dim, k.head_dim)
        if sem.kda_fused_conv:  # one q|k|v conv state; its speculative rows only where the line keeps them
            rows = num_spec if sem.kda_conv_spec_rows else 0
            shapes = ((k.conv_kernel - 1 + rows, 3 * proj), state)
            dtypes, conv_states = (conv, recurrent), 1
        else:  # separate q, k, v conv states without speculative rows
            shapes = ((k.conv_kernel - 1, proj),) * 3 + (state,)
            dtypes, conv_states = (conv, conv, conv, recurrent), 3
    elif kind is LayerKind.SHORT_CONV:
        s = spec.short_conv
        assert s is not None
        _divides(spec, "conv_dim", s.conv_dim, tp)
        rows = num_spec if sem.short_conv_spec_rows else 0
        shapes = ((s.l_cache - 1 + rows, s.conv_dim // tp),)
        dtypes, conv_states = (conv,), 1
        # Lfm2ForCausalLM.get_mamba_state_shape_from_config passes no num_spec: the block is sized without it.
        config_bytes = (s.l_cache - 1) * (s.conv_dim // tp) * conv
    else:
        raise InputError(spec.source, "layer_types", f"{kind.value} layers keep no recurrent state")
    page = RecurrentPage(kind, shapes, dtypes, conv_states, block_size)
    return StateShapes(page, config_bytes if config_bytes is not None else page.state_bytes)


def target_layers(spec: ModelSpec) -> list[CacheLayer]:
    return list(spec.cache_layers)


def draft_layers(spec: ModelSpec, count: int) -> list[CacheLayer]:
    """An MTP module's cache layers: one decoder layer of the target's attention kind each."""
    base = spec.num_layers
    kind = spec.attention_kind
    return [CacheLayer(base + j, kind) for j in range(count)]
