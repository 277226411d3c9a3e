from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class NotifyInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NotifyInfoResponse(_message.Message):
    __slots__ = ("supportedNotifyVersions",)
    SUPPORTEDNOTIFYVERSIONS_FIELD_NUMBER: _ClassVar[int]
    supportedNotifyVersions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, supportedNotifyVersions: _Optional[_Iterable[int]] = ...) -> None: ...
