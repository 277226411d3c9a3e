"""Renewing the self-managed CA's serving certificate (admission/certs.py)."""

from __future__ import annotations

import datetime

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa, x25519

from admission.certs import Bundle, make_ca, make_serving, renewed

NAMES = ["ch-admission", "ch-admission.kubevirt-ch.svc"]


def _pem(key: rsa.RSAPrivateKey | x25519.X25519PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _issuer(pem: bytes) -> x509.Name:
    return x509.load_pem_x509_certificate(pem).issuer


def test_a_ca_key_that_cannot_sign_is_replaced_with_a_fresh_bundle():
    ca_cert, ca_key = make_ca()
    cert, key = make_serving(ca_cert, ca_key, NAMES)
    broken = Bundle(ca_cert, _pem(x25519.X25519PrivateKey.generate()), cert, key)  # a key-agreement key
    fresh = renewed(broken, NAMES)
    assert fresh.ca_cert != ca_cert
    assert _issuer(fresh.cert) == x509.load_pem_x509_certificate(fresh.ca_cert).subject


def test_an_rsa_ca_put_in_the_secret_by_hand_is_kept():
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "an RSA CA")])
    now = datetime.datetime.now(datetime.UTC)
    ca_cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now)
               .not_valid_after(now + datetime.timedelta(days=365))
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .sign(key, hashes.SHA256())).public_bytes(serialization.Encoding.PEM)
    cert, serving_key = make_serving(ca_cert, _pem(key), NAMES)
    again = renewed(Bundle(ca_cert, _pem(key), cert, serving_key), NAMES)
    assert again.ca_cert == ca_cert
    assert _issuer(again.cert) == name
