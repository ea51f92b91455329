"""The versioned binary wire format of a :class:`~vyre.ir.program.Program`, and its fingerprint.

Layout (all integers little-endian)::

    header  magic b"VYRE" | u16 version (1) | u16 flags (0) | u32 body length | 32-byte blake3(body)
    body    u32 #buffers, buffers | u32 x 3 workgroup size | statement list | u32 #functions, functions
            [| u32 #adjoints (>= 1), adjoints]    (only when some function has a custom adjoint)

    buffer      str name | u32 binding | u8 BufferAccess | u8 DataType | u32 count | u8 is_output (0/1)
    function    str op_id | u32 #params, (str name | u8 DataType) each | u8 result DataType | expr body
    adjoint     u32 function index (increasing) | str result | str cotangent | u32 #grads,
                (u8 present (0/1) [| expr]) each
    stmt list   u32 count, statements
    str         u16 byte length | UTF-8 bytes

Every statement and expression is a one-byte tag (:class:`NodeTag`, :class:`ExprTag`) followed by
its fields as the IR schema (vyre/ir/schema.py) lists them: an expression writes its fixed fields
in field order (an optional child as a presence byte, a child tuple as its u32 count), then its
children in :func:`vyre.ir.expr.children` order; a statement writes its fields in field order (an
expression where it stands), then its statement lists. The encoder and the decoder are derived
from the schema (``_WRITERS`` in :mod:`vyre.ir.wire_encode`, ``_READERS`` in
:mod:`vyre.ir.wire_decode`, one entry per field kind), so no ``match`` over the node classes
repeats the layout. Enums are written as
their integer values (u8; they are the documented wire tags); float literals as their bit patterns,
so -0.0, NaN payloads and subnormals survive exactly. Every accepted byte string is canonical:
``to_wire(from_wire(b)) == b``.

:func:`from_wire` verifies everything and raises only :class:`~vyre.errors.WireError` for any input,
within the limits (``MAX_*``), without deep recursion and allocating no more than the input
justifies. It decodes structure only; ``Program.validate()`` checks meaning. :func:`to_wire` enforces the same
limits, so whatever it produces decodes.

:func:`fingerprint` hashes a *canonical* body (buffers sorted by name, functions by op_id) under a
domain-separation prefix; it skips the size limits (depth, node count, name length) so any
representable program, however large, has a fingerprint.

This module holds the framing (header, version, digest) and the entry points; the tags, limits and
error helper are in :mod:`vyre.ir.wire_layout`, the body's encoder in :mod:`vyre.ir.wire_encode`
and its decoder in :mod:`vyre.ir.wire_decode`.
"""

from __future__ import annotations

# Packed imports, as in the IR core.
# isort: off
import struct

import blake3

from .program import Program
from .wire_encode import encode_body
from .wire_layout import (
    EXPR_TAGS, FIX_DECODE, MAX_EXPR_DEPTH, MAX_IDENT_BYTES, MAX_LABEL_BYTES, MAX_NODES, MAX_STMT_DEPTH, NODE_TAGS,
    ExprTag, NodeTag, wire_error,
)
# isort: on

MAGIC = b"VYRE"
VERSION = 1
KNOWN_FLAGS = 0  # no flags are defined in version 1
FINGERPRINT_DOMAIN = b"vyre-fp-v1\0"

MAX_WIRE_BYTES = 64 * 1024 * 1024
_HEADER = struct.Struct("<4sHHI32s")
HEADER_LEN = _HEADER.size


def frame(body: bytes) -> bytes:
    """Wrap an encoded body in a version-1 header (magic, version, flags, length, digest)."""
    return _HEADER.pack(MAGIC, VERSION, 0, len(body), blake3.blake3(body).digest()) + body


def to_wire(p: Program) -> bytes:
    """The wire encoding of ``p``. Raises WireError if ``p`` exceeds the format's limits."""
    out = frame(encode_body(p, canonical=False, limits=True))
    if len(out) > MAX_WIRE_BYTES:
        raise wire_error(f"cannot encode program: {len(out)} bytes exceed the limit of {MAX_WIRE_BYTES}",
                         "split the program into several kernels")
    return out


def fingerprint(p: Program) -> bytes:
    """32-byte blake3 of the canonical encoding of ``p`` (buffer and function order do not count)."""
    return blake3.blake3(FINGERPRINT_DOMAIN + encode_body(p, canonical=True, limits=False)).digest()


def from_wire(data: bytes | bytearray | memoryview) -> Program:
    """Decode and verify ``data``; raise WireError (only) for anything that is not a valid encoding."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise wire_error(f"expected bytes, got {type(data).__name__}", "pass the bytes from Program.to_wire()")
    try:
        raw = bytes(data)
    except (TypeError, ValueError, BufferError) as exc:
        raise wire_error(f"cannot read the buffer as bytes ({exc})", "pass a bytes object") from None
    n = len(raw)
    if n > MAX_WIRE_BYTES:
        raise wire_error(f"input is {n} bytes; the limit is {MAX_WIRE_BYTES} (size limit)",
                         "split the program into several kernels", 0)
    k = min(n, len(MAGIC))
    if raw[:k] != MAGIC[:k]:
        raise wire_error(f"bad magic {raw[:4]!r}, expected {MAGIC!r}; this is not a vyre wire encoding",
                         FIX_DECODE, 0)
    if n < HEADER_LEN:
        raise wire_error(f"truncated: the header needs {HEADER_LEN} bytes but the input has {n}", FIX_DECODE, n)
    _, version, flags, body_len, digest = _HEADER.unpack_from(raw, 0)
    if version != VERSION:
        raise wire_error(f"unknown wire version {version}; this vyre reads version {VERSION}",
                         "re-encode the program with this vyre version", 4)
    if flags & ~KNOWN_FLAGS:
        raise wire_error(f"unknown flags {flags:#06x}; version {VERSION} defines none",
                         "re-encode the program with this vyre version", 6)
    have = n - HEADER_LEN
    if body_len > have:
        raise wire_error(f"truncated: the header announces a {body_len}-byte body but {have} bytes follow",
                         FIX_DECODE, n)
    if body_len < have:
        raise wire_error(f"{have - body_len} trailing byte(s) after the {body_len}-byte body",
                         FIX_DECODE, HEADER_LEN + body_len)
    body = raw[HEADER_LEN:]
    if blake3.blake3(body).digest() != digest:
        raise wire_error("digest mismatch: the body does not hash to the header's blake3 digest (corrupted)",
                         FIX_DECODE, 12)
    from .wire_decode import decode_body  # deferred: fingerprinting (every first compile) never decodes

    return decode_body(body, HEADER_LEN)


__all__ = [
    "EXPR_TAGS", "FINGERPRINT_DOMAIN", "HEADER_LEN", "KNOWN_FLAGS", "MAGIC", "MAX_EXPR_DEPTH", "MAX_IDENT_BYTES",
    "MAX_LABEL_BYTES", "MAX_NODES", "MAX_STMT_DEPTH", "MAX_WIRE_BYTES", "NODE_TAGS", "VERSION", "ExprTag", "NodeTag",
    "fingerprint", "frame", "from_wire", "to_wire",
]
