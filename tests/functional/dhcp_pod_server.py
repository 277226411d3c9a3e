"""Run inside the pod's network namespace by test_dhcp.py: translate, start the DHCP server, wait.

argv[1]: a JSON file {"vmi": ..., "links": {name: [mtu, mac]}, "private_dir": ..., "resolv_conf": ...,
"hostname": ...}. Prints "READY <json of the DhcpSpecs>" once serving, or "ERROR <message>" on a
DhcpError; serves until stdin closes, then stops the server and exits.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from ch_launcher.convert.context import LauncherEnv, LauncherOptions, PodFacts, Translation
from ch_launcher.convert.network import configure_network
from ch_launcher.convert.plan import Plan
from ch_launcher.dhcp import DhcpError, start_dhcp
from ch_launcher.kubevirt.vmi import parse_vmi


def main() -> int:
    args = json.loads(pathlib.Path(sys.argv[1]).read_text())
    links = args["links"]
    env = LauncherEnv(private_dir=args["private_dir"],
                      pod=PodFacts(link_mtu={k: v[0] for k, v in links.items()},
                                   link_mac={k: v[1] for k, v in links.items()}))
    t = Translation(parse_vmi(args["vmi"]), env, LauncherOptions())
    configure_network(t)
    if t.problems:
        print("ERROR translation: " + "; ".join(p.message for p in t.problems), flush=True)
        return 1
    try:
        handle = start_dhcp(Plan(config=t.config, dhcp=t.dhcp), env, resolv_conf=args["resolv_conf"],
                            hostname=args["hostname"])
    except DhcpError as e:
        print(f"ERROR {e}", flush=True)
        return 1
    print("READY " + json.dumps([dataclasses.asdict(s) for s in t.dhcp]), flush=True)
    sys.stdin.read()
    handle.stop()
    print("SERVED " + json.dumps(handle.served), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
