"""Container images without pulling: an image reference maps to a local command.

The table maps a key to an ``Image`` (or just an entrypoint sequence); an image reference matches
the first key, in table order, that is a substring of it (``ghcr.io/x/cbt-mover:v1`` matches
``cbt-mover``). An ``Image`` is what a real image's config carries: ENTRYPOINT, CMD, ENV and
WORKDIR. Kubernetes semantics: ``command`` replaces the entrypoint (and drops CMD), ``args``
replace CMD. A container that gives a ``command`` runs it even when its image is not in the table
(resolved through the container's PATH, which starts with this interpreter's bin directory, so
``python`` and ``cbt-mover`` are the venv's).

Every image is built for one operating system (``Image.os``, ``linux`` by default), like an image
manifest: a node of another OS cannot pull it (``platform_error`` gives the error a containerd
gives, reported as ErrImagePull). An image that is not in the table is a Linux image.

``default_images()``: ``cbt-mover`` -> the venv's ``cbt-mover`` executable running this checkout's ``movers``, and
``localcluster-demo-app`` -> ``python -m demo.demo_app`` (with this repository on
PYTHONPATH), both Linux images; ``localcluster-winapp`` -> the same demo app program as a Windows
image (the Windows node runs the same local Python programs). Pass
``images={**default_images(), "my-image": ["/bin/app"]}`` to extend it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = str(Path(__file__).resolve().parents[2])
BIN_DIR = str(Path(sys.executable).parent)


@dataclass(frozen=True)
class Image:
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    working_dir: str | None = None
    os: str = "linux"


ImageTable = Mapping[str, "Image | Sequence[str]"]


def default_images() -> dict[str, Image]:
    demo = (sys.executable, "-m", "demo.demo_app")
    return {
        "cbt-mover": Image((str(Path(BIN_DIR) / "cbt-mover"),), env={"PYTHONPATH": REPO_ROOT}),
        "localcluster-winapp": Image(demo, env={"PYTHONPATH": REPO_ROOT}, os="windows"),
        "localcluster-demo-app": Image(demo, env={"PYTHONPATH": REPO_ROOT}),
    }


def normalize(table: ImageTable | None) -> dict[str, Image]:
    if table is None:
        return default_images()
    out: dict[str, Image] = {}
    for key, value in table.items():
        out[key] = value if isinstance(value, Image) else Image(tuple(str(v) for v in value))
    return out


def lookup(table: Mapping[str, Image], reference: str) -> Image | None:
    for key, image in table.items():
        if key and key in reference:
            return image
    return None


class ImageError(Exception):
    """The container cannot be started from this image (no mapping and no command)."""


def full_reference(reference: str) -> str:
    """The reference as containerd names it: ``python:3`` -> ``docker.io/library/python:3``."""
    name, digest = reference.split("@", 1) if "@" in reference else (reference, "")
    first = name.split("/", 1)[0]
    if "/" not in name or ("." not in first and ":" not in first and first != "localhost"):
        name = f"docker.io/{name}" if "/" in name else f"docker.io/library/{name}"
    if not digest and ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return f"{name}@{digest}" if digest else name


def platform_error(reference: str, image: Image | None, node_os: str) -> str | None:
    """Why a node of ``node_os`` cannot pull the image (containerd's message), or None when it can."""
    image_os = image.os if image is not None else "linux"
    if image_os == node_os:
        return None
    return (
        f'rpc error: code = NotFound desc = failed to pull and unpack image "{full_reference(reference)}":'
        " no match for platform in manifest: not found"
    )


def argv_of(container: Mapping, image: Image | None) -> list[str]:
    """The process's argv before $(VAR) expansion, as a container runtime builds it."""
    command = list(container.get("command") or [])
    args = list(container.get("args") or [])
    if command:
        return command + args
    if image is None:
        raise ImageError(
            f'image "{container.get("image")}" has no local command in the kubelet\'s image table and'
            " the container gives no command"
        )
    argv = list(image.entrypoint) + (args if args else list(image.cmd))
    if not argv:
        raise ImageError(f'image "{container.get("image")}" has neither entrypoint nor command')
    return argv
