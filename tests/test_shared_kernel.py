"""pdtune.site.kernels: notebooks executed one after another on one kernel start as in a new kernel each."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from pdtune.site import kernels


def _run(folder: Path, *cells: str) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    nb = new_notebook(cells=[new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    client = NotebookClient(nb, km=kernels.kernel_manager(ipc=True), timeout=60,
                            resources={"metadata": {"path": str(folder)}})
    with kernels.notebook_session(client, str(folder)):
        client.execute()
    assert [c.execution_count for c in nb.cells] == list(range(1, len(cells) + 1))
    return ["".join(o.get("text", "") for o in c.outputs) for c in nb.cells]


def test_the_second_notebook_sees_nothing_of_the_first(tmp_path: Path) -> None:
    try:
        first = _run(tmp_path / "a", "import os, sys\nleft = 1\nsys.modules['pdtune_probe'] = 1",
                     "print(os.path.basename(os.getcwd()))")
        km = kernels.kernel_manager(ipc=True)
        pid = km.provisioner.pid
        second = _run(tmp_path / "b", "import os, sys\nprint('left' in globals(), os.path.basename(os.getcwd()))",
                      "print('pdtune_probe' in sys.modules)")
        assert kernels.kernel_manager(ipc=True).provisioner.pid == pid  # the same kernel ran both
    finally:
        kernels.stop()
    assert first[1].strip() == "a"
    # A fresh namespace and the notebook's own folder; the modules imported stay (what the kernel is kept for).
    assert second[0].strip() == "False b" and second[1].strip() == "True"


def test_a_dead_kernel_is_replaced(tmp_path: Path) -> None:
    try:
        _run(tmp_path / "a", "x = 1")
        km = kernels.kernel_manager(ipc=True)
        pid = km.provisioner.pid
        from jupyter_client.utils import run_sync

        run_sync(km.shutdown_kernel)(now=True)
        assert _run(tmp_path / "b", "print(2)")[0].strip() == "2"
        assert kernels.kernel_manager(ipc=True).provisioner.pid != pid
    finally:
        kernels.stop()
