"""`virt-freezer` for ch-launcher pods: the Velero backup hook KubeVirt adds to every launcher pod.

virt-controller annotates launcher pods with Velero pre/post backup hooks that run
`/usr/bin/virt-freezer --freeze|--unfreeze --name <vmi> --namespace <ns>` in the `compute`
container (kubevirt pkg/storage/pod/annotations/generator.go@d923fdb815cd). Without that
executable the hook fails and Velero fails the pod's backup, so the ch-launcher image ships this
one. It keeps upstream's decision logic (kubevirt cmd/virt-freezer/main.go@d923fdb815cd): dial
the launcher's command socket, ask `GetGuestInfo`; with no guest agent (the guest runs none on
vsock, or it is not connected yet) log "No guest agent, exiting" and exit 0, so the backup
proceeds crash-consistent, exactly as it does for a QEMU VM without an agent. With an agent it
calls Freeze/Unfreeze, which ch-launcher carries out through the agent.

Exit status: 0 on success or no agent, 1 on any failure (bad flags, launcher unreachable, RPC
failure), as upstream.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

import grpc

from ch_launcher._proto import kubevirt_cmd_v1_pb2 as pb
from ch_launcher._proto import kubevirt_cmd_v1_pb2_grpc as pb_grpc
from ch_launcher.kubevirt.log import setup_logging

log = logging.getLogger("ch_launcher.freezer")

# Upstream dials this fixed path (the compute container's view of the sockets emptyDir).
LAUNCHER_SOCKET = "/run/kubevirt/sockets/launcher-sock"


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="virt-freezer", description="Freeze or thaw the guest's filesystems "
                                "for a backup (no-op without a guest agent).")
    p.add_argument("--freeze", action="store_true")
    p.add_argument("--unfreeze", action="store_true")
    p.add_argument("--name", default="")
    p.add_argument("--namespace", default="")
    p.add_argument("--unfreezeTimeoutSeconds", type=int, default=300)
    p.add_argument("--socket", default=LAUNCHER_SOCKET, help=argparse.SUPPRESS)  # tests only
    return p.parse_args(list(argv))


def _vmi_request(name: str, namespace: str) -> pb.VMIRequest:
    vmi = {"metadata": {"name": name, "namespace": namespace}}
    return pb.VMIRequest(vmi=pb.VMI(vmiJson=json.dumps(vmi).encode()))


def run(argv: Sequence[str]) -> int:
    try:
        args = _parse(argv)
    except SystemExit as e:  # argparse already printed the usage
        return 1 if e.code else 0
    if not args.freeze and not args.unfreeze:
        log.error("Use either --freeze or --unfreeze")
        return 1
    if not args.name or not args.namespace:
        log.error("Both name and namespace flags must be provided")
        return 1
    with grpc.insecure_channel(f"unix:{args.socket}") as channel:
        stub = pb_grpc.CmdStub(channel)
        try:
            info = stub.GetGuestInfo(pb.EmptyRequest(), timeout=5.0)
        except grpc.RpcError as e:
            log.error("Failed to get guest info from %s: %s", args.socket, e.details() or e.code())
            return 1
        if not info.response.success:
            log.error("Failed to get guest info: %s", info.response.message)
            return 1
        try:
            agent_version = json.loads(info.guestInfoResponse or "{}").get("guestAgentVersion", "")
        except (ValueError, AttributeError):
            agent_version = ""
        if not agent_version:
            log.info("No guest agent, exiting")
            return 0
        request = _vmi_request(args.name, args.namespace)
        try:
            if args.freeze:
                reply = stub.FreezeVirtualMachine(
                    pb.FreezeRequest(vmi=request.vmi, unfreezeTimeoutSeconds=args.unfreezeTimeoutSeconds), timeout=60.0)
            else:
                reply = stub.UnfreezeVirtualMachine(request, timeout=60.0)
        except grpc.RpcError as e:
            log.error("%s failed: %s", "Freezing" if args.freeze else "Unfreezing", e.details() or e.code())
            return 1
        if not reply.success:
            log.error("%s VMI failed: %s", "Freezing" if args.freeze else "Unfreezing", reply.message)
            return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    setup_logging(component="virt-freezer")
    return run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
