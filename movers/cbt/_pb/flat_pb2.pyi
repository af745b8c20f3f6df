from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class FlatResponse(_message.Message):
    __slots__ = ("block_metadata_type", "volume_capacity_bytes", "block_metadata")
    BLOCK_METADATA_TYPE_FIELD_NUMBER: _ClassVar[int]
    VOLUME_CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    BLOCK_METADATA_FIELD_NUMBER: _ClassVar[int]
    block_metadata_type: int
    volume_capacity_bytes: int
    block_metadata: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, block_metadata_type: _Optional[int] = ..., volume_capacity_bytes: _Optional[int] = ..., block_metadata: _Optional[_Iterable[int]] = ...) -> None: ...
