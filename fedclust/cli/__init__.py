"""The ``fedclust`` command line.

Commands: ``simulate``; ``coordinator serve|migrate|check``, ``counter
serve|migrate|members|check``; ``participant run|identity|assign|enrol|check``; ``job
submit|list|status|attach|logs|result|cancel``; ``demo``; ``audit verify|show``; ``pki
init-ca|issue``; ``federation invite|revoke|audit|members``. Each command is a module of
its own (``fedclust.cli.<command>``: ``add_arguments`` and ``run``), imported only when
parsed, so ``--version`` and ``--help`` stay light; this package holds the top-level parser
and :func:`main`.

A long-running command (one whose module has ``starting(args)``: ``simulate``, ``demo``,
``job submit --follow``, ``job attach``) writes its first line, ``fedclust CMD: progress:
starting: ...``, as soon as its arguments are parsed, before its heavy modules are imported.

Exit status: 0 on success, 1 when a followed job fails or is cancelled or an audit log's chain
is broken, 2 on a usage, input or HTTP error (the server's detail is printed), 3 when an audit
log's chain is intact but unverified, 130 on Ctrl-C (one line, no traceback; a followed job
goes on at the coordinator and the line says how to re-attach), 141 (128 + SIGPIPE, what a
shell reports for a program a closed pipe stops) when the reader of the output went away
(``fedclust audit show LOG | head -1``), silently.

Design notes: ``docs/services.md`` (§ The command line).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
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
    ("federation", "invite, revoke, audit and list members (an admin analyst)"),
)


def _version() -> str:
    import importlib.metadata  # its import is most of a bare start-up: only for --version

    try:
        return importlib.metadata.version("fedclust")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


class _VersionAction(argparse.Action):
    """``--version``: print the installed version and exit (looked up only then)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 help: str = "show the installed version and exit") -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0,
                         help=help)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
        values: str | Sequence[Any] | None, option_string: str | None = None,
    ) -> None:
        print(f"fedclust {_version()}")
        parser.exit()


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
    parser.add_argument("--version", action=_VersionAction)
    sub = cast(_Commands, parser.add_subparsers(dest="command", required=True, action=_Commands))
    for name, helptext in _COMMANDS:
        sub.add_command(name, helptext)
    return parser


#: Exit status on Ctrl-C (128 + SIGINT) and when the output's reader has gone (128 + SIGPIPE).
INTERRUPTED_EXIT = 130
BROKEN_PIPE_EXIT = 141


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fedclust`` console script; returns the exit status.

    Ctrl-C ends any command with one line on stderr, ``fedclust CMD: interrupted`` and the
    notes the interrupted code added to the :class:`KeyboardInterrupt` (a followed job: how
    to re-attach), and :data:`INTERRUPTED_EXIT`. A closed output pipe ends it silently with
    :data:`BROKEN_PIPE_EXIT`: stdout is flushed here, where the error can be caught, and then
    pointed at the null device, so that the interpreter's final flush does not fail again.
    """
    command = ["fedclust"]
    try:
        try:
            return _run(argv, command)
        finally:
            sys.stdout.flush()
    except KeyboardInterrupt as exc:
        notes = getattr(exc, "__notes__", [])
        print("; ".join([f"{' '.join(command)}: interrupted", *notes]), file=sys.stderr)
        return INTERRUPTED_EXIT
    except BrokenPipeError:
        with contextlib.suppress(OSError, ValueError):  # ValueError: stdout has no file
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE_EXIT


def _run(argv: Sequence[str] | None, command: list[str]) -> int:
    """Parse, announce a long-running command, run it; ``command`` gets its words."""
    args = _parser().parse_args(argv)
    command += filter(None, (args.command, getattr(args, "action", None)))
    module = importlib.import_module(f"{__name__}.{args.command}")
    starting = getattr(module, "starting", None)
    what = None if starting is None else starting(args)
    if what is not None:
        from fedclust.progress import announce

        announce(" ".join(command), what)
    from fedclust.cli._common import run_command  # heavy: --version and --help never get here

    return run_command(module.run, args)
