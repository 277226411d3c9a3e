"""The QEMU guest agent (qemu-ga) as the launcher speaks to it over the VM's vsock.

- `protocol`: the wire format (pure): commands, replies, the agent's errors;
- `connection`: one connection to the agent (`AgentConnection`), over any stream;
- `info`: what the agent answers, in the shapes KubeVirt reports (pure);
- `guest_exec`: running a command in the guest and waiting for it, as virt-launcher does.

The facts behind it (qemu-ga 7.2, Debian bookworm's `qemu-guest-agent`, run for real:
tests/contract/test_guest_agent.py): every reply is one line of JSON followed by `\\n`; the
reply to `guest-sync-delimited` is preceded by a 0xFF byte, which lets a client skip whatever a
previous client left in the stream; an error is `{"error": {"class", "desc"}}`; the agent serves
one client at a time (a second connection waits until the first closes).
"""
