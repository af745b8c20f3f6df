"""Shared pytest fixtures.

* ``clean_env`` (autouse): every test starts without ``CBT_MOVER_*``, ``AWS_*`` and ``KUBECONFIG`` in
  ``os.environ``, so what the developer's shell has set cannot steer a test; a test that needs one sets it
  (``monkeypatch.setenv``, or an ``env=`` of its subprocess).
* ``moto_server`` / ``s3_bucket`` / ``unconditional_s3``: the S3 test server (``tests/s3server.py``).
* ``local_cluster`` (module scope): the whole local cluster (``localcluster.cluster.LocalCluster``)
  with default settings; ``make_local_cluster(**settings)`` starts one with other settings (no
  CBT, no group snapshots, older served versions) that is stopped when the test ends.
* every cluster these fixtures start writes its API audit log into the session's ``audit_dir``;
  ``tests/cluster/test_shipped_rbac.py`` (always run last) replays what the product's identities called
  against the shipped roles and validates every manifest they sent. ``make test`` runs the suite on two
  pytest-xdist workers with ``--audit-dir DIR`` (shared by the workers; the test files each run collected are
  listed there too), then ``tests/cluster/test_shipped_rbac.py`` on its own with the same ``--audit-dir``.
* ``prefect_api`` (session scope): Prefect's local API (``prefect_test_harness``: a temporary
  database and server) for the flow tests, results in a temporary directory; yields its URL. One server for the
  whole session, because each start costs 15-60 s on 2 cores; tests keep apart by namespace and artifact keys.
"""

import os
from pathlib import Path

import pytest

from tests.audit import RAN_MODULES
from tests.s3server import moto_server, s3_bucket, unconditional_s3  # noqa: F401  (fixtures, re-exported for all tests)

AUDITED_LAST = "test_shipped_rbac.py"
STRIPPED_ENV_PREFIXES = ("CBT_MOVER_", "AWS_")
STRIPPED_ENV_NAMES = ("KUBECONFIG",)


class ModuleEnv:
    """Variables a module-scoped fixture sets for the tests of its module: set at once, and again by ``clean_env``
    for each later test of the module (after it strips them); all undone when the module ends."""

    def __init__(self, patch: pytest.MonkeyPatch) -> None:
        self._patch = patch
        self.kept: dict[str, str] = {}

    def setenv(self, name: str, value: str) -> None:
        self.kept[name] = value
        self._patch.setenv(name, value)


@pytest.fixture(scope="module")
def module_env():
    """A ``ModuleEnv`` of the test module (e.g. the local S3's ``AWS_*`` for a module's flows, which read the
    repository in-process)."""
    with pytest.MonkeyPatch.context() as patch:
        yield ModuleEnv(patch)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, module_env):
    """Strip the product's and the cloud SDKs' variables from ``os.environ`` for the test (restored after it); what
    a module-scoped fixture set through ``module_env`` is set again."""
    for name in list(os.environ):
        if name.startswith(STRIPPED_ENV_PREFIXES) or name in STRIPPED_ENV_NAMES:
            monkeypatch.delenv(name)
    for name, value in module_env.kept.items():
        monkeypatch.setenv(name, value)


def pytest_addoption(parser):
    parser.addoption(
        "--audit-dir",
        help="where the clusters' API audit logs go (default: a temporary directory of the session); shared by"
        " pytest-xdist workers and a later run of tests/cluster/test_shipped_rbac.py",
    )


def pytest_collection_modifyitems(session, config, items):
    """The audit replay runs after every test whose clusters it reads."""
    items.sort(key=lambda item: item.path.name == AUDITED_LAST)


def pytest_collection_finish(session):
    """With ``--audit-dir``: note the test files this run (or xdist worker) runs, for the replay's coverage."""
    shared = session.config.getoption("--audit-dir")
    if shared and session.items:
        Path(shared).mkdir(parents=True, exist_ok=True)
        with open(Path(shared) / RAN_MODULES, "a", encoding="utf-8") as f:
            f.write("".join(f"{name}\n" for name in sorted({item.path.name for item in session.items})))


@pytest.fixture(scope="session")
def audit_dir(tmp_path_factory, pytestconfig):
    shared = pytestconfig.getoption("--audit-dir")
    if shared:
        Path(shared).mkdir(parents=True, exist_ok=True)
        return Path(shared)
    return tmp_path_factory.mktemp("audit")


def _audit_file(audit_dir, nodeid: str, n: int = 0):
    import re

    return audit_dir / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', nodeid)[-150:]}-{n}.jsonl"


@pytest.fixture(scope="module")
def local_cluster(tmp_path_factory, audit_dir, request):
    from localcluster.cluster import LocalCluster

    audit = _audit_file(audit_dir, request.node.nodeid)
    with LocalCluster(tmp_path_factory.mktemp("cluster"), audit_log=audit) as cluster:
        yield cluster


@pytest.fixture
def make_local_cluster(tmp_path, audit_dir, request):
    from localcluster.cluster import LocalCluster

    started = []

    def make(**settings):
        settings.setdefault("audit_log", _audit_file(audit_dir, request.node.nodeid, len(started)))
        cluster = LocalCluster(tmp_path / f"cluster-{len(started)}", **settings).start()
        started.append(cluster)
        return cluster

    try:
        yield make
    finally:
        for cluster in reversed(started):
            cluster.stop()


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory):
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_LOCAL_STORAGE_PATH,
        PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW,
        PREFECT_SERVER_ANALYTICS_ENABLED,
        temporary_settings,
    )
    from prefect.testing.utilities import prefect_test_harness

    # tasks called on their own (tests/flows/test_maintenance.py) log without a flow run: not worth a warning; the
    # results of failed runs go to the session's temporary directory, not ~/.prefect/storage
    quiet = {
        PREFECT_SERVER_ANALYTICS_ENABLED: False,
        PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW: "ignore",
        PREFECT_LOCAL_STORAGE_PATH: str(tmp_path_factory.mktemp("prefect-storage")),
    }
    with temporary_settings(quiet):
        with prefect_test_harness(server_startup_timeout=120):
            yield PREFECT_API_URL.value()


@pytest.fixture
def repo(tmp_path):
    """A ``file://`` repository made with ``cbt-mover init`` (its URL); a test module's own ``repo`` overrides it."""
    from tests.functional.test_cli import run

    url = f"file://{tmp_path}/repo"
    run("init", "--insecure-no-encryption", "--repo", url, check_rc=0)
    return url
