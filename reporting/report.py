"""What a backup run tells people: summary rows and Prefect artifacts (its events: ``reporting.events``).

A volume's byte counts (the mover's result, ``movers.pipeline.stats.BackupStats``) reconcile:

- read = zero + new + already stored, where already stored = found in the repository (dedup) + unchanged
  since the base (a scan compares block digests with its parent's and does not chunk those blocks again);
- uploaded = data (the packs of the new chunks, compressed) + metadata (index, map and manifest objects);
- changed = the bytes the change source named (CBT); a scan's = read - unchanged. A CBT backup reads at least
  the changed bytes (nearby changes are read together).

Ratios:

- dedup = non-zero bytes read / bytes of chunks new to the repository (``inf`` when everything read
  was already stored, ``None`` when nothing was read);
- compression = raw bytes of the new chunks / bytes uploaded for them (data objects only);
- throughput = bytes read from the snapshot per second of the mover's run.

Artifacts (``publish``): the table ``backup-<app>`` (one row per volume, ``reporting.tables``' style) and the
markdown ``backup-<app>-restore`` (the run, each volume's full backup id and base, and how to restore: the
``restore-app`` deployments the Prefect API has, and the CLI with the credentials of the Secret the run used).
"""

from __future__ import annotations

import json
import logging
import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from movers.backup.plan import VolumePlan
from movers.backup.request import BackupResult
from reporting.best_effort import best_effort
from reporting.tables import command, markdown_table, rate, seconds, size, table

if TYPE_CHECKING:
    from movers.backup.snapshots import Retired, SnapshotSet
    from tasks.kube import Snapshots

RESTORE_FLOW = "restore-app"
# the Secret's keys the CLI needs, as (Secret key, how the CLI takes it): storage credentials, the repository key
CLI_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_REGION")
CLI_KEY_FILES = (("password", "--password-file", "repo.pass"), ("keyfile", "--key-file", "repo.key"))
log = logging.getLogger(__name__)


def _ratio(numerator: float, denominator: float) -> float | None:
    if numerator <= 0:
        return None
    return math.inf if denominator <= 0 else round(numerator / denominator, 2)


def volume_row(volume: str, plan: VolumePlan, result: BackupResult, snapshot: str | None = None) -> dict[str, Any]:
    """One volume's summary (plain numbers) from its plan and its mover's result; ``snapshot`` says how its
    snapshot was taken (e.g. ``per-pvc (fallback: ...)``), ``why`` is the plan's reason, ``cbt_fallback`` the mover's
    when it used another change source, ``base_backup`` the backup an incremental built on."""
    read, new, stored = result.read_bytes, result.new_chunk_bytes, result.stored_bytes
    duration = result.duration_s
    return {
        "volume": volume,
        "mode": result.mode,
        "planned": plan.change_source,
        "why": plan.why,
        "cbt_fallback": result.cbt_fallback,
        "snapshot": snapshot,
        "change_source": result.change_source,
        "changed_bytes": result.changed_bytes,
        "read_bytes": read,
        "zero_bytes": result.zero_bytes,
        "new_bytes": new,
        "already_stored_bytes": result.dedup_bytes + result.unchanged_bytes,
        "uploaded_bytes": stored,
        "data_bytes": result.pack_bytes,
        "metadata_bytes": result.metadata_bytes,
        "dedup_ratio": _ratio(read - result.zero_bytes, new),
        "compression_ratio": _ratio(new, stored - result.metadata_bytes) if new else None,
        "duration_s": round(duration, 3),
        "throughput_bps": int(read / duration) if duration > 0 else None,
        "reused_packs": result.reused_packs,
        "base_backup": result.parent,
        "backup_id": result.backup_id,
    }


def snapshot_text(taken: SnapshotSet) -> str:
    """How a run took its snapshots, for its table: ``group``, ``per-pvc`` or ``per-pvc (fallback: why)``."""
    return f"{taken.path} (fallback: {taken.fallback})" if taken.fallback else taken.path


def _times(r: float | None) -> str:
    return "-" if r is None else "all stored before" if math.isinf(r) else f"{r:.2f}x"


def reason(row: dict[str, Any]) -> str:
    """Why the volume got its mode: the plan's reason, and the mover's fallback when it used another source."""
    if row["change_source"] == row["planned"]:
        return row["why"] or "-"
    return f"planned {row['planned']} ({row['why']}); {row.get('cbt_fallback') or 'fell back'}"


def display_rows(rows: list[dict[str, Any]], freeze_s: float | None = None) -> list[dict[str, str]]:
    """The rows as people read them (``reporting.tables``: sizes in KiB/MiB/GiB, ratios as ``1.25x``); ``freeze_s``
    is the run's freeze window (every volume's snapshot was taken in it). The numbers come first and the long texts
    (reason, snapshot) last: the UI shows as many columns as fit and scrolls the rest."""
    return table(
        {
            "volume": r["volume"],
            "mode": r["mode"],
            "changed": size(r["changed_bytes"]),
            "read": size(r["read_bytes"]),
            "zero": size(r.get("zero_bytes")),
            "new": size(r.get("new_bytes")),
            "already stored": size(r.get("already_stored_bytes")),
            "uploaded": size(r["uploaded_bytes"]),
            "metadata": size(r.get("metadata_bytes")),
            "dedup": _times(r["dedup_ratio"]),
            "compression": _times(r["compression_ratio"]),
            "duration": seconds(r["duration_s"]),
            "throughput": rate(r["throughput_bps"]),
            "freeze window": seconds(freeze_s),
            "backup id": r["backup_id"],
            "base backup": r.get("base_backup"),
            "change source": r["change_source"],
            "reason": reason(r),
            "snapshot": r.get("snapshot"),
        }
        for r in rows
    )


def restore_deployments() -> list[str]:
    """The ``restore-app`` deployments of the Prefect API this run talks to, as ``restore-app/<name>``; none when
    it cannot say (logged)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    found = []  # the report then shows the CLI only
    with best_effort(f"cannot list the {RESTORE_FLOW} deployments", log):
        with get_client(sync_client=True) as client:
            found = client.read_deployments(flow_filter=FlowFilter(name=FlowFilterName(any_=[RESTORE_FLOW])))
    return sorted(f"{RESTORE_FLOW}/{d.name}" for d in found)


@dataclass(frozen=True)
class BackupRun:
    """A backup run as its restore report names it: run id, namespace, application, repository, how its snapshots
    were taken (``snapshot_text`` and the path's reason) and its freeze window."""

    run_id: str
    namespace: str
    app: str
    repo_url: str
    snapshots: str | None = None
    freeze_s: float | None = None


@dataclass(frozen=True)
class RestoreWith:
    """What restoring a backup run takes: the credentials Secret ``secret`` (its keys ``secret_keys``, by name:
    never a value), the ``restore-app`` deployments, the writer pods' ``image`` and ``service_account``."""

    secret: str | None = None
    secret_keys: Sequence[str] = ()
    deployments: Sequence[str] = ()
    writer: dict[str, str | None] | None = None


def restore_markdown(run: BackupRun, rows: list[dict[str, Any]], how: RestoreWith = RestoreWith()) -> str:
    """The run (each volume's mode, base and full backup id, the reason for its mode) and what to run to restore
    it, as printed: the ``restore-app`` deployments (none: said so), and the CLI with the storage credentials and
    key taken from the Secret the backup used."""
    run_id, namespace, app, repo_url = run.run_id, run.namespace, run.app, run.repo_url
    snapshots, freeze_s = run.snapshots, run.freeze_s
    secret, secret_keys, deployments, writer = how.secret, how.secret_keys, how.deployments, how.writer
    volumes = [
        {
            "volume": r["volume"],
            "mode": r["mode"],
            "base backup": r.get("base_backup"),
            "backup id": r["backup_id"],
            "reason": reason(r),
        }
        for r in rows
    ]
    out = [
        f"# Backup {run_id} of `{namespace}` ({app})\n",
        f"Repository `{repo_url}`; snapshots {snapshots or '-'}; freeze window {seconds(freeze_s)}.\n",
        markdown_table(volumes),
        "## Restore the application (Prefect)\n",
    ]
    if deployments:
        request = {"repo": repo_url, "namespace": namespace, "backup": run_id, "repo_secret": secret or "<secret>"}
        request |= {k: v for k, v in (writer or {}).items() if v} | {"target_namespace": namespace}
        out += [
            command(
                ["prefect", "deployment", "run", f"'{deployments[0]}'"],
                [("--param", shlex.quote(f"request={json.dumps(request)}"))],
            ),
            f"Deployments of `{RESTORE_FLOW}` on this Prefect server: {', '.join(f'`{d}`' for d in deployments)}."
            ' For one volume add `"pvcs": ["<pvc>"]` to the request; another `target_namespace` needs the Secret'
            f" `{secret}` and the ServiceAccount there. Existing PVCs are never overwritten unless the request says"
            ' `"overwrite": true`. `"in_place": true` rewrites only what differs on the application\'s own Block'
            ' claims (stop the pods that use them first, or add `"scale_down": true` to have their Deployments and'
            " StatefulSets scaled down and back; the volumes stay the same, so the next backup stays a CBT"
            " delta); while this run's snapshots are kept in the cluster, a restore into this namespace provisions"
            ' from them first (`"source"`: `auto`, `snapshot` or `repository`).\n',
        ]
    else:
        out.append(
            f"This Prefect server has no `{RESTORE_FLOW}` deployment: deploy it (`prefect deploy --name restore`,"
            " see README.md) to restore from here, or use the CLI below.\n"
        )
    out += [
        "## Restore one volume onto an image file or block device (CLI)\n",
        *_cli(repo_url, namespace, rows, secret, secret_keys),
    ]
    return "\n".join(out)


def _cli(
    repo_url: str, namespace: str, rows: list[dict[str, Any]], secret: str | None, keys: Sequence[str]
) -> list[str]:
    key = [(option, file) for name, option, file in CLI_KEY_FILES if name in keys][:1]
    env = [name for name in CLI_ENV if name in keys]
    out = []
    if secret and (env or key):
        lines = [f'secret() {{ kubectl -n {namespace} get secret {secret} -o "jsonpath={{.data.$1}}" | base64 -d; }}']
        lines += [f'export {name}="$(secret {name})"' for name in env]
        lines += [f"(umask 077; secret {name} > {file})" for name, _o, file in CLI_KEY_FILES if (_o, file) in key]
        out += [
            f"The repository's credentials, from the Secret `{namespace}/{secret}` the backup used (by name; the"
            " passphrase is never shown):\n",
            "```sh\n" + "\n".join(lines) + "\n```\n",
        ]
    for r in rows:
        image = r["volume"].replace("/", "-") + ".img"
        options = [("--repo", repo_url), ("--volume", r["volume"]), ("--backup", r["backup_id"]), *key]
        out.append(command(["cbt-mover", "restore"], [*options, ("--device", image)]))
    out.append(
        "`--device`: an image file (created) or a block device at least as large as the volume. The key can also"
        " be given as `CBT_MOVER_PASSWORD` / `CBT_MOVER_PASSWORD_FILE`, `--key-file` or `--kms-key`.\n"
    )
    return out


def retained_text(retired: Retired) -> str:
    """What the run left behind of the bases it retired (``retained_snapshots: keep``), for the table's description."""
    left = retired.retained
    if not left:
        return ""
    names = ", ".join(f"{c.kind} {c.name} ({c.handle or 'no handle'})" for c in left)
    return f"; left behind (retained_snapshots: keep): {names}"


def publish(
    run_id: str, policy: Any, snap: Snapshots, retired: Retired, rows: list[dict[str, Any]], secret_keys: Sequence[str]
) -> None:
    """The run's table (``backup-<app>``) and restore markdown (``backup-<app>-restore``) artifacts: its snapshot
    set ``snap``, the bases it ``retired``, its summary ``rows``; ``secret_keys``: the credentials Secret's key names
    as the run's preflight read them (``Preflight.secret_keys``; names, never values)."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    ns, url, secret = policy.namespace, policy.repository.url, policy.repository.credentials_secret
    freeze = snap.freeze_s
    create_table_artifact(
        key=f"backup-{policy.name}",
        table=display_rows(rows, freeze),
        description=f"backup {run_id} of {ns} to {url}; freeze window {seconds(freeze)}{retained_text(retired)}",
    )
    run = BackupRun(run_id, ns, policy.name, url, f"{snapshot_text(snap.taken)} ({snap.reason or '-'})", freeze)
    how = RestoreWith(
        secret=secret,
        secret_keys=secret_keys,
        deployments=restore_deployments(),
        writer={"image": policy.mover.image, "service_account": policy.mover.service_account},
    )
    markdown = restore_markdown(run, rows, how)
    create_markdown_artifact(key=f"backup-{policy.name}-restore", markdown=markdown)
