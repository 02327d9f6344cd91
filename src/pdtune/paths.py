"""Where the bundled data lives.

The package is installed editable from the repository, so ``data/`` sits two levels above ``src/pdtune``.
``PDTUNE_DATA`` overrides it for an installed copy that keeps its data elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def data_dir() -> Path:
    return Path(os.environ.get("PDTUNE_DATA", REPO_ROOT / "data"))


def models_dir() -> Path:
    return data_dir() / "models"


def article_dir() -> Path:
    return data_dir() / "article"


def clusters_dir() -> Path:
    return data_dir() / "clusters"


def params_dir() -> Path:
    return data_dir() / "params"


def logs_dir() -> Path:
    """Real vLLM start-up logs the book checks pdtune against (``data/logs/README.md`` names their source)."""
    return data_dir() / "logs"
