"""The glossary defines every term the book uses, the layout notation is the one ``pdtune plan --help`` prints,
and every page links a term where it first uses it.

* The layout notation lives once, in :data:`pdtune.topology.LAYOUT_NOTATION`: ``pdtune plan --help`` prints it
  and the glossary's entry "layout notation" is the same text (``tests/test_topology.py``); the layouts issue 21
  names are in it.
* The terms issue 21 found undefined are entries, and every ``{term}`` role of the book names one.
* First use: on every page, the first time the prose uses a glossary term (outside code, math, headings
  and other roles) it is a ``{term}`` role. Pages still to be linked are in :data:`LINKING_PENDING`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pdtune.topology import LAYOUT_NOTATION

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "book" / "glossary.md"

#: Terms the issue names as used and never defined.
REQUIRED = ("layout notation", "rate matching", "roofline", "SLA", "prefix caching", "NIXL", "DCP", "GSM8K", "NVL72")

#: Glossary words too common in their everyday sense for a first-use check ("this page", "the next page").
NOT_CHECKED = {"page"}

#: Pages whose terms are not linked at first use yet, with who is linking them.
LINKING_PENDING: dict[str, str] = {}


def glossary_text() -> str:
    return GLOSSARY.read_text(encoding="utf-8")


def glossary_terms() -> list[str]:
    body = glossary_text().split("````{glossary}", 1)[1].split("\n````", 1)[0]
    return [line.strip() for line in body.splitlines()[1:] if line and not line[0].isspace()
            and not line.startswith(":")]


def test_the_notation_names_the_issues_layouts_as_pdtune_reads_them() -> None:
    """The glossary's "layout notation" is :data:`pdtune.topology.LAYOUT_NOTATION` (tests/test_topology.py holds
    the entry and ``plan --help`` to it); the layouts issue 21 names are in it, with their GPU counts."""
    from pdtune.topology import parse_deployment, parse_topology

    text = " ".join(LAYOUT_NOTATION.split())
    for name in ("TP2DP4+EP", "TP1PP6+EP", "TEP8", "DP8+EP"):
        assert name in text
        gpus = parse_topology(name).gpus
        assert f"{name} is {gpus} GPUs" in text or f"{name} is TP8+EP on {gpus} GPUs" in text, name
    deployment = parse_deployment("4xTP2DP4+EP : 1xTP4DP4+EP")
    assert deployment.gpus_total == 48 and "4xTP2DP4+EP : 1xTP4DP4+EP" in text and "48 GPUs" in text


def test_the_terms_the_issue_found_undefined_are_defined() -> None:
    terms = {t.lower() for t in glossary_terms()}
    assert [t for t in REQUIRED if t.lower() not in terms] == []


_ROLE = re.compile(r"\{term\}`([^`]*)`")


def book_pages() -> list[Path]:
    pages = sorted((ROOT / "notebooks").glob("*.md")) + sorted((ROOT / "book").glob("*.md"))
    return [p for p in pages if p.name != "README.md"]


def test_every_term_role_names_an_entry() -> None:
    terms = {t.lower() for t in glossary_terms()}
    missing = []
    for page in book_pages():
        for text in _ROLE.findall(page.read_text(encoding="utf-8")):
            target = text.split("<", 1)[1].rstrip(">").strip() if "<" in text else text
            if target.lower() not in terms:
                missing.append(f"{page.relative_to(ROOT)}: {target}")
    assert missing == []


_FENCED = re.compile(r"^```\{code-cell\}.*?^```\s*$", re.M | re.S)
_FRONT = re.compile(r"\A---\n.*?\n---\n", re.S)
_NOT_PROSE = [
    re.compile(r"^````\{glossary\}.*?^````\s*$", re.M | re.S),  # the glossary's own entries
    # a literal block with a language (a bare ``` line closes a directive, and what follows it is prose)
    re.compile(r"^```(?:text|bash|yaml|python|markdown|console)\s*$.*?^```\s*$", re.M | re.S),
    re.compile(r"\$\$.*?\$\$", re.S),
    re.compile(r"(?<!\\)\$[^$\n]+\$"),
    re.compile(r"``[^`]+``|`[^`]+`"),
]


def prose(text: str) -> str:
    """A page's prose: no front matter, code cells, code, math, headings, labels or directive lines; roles
    other than ``{term}`` dropped, ``{term}`` roles kept as ``[[target|shown]]`` marks."""
    text = _FRONT.sub("", text)
    text = _FENCED.sub("", text)
    for pattern in _NOT_PROSE[:2]:  # code blocks, before their fences go
        text = pattern.sub(" ", text)
    # headings, labels, directive fences and options, raw HTML: no place for a role
    text = "\n".join(line for line in text.splitlines()
                     if not re.match(r"\s*(#|\(.*\)=|```|:[a-z_-]+:|<)", line))
    text = _ROLE.sub(lambda m: "[[" + _target(m.group(1)) + "|" + m.group(1).split("<")[0].strip() + "]]", text)
    text = re.sub(r"\{[a-z:]+\}`[^`]*`", " ", text)  # other roles
    for pattern in _NOT_PROSE[2:]:
        text = pattern.sub(" ", text)
    return text


def _target(role_text: str) -> str:
    return (role_text.split("<", 1)[1].rstrip(">") if "<" in role_text else role_text).strip().lower()


#: A layout name (TP4DP2+EP, TEP8, 4xTP2DP4+EP): its first use links the entry "layout notation".
LAYOUT = re.compile(r"(?<![\w\-])(?:\d+x)?(?:TEP|TP|DP|PP)\d+(?:(?:TP|DP|PP)\d+)*(?:\+EP\d*)?(?![\w\-])")


def _pattern(term: str) -> re.Pattern[str]:
    if term == "layout notation":
        return LAYOUT
    flags = 0 if any(c.isupper() for c in term) else re.IGNORECASE
    return re.compile(r"(?<![\w\-+])" + re.escape(term) + r"(?:s|es)?(?![\w\-+])", flags)


def unlinked_first_uses(text: str, terms: list[str]) -> list[str]:
    body = prose(text)
    found = []
    for term in terms:
        if term in NOT_CHECKED:
            continue
        plain = _pattern(term)
        role = re.compile(r"\[\[" + re.escape(term.lower()) + r"\|[^\]]*\]\]")
        # role marks are not plain text: hide them when looking for a plain use
        hidden = re.sub(r"\[\[[^\]]*\]\]", lambda m: "\0" * len(m.group(0)), body)
        first_plain = plain.search(hidden)
        first_role = role.search(body)
        if first_plain and (first_role is None or first_plain.start() < first_role.start()):
            start = max(0, first_plain.start() - 40)
            found.append(f"{term}: {body[start:first_plain.end() + 20]!r}".replace("\\n", " "))
    return found


@pytest.mark.parametrize("page", [p for p in book_pages() if p.name not in ("glossary.md", "references.md")],
                         ids=lambda p: p.stem)
def test_every_term_is_linked_where_the_page_first_uses_it(page: Path) -> None:
    rel = page.relative_to(ROOT).as_posix()
    if rel in LINKING_PENDING:
        pytest.skip(f"{rel}: linking pending ({LINKING_PENDING[rel]})")
    found = unlinked_first_uses(page.read_text(encoding="utf-8"), glossary_terms())
    assert found == [], f"{rel}: first uses without a {{term}} role:\n" + "\n".join(found)


def test_the_first_use_check_sees_a_plain_use_and_a_linked_one() -> None:
    terms = ["KV cache", "SLA", "roofline", "layout notation"]
    text = ("The {term}`KV cache` holds it; the KV cache grows. An SLA, then a {term}`roofline <roofline>`. "
            "TEP8 runs.")
    assert [f.split(":")[0] for f in unlinked_first_uses(text, terms)] == ["SLA", "layout notation"]
    assert unlinked_first_uses("{term}`TP4DP2+EP <layout notation>`, then TEP8.", terms) == []
    assert unlinked_first_uses("`SLA` in code, $SLA$ in math, {ref}`SLA`.", terms) == []
