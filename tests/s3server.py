"""pytest fixtures for the moto S3 server of ``localcluster.s3`` (a subprocess on loopback).

* ``moto_server`` (session): a running server (``endpoint_url``, ``client()``, ``env``),
  stopped in every outcome.
* ``s3_bucket`` (function): a fresh, uniquely named bucket; yields ``(endpoint_url, bucket)``
  and empties and deletes it afterwards.
* ``unconditional_s3`` (function): ``(endpoint_url, bucket)`` of that bucket behind an S3 without conditional
  writes (``tests.s3proxy.S3Proxy(ignore_conditions=True)``: it ignores ``If-None-Match``, as s3rver does).

Nothing global is changed: credentials (``CREDENTIALS``, region ``REGION``) are passed explicitly.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from localcluster.s3 import ACCESS_KEY, REGION, SECRET_KEY, S3Server, moto_s3
from tests.s3proxy import S3Proxy

CREDENTIALS = {"aws_access_key_id": ACCESS_KEY, "aws_secret_access_key": SECRET_KEY}
MotoServer = S3Server
__all__ = ["CREDENTIALS", "REGION", "MotoServer", "moto_server", "s3_bucket", "unconditional_s3"]


@pytest.fixture(scope="session")
def moto_server() -> Iterator[S3Server]:
    with moto_s3() as server:
        yield server


@pytest.fixture
def s3_bucket(moto_server: S3Server) -> Iterator[tuple[str, str]]:
    client = moto_server.client()
    bucket = f"test-{uuid.uuid4().hex[:20]}"
    client.create_bucket(Bucket=bucket)
    try:
        yield moto_server.endpoint_url, bucket
    finally:
        for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
            client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for obj in page.get("Contents", []):
                client.delete_object(Bucket=bucket, Key=obj["Key"])
        client.delete_bucket(Bucket=bucket)


@pytest.fixture
def unconditional_s3(s3_bucket: tuple[str, str]) -> Iterator[tuple[str, str]]:
    endpoint, bucket = s3_bucket
    with S3Proxy(endpoint, ignore_conditions=True) as proxy:
        yield proxy.endpoint_url, bucket
