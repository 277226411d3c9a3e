"""Self-managed webhook certificates (`serve --self-signed`, the default install).

A CA and a serving certificate for `<service>.<namespace>.svc` (and its DNS variants) are kept
in one Secret shared by all replicas (`ca.crt`, `ca.key`, `tls.crt`, `tls.key`). The first
replica to start creates it; a replica that loses that race (409 AlreadyExists) reads the
winner's, so every replica serves the same chain. Renewal (serving certificate expiring within
`RENEW_BEFORE`, or issued for other names) re-signs with the same CA and updates the Secret with
its resourceVersion; on a conflict the other replica's update is adopted. The files are written
to `--cert-dir` atomically (`tls.ReloadingTLS` picks them up), and the CA bundle is patched into
each webhook of the named configurations at start-up and whenever it differs (re-applying the
manifests resets `caBundle`, `ecosystem.md` §7.2).

Keys are ECDSA P-256 (fast handshakes, accepted by the API server). Failures raise `CertError`
or `kube.KubeError` with a one-line message.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import logging
import os
import tempfile
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from admission.kube import KubeClient, KubeError

log = logging.getLogger(__name__)

CA_VALIDITY = datetime.timedelta(days=3650)
SERVING_VALIDITY = datetime.timedelta(days=365)
RENEW_BEFORE = datetime.timedelta(days=30)
BACKDATE = datetime.timedelta(minutes=5)  # tolerate clock skew between nodes
# Keys that sign X.509 certificates: make_ca's ECDSA, and what a CA put in the Secret by hand may hold
_SIGNING_KEYS = (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey, dsa.DSAPrivateKey, ed25519.Ed25519PrivateKey,
                 ed448.Ed448PrivateKey)


class CertError(RuntimeError):
    pass


@dataclass(frozen=True)
class Bundle:
    """PEM bytes of the CA and the serving pair."""

    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes

    def to_secret_data(self) -> dict[str, str]:
        return {k: base64.b64encode(v).decode() for k, v in (
            ("ca.crt", self.ca_cert), ("ca.key", self.ca_key), ("tls.crt", self.cert), ("tls.key", self.key))}

    @classmethod
    def from_secret(cls, secret: dict[str, Any]) -> Bundle | None:
        """The bundle in a Secret, or None when a key is missing or not base64."""
        data = secret.get("data") or {}
        try:
            return cls(*(base64.b64decode(data[k], validate=True) for k in ("ca.crt", "ca.key", "tls.crt", "tls.key")))
        except (KeyError, ValueError, TypeError):
            return None


def dns_names(service: str, namespace: str) -> list[str]:
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_ca(common_name: str = "kubevirt-ch admission CA") -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - BACKDATE)
            .not_valid_after(now + CA_VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def make_serving(ca_cert_pem: bytes, ca_key_pem: bytes, names: list[str],
                 validity: datetime.timedelta = SERVING_VALIDITY) -> tuple[bytes, bytes]:
    """A serving certificate for `names` (DNS SANs; IP addresses become IP SANs) signed by the CA.
    Raises ValueError when the CA's certificate or key is unreadable or the key cannot sign."""
    import ipaddress
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, _SIGNING_KEYS):
        raise ValueError(f"the CA key ({type(ca_key).__name__}) cannot sign certificates")
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for n in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            sans.append(x509.DNSName(n))
    now = _now()
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - BACKDATE)
            .not_valid_after(now + validity)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def new_bundle(names: list[str]) -> Bundle:
    ca_cert, ca_key = make_ca()
    cert, key = make_serving(ca_cert, ca_key, names)
    return Bundle(ca_cert, ca_key, cert, key)


def needs_renewal(bundle: Bundle, names: list[str], now: datetime.datetime | None = None) -> str | None:
    """Why the serving certificate must be re-issued (None when it is fine)."""
    now = now or _now()
    try:
        cert = x509.load_pem_x509_certificate(bundle.cert)
        ca = x509.load_pem_x509_certificate(bundle.ca_cert)
        serialization.load_pem_private_key(bundle.ca_key, password=None)
        serialization.load_pem_private_key(bundle.key, password=None)
    except ValueError as e:
        return f"unreadable certificate or key: {e}"
    if ca.not_valid_after_utc - now < RENEW_BEFORE:
        return "the CA expires soon"
    if cert.issuer != ca.subject:
        return "the serving certificate is not issued by the CA"
    if cert.not_valid_after_utc - now < RENEW_BEFORE:
        return f"the serving certificate expires on {cert.not_valid_after_utc:%Y-%m-%d}"
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "the serving certificate has no subjectAltName"
    have = set(sans.get_values_for_type(x509.DNSName))
    if not set(names) <= have:
        return f"the serving certificate lacks {sorted(set(names) - have)}"
    return None


def renewed(bundle: Bundle, names: list[str]) -> Bundle:
    """Re-issue the serving pair with the same CA, or everything if the CA itself is the problem."""
    try:
        ca = x509.load_pem_x509_certificate(bundle.ca_cert)
        serialization.load_pem_private_key(bundle.ca_key, password=None)
        if ca.not_valid_after_utc - _now() >= RENEW_BEFORE:
            cert, key = make_serving(bundle.ca_cert, bundle.ca_key, names)
            return Bundle(bundle.ca_cert, bundle.ca_key, cert, key)
    except ValueError:
        pass
    return new_bundle(names)


def ensure_secret(kube: KubeClient, namespace: str, secret_name: str, names: list[str]) -> Bundle:
    """Load the shared bundle from the Secret, creating or renewing it. Replicas converge:
    a lost create or update race (409) re-reads and adopts the other replica's bundle."""
    for _attempt in range(5):
        secret = kube.get_secret(namespace, secret_name)
        if secret is None:
            bundle = new_bundle(names)
            body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": secret_name, "namespace": namespace,
                                 "labels": {"app.kubernetes.io/name": "ch-admission",
                                            "app.kubernetes.io/part-of": "kubevirt-ch"}},
                    "data": bundle.to_secret_data()}
            try:
                kube.create_secret(namespace, body)
            except KubeError as e:
                if e.status == 409:
                    log.info("Secret %s/%s was created by another replica; adopting it", namespace, secret_name)
                    continue
                raise
            log.info("created Secret %s/%s with a new CA and serving certificate", namespace, secret_name)
            return bundle
        stored = Bundle.from_secret(secret)
        why = "it lacks ca.crt, ca.key, tls.crt or tls.key" if stored is None else needs_renewal(stored, names)
        if why is None:
            assert stored is not None
            return stored
        fresh = new_bundle(names) if stored is None else renewed(stored, names)
        secret["data"] = {**(secret.get("data") or {}), **fresh.to_secret_data()}
        try:
            kube.replace_secret(namespace, secret)
        except KubeError as e:
            if e.status == 409:
                continue  # another replica renewed it first
            raise
        log.info("renewed the certificates in Secret %s/%s: %s", namespace, secret_name, why)
        return fresh
    raise CertError(f"Secret {namespace}/{secret_name} kept changing under us; giving up after 5 attempts")


def _atomic_write(path: str, data: bytes, mode: int) -> None:
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_files(cert_dir: str, bundle: Bundle) -> tuple[str, str]:
    """Write tls.key, tls.crt and ca.crt (each atomically; the key first) if they differ.
    Returns the certificate and key paths."""
    try:
        os.makedirs(cert_dir, mode=0o700, exist_ok=True)
        for name, data, mode in (("tls.key", bundle.key, 0o600), ("tls.crt", bundle.cert, 0o644),
                                 ("ca.crt", bundle.ca_cert, 0o644)):
            path = os.path.join(cert_dir, name)
            try:
                with open(path, "rb") as f:
                    if f.read() == data:
                        continue
            except OSError:
                pass
            _atomic_write(path, data, mode)
    except OSError as e:
        raise CertError(f"cannot write certificates to {cert_dir}: {e}") from None
    return os.path.join(cert_dir, "tls.crt"), os.path.join(cert_dir, "tls.key")


def inject_ca_bundle(kube: KubeClient, configurations: list[str], ca_cert: bytes) -> list[str]:
    """Set `clientConfig.caBundle` of every webhook in each named configuration. Returns the
    names of the configurations that were patched (already-correct ones are left alone).

    The JSON Patch tests each webhook's name at its index, so a concurrent reorder fails the
    patch instead of giving a webhook another's bundle; the caller retries at the next round."""
    wanted = base64.b64encode(ca_cert).decode()
    patched = []
    for name in configurations:
        kind, obj = kube.get_webhook_configuration(name)
        ops: list[dict[str, Any]] = []
        for i, webhook in enumerate(obj.get("webhooks") or []):
            client = webhook.get("clientConfig") or {}
            if client.get("caBundle") == wanted:
                continue
            ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": webhook.get("name")})
            ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": wanted})
        if ops:
            kube.patch_webhook_configuration(kind, name, ops)
            patched.append(name)
            log.info("injected the CA bundle into %s webhook configuration %s", kind, name)
    return patched
