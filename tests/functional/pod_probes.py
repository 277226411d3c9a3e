"""Looking into a pod sandbox (`pod_sandbox.py`): the VMM's REST API, the guest's DHCP client,
the privileges of a process, and virt-handler's names and cache files, as tests need them."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

POD_UID = 107  # util.NonRootUID
NET_BIND_SERVICE = 10


def hashed_pod_interface(network_name: str) -> str:
    """virt-handler's name for a secondary Multus network's pod interface (`pod` + sha256[:11])."""
    return "pod" + hashlib.sha256(network_name.encode()).hexdigest()[:11]


def go_dhcp_config(name: str, ip: str, prefix: int, gateway: str, mac: str, mtu: int,
                   routes: Sequence[tuple[str | None, int, str]] = ()) -> dict[str, Any]:
    """virt-handler's bridge-binding cache (`cache.DHCPConfig`) as Go's encoding/json writes it
    (net.IP as text, net.IPMask and net.HardwareAddr as base64, netlink.Addr embedding *net.IPNet)."""
    def mask(bits: int) -> str:
        return base64.b64encode(((1 << 32) - (1 << (32 - bits))).to_bytes(4, "big")).decode()

    def route(dst: str | None, bits: int, gw: str) -> dict[str, Any]:
        return {"LinkIndex": 0, "ILinkIndex": 0, "Scope": 0,
                "Dst": None if dst is None else {"IP": dst, "Mask": mask(bits)},
                "Src": "", "Gw": gw, "MultiPath": None, "Protocol": 0, "Priority": 0, "Family": 0,
                "Table": 0, "Type": 0, "Tos": 0, "Flags": 0, "MPLSDst": None, "NewDst": None,
                "Encap": None, "Via": None, "Realm": 0, "MTU": 0, "Window": 0, "Rtt": 0}
    return {"Name": name,
            "IP": {"IP": ip, "Mask": mask(prefix), "Label": "", "Flags": 0, "Scope": 0, "Peer": None,
                   "Broadcast": "", "PreferedLft": 0, "ValidLft": 0, "LinkIndex": 0},
            "IPv6": {"Label": "", "Flags": 0, "Scope": 0, "Peer": None, "Broadcast": "", "PreferedLft": 0,
                     "ValidLft": 0, "LinkIndex": 0},
            "MAC": base64.b64encode(bytes.fromhex(mac.replace(":", ""))).decode(),
            "AdvertisingIPAddr": "", "AdvertisingIPv6Addr": "",
            "Routes": [route(*r) for r in routes] or [route(None, 0, gateway)],
            "Mtu": mtu, "IPAMDisabled": False, "Gateway": gateway, "Subdomain": ""}


def capabilities(pid: int) -> dict[str, int]:
    """CapInh/CapPrm/CapEff/CapBnd/CapAmb of a process, as bit masks."""
    caps = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Cap"):
                key, value = line.split(":", 1)
                caps[key] = int(value.strip(), 16)
    return caps


def check_privileges(pid: int, *, launcher: bool) -> None:
    """Raise AssertionError unless process `pid` has the compute container's privileges: uid
    107, bounding set {NET_BIND_SERVICE}, nothing inheritable or ambient, no_new_privs, and
    permitted = effective = {NET_BIND_SERVICE} for the launcher, nothing for its children."""
    with open(f"/proc/{pid}/status") as f:
        status = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    caps = capabilities(pid)
    want = (1 << NET_BIND_SERVICE) if launcher else 0
    assert status["Uid"].split() == [str(POD_UID)] * 4, status["Uid"]
    assert status["Gid"].split() == [str(POD_UID)] * 4, status["Gid"]
    assert status.get("Groups", "").split() in ([], [str(POD_UID)]), status.get("Groups")
    assert status["NoNewPrivs"].strip() == "1"
    assert caps == {"CapInh": 0, "CapPrm": want, "CapEff": want, "CapBnd": 1 << NET_BIND_SERVICE,
                    "CapAmb": 0}, {k: hex(v) for k, v in caps.items()}


def api(api_socket: os.PathLike[str] | str, method: str, endpoint: str, body: Any = None,
        timeout: float = 10.0) -> tuple[int, Any]:
    """One raw HTTP/1.1 request to a VMM's REST socket: (status, parsed JSON body or None)."""
    payload = b"" if body is None else json.dumps(body).encode()
    head = (f"{method} /api/v1/{endpoint} HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n").encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(api_socket))
        s.sendall(head + payload)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        header, _, content = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in header.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(content) < length:
            chunk = s.recv(65536)
            if not chunk:
                break
            content += chunk
    status = int(header.split(b" ", 2)[1])
    return status, json.loads(content) if content.strip() else None


def vm_info(api_socket: os.PathLike[str] | str, timeout: float = 5.0) -> dict[str, Any]:
    """`GET vm.info` on a VMM's socket, raw: what the VMM really holds."""
    status, body = api(api_socket, "GET", "vm.info", timeout=timeout)
    if status != 200:
        raise RuntimeError(f"vm.info answered {status}: {body}")
    return body


def udhcpc(netns: str, workdir: Path, *extra: str, iface: str = "eth0", tries: int = 4) -> dict[str, str] | None:
    """busybox udhcpc once in `netns` (the guest's side); the options of the lease, or None."""
    script = workdir / "udhcpc.sh"
    script.write_text('#!/bin/sh\nif [ "$1" = bound ]; then env > "$DHCP_RECORD"; fi\nexit 0\n')
    script.chmod(0o755)
    record = workdir / f"lease-{netns}-{iface}.env"
    record.unlink(missing_ok=True)
    env = {**os.environ, "DHCP_RECORD": str(record)}
    result = subprocess.run(["ip", "netns", "exec", netns, "busybox", "udhcpc", "-i", iface, "-f", "-q", "-n",
                             "-t", str(tries), "-T", "1", "-A", "1", "-s", str(script),
                             "-O", "mtu", "-O", "search", "-O", "staticroutes", *extra],
                            capture_output=True, text=True, timeout=30, env=env, check=False)
    if result.returncode != 0 or not record.exists():
        return None
    return dict(line.split("=", 1) for line in record.read_text().splitlines() if "=" in line)
