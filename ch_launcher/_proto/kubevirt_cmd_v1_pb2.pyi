from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Response(_message.Message):
    __slots__ = ("success", "message")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    success: bool
    message: str
    def __init__(self, success: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...

class EmptyRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class VMI(_message.Message):
    __slots__ = ("vmiJson",)
    VMIJSON_FIELD_NUMBER: _ClassVar[int]
    vmiJson: bytes
    def __init__(self, vmiJson: _Optional[bytes] = ...) -> None: ...

class VMIRequest(_message.Message):
    __slots__ = ("vmi", "options")
    VMI_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    vmi: VMI
    options: VirtualMachineOptions
    def __init__(self, vmi: _Optional[_Union[VMI, _Mapping]] = ..., options: _Optional[_Union[VirtualMachineOptions, _Mapping]] = ...) -> None: ...

class VirtualMachineOptions(_message.Message):
    __slots__ = ("VirtualMachineSMBios", "MemBalloonStatsPeriod", "PreallocatedVolumes", "topology", "DisksInfo", "ExpandDisksEnabled", "clusterConfig", "interfaceDomainAttachment", "interfaceMigration", "pluginsJson", "GraceHostDeviceAliases")
    class DisksInfoEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: DiskInfo
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[DiskInfo, _Mapping]] = ...) -> None: ...
    class InterfaceDomainAttachmentEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class InterfaceMigrationEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: InterfaceBindingMigration
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[InterfaceBindingMigration, _Mapping]] = ...) -> None: ...
    VIRTUALMACHINESMBIOS_FIELD_NUMBER: _ClassVar[int]
    MEMBALLOONSTATSPERIOD_FIELD_NUMBER: _ClassVar[int]
    PREALLOCATEDVOLUMES_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    DISKSINFO_FIELD_NUMBER: _ClassVar[int]
    EXPANDDISKSENABLED_FIELD_NUMBER: _ClassVar[int]
    CLUSTERCONFIG_FIELD_NUMBER: _ClassVar[int]
    INTERFACEDOMAINATTACHMENT_FIELD_NUMBER: _ClassVar[int]
    INTERFACEMIGRATION_FIELD_NUMBER: _ClassVar[int]
    PLUGINSJSON_FIELD_NUMBER: _ClassVar[int]
    GRACEHOSTDEVICEALIASES_FIELD_NUMBER: _ClassVar[int]
    VirtualMachineSMBios: SMBios
    MemBalloonStatsPeriod: int
    PreallocatedVolumes: _containers.RepeatedScalarFieldContainer[str]
    topology: Topology
    DisksInfo: _containers.MessageMap[str, DiskInfo]
    ExpandDisksEnabled: bool
    clusterConfig: ClusterConfig
    interfaceDomainAttachment: _containers.ScalarMap[str, str]
    interfaceMigration: _containers.MessageMap[str, InterfaceBindingMigration]
    pluginsJson: bytes
    GraceHostDeviceAliases: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, VirtualMachineSMBios: _Optional[_Union[SMBios, _Mapping]] = ..., MemBalloonStatsPeriod: _Optional[int] = ..., PreallocatedVolumes: _Optional[_Iterable[str]] = ..., topology: _Optional[_Union[Topology, _Mapping]] = ..., DisksInfo: _Optional[_Mapping[str, DiskInfo]] = ..., ExpandDisksEnabled: _Optional[bool] = ..., clusterConfig: _Optional[_Union[ClusterConfig, _Mapping]] = ..., interfaceDomainAttachment: _Optional[_Mapping[str, str]] = ..., interfaceMigration: _Optional[_Mapping[str, InterfaceBindingMigration]] = ..., pluginsJson: _Optional[bytes] = ..., GraceHostDeviceAliases: _Optional[_Iterable[str]] = ...) -> None: ...

class SMBios(_message.Message):
    __slots__ = ("manufacturer", "product", "version", "sku", "family")
    MANUFACTURER_FIELD_NUMBER: _ClassVar[int]
    PRODUCT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SKU_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    manufacturer: str
    product: str
    version: str
    sku: str
    family: str
    def __init__(self, manufacturer: _Optional[str] = ..., product: _Optional[str] = ..., version: _Optional[str] = ..., sku: _Optional[str] = ..., family: _Optional[str] = ...) -> None: ...

class Topology(_message.Message):
    __slots__ = ("numa_cells",)
    NUMA_CELLS_FIELD_NUMBER: _ClassVar[int]
    numa_cells: _containers.RepeatedCompositeFieldContainer[Cell]
    def __init__(self, numa_cells: _Optional[_Iterable[_Union[Cell, _Mapping]]] = ...) -> None: ...

class Cell(_message.Message):
    __slots__ = ("id", "memory", "pages", "distances", "cpus")
    ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    PAGES_FIELD_NUMBER: _ClassVar[int]
    DISTANCES_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    id: int
    memory: Memory
    pages: _containers.RepeatedCompositeFieldContainer[Pages]
    distances: _containers.RepeatedCompositeFieldContainer[Sibling]
    cpus: _containers.RepeatedCompositeFieldContainer[CPU]
    def __init__(self, id: _Optional[int] = ..., memory: _Optional[_Union[Memory, _Mapping]] = ..., pages: _Optional[_Iterable[_Union[Pages, _Mapping]]] = ..., distances: _Optional[_Iterable[_Union[Sibling, _Mapping]]] = ..., cpus: _Optional[_Iterable[_Union[CPU, _Mapping]]] = ...) -> None: ...

class Memory(_message.Message):
    __slots__ = ("amount", "unit")
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    amount: int
    unit: str
    def __init__(self, amount: _Optional[int] = ..., unit: _Optional[str] = ...) -> None: ...

class Pages(_message.Message):
    __slots__ = ("count", "unit", "size")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    count: int
    unit: str
    size: int
    def __init__(self, count: _Optional[int] = ..., unit: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class Sibling(_message.Message):
    __slots__ = ("id", "value")
    ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    id: int
    value: int
    def __init__(self, id: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...

class CPU(_message.Message):
    __slots__ = ("id", "siblings")
    ID_FIELD_NUMBER: _ClassVar[int]
    SIBLINGS_FIELD_NUMBER: _ClassVar[int]
    id: int
    siblings: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, id: _Optional[int] = ..., siblings: _Optional[_Iterable[int]] = ...) -> None: ...

class DiskInfo(_message.Message):
    __slots__ = ("format", "backingFile", "actualSize", "virtualSize")
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    BACKINGFILE_FIELD_NUMBER: _ClassVar[int]
    ACTUALSIZE_FIELD_NUMBER: _ClassVar[int]
    VIRTUALSIZE_FIELD_NUMBER: _ClassVar[int]
    format: str
    backingFile: str
    actualSize: int
    virtualSize: int
    def __init__(self, format: _Optional[str] = ..., backingFile: _Optional[str] = ..., actualSize: _Optional[int] = ..., virtualSize: _Optional[int] = ...) -> None: ...

class ClusterConfig(_message.Message):
    __slots__ = ("ExpandDisksEnabled", "FreePageReportingDisabled", "BochsDisplayForEFIGuests", "SerialConsoleLogDisabled", "PCINUMAAwareTopologyEnabled", "VGPULiveMigrationEnabled", "GraceIOVirtualizationEnabled")
    EXPANDDISKSENABLED_FIELD_NUMBER: _ClassVar[int]
    FREEPAGEREPORTINGDISABLED_FIELD_NUMBER: _ClassVar[int]
    BOCHSDISPLAYFOREFIGUESTS_FIELD_NUMBER: _ClassVar[int]
    SERIALCONSOLELOGDISABLED_FIELD_NUMBER: _ClassVar[int]
    PCINUMAAWARETOPOLOGYENABLED_FIELD_NUMBER: _ClassVar[int]
    VGPULIVEMIGRATIONENABLED_FIELD_NUMBER: _ClassVar[int]
    GRACEIOVIRTUALIZATIONENABLED_FIELD_NUMBER: _ClassVar[int]
    ExpandDisksEnabled: bool
    FreePageReportingDisabled: bool
    BochsDisplayForEFIGuests: bool
    SerialConsoleLogDisabled: bool
    PCINUMAAwareTopologyEnabled: bool
    VGPULiveMigrationEnabled: bool
    GraceIOVirtualizationEnabled: bool
    def __init__(self, ExpandDisksEnabled: _Optional[bool] = ..., FreePageReportingDisabled: _Optional[bool] = ..., BochsDisplayForEFIGuests: _Optional[bool] = ..., SerialConsoleLogDisabled: _Optional[bool] = ..., PCINUMAAwareTopologyEnabled: _Optional[bool] = ..., VGPULiveMigrationEnabled: _Optional[bool] = ..., GraceIOVirtualizationEnabled: _Optional[bool] = ...) -> None: ...

class InterfaceBindingMigration(_message.Message):
    __slots__ = ("Method",)
    METHOD_FIELD_NUMBER: _ClassVar[int]
    Method: str
    def __init__(self, Method: _Optional[str] = ...) -> None: ...

class MigrationRequest(_message.Message):
    __slots__ = ("vmi", "options")
    VMI_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    vmi: VMI
    options: bytes
    def __init__(self, vmi: _Optional[_Union[VMI, _Mapping]] = ..., options: _Optional[bytes] = ...) -> None: ...

class FreezeRequest(_message.Message):
    __slots__ = ("vmi", "unfreezeTimeoutSeconds")
    VMI_FIELD_NUMBER: _ClassVar[int]
    UNFREEZETIMEOUTSECONDS_FIELD_NUMBER: _ClassVar[int]
    vmi: VMI
    unfreezeTimeoutSeconds: int
    def __init__(self, vmi: _Optional[_Union[VMI, _Mapping]] = ..., unfreezeTimeoutSeconds: _Optional[int] = ...) -> None: ...

class MemoryDumpRequest(_message.Message):
    __slots__ = ("vmi", "dumpPath")
    VMI_FIELD_NUMBER: _ClassVar[int]
    DUMPPATH_FIELD_NUMBER: _ClassVar[int]
    vmi: VMI
    dumpPath: str
    def __init__(self, vmi: _Optional[_Union[VMI, _Mapping]] = ..., dumpPath: _Optional[str] = ...) -> None: ...

class InjectLaunchSecretRequest(_message.Message):
    __slots__ = ("vmi", "options")
    VMI_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    vmi: VMI
    options: bytes
    def __init__(self, vmi: _Optional[_Union[VMI, _Mapping]] = ..., options: _Optional[bytes] = ...) -> None: ...

class BackupRequest(_message.Message):
    __slots__ = ("vmi", "options")
    VMI_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    vmi: VMI
    options: bytes
    def __init__(self, vmi: _Optional[_Union[VMI, _Mapping]] = ..., options: _Optional[bytes] = ...) -> None: ...

class RedefineCheckpointRequest(_message.Message):
    __slots__ = ("vmi", "checkpoint")
    VMI_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    vmi: VMI
    checkpoint: bytes
    def __init__(self, vmi: _Optional[_Union[VMI, _Mapping]] = ..., checkpoint: _Optional[bytes] = ...) -> None: ...

class ExecRequest(_message.Message):
    __slots__ = ("domainName", "Command", "Args", "timeoutSeconds")
    DOMAINNAME_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUTSECONDS_FIELD_NUMBER: _ClassVar[int]
    domainName: str
    Command: str
    Args: _containers.RepeatedScalarFieldContainer[str]
    timeoutSeconds: int
    def __init__(self, domainName: _Optional[str] = ..., Command: _Optional[str] = ..., Args: _Optional[_Iterable[str]] = ..., timeoutSeconds: _Optional[int] = ...) -> None: ...

class GuestPingRequest(_message.Message):
    __slots__ = ("domainName", "timeoutSeconds")
    DOMAINNAME_FIELD_NUMBER: _ClassVar[int]
    TIMEOUTSECONDS_FIELD_NUMBER: _ClassVar[int]
    domainName: str
    timeoutSeconds: int
    def __init__(self, domainName: _Optional[str] = ..., timeoutSeconds: _Optional[int] = ...) -> None: ...

class VMStatsRequest(_message.Message):
    __slots__ = ("domainStats", "dirtyRate", "guestGetLoad", "guestGetCpuStats", "guestGetDiskStats", "guestGetTime", "guestGetVcpus", "guestGetMemoryBlockInfo", "guestGetUsers", "guestGetOsInfo", "guestGetDisks", "guestGetHostName", "guestGetTimezone", "guestNetworkGetRoute", "guestNetworkGetInterfaces", "guestGetMemoryBlocks")
    DOMAINSTATS_FIELD_NUMBER: _ClassVar[int]
    DIRTYRATE_FIELD_NUMBER: _ClassVar[int]
    GUESTGETLOAD_FIELD_NUMBER: _ClassVar[int]
    GUESTGETCPUSTATS_FIELD_NUMBER: _ClassVar[int]
    GUESTGETDISKSTATS_FIELD_NUMBER: _ClassVar[int]
    GUESTGETTIME_FIELD_NUMBER: _ClassVar[int]
    GUESTGETVCPUS_FIELD_NUMBER: _ClassVar[int]
    GUESTGETMEMORYBLOCKINFO_FIELD_NUMBER: _ClassVar[int]
    GUESTGETUSERS_FIELD_NUMBER: _ClassVar[int]
    GUESTGETOSINFO_FIELD_NUMBER: _ClassVar[int]
    GUESTGETDISKS_FIELD_NUMBER: _ClassVar[int]
    GUESTGETHOSTNAME_FIELD_NUMBER: _ClassVar[int]
    GUESTGETTIMEZONE_FIELD_NUMBER: _ClassVar[int]
    GUESTNETWORKGETROUTE_FIELD_NUMBER: _ClassVar[int]
    GUESTNETWORKGETINTERFACES_FIELD_NUMBER: _ClassVar[int]
    GUESTGETMEMORYBLOCKS_FIELD_NUMBER: _ClassVar[int]
    domainStats: DomainStatsRequest
    dirtyRate: DirtyRateRequest
    guestGetLoad: AgentLoadRequest
    guestGetCpuStats: AgentCpuStatsRequest
    guestGetDiskStats: AgentDiskStatsRequest
    guestGetTime: AgentTimeRequest
    guestGetVcpus: AgentVcpusRequest
    guestGetMemoryBlockInfo: AgentMemoryBlockInfoRequest
    guestGetUsers: AgentUsersRequest
    guestGetOsInfo: AgentOsInfoRequest
    guestGetDisks: AgentDisksRequest
    guestGetHostName: AgentHostNameRequest
    guestGetTimezone: AgentTimezoneRequest
    guestNetworkGetRoute: AgentNetworkRouteRequest
    guestNetworkGetInterfaces: AgentNetworkInterfacesRequest
    guestGetMemoryBlocks: AgentMemoryBlocksRequest
    def __init__(self, domainStats: _Optional[_Union[DomainStatsRequest, _Mapping]] = ..., dirtyRate: _Optional[_Union[DirtyRateRequest, _Mapping]] = ..., guestGetLoad: _Optional[_Union[AgentLoadRequest, _Mapping]] = ..., guestGetCpuStats: _Optional[_Union[AgentCpuStatsRequest, _Mapping]] = ..., guestGetDiskStats: _Optional[_Union[AgentDiskStatsRequest, _Mapping]] = ..., guestGetTime: _Optional[_Union[AgentTimeRequest, _Mapping]] = ..., guestGetVcpus: _Optional[_Union[AgentVcpusRequest, _Mapping]] = ..., guestGetMemoryBlockInfo: _Optional[_Union[AgentMemoryBlockInfoRequest, _Mapping]] = ..., guestGetUsers: _Optional[_Union[AgentUsersRequest, _Mapping]] = ..., guestGetOsInfo: _Optional[_Union[AgentOsInfoRequest, _Mapping]] = ..., guestGetDisks: _Optional[_Union[AgentDisksRequest, _Mapping]] = ..., guestGetHostName: _Optional[_Union[AgentHostNameRequest, _Mapping]] = ..., guestGetTimezone: _Optional[_Union[AgentTimezoneRequest, _Mapping]] = ..., guestNetworkGetRoute: _Optional[_Union[AgentNetworkRouteRequest, _Mapping]] = ..., guestNetworkGetInterfaces: _Optional[_Union[AgentNetworkInterfacesRequest, _Mapping]] = ..., guestGetMemoryBlocks: _Optional[_Union[AgentMemoryBlocksRequest, _Mapping]] = ...) -> None: ...

class DomainStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DirtyRateRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AgentLoadRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AgentCpuStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AgentDiskStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AgentTimeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AgentVcpusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AgentMemoryBlockInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AgentUsersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AgentOsInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AgentDisksRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AgentHostNameRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AgentTimezoneRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AgentNetworkRouteRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AgentNetworkInterfacesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AgentMemoryBlocksRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DomainResponse(_message.Message):
    __slots__ = ("response", "domain")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    response: Response
    domain: str
    def __init__(self, response: _Optional[_Union[Response, _Mapping]] = ..., domain: _Optional[str] = ...) -> None: ...

class DomainStatsResponse(_message.Message):
    __slots__ = ("response", "domainStats")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    DOMAINSTATS_FIELD_NUMBER: _ClassVar[int]
    response: Response
    domainStats: str
    def __init__(self, response: _Optional[_Union[Response, _Mapping]] = ..., domainStats: _Optional[str] = ...) -> None: ...

class GuestInfoResponse(_message.Message):
    __slots__ = ("response", "guestInfoResponse")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    GUESTINFORESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: Response
    guestInfoResponse: str
    def __init__(self, response: _Optional[_Union[Response, _Mapping]] = ..., guestInfoResponse: _Optional[str] = ...) -> None: ...

class GuestUserListResponse(_message.Message):
    __slots__ = ("response", "guestUserListResponse")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    GUESTUSERLISTRESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: Response
    guestUserListResponse: str
    def __init__(self, response: _Optional[_Union[Response, _Mapping]] = ..., guestUserListResponse: _Optional[str] = ...) -> None: ...

class GuestFilesystemsResponse(_message.Message):
    __slots__ = ("response", "guestFilesystemsResponse")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    GUESTFILESYSTEMSRESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: Response
    guestFilesystemsResponse: str
    def __init__(self, response: _Optional[_Union[Response, _Mapping]] = ..., guestFilesystemsResponse: _Optional[str] = ...) -> None: ...

class ExecResponse(_message.Message):
    __slots__ = ("response", "exitCode", "stdOut")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    EXITCODE_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    response: Response
    exitCode: int
    stdOut: str
    def __init__(self, response: _Optional[_Union[Response, _Mapping]] = ..., exitCode: _Optional[int] = ..., stdOut: _Optional[str] = ...) -> None: ...

class GuestPingResponse(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: Response
    def __init__(self, response: _Optional[_Union[Response, _Mapping]] = ...) -> None: ...

class QemuVersionResponse(_message.Message):
    __slots__ = ("response", "version")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    response: Response
    version: str
    def __init__(self, response: _Optional[_Union[Response, _Mapping]] = ..., version: _Optional[str] = ...) -> None: ...

class SEVInfoResponse(_message.Message):
    __slots__ = ("response", "sevInfo")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    SEVINFO_FIELD_NUMBER: _ClassVar[int]
    response: Response
    sevInfo: bytes
    def __init__(self, response: _Optional[_Union[Response, _Mapping]] = ..., sevInfo: _Optional[bytes] = ...) -> None: ...

class LaunchMeasurementResponse(_message.Message):
    __slots__ = ("response", "launchMeasurement")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    LAUNCHMEASUREMENT_FIELD_NUMBER: _ClassVar[int]
    response: Response
    launchMeasurement: bytes
    def __init__(self, response: _Optional[_Union[Response, _Mapping]] = ..., launchMeasurement: _Optional[bytes] = ...) -> None: ...

class DirtyRateStatsResponse(_message.Message):
    __slots__ = ("response", "dirtyRateMbs")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    DIRTYRATEMBS_FIELD_NUMBER: _ClassVar[int]
    response: Response
    dirtyRateMbs: int
    def __init__(self, response: _Optional[_Union[Response, _Mapping]] = ..., dirtyRateMbs: _Optional[int] = ...) -> None: ...

class ScreenshotResponse(_message.Message):
    __slots__ = ("response", "mime", "data")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    MIME_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    response: Response
    mime: str
    data: bytes
    def __init__(self, response: _Optional[_Union[Response, _Mapping]] = ..., mime: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class RedefineCheckpointResponse(_message.Message):
    __slots__ = ("response", "checkpointInvalid")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTINVALID_FIELD_NUMBER: _ClassVar[int]
    response: Response
    checkpointInvalid: bool
    def __init__(self, response: _Optional[_Union[Response, _Mapping]] = ..., checkpointInvalid: _Optional[bool] = ...) -> None: ...

class VMStatsResponse(_message.Message):
    __slots__ = ("response", "domainStats", "dirtyRateStats", "guestAgentVersion", "guestGetLoad", "guestGetCpuStats", "guestGetDiskStats", "guestGetTime", "guestGetVcpus", "guestGetMemoryBlockInfo", "guestGetUsers", "guestGetOsInfo", "guestGetDisks", "guestGetHostName", "guestGetTimezone", "guestNetworkGetRoute", "guestNetworkGetInterfaces", "guestGetMemoryBlocks")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    DOMAINSTATS_FIELD_NUMBER: _ClassVar[int]
    DIRTYRATESTATS_FIELD_NUMBER: _ClassVar[int]
    GUESTAGENTVERSION_FIELD_NUMBER: _ClassVar[int]
    GUESTGETLOAD_FIELD_NUMBER: _ClassVar[int]
    GUESTGETCPUSTATS_FIELD_NUMBER: _ClassVar[int]
    GUESTGETDISKSTATS_FIELD_NUMBER: _ClassVar[int]
    GUESTGETTIME_FIELD_NUMBER: _ClassVar[int]
    GUESTGETVCPUS_FIELD_NUMBER: _ClassVar[int]
    GUESTGETMEMORYBLOCKINFO_FIELD_NUMBER: _ClassVar[int]
    GUESTGETUSERS_FIELD_NUMBER: _ClassVar[int]
    GUESTGETOSINFO_FIELD_NUMBER: _ClassVar[int]
    GUESTGETDISKS_FIELD_NUMBER: _ClassVar[int]
    GUESTGETHOSTNAME_FIELD_NUMBER: _ClassVar[int]
    GUESTGETTIMEZONE_FIELD_NUMBER: _ClassVar[int]
    GUESTNETWORKGETROUTE_FIELD_NUMBER: _ClassVar[int]
    GUESTNETWORKGETINTERFACES_FIELD_NUMBER: _ClassVar[int]
    GUESTGETMEMORYBLOCKS_FIELD_NUMBER: _ClassVar[int]
    response: Response
    domainStats: DomainStatsResponse
    dirtyRateStats: DirtyRateStatsResponse
    guestAgentVersion: Response
    guestGetLoad: Response
    guestGetCpuStats: Response
    guestGetDiskStats: Response
    guestGetTime: Response
    guestGetVcpus: Response
    guestGetMemoryBlockInfo: Response
    guestGetUsers: Response
    guestGetOsInfo: Response
    guestGetDisks: Response
    guestGetHostName: Response
    guestGetTimezone: Response
    guestNetworkGetRoute: Response
    guestNetworkGetInterfaces: Response
    guestGetMemoryBlocks: Response
    def __init__(self, response: _Optional[_Union[Response, _Mapping]] = ..., domainStats: _Optional[_Union[DomainStatsResponse, _Mapping]] = ..., dirtyRateStats: _Optional[_Union[DirtyRateStatsResponse, _Mapping]] = ..., guestAgentVersion: _Optional[_Union[Response, _Mapping]] = ..., guestGetLoad: _Optional[_Union[Response, _Mapping]] = ..., guestGetCpuStats: _Optional[_Union[Response, _Mapping]] = ..., guestGetDiskStats: _Optional[_Union[Response, _Mapping]] = ..., guestGetTime: _Optional[_Union[Response, _Mapping]] = ..., guestGetVcpus: _Optional[_Union[Response, _Mapping]] = ..., guestGetMemoryBlockInfo: _Optional[_Union[Response, _Mapping]] = ..., guestGetUsers: _Optional[_Union[Response, _Mapping]] = ..., guestGetOsInfo: _Optional[_Union[Response, _Mapping]] = ..., guestGetDisks: _Optional[_Union[Response, _Mapping]] = ..., guestGetHostName: _Optional[_Union[Response, _Mapping]] = ..., guestGetTimezone: _Optional[_Union[Response, _Mapping]] = ..., guestNetworkGetRoute: _Optional[_Union[Response, _Mapping]] = ..., guestNetworkGetInterfaces: _Optional[_Union[Response, _Mapping]] = ..., guestGetMemoryBlocks: _Optional[_Union[Response, _Mapping]] = ...) -> None: ...
