"""Shared pytest fixtures. The S3 test server fixtures live in ``tests/s3server.py``."""

try:  # tests/ as a package (rootdir on sys.path: ``python -m pytest`` or a tests/__init__.py)
    from tests.s3server import moto_server, s3_bucket  # noqa: F401  (fixtures, re-exported)
except ModuleNotFoundError:  # plain ``pytest`` with tests/ itself on sys.path
    from s3server import moto_server, s3_bucket  # noqa: F401
