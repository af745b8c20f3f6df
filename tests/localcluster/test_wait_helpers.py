"""The tests' waits say why when they time out: ``tests.localcluster.test_controllers_helpers.wait_for`` names the
last Events of the object it waited on (``localcluster.kubelet.testing.wait_pod`` likewise:
tests/localcluster/test_kubelet_volumes.py)."""

from __future__ import annotations

import pytest

from tests.localcluster.test_controllers_helpers import NS, PVC, local_cluster, pvc, wait_event, wait_for


def test_wait_for_names_the_last_events_of_the_object_it_waited_on(tmp_path):
    with local_cluster(tmp_path) as c:
        c.kube.create(PVC, pvc("on-windows", node="win-a"), NS)  # hostpath has no node plugin on Windows nodes
        wait_event(c.kube, "on-windows", "ProvisioningFailed")
        with pytest.raises(AssertionError) as timed_out:
            wait_for(
                c.kube, PVC, "on-windows", lambda o: (o or {}).get("status", {}).get("phase") == "Bound", timeout=1
            )
        said = str(timed_out.value)
        assert "its last events: [" in said, said
        warning = "('Warning', 'ProvisioningFailed', 'error generating accessibility requirements: no topology key"
        assert f"{warning} found for node win-a')" in said, said  # among the others of the same second
