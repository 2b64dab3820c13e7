"""Ed25519 signature verification (RFC 8032, section 5.1.7), for the operator's isolation
attestation: the standard library has no Ed25519, and this package depends on nothing else.

Verification only: nothing secret passes through here, so nothing needs to run in constant time.
It is strict where RFC 8032 is: a signature whose S is not below the group order L, or whose R or
public key is not the canonical encoding of a curve point (y not below p, or x = 0 with the sign
bit set), is refused. The check is the cofactorless equation [S]B = R + [k]A, with k reduced
modulo L, which accepts and refuses what Go's crypto/ed25519 does for the canonical keys the
operator publishes.
"""

from __future__ import annotations

import hashlib
from typing import Optional, Tuple

# The field GF(p), the curve -x^2 + y^2 = 1 + d x^2 y^2 over it, and the order of its base point.
P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P
_2D = 2 * D % P
_SQRT_M1 = pow(2, (P - 1) // 4, P)  # a square root of -1: 2 is not a square, so this is one

# A point in extended coordinates (X, Y, Z, T): x = X/Z, y = Y/Z and x*y = T/Z (section 5.1.4).
Point = Tuple[int, int, int, int]
IDENTITY: Point = (0, 1, 1, 0)


def add(p: Point, q: Point) -> Point:
    """p + q (section 5.1.4's addition; complete: it holds for doubling and the identity too)."""
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a = (y1 - x1) * (y2 - x2) % P
    b = (y1 + x1) * (y2 + x2) % P
    c = t1 * _2D * t2 % P
    d = 2 * z1 * z2 % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def double(p: Point) -> Point:
    """2p (section 5.1.4's doubling, cheaper than add(p, p))."""
    x1, y1, z1, _ = p
    a = x1 * x1 % P
    b = y1 * y1 % P
    c = 2 * z1 * z1 % P
    h = a + b
    e = h - (x1 + y1) * (x1 + y1) % P
    g = a - b
    f = c + g
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def negate(p: Point) -> Point:
    x, y, z, t = p
    return (-x % P, y, z, -t % P)


def equal(p: Point, q: Point) -> bool:
    """Whether p and q are the same point: x1/z1 = x2/z2 and y1/z1 = y2/z2."""
    return (p[0] * q[2] - q[0] * p[2]) % P == 0 and (p[1] * q[2] - q[1] * p[2]) % P == 0


def double_mul(s: int, p: Point, k: int, q: Point) -> Point:
    """[s]p + [k]q, both scalars' bits read together from the top (one doubling per bit)."""
    table = (IDENTITY, p, q, add(p, q))
    r = IDENTITY
    for i in range(max(s.bit_length(), k.bit_length()) - 1, -1, -1):
        r = double(r)
        j = (s >> i & 1) | (k >> i & 1) << 1
        if j:
            r = add(r, table[j])
    return r


def decode_point(b: bytes) -> Optional[Point]:
    """The point that b encodes (section 5.1.3), or None when b is not the canonical encoding of
    a point: y (the low 255 bits) must be below p, x^2 = (y^2 - 1) / (d y^2 + 1) must have a
    square root, and the sign bit (bit 255, x's low bit) may be set only when x is not 0."""
    if len(b) != 32:
        return None
    n = int.from_bytes(b, "little")
    sign, y = n >> 255, n & ((1 << 255) - 1)
    if y >= P:
        return None
    u = (y * y - 1) % P
    v = (D * y * y + 1) % P  # never 0: -1/d is not a square
    # The candidate root x = u v^3 (u v^7)^((p-5)/8); x or x * sqrt(-1) is a root when one exists.
    v3 = v * v * v % P
    x = u * v3 * pow(u * v3 * v3 * v % P, (P - 5) // 8, P) % P
    vx2 = v * x * x % P
    if vx2 == (-u) % P:
        x = x * _SQRT_M1 % P
    elif vx2 != u:
        return None
    if x == 0 and sign:
        return None
    if x & 1 != sign:
        x = P - x
    return (x, y, 1, x * y % P)


def encode_point(p: Point) -> bytes:
    """p's canonical encoding: y, with x's low bit as bit 255 (section 5.1.2)."""
    zinv = pow(p[2], P - 2, P)
    x, y = p[0] * zinv % P, p[1] * zinv % P
    return (y | (x & 1) << 255).to_bytes(32, "little")


# The base point B: y = 4/5, x even.
def _base() -> Point:
    b = decode_point((4 * pow(5, P - 2, P) % P).to_bytes(32, "little"))
    if b is None:
        raise AssertionError("y = 4/5 is not on the curve")
    return b


B = _base()


def verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Whether signature is an Ed25519 signature of message by the 32-byte public_key
    (section 5.1.7): R (its first half) and the key decode canonically, S (its second half, a
    little-endian integer) is below L, and [S]B = R + [k]A where k is SHA-512(R || A || message)
    modulo L. The equation is checked as [S]B + [k](-A) = R."""
    if len(public_key) != 32 or len(signature) != 64:
        return False
    a = decode_point(public_key)
    r = decode_point(signature[:32])
    if a is None or r is None:
        return False
    s = int.from_bytes(signature[32:], "little")
    if s >= L:
        return False
    k = int.from_bytes(hashlib.sha512(signature[:32] + public_key + message).digest(), "little") % L
    return equal(double_mul(s, B, k, negate(a)), r)
