"""The ``ldpdist`` command (also ``python -m ldpdist``).

Subcommands are registered by the modules that implement them:
``ldpdist.experiments`` (``reproduce``, ``simulate``), ``ldpdist.deploy`` (``spec``,
``privatize``, ``aggregate``, ``estimate``), ``ldpdist.planner`` (``plan``) and
``ldpdist.accounting`` (``privacy``). Errors are one line on stderr and a non-zero exit
status, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from .errors import CliError


def build_parser() -> argparse.ArgumentParser:
    from . import __version__, accounting, deploy, experiments, planner
    from .heavy_hitters import cli as heavy_hitters
    from .longitudinal import cli as longitudinal

    parser = argparse.ArgumentParser(
        prog="ldpdist",
        description="Distribution estimation from locally differentially private reports.")
    parser.add_argument("--version", action="version", version=f"ldpdist {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    experiments.register(commands)
    deploy.register(commands)
    planner.register(commands)
    accounting.register(commands)
    heavy_hitters.register(commands)
    longitudinal.register(commands)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status = args.handler(args)
    except KeyboardInterrupt:
        print("ldpdist: interrupted", file=sys.stderr)
        return 130
    except (CliError, ValueError, TypeError, OSError, MemoryError, KeyError, RuntimeError,
            OverflowError) as exc:
        message = str(exc) or type(exc).__name__
        if isinstance(exc, KeyError):
            message = f"missing key {message}"
        print(f"ldpdist {args.command}: error: {message}", file=sys.stderr)
        return 2
    return int(status or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
