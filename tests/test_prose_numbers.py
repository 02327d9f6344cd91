"""Every number the prose of chapters 1-4 and 8 prints is computed at build time, or is the article's.

A result of pdtune typed into the markdown goes stale when the code changes, and is wrong when the workbook
re-runs a chapter for another model. So the prose writes such numbers with MyST-NB's ``{glue:text}`` role,
filled from a code cell, and this test scans the chapter sources for digits that are none of:

(a) a number the article publishes: any number in ``data/article/*.csv`` (the cells, and the quotations in
    ``constants.csv``'s ``where_in_article``), the fields of the article's model that the article states
    (:data:`PUBLISHED_CONFIG_FIELDS` of ``data/models/qwen3.8-2.4t/config.json``), ISL + OSL, and the few
    published figures no CSV carries yet (:data:`PUBLISHED_ELSEWHERE`). A number written with a unit
    (B, KiB, MiB, GiB, GB, %) must be published *with that unit*: "60 MiB" fails although table 2 has 60
    graphs;
(b) structural: a vLLM line pdtune follows (the **bold** versions of :mod:`pdtune.state`'s docstring), the
    article's vLLM, and the small integers of :data:`STRUCTURAL` ("1 + K", "0 turns MTP off"), without a unit;
(c) an input an exercise chooses (:data:`EXERCISE_INPUTS`, per chapter);
(d) inside inline math that shows arithmetic: in ``$a \\times b = c$`` the operands before the first
    relation must be allowed by (a)-(c); the results after it may be anything. Exponents are not checked.

Not scanned: the front matter, code cells, ``$$`` blocks, ``(label)=`` lines, directive options, roles
(``{glue:...}``, ``{eq}``, ``{ref}``, ``{doc}``, ``{cite}``, ``{term}``), link targets, and digits that are
part of a word (TP4DP4, GB300, Qwen3.8-2.4T, fp8, 32k).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from pathlib import Path

import pandas as pd
import pytest

from pdtune import article, state, versions
from pdtune.model import LayerKind, load_model
from pdtune.paths import article_dir

ROOT = Path(__file__).resolve().parents[1]
#: Every page of chapters 1-4 and 8-9 (section pages included).
CHAPTERS = tuple(p.stem for p in sorted((ROOT / "notebooks").glob("0[1-4]_*.md"))) + (
    "08_trust", "08_trust_regimes", "08_trust_calibration", "09_plan", "09_plan_transfer", "09_plan_launch")

#: Small integers that count or name things ("1 + K", "0 turns MTP off", "2 KiB" is published separately).
STRUCTURAL = {"0", "1", "2"}

#: Fields of the article's model config that the article states (data/models/qwen3.8-2.4t/README.md,
#: "Published by the article"); the derived ones (hidden size, vocabulary, ...) are not quotable.
PUBLISHED_CONFIG_FIELDS = (
    "num_hidden_layers", "num_key_value_heads", "head_dim", "linear_key_head_dim", "linear_num_key_heads",
    "linear_value_head_dim", "linear_num_value_heads", "linear_conv_kernel_dim", "num_experts",
)

#: Published by the article but not in data/article/*.csv yet: (number, unit or "") -> where.
PUBLISHED_ELSEWHERE: dict[tuple[str, str], str] = {}

#: Inputs an exercise picks: neither the article's nor results, but what the reader is asked about.
EXERCISE_INPUTS: dict[str, set[str]] = {
    "01_state": set(),
    "01_state_hybrid": set(),
    "01_state_vllm": {"32768"},  # a long-context workload
    "02_memory": {"0.02"},  # gpu_memory_utilization raised by 0.02
    "02_memory_weights": set(),
    "02_memory_reserve": {"0.95"},  # run 5 at gpu_memory_utilization 0.95
    "03_graphs": {"1000", "4000"},  # --max-num-seqs 1000
    "03_graphs_estimate": {"60", "1"},  # a 1 GiB first graph, 60 MiB per graph
    "04_concurrency": set(),
    "04_concurrency_layouts": set(),
    "08_trust": set(),
    "08_trust_regimes": set(),
    "08_trust_calibration": set(),
    "09_plan": set(),
    "09_plan_transfer": set(),
    "09_plan_launch": set(),
}

#: The plain dense models chapters 1-4 work by hand first (pdtune.chapters.state.DENSE_MODELS): the fields of
#: their published config.json a page may quote, and the inputs of their worked examples, per page.
DENSE_CONFIG_FIELDS = ("num_hidden_layers", "num_key_value_heads", "head_dim", "num_attention_heads")
DENSE_INPUTS: dict[str, set[str]] = {
    "03_graphs": {"256"},  # a Llama-3.1-8B engine with --max-num-seqs 256
}

UNITS = ("B", "KiB", "MiB", "GiB", "GB", "%")
ROLE = re.compile(r"\{(?:glue(?::\w+)?|eq|ref|numref|doc|cite(?::\w+)?|term)\}`[^`]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
INLINE_MATH = re.compile(r"(?<!\\)\$([^$]+)\$")
#: A number not glued to a word: 2048, 122,880, 122{,}880, 4.125, 0.26.1 (a version), but not TP4 or fp8.
NUMBER = re.compile(r"(?<![\w.{,\\^])(?<![A-Za-z]-)(\d{1,3}(?:(?:,|\{,\})\d{3})+(?:\.\d+)?|\d+(?:\.\d+)*)(?![\w{])")
UNIT_AFTER = re.compile(r"\s*(?:\\,|~)?\s*(" + "|".join(re.escape(u) for u in UNITS) + r")(?![A-Za-z0-9_])")
RELATION = re.compile(r"=|\\approx|\\le(?:q)?\b|\\ge(?:q)?\b|<|>|\\neq")
UNIT_NAMES = {"B": "B", "KiB": "KiB", "MiB": "MiB", "GiB": "GiB", "GB": "GB", "percent": "%", "%": "%"}


def canonical(token: str) -> str:
    """``122,880`` and ``122{,}880`` as ``122880``; ``2.90`` as ``2.9``; ``-0.01`` as ``0.01``."""
    plain = token.replace("{,}", "").replace(",", "")
    if plain.count(".") > 1:
        return plain  # a version: 0.26.1
    try:
        value = abs(Decimal(plain)).normalize()
    except InvalidOperation:
        return plain
    return format(value, "f")


def numbers_in(text: str) -> Iterator[tuple[str, str]]:
    """(canonical number, unit or "") for every number in ``text``."""
    text = str(text)
    for match in NUMBER.finditer(text):
        unit = UNIT_AFTER.match(text, match.end())
        yield canonical(match.group(1)), unit.group(1) if unit else ""


class Allowed:
    """Numbers a chapter may type: plain ones, and (number, unit) pairs."""

    def __init__(self, plain: set[str], with_unit: set[tuple[str, str]], any_unit: set[str]) -> None:
        self.plain, self.with_unit, self.any_unit = plain, with_unit, any_unit

    def __contains__(self, item: tuple[str, str]) -> bool:
        number, unit = item
        if number in self.any_unit:
            return True
        if unit:
            return (number, unit) in self.with_unit
        return number in self.plain


def published() -> tuple[set[str], set[tuple[str, str]]]:
    """(numbers, (number, unit) pairs) the article publishes, read from data/article/ and its model config."""
    plain: set[str] = set()
    with_unit: set[tuple[str, str]] = set()
    for path in sorted(article_dir().glob("*.csv")):
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        for column in frame.columns:
            unit = "GiB" if column.endswith("_gib") else "%" if column.endswith("_pct") else ""
            for cell in frame[column]:
                for number, quoted_unit in numbers_in(cell):
                    plain.add(number)
                    if quoted_unit or unit:
                        with_unit.add((number, quoted_unit or unit))
        if "unit" in frame.columns:  # constants.csv: value + unit
            for value, unit in zip(frame["value"], frame["unit"], strict=True):
                if unit in UNIT_NAMES:
                    with_unit.add((canonical(value), UNIT_NAMES[unit]))
    c = article.constants()
    plain.add(canonical(str(int(c["isl"] + c["osl"]))))
    config = json.loads(_article_config().read_text(encoding="utf-8"))
    text_config = config.get("text_config", config)
    plain.update(canonical(str(text_config[f])) for f in PUBLISHED_CONFIG_FIELDS)
    spec = load_model(article.MODEL)
    plain.update(canonical(str(spec.count(kind))) for kind in (LayerKind.FULL_ATTENTION, LayerKind.GDN))
    for number, unit in PUBLISHED_ELSEWHERE:
        plain.add(number)
        if unit:
            with_unit.add((number, unit))
    return plain, with_unit


def _article_config() -> Path:
    return ROOT / "data" / "models" / article.MODEL / "config.json"


def structural() -> set[str]:
    """vLLM lines pdtune follows (bold in pdtune.state's docstring) and the article's, plus STRUCTURAL."""
    lines = set(re.findall(r"\*\*(\d+\.\d+)\*\*", state.__doc__ or ""))
    lines |= {versions.CURRENT, article.ARTICLE_VLLM, ".".join(article.ARTICLE_VLLM.split(".")[:2])}
    return {canonical(v) for v in lines} | lines | STRUCTURAL


def dense_fields() -> set[str]:
    """What the dense models' configs publish (head_dim derived as hidden / heads where a config omits it)."""
    from pdtune.chapters.state import DENSE_MODELS

    found = set()
    for name in DENSE_MODELS:
        config = json.loads((ROOT / "data" / "models" / name / "config.json").read_text(encoding="utf-8"))
        config.setdefault("head_dim", config["hidden_size"] // config["num_attention_heads"])
        found |= {canonical(str(config[f])) for f in DENSE_CONFIG_FIELDS}
    return found


def allowed_numbers(chapter: str) -> Allowed:
    plain, with_unit = published()
    inputs = {canonical(n) for n in EXERCISE_INPUTS[chapter] | DENSE_INPUTS.get(chapter, set())}
    return Allowed(plain | structural() | dense_fields(), with_unit, inputs)


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of the prose: outside the front matter, code cells, math blocks and options."""
    lines = text.splitlines()
    i = 0
    if lines and lines[0].strip() == "---":
        i = next(j for j in range(1, len(lines)) if lines[j].strip() == "---") + 1
    fence: str | None = None  # the backticks of a code cell (or a literal block) being skipped
    in_math = False
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        number = i + 1
        i += 1
        if fence is not None:
            if stripped == fence:
                fence = None
            continue
        if in_math:
            if stripped.startswith("$$"):
                in_math = False
            continue
        if stripped.startswith("$$"):
            in_math = not (stripped != "$$" and stripped.endswith("$$"))
            continue
        opening = re.match(r"^(`{3,}|~{3,})\s*(\{[\w:-]+\})?", stripped)
        if opening:
            ticks, directive = opening.groups()
            if directive == "{code-cell}" or (directive is None and len(stripped) > len(ticks)):
                fence = ticks  # a code cell, or a literal block with a language: not prose
            continue  # a directive's opening or closing fence; its body is prose
        if re.match(r"^\(\S+\)=$", stripped) or re.match(r"^:\w[\w-]*:", stripped):
            continue  # a label, or a directive option (:label:, :class:, :tags:)
        if re.match(r"^\*Time: \d+ min", stripped):
            continue  # a page's time line (reading and exercise minutes, checked by test_course.py)
        yield number, line


def offending_numbers(chapter: str, text: str) -> list[str]:
    """``"line N: 1734 MiB in '...'"`` for every number the prose types that is not allowed."""
    allowed = allowed_numbers(chapter)
    problems = []
    for number, line in prose_lines(text):
        prose = LINK_TARGET.sub("](...)", ROLE.sub(" ", line))
        for math in INLINE_MATH.finditer(prose):
            body = math.group(1)
            parts = RELATION.split(body)
            # Without a relation the whole expression is operands; with one, what follows it is the result.
            operands = next((p for p in parts if list(numbers_in(p))), "") if len(parts) > 1 else body
            for n, _ in numbers_in(operands):
                if (n, "") not in allowed:
                    problems.append(f"line {number}: {n} in math ${body}$")
        prose = INLINE_MATH.sub(" ", prose)
        for n, unit in numbers_in(prose):
            if (n, unit) not in allowed:
                problems.append(f"line {number}: {n}{' ' + unit if unit else ''} in {prose.strip()[:110]!r}")
    return problems


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_prose_types_no_computed_number(chapter: str) -> None:
    text = (ROOT / "notebooks" / f"{chapter}.md").read_text(encoding="utf-8")
    problems = offending_numbers(chapter, text)
    assert not problems, (
        f"{chapter}: numbers typed into the prose that are neither the article's nor glued from code "
        "(compute them in a code cell, glue them, and write them with {glue:text}):\n" + "\n".join(problems))


# --- the scanner itself -----------------------------------------------------------------------------------

SAMPLE = """\
---
kernelspec:
  name: python3
---

(state)=
# Per-request state

```{code-cell} ipython3
print(1734)
```

$$
B = 16 \\left\\lceil \\frac{s}{16 \\, a} \\right\\rceil + 31
$$ (state-block)

The article's 759 MiB per request, {glue:text}`state-mib:.0f` MiB for {glue:text}`state-model`.

```{admonition} Takeaway
:class: tip
TP4DP4 on a GB300 with vLLM 0.26.1 keeps $1 + K$ states ({eq}`state-block`, {doc}`/notebooks/05_prefill`).
```

TYPED
"""


@pytest.mark.parametrize(("line", "caught"), [
    ("A request grows from 759 MiB to 1734 MiB.", ["1734"]),
    ("A TP4 rank holds 189.75 MiB of it.", ["189.75"]),
    ("That is $2 \\times 4 \\times 256 \\times 1 = 2048$ B, as published.", []),
    ("So $9 \\times 23 + 69 = 276$ pages.", ["9"]),
    ("A request takes $C = 722.9$ blocks.", ["722.9"]),
    ("About 60 MiB of it is the empty tail, 10,560 token slots.", ["60", "10560"]),  # 60 graphs, not MiB
    ("The padding is 8192 B per page.", ["8192"]),  # 8192 is the ISL, not a number of bytes
    ("The article's 4{,}194{,}304 B, 122,880 B, 83.00 GiB and (24 %).", []),
    ("Read as gigabytes ($10^9$ bytes), vLLM 0.20 and 0.33.", []),
    ("{glue:text}`state-tp4-mib:.2f` MiB on a TP4 rank, in [vLLM](https://example.org/v0.99.1).", []),
])
def test_scanner_catches_typed_results_only(line: str, caught: list[str]) -> None:
    problems = offending_numbers("01_state", SAMPLE.replace("TYPED", line))
    assert [p.split(": ", 1)[1].split(" ", 1)[0] for p in problems] == caught, problems


def test_scanner_fails_a_chapter_with_a_typed_result() -> None:
    """The chapter as written passes; the same chapter with one glued number typed back in fails."""
    text = (ROOT / "notebooks" / "01_state_vllm.md").read_text(encoding="utf-8")
    assert offending_numbers("01_state_vllm", text) == []
    glued = re.search(r"\{glue:text\}`state-article-mtp-mib[^`]*`", text)
    assert glued, "the chapter no longer glues what an MTP request of the article's model takes"
    typed = text.replace(glued.group(0), "1,734", 1)
    assert [p.split(": ", 1)[1] for p in offending_numbers("01_state_vllm", typed)][0].startswith("1734 MiB")


def test_allow_list_comes_from_the_articles_data() -> None:
    allowed = allowed_numbers("01_state")
    for number, unit in (("2048", "B"), ("122880", "B"), ("4194304", "B"), ("2108", ""), ("2112", ""),
                         ("4.125", "MiB"), ("184", ""), ("759", "MiB"), ("276.62", "GiB"), ("0.92", ""),
                         ("279", "GB"), ("2.28", "GiB"), ("3.13", "GiB"), ("2.9", "GiB"), ("248", "GiB"),
                         ("133.96", "GiB"), ("180.7", ""), ("9216", ""), ("132", ""), ("4216", "KiB"),
                         ("128", ""), ("69", ""), ("23", ""), ("24", "%"), ("0.26.1", ""), ("0.2", "")):
        assert (number, unit) in allowed, (number, unit)
    for number, unit in (("1734", "MiB"), ("189.75", "MiB"), ("1056", ""), ("437", ""), ("1803", "MiB"),
                         ("60", "MiB"), ("722.9", ""), ("254.49", "GiB"), ("0.98", ""), ("8192", "B")):
        assert (number, unit) not in allowed, (number, unit)
    assert ("32768", "") in allowed_numbers("01_state_vllm") and ("32768", "") not in allowed  # per page
    assert ("3.1", "") not in allowed and offending_numbers("01_state", "x\n\nLlama-3.1-8B and Jamba-1.5-Mini.") == []
