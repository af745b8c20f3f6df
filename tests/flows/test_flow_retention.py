"""Retention by policy, end to end on the local cluster: two policies over the same claims, a weekly one with the
app's quiesce hooks and a nightly one without. Each backup records the policy that made it, and each policy's
rules forget only its own backups, after every backup run and in the maintenance flow: the weekly policy's
application-consistent backups outlive the nightly policy's rules."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from movers.repo.manifest import POLICY_TAG, RUN_TAG
from movers.repo.selection import select
from reporting.maintenance_report import artifact_key
from tests.flowapp import REPO_SECRET, app_states, artifact, deploy_app, flow_kubeconfig, open_repo, policy_file

NS = "twopolicies"


@pytest.fixture(scope="module")
def harness(prefect_api):
    return prefect_api


@pytest.fixture(scope="module")
def app(local_cluster, module_env):
    return deploy_app(local_cluster, module_env.setenv, NS, "two-policies")


def _runs(repo_url) -> dict[str, dict]:
    """run id -> {policy, pvcs} of every backup in the repository."""
    repo, found = open_repo(repo_url), {}
    for ref in repo.list_backups():
        m = repo.read_manifest(ref.volume, ref.backup_id)
        run = found.setdefault(m.tags[RUN_TAG], {"policy": m.tags.get(POLICY_TAG), "pvcs": []})
        run["pvcs"].append(m.volume.pvc)
    return {run: {**r, "pvcs": sorted(r["pvcs"])} for run, r in found.items()}


def test_a_nightly_policy_never_expires_the_weekly_policys_backups(local_cluster, app, harness, tmp_path):
    from flows.backup import backup_app
    from flows.maintenance import maintain_repo

    core = client.CoreV1Api(local_cluster.client)
    only = {"keep_last": 0, "keep_daily": 0, "keep_weekly": 0, "keep_monthly": 0}
    weekly = policy_file(tmp_path / "weekly.yaml", "app-weekly", NS, app["repo"], retention=only | {"keep_weekly": 4})
    nightly = policy_file(
        tmp_path / "nightly.yaml",
        "app-nightly",
        NS,
        app["repo"],
        hooks={"pre": [], "post": []},
        retention=only | {"keep_last": 1},
    )
    kubeconfig = flow_kubeconfig(local_cluster)

    week = backup_app(policy_path=weekly, kubeconfig=kubeconfig)
    first = backup_app(policy_path=nightly, kubeconfig=kubeconfig)
    second = backup_app(policy_path=nightly, kubeconfig=kubeconfig)
    assert app_states(core, NS) == ["frozen", "thawed"], "only the weekly policy quiesces the app"
    # the nightly run's retention (keep_last 1) judged its own runs only: the weekly run stays, whole
    assert len(second["expired"]["deleted"]) == 2, second["expired"]  # the first nightly run, both volumes
    runs = _runs(app["repo"])
    assert runs == {
        week["run_id"]: {"policy": "app-weekly", "pvcs": ["data", "logs"]},
        second["run_id"]: {"policy": "app-nightly", "pvcs": ["data", "logs"]},
    }, runs
    judged = {r["run"]: r for r in second["expired"]["runs"]}
    assert set(judged) == {first["run_id"], second["run_id"]}, judged  # the weekly run was not even judged
    assert judged[first["run_id"]]["action"] == "forget" and judged[second["run_id"]]["action"] == "keep"

    # a maintenance run with both policies: each keeps its own by its own rules (no merge by the larger count)
    asked = {"repo": app["repo"], "policy_paths": [weekly, nightly], "key_secret": f"{NS}/{REPO_SECRET}"}
    dry = maintain_repo({**asked, "prune": False, "verify": "off", "dry_run": True}, kubeconfig=kubeconfig)
    assert dry["forgotten"] == 0, dry
    later = backup_app(policy_path=nightly, kubeconfig=kubeconfig, forget_expired=False)
    done = maintain_repo({**asked, "grace": 0, "verify": "full"}, kubeconfig=kubeconfig)
    assert done["forgotten"] == 2 and done["verify"]["ok"], done  # the older nightly run, both volumes
    assert set(_runs(app["repo"])) == {week["run_id"], later["run_id"]}
    rows = json.loads(artifact(artifact_key(app["repo"], "retention")).data)  # the table says runs and policies
    verdicts = {(r["run"], r["policy"], r["action"], r["why"].split(",")[0]) for r in rows}
    assert verdicts == {
        (f"{week['run_id']} (complete)", "app-weekly", "keep", "newest complete"),
        (f"{second['run_id']} (complete)", "app-nightly", "forget", "no rule keeps it"),
        (f"{later['run_id']} (complete)", "app-nightly", "keep", "newest complete"),
    }, rows
    # the weekly, application-consistent run restores as one point in time
    chosen = select(open_repo(app["repo"]), NS, None, week["run_id"])
    assert chosen.complete and [s.pvc for s in chosen.volumes] == ["data", "logs"]
    # the nightly policy's latest is a complete run too, and it is the whole-app "latest"
    assert select(open_repo(app["repo"]), NS, None, "latest").run == later["run_id"]
