"""What generated CUDA modules import from vyre (the rest of a module is its own source).

* ``opaque(x)``: ``x`` (an integer), as a value neither LLVM (NVVM) nor ptxas folds through: a
  ``mov`` in inline PTX. The CUDA emitter uses it for i32 ``abs``: NVVM folds
  ``int32(abs(int64(x)))`` into ``abs.s32``, and ptxas then treats that result as non-negative,
  so ``abs(INT_MIN)`` (which vyre defines as INT_MIN, docs/semantics.md) compared with 0 or fed to
  a signed remainder gave the wrong sign on an H100 (``abs(INT_MIN) % 6843`` was +6545, the spec's
  -6545). Kept opaque, the 64-bit ``abs`` of a sign-extended value has no overflow, and the
  truncation to 32 bits wraps as the spec says.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.cuda.extending import intrinsic


@intrinsic
def opaque(typingctx: Any, x: types.Type) -> Any:
    """``x`` unchanged, hidden from NVVM's and ptxas's value reasoning."""
    width = getattr(x, "bitwidth", 0) if isinstance(x, types.Integer) else 0
    if width not in (32, 64):
        return None
    reg = "l" if width == 64 else "r"

    def codegen(context: Any, builder: ir.IRBuilder, signature: Any, args: Any) -> ir.Value:
        [v] = args
        asm = ir.InlineAsm(ir.FunctionType(v.type, [v.type]), f"mov.b{width} $0, $1;", f"={reg},{reg}",
                           side_effect=False)
        return builder.call(asm, [v])

    return x(x), codegen
