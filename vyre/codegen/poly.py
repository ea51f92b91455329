"""Polynomials over named atoms with rational coefficients: the goals and bounds of the value-range
prover (vyre/codegen/ranges.py). A monomial is a sorted tuple of (atom, exponent); ``()`` is the
constant term. Every atom stands for a u32 value, so every monomial is >= 0."""

from __future__ import annotations

import itertools
from fractions import Fraction

Mono = tuple[tuple[str, int], ...]
Poly = dict[Mono, Fraction]


def const(c: int | Fraction) -> Poly:
    return {(): Fraction(c)} if c else {}


def atom(k: str) -> Poly:
    return {((k, 1),): Fraction(1)}


def add(p: Poly, q: Poly, s: int | Fraction = 1) -> Poly:
    out = dict(p)
    for m, c in q.items():
        v = out.get(m, Fraction(0)) + s * c
        if v:
            out[m] = v
        else:
            out.pop(m, None)
    return out


def monomul(a: Mono, b: Mono) -> Mono:
    exps: dict[str, int] = dict(a)
    for k, e in b:
        exps[k] = exps.get(k, 0) + e
    return tuple(sorted((k, e) for k, e in exps.items() if e))


def mul(p: Poly, q: Poly) -> Poly:
    out: Poly = {}
    for (ma, ca), (mb, cb) in itertools.product(p.items(), q.items()):
        out = add(out, {monomul(ma, mb): ca * cb})
    return out


def scale(p: Poly, c: int | Fraction) -> Poly:
    return {m: v * c for m, v in p.items()} if c else {}


def power(p: Poly, e: int) -> Poly:
    out = const(1)
    for _ in range(e):
        out = mul(out, p)
    return out


def substitute(g: Poly, x: str, ub: Poly | None, lb: Poly | None) -> Poly | None:
    """``g`` with atom ``x`` replaced by ``ub`` in monomials of positive coefficient and by ``lb``
    (default 0: every atom is >= 0) in those of negative coefficient: an upper bound of ``g``."""
    out: Poly = {}
    for m, c in g.items():
        e = next((p for k, p in m if k == x), 0)
        if not e:
            out = add(out, {m: c})
            continue
        rest = tuple((k, p) for k, p in m if k != x)
        if c > 0:
            if ub is None:
                return None
            out = add(out, scale(mul({rest: Fraction(1)}, power(ub, e)), c))
        else:
            if lb is None:
                continue  # x >= 0, so c * x^e * rest <= 0
            if e > 1 and not (set(lb) <= {()} and lb.get((), Fraction(0)) >= 0):
                return None
            out = add(out, scale(mul({rest: Fraction(1)}, power(lb, e)), c))
    return out


