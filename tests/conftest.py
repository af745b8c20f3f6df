"""Shared pytest fixtures. The S3 test server fixtures live in ``tests/s3server.py``."""

from tests.s3server import moto_server, s3_bucket  # noqa: F401  (fixtures, re-exported for all tests)
