"""The names a kernel body calls, re-exported at ``vyre``'s top level (``vyre.exp``, ``vyre.gid``,
``vyre.f32`` ...). They are the :mod:`vyre.ir` builders: in a kernel they lower to the IR they build,
outside one they build it (``vyre.exp(vyre.ir.var("x"))``)."""

from ..ir.builder import (
    abs_diff, absolute, acos, asin, atan, atomic, atomic_add, atomic_and, atomic_compare_exchange,
    atomic_exchange, atomic_max, atomic_min, atomic_or, atomic_xor, ballot, barrier, boolean, cast,
    ceil, clz, cos, cosh, ctz, exp, exp2, f32, f64, fixed_mul, floor, fma, gid, i32, inverse_sqrt,
    is_finite, is_inf, is_nan, lane, lid, log, log2, maximum, minimum, popcount, power, reciprocal, rint,
    select, shuffle, sign, sin, sinh, sqrt, stop_gradient, subgroup_reduce, subgroup_size, tan, tanh, trunc, u32,
    wgid,
)

__all__ = [
    "abs_diff", "absolute", "acos", "asin", "atan", "atomic", "atomic_add", "atomic_and",
    "atomic_compare_exchange", "atomic_exchange", "atomic_max", "atomic_min", "atomic_or",
    "atomic_xor", "ballot", "barrier", "boolean", "cast", "ceil", "clz", "cos", "cosh", "ctz", "exp",
    "exp2", "f32", "f64", "fixed_mul", "floor", "fma", "gid", "i32", "inverse_sqrt", "is_finite",
    "is_inf", "is_nan", "lane", "lid", "log", "log2", "maximum", "minimum", "popcount", "power", "reciprocal",
    "rint", "select", "shuffle", "sign", "sin", "sinh", "sqrt", "stop_gradient", "subgroup_reduce", "subgroup_size",
    "tan", "tanh", "trunc", "u32", "wgid",
]
