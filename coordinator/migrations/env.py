"""Alembic's entry point: migrate on the connection fedclust hands over."""

from fedclust.infra.schema import run_env

run_env()
