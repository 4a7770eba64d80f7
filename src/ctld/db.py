"""``corral db``: the store's schema, for operators (``python -m ctld.db``).

``corral db upgrade`` migrates the store named by the config (or ``--url``) to the
schema this corral needs, keeping its data; ``corral db current`` prints its revision.
Stop every ctld and back the store up first: ctld refuses a schema it does not know.
"""

from __future__ import annotations

import argparse
import sys

import sqlalchemy as sa

from corral.config import load_config
from corral.errors import CorralError, StoreError
from ctld import migrate
from ctld.store import normalize_url


def _url(args: argparse.Namespace) -> str:
    if args.url:
        return str(args.url)
    return load_config(args.config).controller.effective_store_url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="corral db", description="the store's schema")
    parser.add_argument("action", choices=["upgrade", "current", "head"])
    parser.add_argument(
        "-f", "--config", help="cluster config (default $CORRAL_CONF or /etc/corral/corral.toml)"
    )
    parser.add_argument("--url", help="store URL (default: the config's controller.store_url)")
    args = parser.parse_args(argv)
    if args.action == "head":
        print(migrate.head())
        return 0
    try:
        url = _url(args)
        try:
            engine = sa.create_engine(normalize_url(url))
        except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as exc:
            raise StoreError(f"{url}: not a store URL this corral can open: {exc}") from None
        shown = engine.url.render_as_string(hide_password=True)
        try:
            if args.action == "current":
                with engine.connect() as conn:
                    print(migrate.current(conn) or "empty")
                return 0
            before, after = migrate.upgrade(engine)
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"{shown}: {exc}") from exc
        finally:
            engine.dispose()
    except CorralError as exc:
        print(f"corral db: error: {exc}", file=sys.stderr)
        return exc.exit_code
    if before == after:
        print(f"{shown}: already at {after}")
    else:
        print(f"{shown}: upgraded from {before or 'nothing'} to {after}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
