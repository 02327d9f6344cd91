"""The ``pdtune`` command.

Each subcommand lives in its own module under :mod:`pdtune.commands` and exposes
``register(subparsers)``; this file only discovers them, so adding a command touches one file.
Bad input of any kind surfaces as :class:`pdtune.errors.InputError`: one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import signal
import sys
from collections.abc import Sequence

from pdtune import __version__, commands
from pdtune.commands._common import check_shared
from pdtune.switches import parse_assignments, vllm_environment
from pdtune.errors import DataError, InputError
from pdtune.io import guarded_stdout, write_failure
from pdtune.signals import Terminated, terminate_raises

EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on a bad flag already; keep its message to one line like ours."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line; given ``argv`` naming a command, only that command's module is imported (a
    module is named for its command), so ``pdtune log`` does not pay for pandas and the workbook's imports.
    Building it reads no data: help texts name the bundled files instead of listing what is in them."""
    parser = _Parser(
        prog="pdtune",
        description="Size and tune prefill/decode disaggregated vLLM serving.",
    )
    parser.add_argument("--version", action="version", version=f"pdtune {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    names = sorted(m.name for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_"))
    first = next((a for a in argv if not a.startswith("-")), None) if argv is not None else None
    if first in names:
        wanted = [first]
    elif argv is not None and first is None and not {"-h", "--help"} & set(argv):
        wanted = []  # --version, or no command at all (argparse's error names COMMAND, not the choices)
    else:
        wanted = names
    for name in wanted:
        importlib.import_module(f"{commands.__name__}.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = f"pdtune {argv[0]}" if argv and argv[0].startswith("-") else "pdtune"  # --help, --version
    try:
        # Every byte a command prints passes the guarded stdout: a full disk, a closed stdout or a reader gone
        # is one line and exit 2, like any output pdtune cannot write (pdtune.io).
        with guarded_stdout():
            args = build_parser(argv).parse_args(argv)
            command = f"pdtune {args.command}"
            with terminate_raises():  # SIGTERM unwinds like Ctrl-C: every clean-up on the way runs
                check_shared(args)
                with vllm_environment(parse_assignments(getattr(args, "vllm_env", None) or [])):
                    return int(args.func(args) or 0)
    except (InputError, DataError) as exc:
        _say(f"{command}: error: {exc}")
        return EXIT_BAD_INPUT
    except OSError as exc:  # the readers and writers name their files; a system error they missed still is one line
        _say(f"{command}: error: {write_failure(exc.filename or 'a file pdtune opened', 'file', exc)}")
        return EXIT_BAD_INPUT
    except (KeyboardInterrupt, Terminated) as exc:
        signum = exc.signum if isinstance(exc, Terminated) else signal.SIGINT
        _say(f"{command}: interrupted ({signal.Signals(signum).name}); nothing half-written was left")
        return 128 + signum


def _say(line: str) -> None:
    """One line on stderr; a stderr that cannot take it leaves the exit status to speak."""
    try:
        print(line, file=sys.stderr)
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
