"""The audit logs' directory shared by several pytest runs (``--audit-dir``, ``tests/conftest.py``)."""

from pathlib import Path

RAN_MODULES = "test-files-run.txt"  # in an --audit-dir: the test files of the runs that wrote its logs


def ran_modules(audit_dir: Path) -> set[str]:
    """The test files the runs sharing ``audit_dir`` ran (none when it is a session's own)."""
    path = audit_dir / RAN_MODULES
    return set(path.read_text(encoding="utf-8").split()) if path.exists() else set()
