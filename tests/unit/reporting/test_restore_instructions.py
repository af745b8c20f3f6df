"""``reporting.report.restore_markdown``: the restore instructions a backup run publishes name a ``restore-app``
run whose one parameter is a request the flow accepts."""

from __future__ import annotations

import json
import re
import shlex

from movers.restore.app_request import RestoreAppRequest
from reporting.report import BackupRun, RestoreWith, restore_markdown

RUN = BackupRun("20261127T010203000000Z-abcdef", "shop", "shop-db", "s3://backups/shop")
ROWS = [
    {"volume": "shop/data", "mode": "full", "backup_id": "b1", "change_source": "scan", "planned": "scan", "why": "-"}
]


def _deployment_command(markdown: str) -> list[str]:
    block = re.search(r"```sh\n(prefect deployment run .*?)\n```", markdown, re.S)
    assert block, markdown
    return shlex.split(block.group(1).replace("\\\n", " "))


def test_the_prefect_instructions_run_the_deployment_with_one_valid_request():
    how = RestoreWith(
        secret="cbt-mover-repo",
        secret_keys=["password"],
        deployments=["restore-app/restore"],
        writer={"image": "registry.example.com/cbt-mover:0.1.0", "service_account": "cbt-mover"},
    )
    words = _deployment_command(restore_markdown(RUN, ROWS, how))
    assert words[:4] == ["prefect", "deployment", "run", "restore-app/restore"]
    (param,) = [w for flag, w in zip(words, words[1:], strict=False) if flag == "--param"]
    name, _, value = param.partition("=")
    assert name == "request"
    request = RestoreAppRequest.model_validate(json.loads(value))
    assert (request.repo, request.namespace, request.backup, request.target) == (
        "s3://backups/shop",
        "shop",
        RUN.run_id,
        "shop",
    )
    markdown = restore_markdown(RUN, ROWS, how)
    assert '`"in_place": true` rewrites only what differs' in markdown and '`"source"`' in markdown
    assert RestoreAppRequest.model_validate(json.loads(value) | {"in_place": True}).in_place
    assert '`"scale_down": true`' in markdown
    assert RestoreAppRequest.model_validate(json.loads(value) | {"in_place": True, "scale_down": True}).scale_down
    assert (request.repo_secret, request.image, request.service_account) == (
        "cbt-mover-repo",
        "registry.example.com/cbt-mover:0.1.0",
        "cbt-mover",
    )


def test_without_a_deployment_the_instructions_say_so_and_print_no_prefect_command():
    markdown = restore_markdown(RUN, ROWS, RestoreWith(secret="cbt-mover-repo"))
    assert "prefect deployment run" not in markdown and "has no `restore-app` deployment" in markdown
