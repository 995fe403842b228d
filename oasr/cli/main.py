"""The ``oasr`` command line.

Each subcommand lives in its own module under ``oasr.cli`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` (called with the
parsed namespace, returning the exit code) and ``parser`` (for argparse-style
errors found after parsing). Adding one (``serve``, ``bench``, ...) is one module
and one entry in ``SUBCOMMANDS``.

Exit codes: 0 success; 1 some input failed (its message on stderr); 2 usage
errors and no usable model; 130 interrupted.

A usage error is two lines on stderr, ``oasr transcribe: error: <what>`` and a pointer to
``--help``, not argparse's usage block (which for ``transcribe`` runs to fifteen lines
and hides the message).
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
from collections.abc import Sequence

from oasr.cli.common import CliError

# module under oasr.cli -> its register(subparsers); in the order `oasr --help` lists them
SUBCOMMANDS: tuple[str, ...] = ("transcribe", "diarize", "stream", "evaluate", "models", "serve", "bench")


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line and a hint (subparsers are
    built with the same class, so every subcommand reports the same way)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n(see '{self.prog} --help')\n")


class _VersionAction(argparse.Action):
    """``--version`` that imports torch only when asked (``oasr --help`` loads no torch)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(_version())  # stdout, as argparse's own "version" action
        parser.exit()


def _version() -> str:
    from oasr import __version__

    try:
        import torch

        torch_version = torch.__version__
    except ImportError:  # pragma: no cover - a declared dependency
        torch_version = "not installed"
    return f"oasr {__version__} (torch {torch_version}, Python {platform.python_version()})"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="oasr",
        description="oasr: speech recognition inference on PyTorch.",
    )
    parser.add_argument("--version", action=_VersionAction, help="show the versions of oasr, torch and Python")
    subparsers = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in SUBCOMMANDS:
        importlib.import_module(f"oasr.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (argparse errors raise ``SystemExit(2)``)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CliError as e:
        print(f"oasr {args.command}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"oasr {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `oasr transcribe ... | head`: stop quietly
        try:  # keep the interpreter's final flush of stdout from failing again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 1


if __name__ == "__main__":
    sys.exit(main())
