"""``cbt-mover key list|add|remove|passwd``: the key slots of an encrypted repository (``movers.repo.keys``).

Each command opens the repository with the usual key options (``CBT_MOVER_PASSWORD``, ``--password-file``,
``--key-file``, ``--kms-key``); ``add`` and ``passwd`` take the new key from ``CBT_MOVER_NEW_PASSWORD``,
``--new-password-file``, ``--new-key-file`` or ``--new-kms-key`` (an AWS KMS key id, ARN or alias). No data is
re-encrypted: every slot wraps the same master key.
"""

from __future__ import annotations

import argparse
import json

from movers.cli._common import add_repo_options, emit, open_repo, retry_budget
from movers.errors import UsageError


def add_parsers(sub) -> None:
    """The ``key`` and its ``list``, ``add``, ``passwd`` and ``remove`` subcommands, with its handler."""
    p = sub.add_parser("key", help="list, add, remove or change the key slots of an encrypted repository")
    ksub = p.add_subparsers(dest="key_command", required=True)
    add_repo_options(ksub.add_parser("list", help="list the key slots (the one that opened is marked *)"))
    for name, what in (("add", "add a key slot for a new key"), ("passwd", "replace the slot that opens by a new key")):
        q = ksub.add_parser(name, help=what)
        add_repo_options(q)
        new = q.add_argument_group("the new key (or its passphrase in CBT_MOVER_NEW_PASSWORD)")
        new.add_argument("--new-password-file", metavar="FILE", help="file holding the new passphrase")
        new.add_argument("--new-key-file", metavar="FILE", help="new key file (at least 32 random bytes)")
        new.add_argument("--new-kms-key", metavar="KEY", help="AWS KMS key id, key ARN, alias/NAME or alias ARN")
    q = ksub.add_parser("remove", help="remove a key slot (not the last, not the one that opens)")
    add_repo_options(q)
    q.add_argument("slot", help="slot id (cbt-mover key list)")
    p.set_defaults(handler=cmd_key)


def cmd_key(args: argparse.Namespace) -> int:
    from movers.repo import keys

    new = None
    if args.key_command in ("add", "passwd"):  # before opening: a missing new key costs no KDF
        new = keys.Credentials.gather_new(
            args.new_password_file,
            args.new_key_file,
            kms_key=args.new_kms_key,
            aws_profile=args.s3_profile,
            retry_for=retry_budget(args),
        )
        if new is None or len(new.secrets) != 1:
            raise UsageError(
                f"give one new key: set {keys.NEW_PASSWORD_ENV}, or give --new-password-file FILE,"
                " --new-key-file FILE or --new-kms-key KEY"
            )
    repo = open_repo(args)
    if repo.keys is None:
        raise UsageError(f"{repo.describe()} is not encrypted: it has no key slots")
    store, opened = repo.store, repo.opened_by
    if args.key_command == "list":
        slots, damaged = keys.read_slots(store)
        rows = [{**slot.describe(), "opened": slot.id == opened} for slot in slots]
        broken = [{"key": key, "error": why} for key, why in damaged]
        if args.json:
            print(json.dumps({"slots": rows, "damaged": broken}, sort_keys=True))
        else:
            for row in rows:
                kdf = row["kdf"] or {}
                cost = f"scrypt n={kdf['n']} r={kdf['r']} p={kdf['p']}" if kdf else row["kms_key"] or "-"
                print(f"{'*' if row['opened'] else ' '} {row['slot']}\t{row['kind']}\t{row['created']}\t{cost}")
            for row in broken:
                print(f"! damaged: {row['error']}")
        return 0
    if args.key_command == "remove":
        keys.remove_slot(store, args.slot, opened)
        emit(args, {"removed": args.slot}, f"removed key slot {args.slot}")
        return 0
    assert new is not None
    secret, cost = new.secrets[0], keys.kdf_cost()
    if args.key_command == "add":
        slot = keys.add_slot(store, repo.config.repo_id, repo.keys.master, secret, cost)
        emit(args, {"added": slot, "kind": secret.kind}, f"added key slot {slot} ({secret.kind})")
        return 0
    slot = keys.replace_slot(store, repo.config.repo_id, repo.keys.master, opened, secret, cost)
    emit(args, {"added": slot, "removed": opened, "kind": secret.kind}, f"replaced key slot {opened} by {slot}")
    return 0
