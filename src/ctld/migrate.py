"""The store's schema: which revision a database is at, and migrating it (Alembic).

ctld opens only a store at the head revision this code knows (an empty database it
creates at head); anything older is migrated by an operator with ``corral db upgrade``,
anything newer or unknown is refused. A store made before migrations existed has the
baseline tables, ``meta.schema_version`` 1 and no ``alembic_version``: it is the
baseline revision, stamped as such on upgrade.
"""

from __future__ import annotations

import pathlib

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection, Engine

from corral.errors import StoreError

BASELINE = "0001"
_LOCATION = pathlib.Path(__file__).parent / "migrations"


def _config(conn: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_LOCATION))
    if conn is not None:
        cfg.attributes["connection"] = conn
    return cfg


def head() -> str:
    rev = ScriptDirectory.from_config(_config()).get_current_head()
    assert rev is not None
    return rev


def known(rev: str) -> bool:
    script = ScriptDirectory.from_config(_config())
    try:
        return script.get_revision(rev) is not None
    except Exception:  # alembic raises its own errors for unknown ids
        return False


def current(conn: Connection) -> str | None:
    """The database's revision; None for an empty database."""
    rev = MigrationContext.configure(conn).get_current_revision()
    if rev is not None:
        return rev
    # the controllers' lease (ctld.lease) is no part of the schema
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
    with engine.begin() as conn:
        rev = current(conn)
        if rev is not None and not known(rev):
            raise StoreError(f"the store is at revision {rev}, which this corral does not know")
        cfg = _config(conn)
        if rev == BASELINE and MigrationContext.configure(conn).get_current_revision() is None:
            command.stamp(cfg, BASELINE)  # made before migrations: the tables are there
        command.upgrade(cfg, "head")
    return rev, head()
