"""ModelSpec from config.json: the article's model, the bundled real configs, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdtune.errors import InputError
from pdtune.model import LayerKind, bundled_models, load_model, spec_from_config
from pdtune.paramcount import count_parameters, weight_bytes
from pdtune.units import GiB

BUNDLED = ["qwen3.8-2.4t", "qwen3-next-80b-a3b", "deepseek-v3", "llama-3.1-70b", "nemotron-nano-9b-v2", "gpt-oss-120b"]


def test_every_required_model_is_bundled() -> None:
    assert set(BUNDLED) <= set(bundled_models())


def test_article_model_layers_and_state_fields() -> None:
    m = load_model("qwen3.8-2.4t")
    assert m.count(LayerKind.GDN) == 69 and m.count(LayerKind.FULL_ATTENTION) == 23
    assert m.layer_kinds[3] is LayerKind.FULL_ATTENTION and m.layer_kinds[0] is LayerKind.GDN
    assert m.attention is not None and (m.attention.num_kv_heads, m.attention.head_dim) == (4, 256)
    assert m.gdn is not None
    assert (m.gdn.num_k_heads, m.gdn.num_v_heads, m.gdn.head_k_dim, m.gdn.head_v_dim, m.gdn.conv_kernel) == (
        16, 128, 128, 128, 4)
    assert m.moe is not None and m.moe.num_experts == 512 and all(m.moe_layers)
    assert m.mamba_ssm_dtype == "bfloat16"


def test_article_model_reproduces_the_published_weight_totals() -> None:
    """The derived dimensions (README) must give the article's 60 / 19 / 91 / 1242 GiB."""
    m = load_model("qwen3.8-2.4t")
    w = weight_bytes(m, count_parameters(m).main).by_component
    gdn = w["gdn"] / GiB
    attention = (w["attention"] + w["attention_kv"]) / GiB
    non_expert = (sum(w.values()) - w["experts"]) / GiB
    experts = w["experts"] / GiB
    assert gdn == pytest.approx(60, abs=0.5)
    assert attention == pytest.approx(19, abs=0.5)
    assert non_expert == pytest.approx(91, abs=0.5)
    assert experts == pytest.approx(1242, rel=0.005)
    assert count_parameters(m).main.total == pytest.approx(2.4e12, rel=0.01)


def test_qwen3_next_follows_full_attention_interval() -> None:
    m = load_model("qwen3-next-80b-a3b")
    assert m.num_layers == 48
    assert m.count(LayerKind.FULL_ATTENTION) == 12 and m.count(LayerKind.GDN) == 36
    assert [i for i, k in enumerate(m.layer_kinds) if k is LayerKind.FULL_ATTENTION][:3] == [3, 7, 11]
    assert m.gdn is not None and m.gdn.conv_dim == 128 * 16 * 2 + 128 * 32
    # 80B total, 3B active: the name is the check.
    params = count_parameters(m)
    assert params.main.total == pytest.approx(80e9, rel=0.03)
    # "A3B": about 3 B active parameters besides the embeddings
    assert params.active_per_token - params.main.embedding == pytest.approx(3e9, rel=0.1)


def test_nemotron_pattern() -> None:
    m = load_model("nemotron-nano-9b-v2")
    assert m.count(LayerKind.MAMBA2) == 27 and m.count(LayerKind.FULL_ATTENTION) == 4
    assert m.count(LayerKind.MLP) == 25
    assert m.mamba is not None and (m.mamba.num_heads, m.mamba.head_dim, m.mamba.n_groups) == (128, 80, 8)
    assert count_parameters(m).main.total == pytest.approx(9e9, rel=0.05)


def test_deepseek_v3_is_mla() -> None:
    m = load_model("deepseek-v3")
    assert m.count(LayerKind.MLA) == 61
    assert m.mla is not None and m.mla.latent_dim == 576
    assert m.num_mtp_layers == 1
    assert sum(m.moe_layers) == 58  # first_k_dense_replace = 3
    assert count_parameters(m).main.total == pytest.approx(671e9, rel=0.005)  # 671 B besides the MTP module


def test_gpt_oss_alternates_sliding_and_full() -> None:
    m = load_model("gpt-oss-120b")
    assert m.count(LayerKind.SLIDING_ATTENTION) == 18 and m.count(LayerKind.FULL_ATTENTION) == 18
    assert m.attention is not None and m.attention.sliding_window == 128
    assert count_parameters(m).main.total == pytest.approx(117e9, rel=0.03)


def test_llama_is_dense_gqa() -> None:
    m = load_model("llama-3.1-70b")
    assert m.count(LayerKind.FULL_ATTENTION) == 80
    assert m.attention is not None and (m.attention.num_heads, m.attention.num_kv_heads) == (64, 8)
    assert count_parameters(m).main.total == pytest.approx(70.6e9, rel=0.01)


def test_model_named_by_folder_or_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = load_model("qwen3.8-2.4t").source
    by_file = load_model(src)
    by_folder = load_model(Path(src).parent)
    assert by_file.layer_kinds == by_folder.layer_kinds
    assert by_file.name == by_folder.name == Path(src).parent.name
    # A bare "config.json" in the working folder is named for that folder (its relative parent is "", which
    # left a plan's errors saying "the smallest deployment of  on b200").
    folder = tmp_path / "my-moe"
    folder.mkdir()
    (folder / "config.json").write_text(Path(src).read_text())
    monkeypatch.chdir(folder)
    assert load_model("config.json").name == "my-moe"


# --- bad input: one clear InputError naming the file and the field ---------------------------------------

BASE = {
    "model_type": "llama",
    "hidden_size": 1024,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "intermediate_size": 4096,
    "vocab_size": 1000,
}


def _write(tmp_path: Path, cfg: object, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(cfg) if not isinstance(cfg, str) else cfg, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"num_hidden_layers": None}, "num_hidden_layers"),
        ({"model_type": "bert"}, "model_type"),
        ({"hidden_size": -4}, "hidden_size"),
        ({"num_key_value_heads": 3}, "num_key_value_heads"),
        ({"torch_dtype": "float128"}, "torch_dtype"),
        ({"vocab_size": "many"}, "vocab_size"),
    ],
)
def test_bad_config_names_file_and_field(tmp_path: Path, change: dict[str, object], field: str) -> None:
    cfg = {k: v for k, v in {**BASE, **change}.items() if v is not None}
    path = _write(tmp_path, cfg)
    with pytest.raises(InputError) as err:
        load_model(path)
    assert err.value.field == field
    assert str(path) in str(err.value)


def test_gdn_config_without_layer_pattern(tmp_path: Path) -> None:
    cfg = json.loads(Path(load_model("qwen3-next-80b-a3b").source).read_text())
    cfg.pop("layer_types", None)
    cfg.pop("full_attention_interval", None)
    with pytest.raises(InputError, match="layer_types"):
        spec_from_config(cfg, source="x.json")


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not valid JSON"):
        load_model(_write(tmp_path, '{"model_type": "llama",'))
    with pytest.raises(InputError, match="must be a JSON object"):
        load_model(_write(tmp_path, "[1, 2]", "list.json"))
    with pytest.raises(InputError, match="no such file"):
        load_model(tmp_path / "missing.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no config.json"):
        load_model(tmp_path / "empty")
    binary = tmp_path / "garbage.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError):
        load_model(binary)


# ------------------------------------------------------------------------------------ families added by issue 11


@pytest.mark.parametrize(("model", "kinds", "params"), [
    # Mistral-7B: embed + lm_head 2 x 32000 x 4096 = 262,144,000; per layer q, o 2 x 4096^2 + k, v 2 x 4096 x 1024
    # + MLP 3 x 4096 x 14336 + 2 norms x 4096 = 218,112,000, x 32 = 6,979,584,000; + final norm 4096
    # = 7,241,732,096 (the published count).
    ("mistral-7b-v0.1", "32 sliding_attention", 7_241_732_096),
    # Mixtral: the same attention, 8 experts x 3 x 4096 x 14336 per layer + router 4096 x 8: 46,702,792,704.
    ("mixtral-8x7b", "32 full_attention", 46_702_792_704),
    ("llama-3.1-8b", "32 full_attention", 8_030_261_248),      # untied 128256 x 4096 head: 8.03 B
    ("qwen3-14b", "40 full_attention", 14_768_307_200),        # Qwen's 14.8 B
    ("jamba-1.5-mini", "4 full_attention, 28 mamba1", 51_570_323_328),  # AI21's 52 B (12 B active)
])
def test_new_families_layers_and_parameters(model: str, kinds: str, params: int) -> None:
    spec = load_model(model)
    assert spec.kinds_summary() == kinds
    assert count_parameters(spec).main.total == params


@pytest.mark.parametrize(("model", "model_type", "text_type"), [
    ("kimi-k2.5", "kimi_k25", "kimi_k2"),
    ("qwen3-vl-32b", "qwen3_vl", "qwen3_vl_text"),
    ("qwen3-vl-235b-a22b", "qwen3_vl_moe", "qwen3_vl_moe_text"),
    ("llama-4-scout-17b-16e", "llama4", "llama4_text"),
])
def test_multimodal_wrappers_read_their_text_model(model: str, model_type: str, text_type: str) -> None:
    spec = load_model(model)
    assert (spec.model_type, spec.text_model_type) == (model_type, text_type)
