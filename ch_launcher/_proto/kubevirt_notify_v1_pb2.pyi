from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class DomainEventRequest(_message.Message):
    __slots__ = ("domainJSON", "statusJSON", "eventType")
    DOMAINJSON_FIELD_NUMBER: _ClassVar[int]
    STATUSJSON_FIELD_NUMBER: _ClassVar[int]
    EVENTTYPE_FIELD_NUMBER: _ClassVar[int]
    domainJSON: bytes
    statusJSON: bytes
    eventType: str
    def __init__(self, domainJSON: _Optional[bytes] = ..., statusJSON: _Optional[bytes] = ..., eventType: _Optional[str] = ...) -> None: ...

class K8sEventRequest(_message.Message):
    __slots__ = ("eventJSON",)
    EVENTJSON_FIELD_NUMBER: _ClassVar[int]
    eventJSON: bytes
    def __init__(self, eventJSON: _Optional[bytes] = ...) -> None: ...

class Response(_message.Message):
    __slots__ = ("success", "message")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    success: bool
    message: str
    def __init__(self, success: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...
