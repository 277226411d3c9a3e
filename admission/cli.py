"""`ch-admission`: the admission server and its offline commands.

    ch-admission [serve] --config FILE [--tls-cert-file F --tls-private-key-file F | --self-signed] ...
    ch-admission check [--kubevirt-cr F] FILE...
                                     verdict, field paths and warnings per object; exit 1 if any is denied
    ch-admission overhead FILE...    per VMI: Cloud Hypervisor overhead beside KubeVirt's QEMU figure
    ch-admission outdated [--resync] which Cloud Hypervisor VMIs KubeVirt calls outdated, and which it
                                     should; --resync makes virt-controller write the others again

`serve` is the default subcommand. Flags and defaults are shared with addon_manifests (see
docs/admission.md); `--namespace` defaults to the POD_NAMESPACE environment variable.
Exit codes: 0 success, 1 an object was denied (check) or a VMI does not look as it should
(outdated), 2 bad usage or configuration.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from admission.config import DEFAULT_PATH

SUBCOMMANDS = ("serve", "check", "overhead", "outdated")
DEFAULT_PORT = 8443
DEFAULT_CERT_DIR = "/var/run/ch-admission/certs"
DEFAULT_NAMESPACE = "kubevirt-ch"
DEFAULT_SERVICE = "ch-admission"
DEFAULT_DEPLOYMENT = "ch-admission"
DEFAULT_CERT_SECRET = "ch-admission-tls"
DEFAULT_WEBHOOK_CONFIGURATIONS = "kubevirt-ch-validator,kubevirt-ch-launcher-mutator"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ch-admission",
        description="Admission webhooks and overhead calculator for KubeVirt VMIs on Cloud Hypervisor.")
    sub = parser.add_subparsers(dest="command", metavar="{serve,check,overhead,outdated}")

    serve = sub.add_parser("serve", help="run the HTTPS admission server (default)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="HTTPS port (default %(default)s)")
    serve.add_argument("--address", default="0.0.0.0", help="listen address (default %(default)s)")
    serve.add_argument("--tls-cert-file", default="",
                       help="serving certificate chain, PEM (default with --self-signed: <cert-dir>/tls.crt); "
                            "re-read when the file changes")
    serve.add_argument("--tls-private-key-file", default="",
                       help="private key, PEM (default with --self-signed: <cert-dir>/tls.key)")
    serve.add_argument("--config", default=DEFAULT_PATH, help="configuration file (default %(default)s)")
    serve.add_argument("--kubeconfig", default="",
                       help="kubeconfig file for the API server (default: in-cluster configuration)")
    serve.add_argument("--self-signed", action="store_true",
                       help="manage a CA and serving certificate in the Secret --cert-secret, write them to "
                            "--cert-dir and inject the CA bundle into --webhook-configurations")
    serve.add_argument("--cert-dir", default=DEFAULT_CERT_DIR, help="where --self-signed writes tls.crt, tls.key, "
                       "ca.crt (default %(default)s)")
    serve.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE") or DEFAULT_NAMESPACE,
                       help="the add-on's namespace (default: $POD_NAMESPACE, else %(default)s)")
    serve.add_argument("--service", default=DEFAULT_SERVICE, help="the webhook Service name (default %(default)s)")
    serve.add_argument("--deployment", default=DEFAULT_DEPLOYMENT,
                       help="the server's own Deployment, which Events about cluster-wide conditions are about "
                            "(default %(default)s)")
    serve.add_argument("--cert-secret", default=DEFAULT_CERT_SECRET,
                       help="Secret holding the self-managed certificates (default %(default)s)")
    serve.add_argument("--webhook-configurations", default=DEFAULT_WEBHOOK_CONFIGURATIONS,
                       help="comma-separated webhook configurations whose caBundle --self-signed keeps "
                            "(default %(default)s)")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])

    check = sub.add_parser("check", help="validate VMIs, VMs, replica sets and pools from files, offline")
    check.add_argument("files", nargs="+", metavar="FILE", help="YAML or JSON, several documents per file; - = stdin")
    check.add_argument("--config", default=None, help="configuration file (default: the packaged example)")
    check.add_argument("--all", action="store_true",
                       help="check every VMI-bearing object, not only those annotated for Cloud Hypervisor")
    check.add_argument("--kubevirt-cr", default=None, metavar="FILE",
                       help="the cluster's KubeVirt CR (kubectl get kubevirt -n kubevirt kubevirt -o yaml): host "
                            "devices it permits as USB are refused, as the webhook refuses them (without it: a "
                            "warning for every hostDevices entry)")

    overhead = sub.add_parser("overhead", help="memory overhead per VMI: Cloud Hypervisor beside KubeVirt's QEMU")
    overhead.add_argument("files", nargs="+", metavar="FILE",
                          help="YAML or JSON, several documents per file; - = stdin")
    overhead.add_argument("--config", default=None, help="configuration file (default: the packaged example)")
    overhead.add_argument("--kubevirt", default="main", choices=["main", "v1.9.0"],
                          help="which KubeVirt constants to compare against (default %(default)s)")
    overhead.add_argument("--arch", default="amd64", choices=["amd64", "arm64", "s390x"],
                          help="cluster CPU architecture (default %(default)s)")

    outdated = sub.add_parser("outdated", help="Cloud Hypervisor VMIs KubeVirt calls outdated, and those it should "
                                               "(docs/operations.md §7); needs the cluster")
    outdated.add_argument("--config", default=None,
                          help="the add-on's configuration file (default: the packaged example); use the "
                               "ConfigMap's config.yaml of the running add-on")
    outdated.add_argument("--kubeconfig", default="",
                          help="kubeconfig with list and patch rights on VMIs (default: $KUBECONFIG, "
                               "~/.kube/config, in-cluster)")
    outdated.add_argument("--resync", action="store_true",
                          help="make virt-controller write again every VMI that does not look as it should")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse argv; `serve` is implied when the first word is not a subcommand or a help flag."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or (args[0] not in SUBCOMMANDS and args[0] not in ("-h", "--help")):
        args.insert(0, "serve")
    return build_parser().parse_args(args)


def main(argv: Sequence[str] | None = None) -> int:
    ns = parse_args(argv)
    if ns.command == "serve":
        from admission.app import serve_main
        return serve_main(ns)
    if ns.command == "check":
        from admission.offline import check_main
        return check_main(ns)
    if ns.command == "outdated":
        from admission.outdated import outdated_main
        return outdated_main(ns)
    from admission.offline import overhead_main
    return overhead_main(ns)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
