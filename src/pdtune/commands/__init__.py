"""One module per ``pdtune`` subcommand; each defines ``register(subparsers)``.

Shared flag helpers live in :mod:`pdtune.commands._common`.
"""
