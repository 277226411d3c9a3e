"""Executes a Plan's preparation steps (the only I/O of a translation): overlays, sparse images,
ISOs, waits for sockets. Never imported by admission."""
