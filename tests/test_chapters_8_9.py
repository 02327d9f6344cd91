"""Chapters 8 (how far to trust a prediction) and 9 (plan before you measure) as lessons: their shape, their
glue, and every takeaway checked against the values of the table it sums up.

Fast checks read the MyST sources: the label above the title, the time line, the question, three "what you'll
learn" bullets, a labelled equation's section closing on a takeaway, two exercises with folded solutions,
"where this goes next", and every key the prose quotes glued by the page's code. The takeaways of chapter 8 read
the shipped scorecard, the same for every parameter set, so the wording they choose is checked on it here.

Slow checks read the executed pages (``tests/chapter_runs.py``): for the article's parameters (the book build)
each takeaway's glued numbers equal the package's, recomputed here from the frames the pages show; for the
workbook sets with an HTML book, the numbers a takeaway states agree with the table values glued beside them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jupytext
import pytest

from chapter_runs import HTML_SETS, Runs, group
from conftest import article_scenario
from pdtune.chapters import plan as ch9
from pdtune.chapters import trust as ch8

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
#: Every page of chapters 8 and 9 and the (label)= above its title.
PAGES = {"08_trust": "trust", "08_trust_regimes": "trust-regimes", "08_trust_calibration": "trust-calibration",
         "09_plan": "plan", "09_plan_transfer": "plan-transfer", "09_plan_launch": "plan-launch"}
#: Labels and equations other pages (and the course plan) name, which a split must keep.
KEPT = {"08_trust": ("(trust)=", "$$ (trust-error)"), "09_plan": ("(plan)=", "$$ (plan-budget)"),
        "09_plan_transfer": ("$$ (plan-transfer)", ":label: plan-ex-link"),
        "09_plan_launch": (":label: plan-ex-budget",), "08_trust_calibration": (":label: trust-ex-peer",)}
GLUED_AS = re.compile(r"\{glue:(?:text|md)\}`([\w.-]+)(?::[^`]*)?`")


def _text(page: str) -> str:
    return (NOTEBOOKS / f"{page}.md").read_text(encoding="utf-8")


def _code(page: str) -> str:
    return "\n".join(c.source for c in jupytext.read(NOTEBOOKS / f"{page}.md").cells if c.cell_type == "code")


@pytest.mark.parametrize(("page", "label"), PAGES.items())
def test_each_page_is_a_lesson(page: str, label: str) -> None:
    text = _text(page)
    assert re.search(rf"^\({label}\)=\n# \S", text, re.M), "label line right above the title"
    paragraphs = text.split("\n# ", 1)[1].split("\n\n")[1:]
    assert re.fullmatch(r"\*Time: \d+ min reading, \d+ min exercises\.\*", paragraphs[0])
    assert paragraphs[1].split("\n")[0].rstrip().endswith("?"), "the first sentence is the page's question"
    learn = text.split("**What you'll learn**", 1)[1].split("\n## ", 1)[0]
    assert len(re.findall(r"^- ", learn, re.M)) == 3
    assert "Llama-3.1-70B" in text.split("## Exercises", 1)[0], "a dense model is worked on the page"
    assert text.count("```{admonition} Takeaway") >= 1
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        if re.search(r"^\$\$ \(", section, re.M):
            assert "```{admonition} Takeaway" in section, section.splitlines()[0]
    assert len(re.findall(r"^```\{exercise-start\}", text, re.M)) >= 2
    assert text.count("```{solution-start}") == text.count("```{exercise-start}")
    assert text.count(":class: dropdown") >= text.count("```{solution-start}")
    assert "## Where this goes next" in text
    for kept in KEPT.get(page, ()):
        assert kept in text, kept


@pytest.mark.parametrize("page", PAGES)
def test_every_quoted_key_is_glued_by_the_page(page: str) -> None:
    code = _code(page)
    single = set(re.findall(r"glue(?:_markdown)?\(\s*f?\"([\w.{}-]+)\"", code))
    prefixes = set(re.findall(r"glue_numbers\(\s*\"([\w-]+)\"", code))
    loops = {k.split("{")[0] for k in single if "{" in k}  # glue(f"trust-regime-{r}", ...)
    missing = [key for key in GLUED_AS.findall(_text(page)) if key not in single
               and not any(key.startswith(f"{p}-") for p in prefixes) and not any(key.startswith(p) for p in loops)]
    assert missing == []


def test_chapter_8s_takeaways_hold_on_the_shipped_scorecard() -> None:
    """The scorecard is the same for every parameter set, so what the takeaways' wording asserts is checked on
    it once: TTFT misses more than TPOT, the top concurrency band is the worst, dense is closer than MoE,
    calibration lowers the median TTFT error for most pairs, and its 90th percentile by a smaller share ("the typical
    TTFT more than its tail")."""
    card = ch8.scorecard()
    overall = ch8.validation_table(card).set_index("model").loc["all"]
    assert overall["ttft_median_error_pct"] > overall["tpot_median_error_pct"]
    assert ch8.worked_row(card)["error_pct"] < 0  # "the model thinks the deployment faster than it is"
    assert overall["tpot_p90_error_pct"] > 2 * overall["tpot_median_error_pct"]  # "a tail" worth naming
    bands = ch8.regime_table(card, "concurrency").set_index("concurrency")
    assert bands.index[-1] == "512 and more"
    assert bands["ttft_median_error_pct"].idxmax() == bands.index[-1]
    arch = ch8.regime_table(card, "architecture").set_index("architecture")["tpot_median_error_pct"]
    assert arch["dense"] < arch["MoE"]
    h, gains = ch8.headline(card), ch8.calibration_gains(card)
    assert gains["ttft"] > gains["scored"] / 2
    assert h["calibrated-ttft-median"] < 0.8 * h["lomo-ttft-median"]  # the typical TTFT moves ...
    # ... "more than its tail": the 90th percentile falls by a smaller share, "still more than twice the median"
    assert h["calibrated-ttft-p90"] / h["lomo-ttft-p90"] > h["calibrated-ttft-median"] / h["lomo-ttft-median"]
    assert h["calibrated-ttft-p90"] > 2 * h["calibrated-ttft-median"]


def takeaway_problems(g: dict[str, Any]) -> list[str]:
    """What the takeaways of chapters 8 and 9 state, against the table values glued beside them (one run)."""
    found = []

    def same(name: str, value: Any, expected: Any) -> None:
        if value != pytest.approx(expected, rel=1e-9):
            found.append(f"{name}: {value!r} against {expected!r}")

    same("trust-takeaway-ttft-ratio", g["trust-takeaway-ttft-ratio"],
         g["trust-lomo-ttft-median"] / g["trust-lomo-tpot-median"])
    same("trust-takeaway-tail", g["trust-takeaway-tail"], g["trust-lomo-tpot-p90"] / g["trust-lomo-tpot-median"])
    same("trust-worked-page_error_pct", g["trust-worked-page_error_pct"], g["trust-worked-error_pct"])
    if g["trust-fold-scored"] < 1:
        found.append("the worked row's fold holds no deployment")
    same("plan-picks-kept", g["plan-picks-kept"], g["plan-picks-high-tps"] / g["plan-picks-low-tps"])
    same("plan-seqs", g["plan-seqs-page"], g["plan-seqs-recipe"])
    same("plan-link-ratio", g["plan-link-ratio"], g["plan-link-nic-ms"] / g["plan-link-nvlink-ms"])
    same("plan-dense-link-nic-share", g["plan-dense-link-nic-share"],
         g["plan-dense-link-nic-ms"] / (g["plan-dense-link-prefill-ms"] + g["plan-dense-link-nic-ms"]))
    if not 0 <= g["plan-largest-share"] <= 1:
        found.append(f"plan-largest-share {g['plan-largest-share']!r} is not a share")
    if not g["plan-dense-counts"] >= 1:
        found.append("the dense example's budget allows no engine counts")
    return found


@pytest.mark.slow
@pytest.mark.xdist_group(group("article"))
def test_every_takeaway_reads_the_values_of_the_table_it_summarises(runs: Runs) -> None:
    """The article's pages (the book build): each takeaway's numbers are the package's, recomputed here from the
    frames the pages show (the validation, regime and calibration tables; the plan's picks and transfers)."""
    g = runs["article"].glued
    assert takeaway_problems(g) == []
    card = ch8.scorecard()
    overall = ch8.validation_table(card).set_index("model").loc["all"]
    assert g["trust-takeaway-tail"] == pytest.approx(overall["tpot_p90_error_pct"] / overall["tpot_median_error_pct"])
    bands = ch8.regime_table(card, "concurrency").set_index("concurrency")["ttft_median_error_pct"]
    assert g["trust-top-band-ratio"] == pytest.approx(bands.iloc[-1] / bands.iloc[:-1].max())
    assert (g["trust-gains-ttft"], g["trust-gains-tpot"]) == (ch8.calibration_gains(card)["ttft"],
                                                            ch8.calibration_gains(card)["tpot"])
    s = article_scenario().to_dict()
    common = {k: s[k] for k in ("model", "weights", "gpu", "isl", "osl", "kv_cache_dtype", "gpu_memory_utilization",
                                "num_speculative_tokens", "mtp_acceptance", "speculative_model",
                                "decode_context_parallel_size", "calibration", "plan")}
    p = ch9.timed_plan(ch9.plan_settings(**common), ch9.plan_slas(common["plan"])).plan
    picks = ch9.picks_frame(p)
    assert g["plan-picks-kept"] == pytest.approx(picks["tps_per_gpu"].iloc[-1] / picks["tps_per_gpu"].iloc[0])
    shares = ch9.transfer_table(p)["share_of_ttft_max"]
    assert g["plan-largest-share"] == pytest.approx(float(shares.max()))


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xdist_group(group(n))) for n in HTML_SETS])
def test_takeaways_agree_with_their_tables_for_other_models(runs: Runs, name: str) -> None:
    assert takeaway_problems(runs[name].glued) == []
