"""A stand-in for qemu-ga in the simulated guest: the QEMU guest agent's protocol and answers.

Part of `fake_cloud_hypervisor.py` (stdlib only), which runs it behind the VM's vsock
(`fakech_vsock.py`) when the simulated guest starts it. Modelled on Debian bookworm's
`qemu-guest-agent` 7.2.22 run for real (`tests/contract/test_guest_agent.py` plays the same
conversation with both and compares): every reply one line of JSON (`", "` and `": "` as
separators) and `\\n`; `guest-sync-delimited`'s reply led by 0xFF; errors
`{"error": {"class", "desc"}}` with qemu-ga's texts; an unknown command `CommandNotFound`;
unexpected or missing arguments `GenericError`; while frozen every command but
`FROZEN_ALLOWED` is `CommandNotFound` (`... has been disabled: the agent is in frozen state`)
and `guest-info` shows them disabled; freezing a guest with no freezable filesystem freezes
nothing, answers 0 and stays thawed; `guest-exec-status` of a process that has been reported
exited is `Invalid parameter 'pid'`; `guest-shutdown` answers nothing when it succeeds;
`guest-exec-status` leaves out a stream that printed nothing; `guest-ssh-get-authorized-keys`
lists the file's keys last first, and the file holds them one a line without a final newline.

The simulated guest: the OS `OS_INFO`, host name `fake-guest`, UTC, a root user (`/root`), one
ext4 filesystem on the VM's first disk (none without disks: an initramfs), a NIC per VmConfig
`net` entry (lo too), files in memory. `guest-exec` runs a few programs on those files:
`true`, `false`, `echo`, `cat`, `test -e|-f`, `getent passwd`, `sh -c 'exit N'`; anything else
fails as a missing program does. `Guest.console()` is what the simulated guest's shell does
with a command line typed on the serial console (`touch`, `rm`, `echo TEXT > FILE`, `login USER`,
`logout USER`; starting and stopping qemu-ga is the VMM's: `fakech_vsock.py`).
"""

from __future__ import annotations

import base64
import binascii
import json
import shlex
import time
from collections.abc import Callable
from typing import Any

VERSION = "7.2.22"
OS_INFO = {"name": "Debian GNU/Linux", "kernel-release": "6.6.0-fake", "version": "12 (bookworm)",
           "pretty-name": "Debian GNU/Linux 12 (bookworm)", "version-id": "12",
           "kernel-version": "#1 SMP PREEMPT_DYNAMIC fake", "machine": "x86_64", "id": "debian"}
HOSTNAME = "fake-guest"
# qemu-ga 7.2.22's `guest-info` order, and whether a command answers when it succeeds.
COMMANDS: tuple[tuple[str, bool], ...] = (
    ("guest-get-cpustats", True), ("guest-get-diskstats", True), ("guest-ssh-remove-authorized-keys", True),
    ("guest-ssh-add-authorized-keys", True), ("guest-ssh-get-authorized-keys", True), ("guest-get-devices", True),
    ("guest-get-osinfo", True), ("guest-get-timezone", True), ("guest-get-users", True),
    ("guest-get-host-name", True), ("guest-exec", True), ("guest-exec-status", True),
    ("guest-get-memory-block-info", True), ("guest-set-memory-blocks", True), ("guest-get-memory-blocks", True),
    ("guest-set-user-password", True), ("guest-get-fsinfo", True), ("guest-get-disks", True),
    ("guest-set-vcpus", True), ("guest-get-vcpus", True), ("guest-network-get-interfaces", True),
    ("guest-suspend-hybrid", False), ("guest-suspend-ram", False), ("guest-suspend-disk", False),
    ("guest-fstrim", True), ("guest-fsfreeze-thaw", True), ("guest-fsfreeze-freeze-list", True),
    ("guest-fsfreeze-freeze", True), ("guest-fsfreeze-status", True), ("guest-file-flush", True),
    ("guest-file-seek", True), ("guest-file-write", True), ("guest-file-read", True), ("guest-file-close", True),
    ("guest-file-open", True), ("guest-shutdown", False), ("guest-info", True), ("guest-set-time", True),
    ("guest-get-time", True), ("guest-ping", True), ("guest-sync", True), ("guest-sync-delimited", True),
)
# qemu-ga's freeze allow list (qga/main.c): all other commands are refused while frozen.
FROZEN_ALLOWED = frozenset({"guest-ping", "guest-info", "guest-sync", "guest-sync-delimited",
                            "guest-fsfreeze-status", "guest-fsfreeze-thaw"})
# command -> (required arguments, optional arguments), for the commands served here
ARGUMENTS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "guest-sync": (frozenset({"id"}), frozenset()),
    "guest-sync-delimited": (frozenset({"id"}), frozenset()),
    "guest-exec": (frozenset({"path"}), frozenset({"arg", "env", "input-data", "capture-output"})),
    "guest-exec-status": (frozenset({"pid"}), frozenset()),
    "guest-file-open": (frozenset({"path"}), frozenset({"mode"})),
    "guest-file-read": (frozenset({"handle"}), frozenset({"count"})),
    "guest-file-write": (frozenset({"handle", "buf-b64"}), frozenset({"count"})),
    "guest-file-close": (frozenset({"handle"}), frozenset()),
    "guest-ssh-get-authorized-keys": (frozenset({"username"}), frozenset()),
    "guest-ssh-add-authorized-keys": (frozenset({"username", "keys"}), frozenset({"reset"})),
    "guest-ssh-remove-authorized-keys": (frozenset({"username", "keys"}), frozenset()),
    "guest-set-user-password": (frozenset({"username", "password", "crypted"}), frozenset()),
    "guest-shutdown": (frozenset(), frozenset({"mode"})),
    "guest-fsfreeze-freeze-list": (frozenset(), frozenset({"mountpoints"})),
}
USERS = {"root": "/root"}  # /etc/passwd of the simulated guest
MAX_HANDLE_READ = 48 * 1024 * 1024


class Failure(Exception):
    def __init__(self, cls: str, desc: str) -> None:
        super().__init__(desc)
        self.cls, self.desc = cls, desc


def generic(desc: str) -> Failure:
    return Failure("GenericError", desc)


class Guest:
    """What the simulated guest's agent knows of the guest: its files, users, filesystems and
    NICs, its freeze state. One per VM boot (a reboot starts a fresh guest)."""

    def __init__(self, config: dict[str, Any], on_shutdown: Callable[[str], None]) -> None:
        self.files: dict[str, bytes] = {"/etc/hostname": HOSTNAME.encode() + b"\n",
                                        "/etc/passwd": b"root:x:0:0:root:/root:/bin/sh\n"}
        self.passwords: dict[str, tuple[str, bool]] = {}
        self.logged_in: dict[str, float] = {}
        self.frozen = False
        self.on_shutdown = on_shutdown
        disks = [d for d in config.get("disks") or [] if isinstance(d, dict)]
        self.filesystems: list[dict[str, Any]] = []
        if disks:
            first = disks[0]
            disk = {"bus-type": "virtio", "bus": 0, "unit": 0, "target": 0, "dev": "/dev/vda",
                    "pci-controller": {"bus": 0, "slot": 1, "domain": 0, "function": 0}}
            if first.get("serial"):
                disk["serial"] = first["serial"]
            self.filesystems.append({"name": "vda1", "total-bytes": 1 << 30, "mountpoint": "/", "disk": [disk],
                                     "used-bytes": 256 << 20, "type": "ext4"})
        self.nics = [("lo", "00:00:00:00:00:00")] + [
            (f"eth{i}", str(n.get("mac") or "")) for i, n in enumerate(config.get("net") or []) if isinstance(n, dict)]

    def console(self, line: str) -> str:
        """The shell's answer to a command line typed on the console ("" when it prints nothing).
        Lines it does not know are only echoed, as the simulated console always did (the console's
        own tests type arbitrary text)."""
        try:
            words = shlex.split(line)
        except ValueError:
            return ""
        if not words:
            return ""
        if words[0] == "echo" and len(words) >= 3 and words[-2] == ">":
            self.files[words[-1]] = (" ".join(words[1:-2]) + "\n").encode()
        elif words[0] == "touch":
            for path in words[1:]:
                self.files.setdefault(path, b"")
        elif words[0] == "rm":
            for path in words[1:]:
                self.files.pop(path, None)
        elif words[0] == "login" and len(words) == 2:
            self.logged_in[words[1]] = time.time()
        elif words[0] == "logout" and len(words) == 2:
            self.logged_in.pop(words[1], None)
        return ""

    def run(self, path: str, args: list[str]) -> tuple[int, bytes, bytes]:
        """`guest-exec` of `path args`: (exit code, stdout, stderr). Raises Failure for a program
        the guest does not have."""
        name = path.rsplit("/", 1)[-1]
        if name == "true":
            return 0, b"", b""
        if name == "false":
            return 1, b"", b""
        if name == "echo":
            return 0, (" ".join(args) + "\n").encode(), b""
        if name == "cat":
            out, err, code = b"", b"", 0
            for arg in args:
                if arg in self.files:
                    out += self.files[arg]
                else:
                    err += f"cat: can't open '{arg}': No such file or directory\n".encode()
                    code = 1
            return code, out, err
        if name == "test" and len(args) == 2 and args[0] in ("-e", "-f"):
            return (0 if args[1] in self.files else 1), b"", b""
        if name == "getent" and len(args) == 2 and args[0] == "passwd":
            home = USERS.get(args[1])
            return (0, f"{args[1]}:x:0:0:{args[1]}:{home}:/bin/sh\n".encode(), b"") if home else (2, b"", b"")
        if name == "sh" and len(args) == 2 and args[0] == "-c" and args[1].startswith("exit "):
            return int(args[1][5:].strip() or 0), b"", b""
        raise generic(f"Guest agent command failed, error was 'Failed to execute child process "
                      f"\u201c{path}\u201d (No such file or directory)'")


class Agent:
    """One qemu-ga process: its parser, its file handles and processes, talking to `Guest`."""

    def __init__(self, guest: Guest) -> None:
        self.guest = guest
        self.buffer = b""
        self.handles: dict[int, list[Any]] = {}  # handle -> [path, mode, position]
        self.next_handle = 1000
        self.processes: dict[int, tuple[int, bytes, bytes, bool]] = {}
        self.next_pid = 1000

    def feed(self, data: bytes) -> bytes:
        """The replies to what the client sent (commands may arrive in pieces)."""
        out = b""
        for byte in data:
            if byte == 0xFF:  # qemu-ga's lexer resets on an invalid byte: what it held is an error
                pending, self.buffer = self.buffer.strip(), b""
                out += self.error(generic(f"JSON parse error, stray '{pending.decode(errors='replace')}\ufffd'"))
                continue
            self.buffer += bytes([byte])
        decoder = json.JSONDecoder()
        while True:
            text = self.buffer.lstrip()
            if not text:
                self.buffer = b""
                break
            if not text.startswith(b"{"):
                word = text.split(b"{", 1)[0].strip()
                if b"{" not in text:
                    self.buffer = text  # a keyword still arriving, or garbage waiting for the next object
                    break
                self.buffer = text[len(word):]
                out += self.error(generic(f"JSON parse error, invalid keyword '{word.decode(errors='replace')}'"))
                continue
            try:
                request, end = decoder.raw_decode(text.decode(errors="replace"))
            except ValueError:
                self.buffer = text  # incomplete
                break
            self.buffer = text[len(text.decode(errors="replace")[:end].encode()):]
            out += self.handle(request)
        return out

    @staticmethod
    def reply(value: Any, delimited: bool = False) -> bytes:
        return (b"\xff" if delimited else b"") + json.dumps({"return": value}).encode() + b"\n"

    @staticmethod
    def error(failure: Failure) -> bytes:
        return json.dumps({"error": {"class": failure.cls, "desc": failure.desc}}).encode() + b"\n"

    def handle(self, request: Any) -> bytes:
        if not isinstance(request, dict) or not isinstance(request.get("execute"), str):
            return self.error(generic("Expecting a JSON object with an 'execute' key"))
        name = request["execute"]
        args = request.get("arguments") or {}
        try:
            if name not in dict(COMMANDS):
                raise Failure("CommandNotFound", f"The command {name} has not been found")
            if self.guest.frozen and name not in FROZEN_ALLOWED:
                raise Failure("CommandNotFound", f"Command {name} has been disabled: the agent is in frozen state")
            required, optional = ARGUMENTS.get(name, (frozenset(), frozenset()))
            for key in sorted(args):
                if key not in required | optional:
                    raise generic(f"Parameter '{key}' is unexpected")
            for key in sorted(required - set(args)):
                raise generic(f"Parameter '{key}' is missing")
            if name == "guest-shutdown":
                self.guest.on_shutdown(str(args.get("mode", "powerdown")))
                return b""  # success-response false: no answer
            value = getattr(self, "do_" + name.removeprefix("guest-").replace("-", "_"), self.not_served)(name, args)
        except Failure as e:
            return self.error(e)
        return self.reply(value, delimited=name == "guest-sync-delimited")

    def not_served(self, name: str, args: dict[str, Any]) -> Any:
        raise generic(f"{name} is not simulated")

    # --- commands -------------------------------------------------------------------------

    def do_sync(self, _: str, args: dict[str, Any]) -> Any:
        return args["id"]

    do_sync_delimited = do_sync

    def do_ping(self, _: str, __: dict[str, Any]) -> Any:
        return {}

    def do_info(self, _: str, __: dict[str, Any]) -> Any:
        return {"version": VERSION, "supported_commands": [
            {"enabled": not self.guest.frozen or name in FROZEN_ALLOWED, "name": name, "success-response": answers}
            for name, answers in COMMANDS]}

    def do_get_osinfo(self, _: str, __: dict[str, Any]) -> Any:
        return dict(OS_INFO)

    def do_get_host_name(self, _: str, __: dict[str, Any]) -> Any:
        return {"host-name": HOSTNAME}

    def do_get_timezone(self, _: str, __: dict[str, Any]) -> Any:
        return {"zone": "UTC", "offset": 0}

    def do_get_time(self, _: str, __: dict[str, Any]) -> Any:
        return time.time_ns()

    def do_get_users(self, _: str, __: dict[str, Any]) -> Any:
        return [{"user": user, "login-time": since} for user, since in self.guest.logged_in.items()]

    def do_get_fsinfo(self, _: str, __: dict[str, Any]) -> Any:
        return [dict(fs) for fs in self.guest.filesystems]

    def do_network_get_interfaces(self, _: str, __: dict[str, Any]) -> Any:
        out = []
        for name, mac in self.guest.nics:
            nic: dict[str, Any] = {"name": name, "hardware-address": mac}
            if name == "lo":
                nic["ip-addresses"] = [{"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8}]
            out.append(nic)
        return out

    def do_fsfreeze_status(self, _: str, __: dict[str, Any]) -> Any:
        return "frozen" if self.guest.frozen else "thawed"

    def do_fsfreeze_freeze(self, _: str, __: dict[str, Any]) -> Any:
        count = len(self.guest.filesystems)
        self.guest.frozen = count > 0  # nothing frozen: qemu-ga thaws again
        return count

    def do_fsfreeze_thaw(self, _: str, __: dict[str, Any]) -> Any:
        count = len(self.guest.filesystems) if self.guest.frozen else 0
        self.guest.frozen = False
        return count

    def do_exec(self, _: str, args: dict[str, Any]) -> Any:
        argv = [str(a) for a in args.get("arg") or []]
        code, out, err = self.guest.run(str(args["path"]), argv)
        pid = self.next_pid
        self.next_pid += 1
        self.processes[pid] = (code, out, err, bool(args.get("capture-output")))
        return {"pid": pid}

    def do_exec_status(self, _: str, args: dict[str, Any]) -> Any:
        entry = self.processes.pop(args["pid"], None) if isinstance(args["pid"], int) else None
        if entry is None:
            raise generic("Invalid parameter 'pid'")
        code, out, err, captured = entry
        status: dict[str, Any] = {"exitcode": code}
        if captured and err:  # qemu-ga leaves out a stream that printed nothing
            status["err-data"] = base64.b64encode(err).decode()
        if captured and out:
            status["out-data"] = base64.b64encode(out).decode()
        if captured and err:
            status["err-truncated"] = False
        if captured and out:
            status["out-truncated"] = False
        status["exited"] = True
        return status

    def do_file_open(self, _: str, args: dict[str, Any]) -> Any:
        path, mode = str(args["path"]), str(args.get("mode", "r"))
        if mode.startswith("r") and path not in self.guest.files:
            raise generic(f"failed to open file '{path}' (mode: '{mode}'): No such file or directory")
        if mode.startswith("w"):
            self.guest.files[path] = b""
        elif mode.startswith("a"):
            self.guest.files.setdefault(path, b"")
        handle = self.next_handle
        self.next_handle += 1
        self.handles[handle] = [path, mode, len(self.guest.files[path]) if mode.startswith("a") else 0]
        return handle

    def _handle(self, args: dict[str, Any]) -> list[Any]:
        entry = self.handles.get(args["handle"])
        if entry is None:
            raise generic(f"handle '{args['handle']}' has not been found")
        return entry

    def do_file_read(self, _: str, args: dict[str, Any]) -> Any:
        entry = self._handle(args)
        data = self.guest.files.get(entry[0], b"")
        count = int(args.get("count", 4096))
        if count < 0 or count > MAX_HANDLE_READ:
            raise generic(f"value '{count}' is invalid for argument count")
        chunk = data[entry[2]:entry[2] + count]
        entry[2] += len(chunk)
        return {"count": len(chunk), "buf-b64": base64.b64encode(chunk).decode(), "eof": entry[2] >= len(data)}

    def do_file_write(self, _: str, args: dict[str, Any]) -> Any:
        entry = self._handle(args)
        try:
            chunk = base64.b64decode(str(args["buf-b64"]), validate=True)
        except binascii.Error:
            raise generic("Base64 data contains invalid characters") from None
        data = self.guest.files.get(entry[0], b"")
        self.guest.files[entry[0]] = data[:entry[2]] + chunk + data[entry[2] + len(chunk):]
        entry[2] += len(chunk)
        return {"count": len(chunk), "eof": False}

    def do_file_close(self, _: str, args: dict[str, Any]) -> Any:
        self._handle(args)
        del self.handles[args["handle"]]
        return {}

    def _home(self, user: str) -> str:
        home = USERS.get(user)
        if home is None:
            raise generic(f"failed to lookup user '{user}': Success")
        return home

    def _keys(self, user: str) -> list[str]:
        path = f"{self._home(user)}/.ssh/authorized_keys"
        return [k for k in self.guest.files.get(path, b"").decode().split("\n") if k.strip()]

    def do_ssh_get_authorized_keys(self, _: str, args: dict[str, Any]) -> Any:
        user = str(args["username"])
        path = f"{self._home(user)}/.ssh/authorized_keys"
        if path not in self.guest.files:
            raise generic(f"failed to read '{path}': Failed to open file \u201c{path}\u201d: No such file or "
                          "directory")
        return {"keys": self._keys(user)[::-1]}  # qemu-ga lists the file's keys last first

    def do_ssh_add_authorized_keys(self, _: str, args: dict[str, Any]) -> Any:
        user = str(args["username"])
        keys = [str(k) for k in args["keys"]]
        current = [] if args.get("reset") else self._keys(user)
        merged = current + [k for k in keys if k not in current]
        self.guest.files[f"{self._home(user)}/.ssh/authorized_keys"] = "\n".join(merged).encode()
        return {}

    def do_ssh_remove_authorized_keys(self, _: str, args: dict[str, Any]) -> Any:
        user = str(args["username"])
        kept = [k for k in self._keys(user) if k not in [str(k) for k in args["keys"]]]
        self.guest.files[f"{self._home(user)}/.ssh/authorized_keys"] = "\n".join(kept).encode()
        return {}

    def do_set_user_password(self, _: str, args: dict[str, Any]) -> Any:
        try:
            password = base64.b64decode(str(args["password"]), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise generic("Base64 data contains invalid characters") from None
        user = str(args["username"])
        if user not in USERS:
            raise generic("child process has failed to set user password")
        self.guest.passwords[user] = (password, bool(args["crypted"]))
        return {}
