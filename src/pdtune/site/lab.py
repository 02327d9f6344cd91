"""``make lab``: JupyterLab on the book's chapters, from this venv, offline.

Every chapter is a jupytext MyST file (``notebooks/*.md``); jupytext's JupyterLab extension (shipped in the
``jupytext`` wheel) opens such a file as a notebook, and the settings written here make that the default
viewer, so a double click on a chapter opens it as a notebook. The ipywidgets explorers
(:func:`pdtune.site.render.live_explorer`) run there, because the kernel is a live one and the static-build
flag is not set.

Nothing is fetched when JupyterLab starts: its extensions are prebuilt in the installed wheels
(``jupyterlab``, ``jupytext``, ``jupyterlab_widgets``), the news feed and the update check are off, and the
extension manager is read-only (it would otherwise list PyPI). The settings go to a folder of their own
(``_build/lab/settings`` by default), never to the user's ``~/.jupyter``.

``python -m pdtune.site.lab [--ip IP] [--port N] [--token T] [--root DIR] [--open PATH]`` starts it; the
browser test starts it the same way, on a free port with a random token.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pdtune.paths import REPO_ROOT
from pdtune.site.render import NO_WIDGETS_ENV, STATIC_BUILD_ENV

#: JupyterLab settings overrides (``overrides.json``): chapters open as notebooks; nothing goes online.
LAB_SETTINGS: dict[str, Any] = {
    "@jupyterlab/docmanager-extension:plugin": {
        "defaultViewers": {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"},
    },
    "@jupyterlab/apputils-extension:notification": {"checkForUpdates": False, "fetchNews": "false"},
    "@jupyterlab/extensionmanager-extension:plugin": {"enabled": False},
    # Render every cell (a chapter is short), so a widget far down the page exists before you scroll to it.
    "@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
}

DEFAULT_SETTINGS_DIR = REPO_ROOT / "_build" / "lab" / "settings"


def write_settings(folder: Path = DEFAULT_SETTINGS_DIR) -> Path:
    """Write :data:`LAB_SETTINGS` as ``overrides.json`` in ``folder`` (JupyterLab's app settings dir)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "overrides.json"
    target.write_text(json.dumps(LAB_SETTINGS, indent=2) + "\n", encoding="utf-8")
    return folder


def lab_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment JupyterLab runs in: this venv's kernels first, live explorers on."""
    env = dict(os.environ if base is None else base)
    for flag in (STATIC_BUILD_ENV, NO_WIDGETS_ENV):
        env.pop(flag, None)  # a live kernel: explorers are widgets, not notes
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["JUPYTER_PREFER_ENV_PATH"] = "1"
    return env


def lab_command(*, ip: str = "127.0.0.1", port: int = 8888, token: str | None = None, root: Path = REPO_ROOT,
                open_path: str = "notebooks/01_state.md", settings: Path = DEFAULT_SETTINGS_DIR,
                browser: bool = False) -> list[str]:
    """The ``jupyter lab`` command line (run with :func:`lab_environment`)."""
    command = [
        sys.executable, "-m", "jupyterlab",
        f"--ServerApp.ip={ip}", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root}", f"--ServerApp.open_browser={browser}",
        f"--LabApp.app_settings_dir={settings}",
        "--LabApp.news_url=", "--LabApp.extension_manager=readonly",
        "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate",
        f"--LabApp.default_url=/lab/tree/{open_path}",
    ]
    if token is not None:
        command.append(f"--IdentityProvider.token={token}")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--ServerApp.allow_root=True")  # containers and CI often run as root
    return command


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pdtune.site.lab", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ip", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8888, help="port (default 8888)")
    parser.add_argument("--token", default=None, help="the login token (default: JupyterLab makes one)")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="folder JupyterLab serves (the repository)")
    parser.add_argument("--open", dest="open_path", default="notebooks/01_state.md",
                        help="the file to open first, relative to --root")
    parser.add_argument("--settings", type=Path, default=DEFAULT_SETTINGS_DIR,
                        help="where to write JupyterLab's settings overrides")
    parser.add_argument("--browser", action="store_true", help="open a web browser")
    args = parser.parse_args(argv)
    settings = write_settings(args.settings)
    command = lab_command(ip=args.ip, port=args.port, token=args.token, root=args.root.resolve(),
                          open_path=args.open_path, settings=settings, browser=args.browser)
    os.execvpe(command[0], command, lab_environment())
    return 0  # pragma: no cover - execvpe does not return


if __name__ == "__main__":
    raise SystemExit(main())
