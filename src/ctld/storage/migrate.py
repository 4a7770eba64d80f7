"""The store's schema: which revision a database is at, and migrating it (Alembic).

ctld opens only a store at the head revision this code knows (an empty database it
creates at head); anything older is migrated by an operator with ``corral db upgrade``,
anything newer or unknown is refused. A store made before migrations existed has the
baseline tables, ``meta.schema_version`` 1 and no ``alembic_version``: it is the
baseline revision, stamped as such on upgrade.

Alembic itself (~11 MiB and half a second of imports) is loaded only to migrate: a
ctld that finds its store at head reads the revisions from the migration files' own
``revision``/``down_revision`` lines and the store's from ``alembic_version``.
"""

from __future__ import annotations

import ast
import functools
import pathlib
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from corral.errors import StoreError

if TYPE_CHECKING:
    from alembic.config import Config

BASELINE = "0001"
_LOCATION = pathlib.Path(__file__).parent / "migrations"


def _config(conn: Connection | None = None) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_LOCATION))
    if conn is not None:
        cfg.attributes["connection"] = conn
    return cfg


@functools.cache
def revisions() -> dict[str, str | None]:
    """Each migration's revision and the one it follows, as its file declares them."""
    out: dict[str, str | None] = {}
    for path in sorted((_LOCATION / "versions").glob("[0-9]*.py")):
        names: dict[str, object] = {}
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        names[target.id] = node.value.value
        rev, down = names.get("revision"), names.get("down_revision")
        if not isinstance(rev, str) or not (down is None or isinstance(down, str)):
            raise StoreError(f"migration {path.name} declares no plain revision/down_revision")
        out[rev] = down
    return out


def head() -> str:
    revs = revisions()
    heads = set(revs) - {down for down in revs.values() if down is not None}
    if len(heads) != 1:
        raise StoreError(f"the migrations have {len(heads)} heads ({sorted(heads)}), not one")
    return heads.pop()


def known(rev: str) -> bool:
    return rev in revisions()


def _stamped(conn: Connection) -> str | None:
    """What ``alembic_version`` holds (as alembic's MigrationContext reads it)."""
    if not sa.inspect(conn).has_table("alembic_version"):
        return None
    rows = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all()
    if len(rows) > 1:
        raise StoreError(f"the store's alembic_version names {len(rows)} revisions, not one")
    return str(rows[0]) if rows else None


def current(conn: Connection) -> str | None:
    """The database's revision; None for an empty database."""
    rev = _stamped(conn)
    if rev is not None:
        return rev
    # the controllers' lease (ctld.storage.lease) is no part of the schema
    tables = set(sa.inspect(conn).get_table_names()) - {"corral_controller_lease"}
    if not tables - {"alembic_version"}:
        return None
    if "meta" in tables:
        version = conn.execute(
            sa.text("SELECT value FROM meta WHERE key = 'schema_version'")
        ).scalar()
        if version == "1":
            return BASELINE
        raise StoreError(f"the store has schema version {version}, which this corral does not know")
    raise StoreError(f"the database has tables {sorted(tables)} but is not a corral store")


def check(engine: Engine, url: str) -> None:
    """Make an empty database, accept one at head, refuse anything else (with the fix)."""
    with engine.begin() as conn:
        rev = current(conn)
        if rev is None:
            from alembic import command

            command.upgrade(_config(conn), "head")
            return
    want = head()
    if rev == want:
        return
    if known(rev):
        raise StoreError(
            f"{url}: the store's schema is at revision {rev}, this ctld needs {want}: "
            "stop every ctld, back the store up, then run `corral db upgrade`"
        )
    raise StoreError(
        f"{url}: the store's schema is at revision {rev}, which this ctld does not know "
        f"(it knows up to {want}): was it made by a newer corral?"
    )


def upgrade(engine: Engine) -> tuple[str | None, str]:
    """Migrate to head, keeping the data; returns (from, to) revisions."""
    from alembic import command

    with engine.begin() as conn:
        rev = current(conn)
        if rev is not None and not known(rev):
            raise StoreError(f"the store is at revision {rev}, which this corral does not know")
        cfg = _config(conn)
        if rev == BASELINE and _stamped(conn) is None:
            command.stamp(cfg, BASELINE)  # made before migrations: the tables are there
        command.upgrade(cfg, "head")
    return rev, head()
