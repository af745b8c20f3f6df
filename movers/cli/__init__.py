"""``cbt-mover``: the mover pod's entrypoint and the operator's tool.

Every failure a user can cause prints one line ``cbt-mover: error: ...`` on stderr and exits
with the code documented in ``movers.errors`` (never a traceback; ``--log-level DEBUG``
logs one). ``--json`` prints exactly one JSON object on stdout. Progress goes to stderr as ``--progress`` says
(``movers.cli.progress``: a bar on a terminal, else ``progress done=N total=N`` lines, a backup's followed by
``position=N capacity=N mode=M``). ``extents`` also takes the
upstream snapshot-metadata-lister's command line (``movers.cli.extents``).

The package is one module per command (or family of commands), in the way of borg's ``archiver/*_cmd.py``:
``init``, ``backup``, ``extents``, ``restore``, ``files`` (ls, cp), ``mount``, ``ls``, ``verify``, ``maintenance``
(forget, prune), ``key`` and ``install``. Each registers its subparser(s) with ``add_parsers(sub)`` and its handler as
the parser's ``handler`` default; what they share is ``movers.cli._common``. They import ``_common``, never each other;
this module only assembles them and holds ``main``, the one boundary where an exception becomes an exit code.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import NoReturn

from movers import errors, logsetup, redaction
from movers.cli import backup, extents, files, init, install, key, ls, maintenance, mount, restore, verify
from movers.errors import MoverError

log = logging.getLogger("movers")

# in the order ``cbt-mover --help`` lists them
COMMANDS = (init, backup, extents, restore, files, mount, ls, verify, maintenance, key, install)


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's error contract: a bad argument is one line naming the fix and the command's
    ``--help``, exit code 2, instead of argparse's usage block (subcommands' parsers are of this class too)."""

    def error(self, message: str) -> NoReturn:
        self.exit(errors.EXIT_USAGE, f"cbt-mover: error: {message} (see {self.prog} --help)\n")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cbt-mover")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown (not installed)"


class _VersionAction(argparse.Action):
    """``--version``: looked up (in the installed package's metadata) only when asked for, not at every start."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_args: object) -> NoReturn:
        print(f"cbt-mover {_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: each command module adds its subparser(s) and handler (``args.handler``)."""
    parser = _Parser(prog="cbt-mover", description="Back up and restore block volumes.")
    parser.add_argument("--version", action=_VersionAction, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parsers(sub)
    return parser


def _api_refusal(err: Exception) -> str | None:
    """The one line for a Kubernetes ``ApiException`` 401/403 (the API's message), else None."""
    if type(err).__name__ != "ApiException" or getattr(err, "status", None) not in (401, 403):
        return None
    from movers.kube.apply import api_message

    return f"the Kubernetes API refused a call ({err.status}): {api_message(err)}"


def _fail(line: str) -> None:
    """The one error line on stderr, with every known credential redacted (``movers.redaction``)."""
    print(f"cbt-mover: {redaction.KNOWN(line)}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    # The engine uses no pydantic plugins; looking for them reads every installed distribution's entry points
    # (tens of ms on a cold start, which every restore's recovery time pays). A caller's own setting wins.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    parser = build_parser()
    args = parser.parse_args(argv)
    log_level = getattr(args, "log_level", "WARNING")  # commands that only print (install) have none
    level = getattr(logging, str(log_level).upper(), None)
    if not isinstance(level, int):
        parser.error(f"unknown --log-level {log_level}")
    logsetup.configure(level)
    try:
        if getattr(args, "volume", None) is not None:  # every command that takes a volume id, before any work
            from movers.repo.manifest import check_volume_id

            check_volume_id(args.volume)
        return args.handler(args)
    except MoverError as err:
        log.debug("command failed", exc_info=True)
        _fail(f"error: {err}")
        return err.exit_code
    except KeyboardInterrupt:
        print("cbt-mover: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # a bug: keep the one-line contract, log the traceback at DEBUG
        refused = _api_refusal(err)
        if refused:  # a Kubernetes call no wrapper mapped: still the access exit code
            _fail(f"error: {refused}")
            return errors.EXIT_ACCESS
        log.debug("internal error", exc_info=True)
        _fail(f"internal error: {type(err).__name__}: {err}")
        return errors.EXIT_INTERNAL
