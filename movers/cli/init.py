"""``cbt-mover init``: create a repository (encrypted with its first key, or ``--insecure-no-encryption``)."""

from __future__ import annotations

import argparse

from movers.cli._common import add_repo_options, emit, open_repo


def add_parsers(sub) -> None:
    """The ``init`` subcommand, with its handler."""
    p = sub.add_parser("init", help="create a repository (encrypted: give its first key)")
    add_repo_options(p)
    p.add_argument(
        "--insecure-no-encryption",
        action="store_true",
        help="create an unencrypted repository: anyone who can read the bucket reads the backups",
    )
    p.set_defaults(handler=cmd_init)


def cmd_init(args: argparse.Namespace) -> int:
    repo = open_repo(args, create=True)
    doc = {
        "repo": repo.describe(),
        "repo_id": repo.config.repo_id,
        "chunk_hash": repo.content_hash.name,
        "encrypted": repo.config.encrypted,
        "key_slot": repo.opened_by,
    }
    how = f"encrypted, key slot {repo.opened_by}" if repo.config.encrypted else "NOT encrypted"
    emit(args, doc, f"initialized {repo.describe()} ({how}, chunk hash {repo.content_hash.name})")
    return 0
