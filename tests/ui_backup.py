"""``python -m tests.ui_backup``: one ``backup-app`` run of a small two-PVC app on its own local cluster, sent to
the Prefect server of ``PREFECT_API_URL`` (required; the cluster starts while that server may still be starting),
as a worker process would send it. Prints one JSON line:
``{"flow_run_id", "result"}``. The cluster and its temporary directory are gone when it exits.

A process of its own because everything a run sends must reach that server, also from threads that do not
carry Prefect's settings context (the progress updates of the mover's log follower): only the environment
gives them the server.
"""

from __future__ import annotations

import json
import os
import sys

NS = "uismoke"


def main() -> int:
    if not os.environ.get("PREFECT_API_URL"):
        print("ui_backup: set PREFECT_API_URL to the server to send the run to", file=sys.stderr)
        return 2
    from deploy.prefect_server import wait_healthy
    from flows.backup import backup_app
    from localcluster.cluster import LocalCluster
    from tests.flowapp import backup_params, deploy_app

    with LocalCluster() as cluster:  # in a temporary directory of its own, removed when it stops
        app = deploy_app(cluster, os.environ.__setitem__, NS, "ui-smoke", size="8Mi")
        wait_healthy(os.environ["PREFECT_API_URL"])
        state = backup_app(**backup_params(cluster, app["repo"], NS), return_state=True)
        result = state.result()
    print(json.dumps({"flow_run_id": str(state.state_details.flow_run_id), "result": result}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
