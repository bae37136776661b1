"""The coordinator database's Alembic revisions (run by ``fedclust coordinator migrate``;
see :mod:`fedclust.infra.schema`). A new table or column is a new file in ``versions/``."""
