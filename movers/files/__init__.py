"""Files out of a backup without restoring the volume: the filesystems a backed-up volume holds (bare, in a GPT or
MBR partition, in an LVM2 logical volume), read through the lazy backup reader (``movers.pipeline.lazy``) by the
libyal readers of ext2-4, XFS and NTFS. No root, no mount, no FUSE: ``cbt-mover files ls|cp`` and the
``restore-files`` flow's pod use it. Apart: ``fuseview`` (``cbt-mover mount``), the whole volume as a read-only
image file through FUSE, for any other tool.

``source`` (the volume's bytes as file objects, the engine's errors kept), ``layout`` (which filesystems, where),
``tree`` with ``posix`` and ``ntfs`` (one typed ``Entry`` over each reader), ``volume`` (one filesystem chosen and
opened), ``copy`` (into a local directory), ``backup`` (list and copy out of a backup: the use case), ``request``
(the ``FilesRequest`` / ``FilesResult`` contract).
"""
