"""The operator's isolation attestation (airlock's pkg/attestation): the published keys' PEM
bundle, and the checks of a signed statement. Errors are ValueError with what did not hold;
verify_isolation (in _api) turns them into IsolationError."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from typing import Any, Dict, Mapping

from . import _ed25519

VERSION = "airlock.dev/isolation/v1"

# An Ed25519 key's PKIX SubjectPublicKeyInfo (RFC 8410) is this prefix (SEQUENCE { SEQUENCE { OID
# 1.3.101.112 }, BIT STRING of 33 bytes }) and the 32 bytes of the key.
_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")

# The statement's fields (pkg/attestation.Statement); a verifier refuses any other, as Go's does.
_FIELDS = {
    "version", "namespace", "claim", "claimUID", "pod", "podUID", "node", "nodeKernel", "kernel",
    "recordDigest", "tokenHash", "evidenceDigest", "evidence", "issuedAt",
}

_PEM_BLOCK = re.compile(r"-----BEGIN ([^-\r\n]*)-----\r?\n(.*?)-----END \1-----", re.DOTALL)


def digest(b: bytes) -> str:
    """The hex sha256 of b."""
    return hashlib.sha256(b).hexdigest()


def key_id(public_key: bytes) -> str:
    """A public key's ID: the first 16 hex digits of the sha256 of its 32 bytes."""
    return digest(public_key)[:16]


def parse_public_keys(bundle: bytes) -> Dict[str, bytes]:
    """The Ed25519 public keys of a PEM bundle of "PUBLIC KEY" blocks (isolation-keys.pem), by
    key ID. A block of another type or of another key kind is an error: the bundle is the
    operator's, whole. Text outside the blocks is ignored, as PEM allows."""
    try:
        text = bundle.decode("ascii")
    except UnicodeDecodeError as err:
        raise ValueError("the key bundle is not PEM: %s" % err) from None
    keys: Dict[str, bytes] = {}
    for m in _PEM_BLOCK.finditer(text):
        if m.group(1) != "PUBLIC KEY":
            raise ValueError("a PEM block of type %r in the key bundle, want 'PUBLIC KEY'" % m.group(1))
        try:
            der = base64.b64decode("".join(m.group(2).split()), validate=True)
        except (binascii.Error, ValueError) as err:
            raise ValueError("a PUBLIC KEY block that is not base64: %s" % err) from None
        if len(der) != len(_SPKI_PREFIX) + 32 or not der.startswith(_SPKI_PREFIX):
            raise ValueError("a PUBLIC KEY block that is not an Ed25519 key")
        key = der[len(_SPKI_PREFIX):]
        keys[key_id(key)] = key
    if _PEM_BLOCK.sub("", text).count("-----BEGIN") > 0:
        raise ValueError("a PEM block without its END line in the key bundle")
    if not keys:
        raise ValueError("no public key in the bundle")
    return keys


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise ValueError("%s is not a base64 string" % what)
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as err:
        raise ValueError("%s: %s" % (what, err)) from None


def verify(attestation: Any, keys: Mapping[str, bytes], token: str, namespace: str, claim: str) -> Dict[str, Any]:
    """Checks attestation ({statement, signature, keyID}, as the acquire answer carries it): its
    signature with the key of its keyID among keys, over the statement's exact bytes; that the
    statement is of this version, its evidence what its digest says, and that it is about the
    sandbox of token, claim and namespace. Returns the statement as its JSON decodes (evidence
    is base64 there); raises ValueError saying what did not hold."""
    if not isinstance(attestation, Mapping):
        raise ValueError("no attestation")
    kid = attestation.get("keyID")
    key = keys.get(kid) if isinstance(kid, str) else None
    if key is None:
        raise ValueError("attestation signed by key %r, which is not among the %d published" % (kid, len(keys)))
    statement = _b64(attestation.get("statement"), "statement")
    signature = _b64(attestation.get("signature"), "signature")
    if not _ed25519.verify(key, statement, signature):
        raise ValueError("the signature does not verify")
    try:
        s = json.loads(statement)
    except ValueError as err:
        raise ValueError("statement: %s" % err) from None
    if not isinstance(s, dict):
        raise ValueError("the statement is not a JSON object")
    unknown = sorted(set(s) - _FIELDS)
    if unknown:
        raise ValueError("statement: unknown field %r" % unknown[0])
    for name in _FIELDS - {"evidence"}:
        if not isinstance(s.get(name, ""), str):
            raise ValueError("statement: %s is not a string" % name)
    evidence = b"" if s.get("evidence") is None else _b64(s["evidence"], "the statement's evidence")
    if s.get("version") != VERSION:
        raise ValueError("statement version %r, want %r" % (s.get("version"), VERSION))
    if digest(evidence) != s.get("evidenceDigest"):
        raise ValueError("the statement's evidence is not what its digest says")
    if s.get("tokenHash") != digest(token.encode()):
        raise ValueError("the statement is about another sandbox: its token hash is not this token's")
    if s.get("claim") != claim or s.get("namespace") != namespace:
        raise ValueError("the statement is about claim %s/%s, not %s/%s"
                         % (s.get("namespace"), s.get("claim"), namespace, claim))
    return s
