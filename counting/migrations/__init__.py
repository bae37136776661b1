"""The counting service database's Alembic revisions (run by ``fedclust counter migrate``;
see :mod:`fedclust.infra.schema`). A new table or column is a new file in ``versions/``."""
