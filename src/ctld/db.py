"""``corral db``: the store's schema and its backups, for operators (``python -m ctld.db``).

``corral db upgrade`` migrates the store named by the config (or ``--url``) to the
schema this corral needs, keeping its data; ``corral db current`` prints its revision.
``corral db backup FILE`` copies the store while ctld runs; ``corral db restore FILE``
puts a backup back, ctld stopped; ``corral db verify FILE`` checks a backup file and
``corral db check`` the store itself (docs/operations.md). Upgrade and restore refuse
while a ctld holds the store (ctld.storage.storelock).
"""

from __future__ import annotations

import argparse
import sys
import time

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from corral.config import load_config
from corral.errors import CorralError, StoreError
from ctld.storage import backup_file, migrate, storelock
from ctld.storage.store import normalize_url

USAGE = """corral db upgrade|current|head [-f CONFIG] [--url URL]
       corral db backup FILE [-f CONFIG] [--url URL]
       corral db restore FILE [-f CONFIG] [--url URL]
       corral db verify FILE
       corral db check [-f CONFIG] [--url URL]"""


def _url(args: argparse.Namespace) -> str:
    if args.url:
        return str(args.url)
    return load_config(args.config).controller.effective_store_url


def _engine(args: argparse.Namespace) -> Engine:
    url = _url(args)
    try:
        return sa.create_engine(normalize_url(url))
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as exc:
        raise StoreError(f"{url}: not a store URL this corral can open: {exc}") from None


def _parser() -> argparse.ArgumentParser:
    store = argparse.ArgumentParser(add_help=False)
    store.add_argument(
        "-f", "--config", help="cluster config (default $CORRAL_CONF or /etc/corral/corral.toml)"
    )
    store.add_argument("--url", help="store URL (default: the config's controller.store_url)")
    parser = argparse.ArgumentParser(
        prog="corral db", description="the store's schema and backups", usage=USAGE
    )
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    sub.add_parser("upgrade", parents=[store], help="migrate the store to this corral's schema")
    sub.add_parser("current", parents=[store], help="the store's schema revision")
    sub.add_parser("head", help="the schema revision this corral needs")
    for name, doc in (
        ("backup", "copy the store to FILE (online: ctld may run)"),
        ("restore", "put the backup FILE back as the store (every ctld stopped)"),
    ):
        sub.add_parser(name, parents=[store], help=doc).add_argument("file", metavar="FILE")
    sub.add_parser("verify", help="check a backup file").add_argument("file", metavar="FILE")
    sub.add_parser("check", parents=[store], help="read the whole store: is it sound?")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.action == "head":
            print(migrate.head())
            return 0
        if args.action == "verify":
            return _verify(args.file)
        engine = _engine(args)
        try:
            return _act(args, engine)
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"{engine.url.render_as_string(hide_password=True)}: {exc}") from exc
        finally:
            engine.dispose()
    except CorralError as exc:
        print(f"corral db: error: {exc}", file=sys.stderr)
        return exc.exit_code


def _act(args: argparse.Namespace, engine: Engine) -> int:
    shown = engine.url.render_as_string(hide_password=True)
    if args.action == "current":
        with engine.connect() as conn:
            print(migrate.current(conn) or "empty")
        return 0
    if args.action == "upgrade":
        held = storelock.hold(engine, "corral db upgrade", shown)
        try:
            before, after = migrate.upgrade(engine)
        finally:
            if held is not None:
                held.release()
        if before == after:
            print(f"{shown}: already at {after}")
        else:
            print(f"{shown}: upgraded from {before or 'nothing'} to {after}")
        return 0
    from ctld.storage import backup

    if args.action == "check":
        damage = backup.check(engine)
        if damage:
            print(f"{shown}: DAMAGED: {damage}; {backup.DAMAGED}")
            return 1
        print(f"{shown}: ok")
        return 0
    if args.action == "backup":
        header = backup.take(engine, args.file)
        print(
            f"{shown}: backed up to {args.file} (revision {header.revision}, "
            f"{header.payload_bytes} bytes, sha256 {header.payload_sha256})"
        )
        return 0
    from ctld.storage.restore import restore

    done = restore(engine, args.file)
    h = done.header
    print(
        f"{shown}: restored from {args.file} (revision {h.revision}, taken {_when(h.taken_at)} "
        f"by corral {h.corral_version})"
    )
    if done.replaced:
        print(f"the store it replaced is kept as {done.replaced}")
    if h.revision != migrate.head():
        print(
            f"this corral needs revision {migrate.head()}: start corral {h.corral_version}'s "
            "ctld on it, or run `corral db upgrade` first to start this one's"
        )
    return 0


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def _verify(path: str) -> int:
    with backup_file.open_trusted(path) as (h, _payload):
        pass
    known = migrate.known(h.revision)
    print(
        f"{path}: a {h.backend} backup of {h.source}"
        + (f" (schema {h.schema})" if h.schema else "")
        + f", revision {h.revision}, taken {_when(h.taken_at)} by corral {h.corral_version}, "
        f"{h.payload_bytes} bytes, checksum ok"
    )
    if not known:
        print(f"revision {h.revision} is newer than this corral knows (up to {migrate.head()})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
