from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class CmdInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CmdInfoResponse(_message.Message):
    __slots__ = ("supportedCmdVersions",)
    SUPPORTEDCMDVERSIONS_FIELD_NUMBER: _ClassVar[int]
    supportedCmdVersions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, supportedCmdVersions: _Optional[_Iterable[int]] = ...) -> None: ...
