"""`margin keys create|list|revoke|quota`: manage API keys and tenant quotas.

`create` prints only the new key on stdout (it is shown once and never stored; only its SHA-256
is); everything else goes to stderr, so `KEY=$(margin keys create ...)` works. The commands read
the same settings as `margin serve` (`--data-dir` or DATA_DIR, `--database-url` or DATABASE_URL).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from app.scopes import SCOPES

if TYPE_CHECKING:
    from app.config import Settings


def add_parser(commands, common) -> None:
    """Register `keys` under the main parser's subcommands; `common` adds the settings flags."""
    keys = commands.add_parser("keys", help="manage API keys and tenant quotas")
    sub = keys.add_subparsers(dest="keys_command", required=True)
    _add_create(sub, common)
    _add_list(sub, common)
    _add_revoke(sub, common)
    _add_quota(sub, common)


def _add_create(sub, common) -> None:
    create = sub.add_parser("create", help="create a key and print it (once) on stdout")
    common(create)
    create.add_argument("--tenant", required=True, help="the tenant the key acts for")
    create.add_argument("--name", required=True, help="a label to recognise the key by")
    create.add_argument(
        "--scope",
        action="append",
        required=True,
        choices=SCOPES,
        help="read, train, predict or admin (repeat for several)",
    )


def _add_list(sub, common) -> None:
    listing = sub.add_parser("list", help="list keys (never the keys themselves)")
    common(listing)
    listing.add_argument("--tenant", help="only this tenant's keys")
    listing.add_argument("--all", action="store_true", help="include revoked keys")


def _add_revoke(sub, common) -> None:
    revoke = sub.add_parser("revoke", help="revoke a key by id or prefix")
    common(revoke)
    revoke.add_argument("key", help="the key's id (key_...) or prefix (mgn_...)")


def _add_quota(sub, common) -> None:
    quota = sub.add_parser(
        "quota",
        help="set a tenant's own quotas (a limit left out stays as it is; 'default' puts it "
        "back to the service-wide one); prints them",
        description="Set a tenant's own quotas and print them. Each limit is the number "
        "allowed, so 0 allows none (--jobs 0: the tenant may queue no job); 'default' puts "
        "it back to the service-wide one (QUOTA_STORAGE_MB, QUOTA_ACTIVE_JOBS, "
        "QUOTA_ACTIVE_PREDICTION_RUNS, RATE_LIMIT; unset or empty: no bound); a limit left "
        "out stays as it is.",
    )
    common(quota)
    quota.add_argument("--tenant", required=True)
    for flag, kind, text in _QUOTA_LIMITS:
        quota.add_argument(flag, type=kind, default=argparse.SUPPRESS, help=text + ", or default")


def _or_default(kind):
    """An argparse type: `kind`, or None for the word 'default'."""
    return lambda text: None if text == "default" else kind(text)


def _at_least(low, kind):
    """An argparse type: a `kind` number no less than `low` (a negative quota is no quota), or
    None for the word 'default'."""

    def parse(text: str):
        if text == "default":
            return None
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not value >= low:
            raise argparse.ArgumentTypeError(f"expected a number >= {low}, got {text}")
        return value

    return parse


# `margin keys quota`'s limits: flag, argparse type, help (each takes 'default' too)
_QUOTA_LIMITS = (
    ("--storage-mb", _at_least(0.0, float), "stored bytes, in MB (0: none)"),
    ("--jobs", _at_least(0, int), "queued or running jobs at once (0: none)"),
    ("--rate", _or_default(str), "requests per key, e.g. '50/second;1000/minute'"),
    ("--prediction-runs", _at_least(0, int), "queued or running prediction runs (0: none)"),
)


def run(args: argparse.Namespace, settings: Settings) -> int:
    # the upgrade is a detail here: stderr holds the command's own message, not Alembic's log
    # (which starts when alembic is imported)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    from app import migrate
    from app.db import Database
    from app.services import keys

    migrate.upgrade(settings.db_url)
    db = Database(settings.db_url)
    try:
        return _dispatch(args, db, keys)
    except keys.KeyRequestError as exc:
        print(f"margin keys: {exc}", file=sys.stderr)
        return 2
    finally:
        db.dispose()


def _dispatch(args, db, keys) -> int:
    _COMMANDS[args.keys_command](args, db, keys)
    return 0


def _create(args, db, keys) -> None:
    row, key = keys.create_key(db, args.tenant, args.name, args.scope)
    print(
        f"created key {row.id} ({row.prefix}...) for tenant {row.tenant!r}, scopes "
        f"{','.join(row.scopes)}; it is shown once, store it now",
        file=sys.stderr,
    )
    print(key)


def _list(args, db, keys) -> None:
    print("id\ttenant\tname\tprefix\tscopes\tcreated_at\trevoked_at")
    for row in keys.list_keys(db, args.tenant, revoked=args.all):
        revoked = row.revoked_at.isoformat() if row.revoked_at else "-"
        print(
            f"{row.id}\t{row.tenant}\t{row.name}\t{row.prefix}\t{','.join(row.scopes)}\t"
            f"{row.created_at.isoformat()}\t{revoked}"
        )


def _revoke(args, db, keys) -> None:
    row = keys.revoke_key(db, args.key)
    print(f"revoked key {row.id} ({row.prefix}...) of tenant {row.tenant!r}", file=sys.stderr)


def _quota(args, db, keys) -> None:
    keep = keys.KEEP  # a limit left out of the command
    row = keys.set_quota(
        db,
        args.tenant,
        _megabytes_as_bytes(getattr(args, "storage_mb", keep), keep),
        getattr(args, "jobs", keep),
        getattr(args, "rate", keep),
        getattr(args, "prediction_runs", keep),
    )
    print(
        f"tenant {row.id!r}: storage {row.max_storage_bytes} bytes, "
        f"active jobs {row.max_active_jobs}, "
        f"active prediction runs {row.max_active_prediction_runs}, rate {row.rate_limit}",
        file=sys.stderr,
    )


def _megabytes_as_bytes(megabytes, keep):
    """--storage-mb in bytes; None ('default') and `keep` (left out) stay as they are."""
    return megabytes if megabytes in (None, keep) else int(megabytes * 2**20)


_COMMANDS = {"create": _create, "list": _list, "revoke": _revoke, "quota": _quota}
