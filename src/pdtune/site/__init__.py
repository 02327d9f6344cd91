"""The book's build: everything that turns the chapters into the offline HTML book.

* :mod:`.bookbuild` — the table-of-contents check ``make book`` runs first, and the Sphinx extension
  that guards the offline assets and loads the vega bundle only on pages with a chart;
* :mod:`.bookexec` — every chapter executed in parallel into a fresh jupyter-cache before Sphinx runs;
* :mod:`.kernels` — one kernel for the notebooks a process executes in turn (the book's and the workbook's
  workers), each notebook started as in a new kernel;
* :mod:`.runcache` — what several chapters of one run compute alike (chapter 9's plan), computed once per run;
* :mod:`.vendor` — the third-party JavaScript (vega bundle, MathJax) written from installed packages;
* :mod:`.render` — how a chart reaches a page: the offline renderer, :func:`~pdtune.site.render.show`,
  live explorers, and the static-build switch;
* :mod:`.lab` — ``make lab``: JupyterLab on the chapters from this venv, offline;
* :mod:`.pagecheck` — what a reader sees in Chromium at 1400 px: offline, within the column, commands whole,
  the length rule (``python -m pdtune.site.pagecheck _build/html``).

Chart builders and their style live in :mod:`pdtune.charts`, which re-exports ``show`` and
``live_explorer`` so a chapter imports what it draws from one place.
"""
