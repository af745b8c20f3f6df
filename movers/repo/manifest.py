"""Backup manifests: the root object of one backup and its commit point.

A manifest is JSON at ``backups/<quoted volume id>/<backup id>``; it is written last, after
every pack, index, page and directory it references, so a backup without a manifest does not
exist. ``latest`` of a volume is the greatest backup id under its prefix (ids sort by time).

The manifest carries ``format_version`` and ``mandatory_features``; a reader refuses
versions newer than it knows and features it does not implement (``IncompatibleError``).
Optional fields may be added without a version bump: a missing one decodes to its default and
an unknown key of the manifest, ``volume`` or ``snapshot`` is ignored (``map`` stays strict:
a change there is a mandatory feature). ``volume.pv_name``, ``pv_uid``, ``fs_type``, ``node_affinity``,
``labels`` and ``run_pvcs`` were added that way (see docs/format.md).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote

from movers.errors import IncompatibleError, IntegrityError, UsageError
from movers.repo import contenthash

FORMAT_VERSION = 2  # new repositories; version 1 repositories stay readable and are written as version 1
LOCATED_PAGES = "located-pages"  # map pages say where each chunk is stored: no chunk index to read
ENCRYPTED = "encrypted-v1"  # every object sealed, chunk ids keyed, manifests named by keyed volume names
KNOWN_FEATURES = frozenset({"paged-map-v1", LOCATED_PAGES, "zstd", ENCRYPTED}) | contenthash.HASH_FEATURES
# What a new repository of each version records (a repository's own list is in its config: version 2
# repositories created before BLAKE3 say sha256-chunks, movers.repo.contenthash).
FEATURES_OF_VERSION = {
    1: ("paged-map-v1", contenthash.SHA256.feature, "zstd"),
    2: ("paged-map-v1", LOCATED_PAGES, contenthash.NEW_REPOSITORIES.feature, "zstd"),
}
MANDATORY_FEATURES = FEATURES_OF_VERSION[FORMAT_VERSION]
# What a new encrypted repository records (version 2 only; movers.repo.crypto, movers.repo.keys).
ENCRYPTED_FEATURES = ("paged-map-v1", LOCATED_PAGES, f"{contenthash.KEYED_BLAKE3}-chunks", "zstd", ENCRYPTED)
BACKUP_PREFIX = "backups/"
MODES = ("full", "incremental-cbt", "incremental-scan")
VOLUME_MODES = ("Block", "Filesystem")
RUN_TAG = "cbt-mover.io/run"  # Manifest.tags key: the backup run (one flow run) the backup belongs to
APP_TAG = "cbt-mover.io/app"  # Manifest.tags key: the application (policy name) backed up
POLICY_TAG = "cbt-mover.io/policy"  # Manifest.tags key: the policy whose run made the backup (its retention's)


def check_compatible(version: Any, mandatory: Any, what: str) -> None:
    """Raise ``IncompatibleError`` unless this reader can read ``version`` and ``mandatory``."""
    if not isinstance(version, int) or version < 1 or version > FORMAT_VERSION:
        raise IncompatibleError(
            f"{what} has format version {version!r}; this cbt-mover reads versions up to {FORMAT_VERSION}"
            " (upgrade cbt-mover)"
        )
    unknown = sorted(set(mandatory or ()) - KNOWN_FEATURES)
    if unknown:
        raise IncompatibleError(f"{what} needs features this cbt-mover lacks: {', '.join(unknown)} (upgrade cbt-mover)")


# Volume ids: printable ASCII (space to ``~``), not starting or ending with a space; at most
# VOLUME_KEY_MAX bytes once quoted into their key segment (docs/format.md, "Volume ids").
_VOLUME_ID = re.compile(r"[!-~]([ -~]*[!-~])?")
VOLUME_KEY_MAX = 255  # one path component of a local folder repository (NAME_MAX of ext4, xfs, tmpfs)


def volume_segment(volume_id: str) -> str:
    """The key segment of a volume id: URL-quoted, ``/`` and ``~`` too (letters, digits and ``-._``
    stay one byte, every other character takes three)."""
    return quote(volume_id, safe="").replace("~", "%7E")


def check_volume_id(volume_id: str) -> str:
    """Return ``volume_id`` if it follows the volume id grammar, else raise ``UsageError`` naming the rule.

    The grammar: 1 or more printable ASCII characters (space to ``~``: no control characters, no
    newline), not starting or ending with a space, whose key segment (``volume_segment``) is at most
    ``VOLUME_KEY_MAX`` bytes. Checked where an id comes in (the CLI, ``run_backup``), not where one is
    read back from a key: ids a version without the check stored stay listable, prunable and verifiable.
    """
    if not _VOLUME_ID.fullmatch(volume_id):
        raise UsageError(
            f"volume id '{shown_volume_id(volume_id, 60)}' is not valid: a volume id is 1 or more printable ASCII"
            " characters (no newline or other control character, no leading or trailing space)"
        )
    size = len(volume_segment(volume_id))
    if size > VOLUME_KEY_MAX:
        raise UsageError(
            f"volume id '{shown_volume_id(volume_id, 60)}' ({len(volume_id)} characters) is too long: quoted into its"
            f" key it takes {size} bytes, at most {VOLUME_KEY_MAX} (letters, digits and -._ take 1, other characters 3)"
        )
    return volume_id


def shown_volume_id(volume_id: str, limit: int | None = None) -> str:
    """``volume_id`` for one line of text: control and non-ASCII characters escaped as in Python
    (a newline as ``\\n``; only ids stored before the grammar have them), cut to ``limit``
    characters and ``...`` when a limit is given."""
    text = volume_id.encode("unicode_escape").decode("ascii")
    return text[:limit] + "..." if limit is not None and len(text) > limit else text


def volume_prefix(volume_id: str) -> str:
    if not volume_id:
        raise UsageError("volume id must not be empty")
    return f"{BACKUP_PREFIX}{volume_segment(volume_id)}/"


def new_backup_id(now: datetime | None = None) -> str:
    """A backup id that sorts by creation time: ``20261121T105300123456Z-1a2b3c``."""
    now = now or datetime.now(UTC)
    return now.strftime("%Y%m%dT%H%M%S%fZ") + "-" + os.urandom(3).hex()


def volume_from_key(key: str) -> str:
    return unquote(key[len(BACKUP_PREFIX) :].split("/", 1)[0])


@dataclass
class VolumeIdentity:
    id: str
    cluster: str | None = None
    namespace: str | None = None
    pvc: str | None = None
    pv_volume_handle: str | None = None  # the source PV's spec.csi.volumeHandle: the volume's identity
    csi_driver: str | None = None
    storage_class: str | None = None  # the PVC's storageClassName: what a restore provisions
    volume_mode: str | None = None  # the PVC's volumeMode, Block or Filesystem (None: not recorded)
    pv_name: str | None = None  # the source PV's name
    pv_uid: str | None = None  # the source PV's metadata.uid (a re-created PV of the same name differs)
    fs_type: str | None = None  # the source PV's spec.csi.fsType (None: Block, or not recorded)
    node_affinity: dict[str, Any] | None = None  # the source PV's spec.nodeAffinity.required (a NodeSelector)
    labels: dict[str, str] | None = None  # the source PVC's metadata.labels (a restored claim gets them back)


@dataclass
class SnapshotIdentity:
    volume_snapshot: str | None = None
    namespace: str | None = None
    snapshot_handle: str | None = None
    group_snapshot: str | None = None
    group_snapshot_handle: str | None = None


@dataclass
class MapRef:
    page_size: int
    dir_fanout: int
    dirs: list[str | None]
    entries: int


@dataclass
class Manifest:
    backup_id: str
    volume: VolumeIdentity
    capacity_bytes: int
    snapshot: SnapshotIdentity
    parent: str | None
    mode: str
    created: str
    map: MapRef
    stats: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)  # free key/value, e.g. RUN_TAG and APP_TAG
    run_pvcs: list[str] | None = None  # every PVC of the backup's application run (None: not recorded)
    format_version: int = FORMAT_VERSION
    mandatory_features: list[str] = field(default_factory=lambda: list(MANDATORY_FEATURES))
    # the key of the remap (``movers.repo.remap``) whose map ``map`` is, when a consolidation rewrote it; never stored
    remapped: str | None = None

    @property
    def key(self) -> str:
        """The manifest's key in an unencrypted repository (``Repository.manifest_key`` in any repository)."""
        return volume_prefix(self.volume.id) + self.backup_id

    def encode(self) -> bytes:
        doc = asdict(self)
        del doc["remapped"]
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes, key: str = "manifest") -> Manifest:
        try:
            doc = json.loads(data)
        except ValueError:
            raise IntegrityError(f"{key} is not valid JSON") from None
        if not isinstance(doc, dict):
            raise IntegrityError(f"{key} is not a manifest")
        check_compatible(doc.get("format_version"), doc.get("mandatory_features"), f"backup {key}")
        try:
            manifest = cls(
                backup_id=doc["backup_id"],
                volume=VolumeIdentity(**_known(VolumeIdentity, doc["volume"])),
                capacity_bytes=int(doc["capacity_bytes"]),
                snapshot=SnapshotIdentity(**_known(SnapshotIdentity, doc["snapshot"])),
                parent=doc.get("parent"),
                mode=doc["mode"],
                created=doc["created"],
                map=MapRef(**doc["map"]),
                stats=doc.get("stats", {}),
                tags=_tags(doc.get("tags")),
                run_pvcs=_names(doc.get("run_pvcs")),
                format_version=doc["format_version"],
                mandatory_features=list(doc["mandatory_features"]),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise IntegrityError(f"{key} is missing or has a malformed field: {err}") from None
        if manifest.mode not in MODES:
            raise IntegrityError(f"{key} has unknown mode {manifest.mode!r}")
        if manifest.volume.volume_mode not in (None, *VOLUME_MODES):
            raise IntegrityError(f"{key} has unknown volume mode {manifest.volume.volume_mode!r}")
        affinity = manifest.volume.node_affinity
        if affinity is not None and not isinstance(affinity, dict):
            raise IntegrityError(f"{key} has a node affinity that is not an object")
        if manifest.volume.labels is not None and not _string_map(manifest.volume.labels):
            raise IntegrityError(f"{key} has volume labels that are not strings")
        return manifest


_TAG_KEY = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._/-]{0,251}[A-Za-z0-9])?")
TAG_VALUE_MAX = 1024


def parse_tags(items: Iterable[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings as tags; ``UsageError`` for a malformed or repeated key or a long value.

    Keys are 1-253 characters of letters, digits, ``.``, ``_``, ``/`` and ``-``, starting and ending
    alphanumeric (label keys fit); values are any text up to ``TAG_VALUE_MAX`` characters.
    """
    tags: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not _TAG_KEY.fullmatch(key):
            raise UsageError(f"--tag {item!r} is not KEY=VALUE with a key of letters, digits and ._/-")
        if key in tags:
            raise UsageError(f"--tag {key} given twice")
        if len(value) > TAG_VALUE_MAX or "\n" in value:
            raise UsageError(f"--tag {key}: the value must be one line of at most {TAG_VALUE_MAX} characters")
        tags[key] = value
    return tags


def _known(cls: type, doc: Any) -> dict[str, Any]:
    """The keys of ``doc`` that are fields of dataclass ``cls`` (newer optional fields are ignored)."""
    if not isinstance(doc, dict):
        raise TypeError(f"{cls.__name__} is not an object")
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in doc.items() if k in names}


def _names(doc: Any) -> list[str] | None:
    if doc is None:
        return None
    if not isinstance(doc, list) or not all(isinstance(x, str) and x for x in doc):
        raise TypeError("run_pvcs must be a list of names")
    return list(doc)


def parse_run_pvcs(text: str | None) -> list[str] | None:
    """``--run-pvcs data,wal`` as a sorted list without repeats; ``UsageError`` for an empty name."""
    if text is None:
        return None
    names = [x.strip() for x in text.split(",")]
    if not names or not all(names):
        raise UsageError(f"--run-pvcs {text!r} must be PVC names separated by commas")
    return sorted(set(names))


def parse_node_affinity(text: str | None) -> dict[str, Any] | None:
    """``--node-affinity JSON``: a NodeSelector ``{"nodeSelectorTerms": [...]}`` (the source PV's
    ``spec.nodeAffinity.required``); ``UsageError`` for anything else."""
    if text is None or text == "":
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        raise UsageError("--node-affinity must be JSON: the source PV's spec.nodeAffinity.required") from None
    terms = doc.get("nodeSelectorTerms") if isinstance(doc, dict) else None
    if not isinstance(terms, list) or not terms or not all(isinstance(t, dict) for t in terms):
        raise UsageError('--node-affinity must be a NodeSelector: {"nodeSelectorTerms": [{...}, ...]}')
    return doc


def parse_pvc_labels(text: str | None) -> dict[str, str] | None:
    """``--pvc-labels JSON``: the source PVC's ``metadata.labels``, an object of strings (``{}`` and
    nothing: None); ``UsageError`` for anything else."""
    if text is None or text == "":
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        raise UsageError("--pvc-labels must be JSON: the source PVC's metadata.labels") from None
    if not _string_map(doc):
        raise UsageError('--pvc-labels must be an object of strings: {"app": "db", ...}')
    return doc or None


def _string_map(doc: Any) -> bool:
    return isinstance(doc, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in doc.items())


def _tags(doc: Any) -> dict[str, str]:
    if doc is None:
        return {}
    if not _string_map(doc):
        raise TypeError("tags must map strings to strings")
    return dict(doc)
