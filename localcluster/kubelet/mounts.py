"""Filesystem volumes by the PV's fsType, with mount-utils' SafeFormatAndMount semantics.

``prepare_filesystem(device, fstype, staging)`` is what a CSI node plugin's NodeStageVolume does
before the filesystem is mounted (the shim then mounts it in each container's namespace):

- the device's current format is read with ``blkid -p -s TYPE -s PTTYPE -o export`` (exit 2: blank;
  a partition table counts as "unknown data, probably partitions", never formatted);
- a blank device is formatted as ``fstype`` (``mkfs.ext4 -F -m0`` / ``mkfs.ext3 -F -m0``,
  ``mkfs.xfs -f``, ``mkntfs -Q -F`` for ntfs: what the Windows node's Format-Volume does), and
  nothing else is ever formatted;
- a device holding a filesystem of another type is mounted as ``fstype`` once, in a private mount
  namespace at ``staging`` (nothing is mounted on the host), as mount-utils does; when that
  fails, so does the volume (``MountDeviceError`` with mount's own output, e.g. xfs data handed
  over as an ext4 PV). A device already of ``fstype`` is not probed further (no fsck).

NTFS is mounted with ntfs-3g (FUSE; ``ntfs`` is the fsType a Windows node uses). On a Windows node
only NTFS exists: any other fsType fails as Format-Volume would. An empty fsType means ext4 on
Linux and NTFS on Windows, as mount-utils defaults on each. ``MKFS`` names the tools (Debian
packages e2fsprogs, xfsprogs, ntfs-3g), looked up in ``mkfs_path`` (a PATH; default the process's, as
Go's ``exec.Command`` looks them up in the kubelet's): a missing one fails the format with Go's own error
(``exec: "mkfs.xfs": executable file not found in $PATH``), which the kubelet reports as FailedMount.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

MKFS = {
    "ext4": ["mkfs.ext4", "-F", "-m0"],
    "ext3": ["mkfs.ext3", "-F", "-m0"],
    "xfs": ["mkfs.xfs", "-f"],
    "ntfs": ["mkntfs", "-Q", "-F"],
}
WINDOWS_FILESYSTEMS = ("FAT", "FAT32", "exFAT", "NTFS", "ReFS")


class MountDeviceError(Exception):
    """The device cannot be formatted or mounted as asked (the volume stays unmounted)."""


def default_fstype(fstype: str, node_os: str) -> str:
    if not fstype:
        return "ntfs" if node_os == "windows" else "ext4"
    return fstype.lower() if fstype.lower() == "ntfs" else fstype


def disk_format(device: str) -> str:
    """The filesystem type on ``device``, "" when blank (mount-utils' getDiskFormat)."""
    proc = subprocess.run(
        ["blkid", "-p", "-s", "TYPE", "-s", "PTTYPE", "-o", "export", device], capture_output=True, text=True
    )
    if proc.returncode == 2:
        return ""
    if proc.returncode != 0:
        raise MountDeviceError(
            f"failed to get disk format of disk {device}: exit status {proc.returncode} {proc.stderr.strip()}"
        )
    fields = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    if fields.get("PTTYPE"):
        return "unknown data, probably partitions"
    return fields.get("TYPE", "")


def prepare_filesystem(
    device: str, fstype: str, staging: Path, node_os: str = "linux", mkfs_path: str | None = None
) -> str:
    """Format a blank ``device`` as ``fstype`` (``mkfs.*`` found in ``mkfs_path``, default the process's PATH) or
    check that it mounts as ``fstype``; the fsType to mount."""
    fstype = default_fstype(fstype, node_os)
    if node_os == "windows" and fstype != "ntfs":
        raise MountDeviceError(
            "Format-Volume : Cannot validate argument on parameter 'FileSystem'. The argument"
            f' "{fstype}" does not belong to the set "{",".join(WINDOWS_FILESYSTEMS)}" specified by the ValidateSet'
            " attribute."
        )
    existing = disk_format(device)
    if not existing:
        _format(device, fstype, staging, mkfs_path)
        return fstype
    if existing != fstype:
        _trial_mount(device, fstype, staging)
    return fstype


def _format(device: str, fstype: str, staging: Path, mkfs_path: str | None) -> None:
    name, *args = MKFS.get(fstype, [f"mkfs.{fstype}"])
    tool = shutil.which(name, path=mkfs_path)
    if tool is None:
        proc, code, output = None, f'exec: "{name}": executable file not found in $PATH', ""
    else:
        proc = subprocess.run([tool, *args, device], capture_output=True, text=True)
        code, output = f"exit status {proc.returncode}", proc.stdout + proc.stderr
    if proc is None or proc.returncode != 0:
        raise MountDeviceError(
            f'format of disk "{device}" failed: type:("{fstype}") target:("{staging}")'
            f' options:("defaults") errcode:({code}) output:({output}) '
        )


def _trial_mount(device: str, fstype: str, staging: Path) -> None:
    staging.mkdir(parents=True, exist_ok=True)
    args = ["-t", fstype, "-o", "defaults", device, str(staging)]
    script = 'mount "$@" && exec umount "$6"'  # a FUSE daemon (ntfs-3g) ends with the unmount
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "mount", *args],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise MountDeviceError(
            f"mount failed: exit status {proc.returncode}\nMounting command: mount\n"
            f"Mounting arguments: {' '.join(args)}\nOutput: {proc.stdout + proc.stderr}"
        )
