"""The ``fedclust`` command line.

Commands: ``simulate``; ``coordinator serve|migrate``, ``counter serve|migrate``;
``participant run|assign|enrol``; ``job submit|status|result|cancel``; ``demo``;
``audit verify|show``; ``pki init-ca|issue``; ``federation invite|revoke|audit``. Each command
is a module of its own (``fedclust.cli.<command>``: ``add_arguments`` and ``run``), imported
only when parsed, so ``--version`` and ``--help`` stay light; this package holds the
top-level parser and :func:`main`.

Exit status: 0 on success, 1 when a followed job fails or is cancelled or an audit log's chain
is broken, 2 on a usage, input or HTTP error (the server's detail is printed), 3 when an audit
log's chain is intact but unverified.

Design notes: ``docs/services.md`` (§ The command line).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn, cast

#: The commands, in the order ``fedclust --help`` lists them, with their one-line help.
_COMMANDS = (
    ("simulate", "run a federated K sweep in process"),
    ("coordinator", "run the coordinator service"),
    ("counter", "run the counting service (releases only ΣN_l)"),
    ("participant", "run a participant agent next to its data"),
    ("job", "submit and follow jobs at a coordinator (analyst)"),
    ("demo", "run a whole federation on loopback: FedFCM + FedFuzzDB K sweep"),
    ("audit", "check or summarise a participant's audit log"),
    ("plot", "draw a result's K sweep and centers (needs fedclust[plot])"),
    ("pki", "a small certificate authority for TLS and mutual TLS"),
    ("federation", "invite, revoke and audit members (an admin analyst)"),
)


def _version() -> str:
    try:
        return importlib.metadata.version("fedclust")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the command, what is wrong, where to read more."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


if TYPE_CHECKING:
    _SubParsersAction = argparse._SubParsersAction[argparse.ArgumentParser]
else:  # not subscriptable at run time
    _SubParsersAction = argparse._SubParsersAction


class _Commands(_SubParsersAction):
    """The subcommands; a command's module adds its arguments when the command is parsed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._unbuilt: set[str] = set()

    def add_command(self, name: str, helptext: str) -> None:
        self.add_parser(name, help=helptext)
        self._unbuilt.add(name)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
        values: str | Sequence[Any] | None, option_string: str | None = None,
    ) -> None:
        name = values[0] if values else None
        if name in self._unbuilt:
            self._unbuilt.remove(name)
            importlib.import_module(f"{__name__}.{name}").add_arguments(self.choices[name])
        super().__call__(parser, namespace, values, option_string)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="fedclust",
        description="Federated cluster analysis without pooling data.",
    )
    parser.add_argument("--version", action="version", version=f"fedclust {_version()}")
    sub = cast(_Commands, parser.add_subparsers(dest="command", required=True, action=_Commands))
    for name, helptext in _COMMANDS:
        sub.add_command(name, helptext)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fedclust`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    from fedclust.cli._common import run_command  # heavy: --version and --help never get here

    return run_command(importlib.import_module(f"{__name__}.{args.command}").run, args)
