"""The SnapshotMetadata stubs: wire facts from the reference, and never stale."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from movers.cbt._pb import schema_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]
PB = ROOT / "movers" / "cbt" / "_pb"


def test_committed_stubs_match_the_proto(tmp_path):
    out = tmp_path / "gen"
    (out / "movers" / "cbt" / "_pb").mkdir(parents=True)
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{ROOT}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        str(PB / "schema.proto"),
    ]
    subprocess.run(cmd, check=True, cwd=ROOT)
    subprocess.run([*cmd[:-2], str(PB / "flat.proto")], check=True, cwd=ROOT)
    for name in ("schema_pb2.py", "schema_pb2.pyi", "schema_pb2_grpc.py", "flat_pb2.py", "flat_pb2.pyi"):
        fresh = (out / "movers" / "cbt" / "_pb" / name).read_text()
        assert (PB / name).read_text() == fresh, f"{name} is stale: run `make proto`"


def test_wire_facts():
    assert pb.DESCRIPTOR.package == "snapshotmetadata"
    service = pb.DESCRIPTOR.services_by_name["SnapshotMetadata"]
    assert {m.name for m in service.methods} == {"GetMetadataAllocated", "GetMetadataDelta"}
    assert all(m.server_streaming and not m.client_streaming for m in service.methods)
    fields = lambda msg: {f.name: f.number for f in msg.DESCRIPTOR.fields}  # noqa: E731
    assert fields(pb.BlockMetadata) == {"byte_offset": 1, "size_bytes": 2}
    assert fields(pb.GetMetadataAllocatedRequest) == {
        "security_token": 1,
        "namespace": 2,
        "snapshot_name": 3,
        "starting_offset": 4,
        "max_results": 5,
    }
    assert fields(pb.GetMetadataDeltaRequest) == {
        "security_token": 1,
        "namespace": 2,
        "base_snapshot_id": 3,
        "target_snapshot_name": 4,
        "starting_offset": 5,
        "max_results": 6,
    }
    for resp in (pb.GetMetadataAllocatedResponse, pb.GetMetadataDeltaResponse):
        assert fields(resp) == {"block_metadata_type": 1, "volume_capacity_bytes": 2, "block_metadata": 3}
    assert (pb.UNKNOWN, pb.FIXED_LENGTH, pb.VARIABLE_LENGTH) == (0, 1, 2)
