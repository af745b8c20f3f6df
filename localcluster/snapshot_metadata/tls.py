"""Throw-away TLS material for the local SnapshotMetadata server: a self-signed CA and a server certificate.

``make_ca_and_cert(dns_names=())`` returns a ``TlsMaterial`` of PEM bytes, generated in memory:

- the CA: ECDSA P-256, ``CA:TRUE``, key usage keyCertSign/cRLSign; its key is discarded once the server
  certificate is signed, so nothing else can ever be issued under it;
- the server certificate: ECDSA P-256, signed by the CA, SANs ``DNS:localhost``, ``IP:127.0.0.1`` plus every
  name of ``dns_names`` (e.g. ``csi-snapshot-metadata.<ns>``), extended key usage serverAuth;
- both valid from 5 minutes ago (clock skew) for 1 day.

Clients trust ``ca_pem`` (``grpc.ssl_channel_credentials(root_certificates=ca_pem)``), exactly as a backup client
trusts ``SnapshotMetadataService.spec.caCert``. Nothing is written to disk here; ``key_pem`` stays out of reprs.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=1)
SKEW = datetime.timedelta(minutes=5)


@dataclass(frozen=True)
class TlsMaterial:
    """PEM bytes: the CA certificate to trust, the server certificate and the server's private key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes = field(repr=False)


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "cbt-mover localcluster"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _key_usage(*allowed: str) -> x509.KeyUsage:
    flags = (
        "digital_signature",
        "content_commitment",
        "key_encipherment",
        "data_encipherment",
        "key_agreement",
        "key_cert_sign",
        "crl_sign",
        "encipher_only",
        "decipher_only",
    )
    return x509.KeyUsage(**{flag: flag in allowed for flag in flags})


def make_ca_and_cert(dns_names: Iterable[str] = ()) -> TlsMaterial:
    """A fresh CA and a server certificate for localhost, 127.0.0.1 and ``dns_names``."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("snapshot-metadata test CA")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - SKEW)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage("key_cert_sign", "crl_sign"), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = ["localhost", *(n for n in dns_names if n != "localhost")]
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dict.fromkeys(names)]
    sans.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("snapshot-metadata"))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - SKEW)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage("digital_signature", "key_agreement"), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return TlsMaterial(
        ca_pem=ca_cert.public_bytes(pem),
        cert_pem=cert.public_bytes(pem),
        key_pem=key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )
