"""What generated CPU modules import from vyre (the rest of a module is its own source).

* ``opaque(x)``: ``x``, as a value LLVM's optimiser cannot see through; why and where the emitter
  uses it: vyre/codegen/cpu_narrow.py. An empty inline-assembly statement that returns its operand
  unchanged in a register. It has no side effects and reads no memory, so LLVM hoists it out of
  loops and a loop using it still vectorises (a mask or shift by a loop-invariant register costs
  what one by an immediate does), while constant folding and scalar evolution see an unknown value.
* ``fmuladd(a, b, c)``: ``Fma``, fused where the CPU can (``llvm.fmuladd``).
* ``loop_vectorizer_off()``: the context a module compiled in the CPU backend's safe mode defines
  its kernels in (vyre/driver/cpu_selfcheck.py): numba's loop vectoriser is off while they compile.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils, config
from numba.extending import intrinsic

_config_lock = threading.Lock()


@intrinsic
def opaque(typingctx: Any, x: types.Type) -> Any:
    """``x`` unchanged, hidden from LLVM's constant folding and scalar evolution."""
    if not isinstance(x, types.Integer):
        return None

    def codegen(context: Any, builder: ir.IRBuilder, signature: Any, args: Any) -> ir.Value:
        [v] = args
        asm = ir.InlineAsm(ir.FunctionType(v.type, [v.type]), "", "=r,0", side_effect=False)
        call = builder.call(asm, [v])
        call.attributes.add("nounwind")
        call.attributes.add("readnone")  # memory(none): LICM hoists it out of the loop
        return call

    return x(x), codegen


@intrinsic
def fmuladd(typingctx: Any, a: types.Type, b: types.Type, c: types.Type) -> Any:
    """``a*b + c`` (``Fma``) as LLVM's ``llvm.fmuladd``: fused into one instruction where the CPU
    has one (one rounding, as docs/semantics.md allows a backend), else a multiply and an add.
    numba compiles ``a * b + c`` unfused (no fast-math), which costs a loop of multiply-adds one
    more instruction per element."""
    if not (isinstance(a, types.Float) and a == b == c):
        return None

    def codegen(context: Any, builder: ir.IRBuilder, signature: Any, args: Any) -> ir.Value:
        x, y, z = args
        name = "llvm.fmuladd.f32" if isinstance(x.type, ir.FloatType) else "llvm.fmuladd.f64"
        fn = builder.module.globals.get(name)
        if fn is None:
            fn = ir.Function(builder.module, ir.FunctionType(x.type, [x.type] * 3), name=name)
        return builder.call(fn, [x, y, z])

    return a(a, b, c), codegen


@intrinsic
def select(typingctx: Any, cond: types.Type, a: types.Type, b: types.Type) -> Any:
    """``a if cond else b`` as one LLVM ``select``, both operands evaluated. A vyre expression
    has no effects and every load in it is in range or guarded wherever it stands, so evaluating
    the operand not taken changes nothing (docs/semantics.md, ``Select``). Python's conditional
    expression is three basic blocks in numba's IR, and numba's passes cost grows with the blocks
    (liveness per block): a kernel with a hundred selects compiled a third slower."""
    t = a if a == b else typingctx.unify_pairs(a, b)
    if t is None or not isinstance(cond, types.Boolean) or not isinstance(t, (types.Number, types.Boolean)):
        return None

    def codegen(context: Any, builder: ir.IRBuilder, signature: Any, args: Any) -> ir.Value:
        c, x, y = args
        c = context.cast(builder, c, cond, types.boolean)
        return builder.select(c, context.cast(builder, x, a, t), context.cast(builder, y, b, t))

    return t(cond, a, b), codegen


def _logical(name: str, combine: Callable[[ir.IRBuilder, ir.Value, ir.Value], ir.Value]) -> Any:
    def typer(typingctx: Any, a: types.Type, b: types.Type) -> Any:
        if not (isinstance(a, types.Boolean) and isinstance(b, types.Boolean)):
            return None

        def codegen(context: Any, builder: ir.IRBuilder, signature: Any, args: Any) -> ir.Value:
            x, y = args
            return combine(builder, context.cast(builder, x, a, types.boolean),
                           context.cast(builder, y, b, types.boolean))

        return types.boolean(a, b), codegen

    typer.__name__ = name
    return intrinsic(typer)


#: ``a and b`` / ``a or b`` of two booleans without short-circuit (one instruction, no blocks:
#: see :func:`select`; neither operand has an effect)
both = _logical("both", lambda builder, x, y: builder.and_(x, y))
either = _logical("either", lambda builder, x, y: builder.or_(x, y))


@intrinsic
def stack_array(typingctx: Any, count: types.Type, dtype: types.Type) -> Any:
    """A new C-contiguous 1-D array of ``count`` (a literal int) elements of ``dtype`` (a numba
    scalar class: ``np.float32``) in the calling function's stack frame, uninitialised: an LLVM
    ``alloca`` in the function's entry block, so one per call of the compiled function however
    often the statement runs. LLVM knows such memory aliases no argument, so it can keep the array
    in registers across a loop (a heap array it must load and store every step)."""
    if not isinstance(count, types.IntegerLiteral) or not isinstance(dtype, types.NumberClass):
        return None
    n, elem = count.literal_value, dtype.instance_type
    arr = types.Array(elem, 1, "C")

    def codegen(context: Any, builder: ir.IRBuilder, signature: Any, args: Any) -> ir.Value:
        ll = context.get_data_type(elem)
        data = cgutils.alloca_once(builder, ll, size=n)
        size = context.get_abi_sizeof(ll)
        ary = context.make_array(arr)(context, builder)
        context.populate_array(ary, data=data, shape=[context.get_constant(types.intp, n)],
                               strides=[context.get_constant(types.intp, size)],
                               itemsize=context.get_constant(types.intp, size), meminfo=None)
        return ary._getvalue()

    return arr(count, dtype), codegen


@contextlib.contextmanager
def loop_vectorizer_off() -> Iterator[None]:
    """numba's loop vectoriser off for what compiles inside (numba reads the setting per compile;
    every kernel of a safe-mode module is compiled eagerly, inside)."""
    with _config_lock:
        saved = config.LOOP_VECTORIZE  # type: ignore[attr-defined]  # numba sets it at import
        config.LOOP_VECTORIZE = False  # type: ignore[attr-defined]
        try:
            yield
        finally:
            config.LOOP_VECTORIZE = saved  # type: ignore[attr-defined]
