"""``movers.restore.quiesce``: what the plan says about claims in use and what the report says about the workloads
scaled down and back (pure: no cluster)."""

from __future__ import annotations

from movers.kube.workloads import SCALED_DOWN_FROM, ScaleBack, Scaled, Users, Workload
from movers.restore import quiesce

APP = Workload("Deployment", "shop", "app")
DB = Workload("StatefulSet", "shop", "db")


def test_a_claim_in_use_is_refused_naming_the_pods_and_their_workloads_and_offering_scale_down():
    users = Users(("app-7d-x", "db-0"), (APP, DB))
    (problem,) = quiesce.refusals(users, "data", "shop", scale_down=False)
    assert problem == (
        "PersistentVolumeClaim shop/data is used by pod(s) app-7d-x, db-0 (run by Deployment shop/app, StatefulSet"
        " shop/db): stop them before restoring it in place, or pass scale_down to scale Deployment shop/app,"
        " StatefulSet shop/db down and back"
    )
    assert quiesce.refusals(users, "data", "shop", scale_down=True) == []
    assert quiesce.refusals(Users(), "data", "shop", scale_down=False) == []


def test_a_bare_pod_is_refused_by_name_also_with_scale_down():
    users = Users(("app-7d-x", "user"), (APP,), ("user (a bare pod, no workload runs it)",))
    (without,) = quiesce.refusals(users, "data", "shop", scale_down=False)
    assert "used by pod(s) app-7d-x, user (run by Deployment shop/app)" in without
    (problem,) = quiesce.refusals(users, "data", "shop", scale_down=True)
    assert "used by pod(s) user (a bare pod, no workload runs it): scale_down stops only pods a Deployment" in problem


def test_the_report_line_names_what_was_scaled_back_and_plainly_what_was_not():
    back = ScaleBack((Scaled(APP, 3),), ((Scaled(DB, 2), "scaling StatefulSet shop/db to 2: 403 forbidden"),))
    line = quiesce.describe(back)
    assert line.startswith("scaled down for the restore and back up: Deployment shop/app to 3; SCALING BACK FAILED:")
    assert (
        f"StatefulSet shop/db is still scaled down: scale it to 2 replicas (its annotation {SCALED_DOWN_FROM}" in line
    )
    assert quiesce.describe(ScaleBack()) == "no workload was scaled down"


def test_a_stateful_sets_claims_are_recognised_by_their_template_names():
    sts = {"metadata": {"name": "db"}, "spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"}}]}}
    deploy = {
        "metadata": {"name": "app"},
        "spec": {"template": {"spec": {"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "logs"}}]}}},
    }
    assert quiesce._mounts_any(sts, ["data-db-1"]) and not quiesce._mounts_any(sts, ["data-db-x", "data-dbx-1"])
    assert quiesce._mounts_any(deploy, ["logs"]) and not quiesce._mounts_any(deploy, ["data"])
