"""``make lab`` works: JupyterLab from this venv opens a chapter as a notebook, runs it, and an explorer's
slider changes what it shows.

The server is started exactly as ``make lab`` starts it (``python -m pdtune.site.lab``), on 127.0.0.1 with a
free port and a random token, serving a temporary copy of one chapter (so a save can never touch
``notebooks/``). Headless Debian Chromium, driven by Playwright, opens the chapter (jupytext's default
viewer, set by pdtune.site.lab), runs every cell from the Run menu, waits for the ipywidgets explorer,
moves its slider with the keyboard and waits for the explorer's output to change. No request may leave
the machine. The server and its kernel are stopped whatever happens (their process group is ended).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import ROOT
from pdtune.site.pagecheck import CHROMIUM, LAUNCH_ARGS, is_local
from warm_kernel import real_kernel_env

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("lab")]

CHAPTER = "02_memory_reserve.md"  # its explorer: the gpu_memory_utilization what-if
START_TIMEOUT_S = 90
RUN_TIMEOUT_MS = 180_000


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def lab_server(root: Path) -> Iterator[tuple[str, str]]:
    """``python -m pdtune.site.lab`` serving ``root``; yields (base URL, token); always stopped after."""
    port, token = free_port(), secrets.token_hex(16)
    log = (root / "lab.log").open("w", encoding="utf-8")
    command = [sys.executable, "-m", "pdtune.site.lab", "--port", str(port), "--token", token,
               "--root", str(root), "--open", CHAPTER, "--settings", str(root / ".lab-settings")]
    # JupyterLab starts real kernels, as `make lab` does (not the test session's forked ones).
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                              env=real_kernel_env(dict(os.environ)))
    base = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if server.poll() is not None:
                pytest.fail(f"JupyterLab exited ({server.returncode}):\n{(root / 'lab.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base}api/status?token={token}", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not answer in {START_TIMEOUT_S} s:\n"
                            f"{(root / 'lab.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield base, token
    finally:
        _stop(server)
        log.close()


def _stop(server: subprocess.Popen) -> None:
    """End the server's process group (the server and the kernels it started), by its id."""
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=15)
    try:
        os.killpg(server.pid, signal.SIGKILL)  # a kernel left behind in the group
    except ProcessLookupError:
        pass


def test_lab_runs_a_chapter_and_its_explorer_responds(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: run `make chromium` (Debian package 'chromium')", pytrace=False)
    root = tmp_path / "lab"
    root.mkdir()
    shutil.copyfile(ROOT / "notebooks" / CHAPTER, root / CHAPTER)
    outside: list[str] = []
    with lab_server(root) as (base, token), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000}, service_workers="block")
            context.set_default_timeout(60_000)

            def route(r) -> None:
                if is_local(r.request.url):
                    r.continue_()
                else:  # never reach the internet, and say so
                    outside.append(r.request.url)
                    r.abort()

            context.route("**/*", route)
            page = context.new_page()
            page.goto(f"{base}lab/tree/{CHAPTER}?token={token}", wait_until="domcontentloaded")
            # jupytext's viewer: the chapter opens as a notebook, not as text
            page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for()
            page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=RUN_TIMEOUT_MS)  # kernel ready
            page.locator(".lm-MenuBar-itemLabel").get_by_text("Run", exact=True).click()
            page.locator(".lm-Menu-itemLabel").get_by_text("Run All Cells", exact=True).click()
            slider = page.locator(".widget-slider .noUi-handle, .widget-slider input").first
            slider.wait_for(state="attached", timeout=RUN_TIMEOUT_MS)
            slider.scroll_into_view_if_needed()
            explorer = page.locator(".widget-interact").first
            output = explorer.locator(".widget-output, .jupyter-widgets-output-area").first
            page.wait_for_function("el => el.innerText.includes('GiB')", arg=output.element_handle(),
                                   timeout=RUN_TIMEOUT_MS)
            before = output.inner_text()
            errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']")
            assert errors.count() == 0, errors.first.inner_text()
            slider.focus()
            for _ in range(5):
                page.keyboard.press("ArrowRight")
            page.wait_for_function("([el, old]) => el.innerText !== old && el.innerText.includes('GiB')",
                                   arg=[output.element_handle(), before], timeout=60_000)
            after = output.inner_text()
            assert after != before
            shots = ROOT / "_build" / "screenshots"
            shots.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shots / "lab__02_memory_reserve.png"))
        finally:
            browser.close()
    assert outside == [], f"JupyterLab asked the internet for: {outside}"
    assert (root / CHAPTER).read_text(encoding="utf-8") == (ROOT / "notebooks" / CHAPTER).read_text(
        encoding="utf-8"), "the chapter file changed"


def test_make_lab_starts_what_the_test_starts() -> None:
    """``make lab`` runs ``python -m pdtune.site.lab`` from the venv (the command the test above runs)."""
    done = subprocess.run(["make", "-n", "lab", "LAB_PORT=9999"], cwd=ROOT, capture_output=True, text=True,
                          check=True)
    assert any(line.endswith("/python -m pdtune.site.lab --port 9999") for line in done.stdout.splitlines())


def test_lab_settings_open_chapters_as_notebooks_and_stay_offline(tmp_path: Path) -> None:
    import json

    from pdtune.site.lab import lab_command, lab_environment, write_settings

    folder = write_settings(tmp_path / "settings")
    settings = json.loads((folder / "overrides.json").read_text(encoding="utf-8"))
    viewers = settings["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]
    assert viewers == {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"}
    assert settings["@jupyterlab/apputils-extension:notification"] == {"checkForUpdates": False,
                                                                       "fetchNews": "false"}
    command = " ".join(lab_command(port=1234, token="t", settings=folder))
    assert "--ServerApp.ip=127.0.0.1" in command and "--LabApp.extension_manager=readonly" in command
    assert "NeverCheckForUpdate" in command and "--IdentityProvider.token=t" in command
    env = lab_environment({"PDTUNE_STATIC_BUILD": "1", "PATH": "/usr/bin"})
    assert "PDTUNE_STATIC_BUILD" not in env and env["PATH"].startswith(str(Path(sys.executable).parent))
