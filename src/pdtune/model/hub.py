"""The model id ``vllm serve`` loads: a bundled model's Hub id, or what a user's config names itself.

``data/models/hub-ids.csv`` lists each bundled folder's Hub id, transcribed from the table of
``data/models/README.md`` (a test keeps them equal); a folder with none (the article's reconstructed model, the
EAGLE-3 head) has an empty id. A config outside ``data/models/`` is named by its own ``_name_or_path`` when that
is a Hub id (``org/name``) or an absolute path; bundled configs' ``_name_or_path`` is not trusted (LFM2.5-VL's
names its text model, Phi-3's has no organisation).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from pdtune import guarded
from pdtune.model.spec import ModelSpec
from pdtune.paths import models_dir

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


@cache
def bundled_hub_ids() -> dict[str, str]:
    """Bundled folder -> Hub id ("" when it has none)."""
    with guarded.bundled():
        rows = guarded.read_csv_table(models_dir() / "hub-ids.csv", ("folder", "hub_id"))
    return {r["folder"]: r["hub_id"].strip() for r in rows}


def is_hub_id(text: str) -> bool:
    return bool(_HUB_ID.match(text))


def hub_id(spec: ModelSpec) -> str | None:
    """The id to serve ``spec`` by (see the module docstring), or None when none is known."""
    source = Path(spec.source)
    try:
        bundled = source.resolve().parent.parent == models_dir().resolve()
    except OSError:
        bundled = False
    if bundled:
        return bundled_hub_ids().get(source.parent.name) or None
    own = spec.extra.get("config", {}).get("_name_or_path")
    if isinstance(own, str) and (is_hub_id(own) or (own.startswith("/") and len(own) < 4096)):
        return own
    return None
