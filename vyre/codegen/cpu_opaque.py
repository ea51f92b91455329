"""``opaque(x)``: ``x``, as a value LLVM's optimiser cannot see through (imported by generated
CPU modules; why and where it is used: vyre/codegen/cpu_narrow.py).

An empty inline-assembly statement that returns its operand unchanged in a register. It has no side
effects and reads no memory, so LLVM hoists it out of loops and a loop using it still vectorises
(a mask or shift by a loop-invariant register costs what one by an immediate does), while constant
folding and scalar evolution see an unknown value.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


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
