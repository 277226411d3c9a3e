"""The launcher contract's .proto files (written here from reference/contract.md §2) and the
Python code protoc generates from them. Regenerate with `make proto`
(`python ch_launcher/_proto/regenerate.py`); a test fails when the generated code is stale.

Modules: kubevirt_cmd_info_pb2(_grpc) (kubevirt.cmd.info.CmdInfo), kubevirt_cmd_v1_pb2(_grpc)
(kubevirt.cmd.v1.Cmd, 36 RPCs), kubevirt_notify_info_pb2(_grpc) (kubevirt.notify.info.NotifyInfo),
kubevirt_notify_v1_pb2(_grpc) (kubevirt.notify.v1.Notify). Imported only by server, notify and
freezer (.importlinter), and by the developers' virt-handler stand-in (demo/).
"""
