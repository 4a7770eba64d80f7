"""sacct at depth: the jobs table's indexes lead with each of sacct's common filters
(user, account, state) and carry the end time beside it, so a filter with a time
window (``-S``) is one index range; ``(end_time, job_id)`` finds where a window
starts in job id order (sacct pages by job id); job_runs gets its end time indexed
(fair-share usage and sreport read earlier runs by it). The single-column indexes
the new ones start with are dropped: each insert writes as many indexes as before.

Sets meta.schema_version to 6.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_OLD = {
    "ix_jobs_state": ["state"],
    "ix_jobs_user": ["user"],
    "ix_jobs_end_time": ["end_time"],
    "ix_jobs_account": ["account"],
}
_NEW = {
    "ix_jobs_state_end": ["state", "end_time"],
    "ix_jobs_user_end": ["user", "end_time"],
    "ix_jobs_account_end": ["account", "end_time"],
    "ix_jobs_end_id": ["end_time", "job_id"],
}


def upgrade() -> None:
    for name, columns in _NEW.items():
        op.create_index(name, "jobs", columns)
    for name in _OLD:
        op.drop_index(name, table_name="jobs")
    op.create_index("ix_job_runs_end_time", "job_runs", ["end_time"])
    op.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")


def downgrade() -> None:
    op.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    op.drop_index("ix_job_runs_end_time", table_name="job_runs")
    for name, columns in _OLD.items():
        op.create_index(name, "jobs", columns)
    for name in _NEW:
        op.drop_index(name, table_name="jobs")
