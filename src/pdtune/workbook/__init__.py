"""Re-run every chapter for another model and cluster, from one parameters file.

A parameters file (``data/params/*.yaml``) is a :class:`~pdtune.scenario.Scenario` written out: the model,
the GPU and its memory, the workload, the topologies, where the benchmark results are. The workbook

1. reads and checks it completely before anything runs: names and types (:meth:`Scenario.from_mapping`),
   every file it names, the model, the GPU, and the key numbers of :mod:`pdtune.workbook.summary` (which loads the
   results, so a results file pdtune cannot read fails here too, naming the file);
2. runs each chapter listed in ``_toc.yml`` with papermill (chapters are jupytext MyST files), injecting
   only the parameters the chapter's ``parameters`` cell declares, with paths made absolute because a
   chapter runs with its own folder as the working directory;
3. writes one executed ``.ipynb`` per chapter, ``summary.json`` and ``summary.md``, and with ``html=True``
   a Jupyter Book of the executed notebooks.

Everything is written into a folder beside the output folder and swapped into place at the end
(:class:`pdtune.io.FolderSwap`), so the output folder appears whole or not at all. A failing chapter does not stop the others: it is reported
with the cell (and its line in the chapter's source) where it failed, and its executed notebook, error
included, is kept.

The parts, one file each (everything below is re-exported here):

* :mod:`.parameters` — the parameters file, checked in full;
* :mod:`.chapter` — the chapters of the book, the parameters each declares, how each run went (a leaf: the
  others read its records, it reads none of theirs);
* :mod:`.running` — papermill jobs in a process pool, progress, failures located, the output swapped in whole;
* :mod:`.summary` — the key numbers (``summary.json``, ``summary.md``), computed by pdtune, not read back;
* :mod:`.minibook` — the executed chapters as a small HTML book;
* :mod:`.planning` — the ``plan:`` section: ``pdtune plan``'s search in a child process, ``plan/plan.json`` and
  the picks' recipes.
"""

from pdtune.workbook.minibook import HTML_DIR, HTML_LOG, SUMMARY_PAGE, HtmlBuild, build_html
from pdtune.workbook.chapter import (
    CHAPTER_DIR,
    Chapter,
    ChapterResult,
    ParametersCell,
    book_chapters,
    chapter_parameters,
    first_chapter_of,
    read_chapter,
    read_parameters_cell,
)
from pdtune.workbook.parameters import PATH_FIELDS, Parameters, check_inputs, load_parameters
from pdtune.workbook.running import CELL_TIMEOUT, WorkbookResult, run_workbook
from pdtune.workbook.summary import SUMMARY_JSON, SUMMARY_MD, KeyNumbers, key_numbers, to_markdown

__all__ = [
    "CELL_TIMEOUT",
    "CHAPTER_DIR",
    "HTML_DIR",
    "HTML_LOG",
    "PATH_FIELDS",
    "SUMMARY_JSON",
    "SUMMARY_MD",
    "SUMMARY_PAGE",
    "Chapter",
    "ChapterResult",
    "HtmlBuild",
    "KeyNumbers",
    "Parameters",
    "ParametersCell",
    "WorkbookResult",
    "book_chapters",
    "build_html",
    "chapter_parameters",
    "check_inputs",
    "first_chapter_of",
    "key_numbers",
    "load_parameters",
    "read_chapter",
    "read_parameters_cell",
    "run_workbook",
    "to_markdown",
]
