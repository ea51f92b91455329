"""The autotuner's natural-gradient step as a dispatched IR program (16.16 fixed point).

``g_nat = M^{-1/2} · g``: the autotuner preconditions its plain gradient with the inverse square
root of a Fisher block, which stretches the steep axes of the latency surface back to unit scale.
The production path (``precondition_autotune_gradient_fixed_via*``) runs
:func:`vyre.primitives.natural_gradient_block_apply` through an :class:`OptimizerDispatcher`; the
``reference_*``, ``autotune_step`` and ``identity_fisher_block`` helpers are float references.
:func:`natural_gradient_direction` is the whole pipeline for the tuner: Newton-Schulz on the Fisher
block, quantise, apply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..ir import DataType
from ..primitives import (
    PrimitiveError, Runner, from_q16_list, identity_fisher_q16, natural_gradient_block_apply,
    natural_gradient_block_apply_cpu, newton_schulz_inv_sqrt, to_q16,
)
from .dispatch_buffers import (
    ceil_div_u32, checked_square_cells, decode_u32_output_exact, ensure_input_slots,
    write_u32_slice_le_bytes, write_zero_bytes,
)
from .dispatcher import OptimizerDispatcher, OptimizerDispatchError, as_runner
from .observability import NATURAL_GRADIENT_AUTOTUNER_CALLS, bump

_VIA = "precondition_autotune_gradient_fixed_via"


@dataclass
class NaturalGradientScratch:
    """Caller-owned dispatch scratch: the input byte buffers are reused across calls."""

    inputs: list[bytearray] = field(default_factory=list)


def reference_precondition_autotune_gradient(m_inv_sqrt: Sequence[float], grad: Sequence[float],
                                             n: int) -> list[float]:
    """Float reference: ``M_inv_sqrt · grad`` (row-major ``n x n`` times length ``n``)."""
    out: list[float] = []
    reference_precondition_autotune_gradient_into(m_inv_sqrt, grad, n, out)
    return out


def reference_precondition_autotune_gradient_into(m_inv_sqrt: Sequence[float], grad: Sequence[float],
                                                  n: int, out: list[float]) -> None:
    """As :func:`reference_precondition_autotune_gradient`, into ``out`` (cleared, same object)."""
    bump(NATURAL_GRADIENT_AUTOTUNER_CALLS)
    out[:] = natural_gradient_block_apply_cpu(m_inv_sqrt, grad, n)


def precondition_autotune_gradient_fixed_via(dispatcher: OptimizerDispatcher, m_inv_sqrt_fixed: Sequence[int],
                                             grad_fixed: Sequence[int], n: int) -> list[int]:
    """``M_inv_sqrt · grad`` in 16.16 fixed point, computed by dispatching
    :func:`natural_gradient_block_apply`. Raises :class:`OptimizerDispatchError` (BadInputs for
    shapes, BackendError for malformed readback, or whatever the dispatcher raises)."""
    out: list[int] = []
    precondition_autotune_gradient_fixed_via_into(dispatcher, m_inv_sqrt_fixed, grad_fixed, n, out)
    return out


def precondition_autotune_gradient_fixed_via_into(dispatcher: OptimizerDispatcher,
                                                  m_inv_sqrt_fixed: Sequence[int],
                                                  grad_fixed: Sequence[int], n: int, out: list[int]) -> None:
    """As :func:`precondition_autotune_gradient_fixed_via`, into ``out`` (cleared, same object)."""
    scratch = NaturalGradientScratch()
    precondition_autotune_gradient_fixed_via_with_scratch_into(
        dispatcher, m_inv_sqrt_fixed, grad_fixed, n, scratch, out)


def precondition_autotune_gradient_fixed_via_with_scratch_into(
    dispatcher: OptimizerDispatcher,
    m_inv_sqrt_fixed: Sequence[int],
    grad_fixed: Sequence[int],
    n: int,
    scratch: NaturalGradientScratch,
    out: list[int],
) -> None:
    """As :func:`precondition_autotune_gradient_fixed_via`, reusing ``scratch``'s input buffers."""
    bump(NATURAL_GRADIENT_AUTOTUNER_CALLS)
    matrix_cells = checked_square_cells(n, _VIA)
    if len(m_inv_sqrt_fixed) != matrix_cells:
        raise OptimizerDispatchError.bad_inputs(
            f"{_VIA} requires len(m_inv_sqrt_fixed) == n*n, got len={len(m_inv_sqrt_fixed)}, n={n}, "
            f"n*n={matrix_cells}. Fix: pass a row-major n x n 16.16 matrix"
        )
    if len(grad_fixed) != n:
        raise OptimizerDispatchError.bad_inputs(
            f"{_VIA} requires len(grad_fixed) == n, got len={len(grad_fixed)}, n={n}. "
            "Fix: pass a length-n 16.16 gradient"
        )
    try:
        program = natural_gradient_block_apply("m_inv_sqrt", "grad", "grad_nat", n)
    except PrimitiveError as exc:
        raise OptimizerDispatchError.bad_inputs(f"{_VIA}: {exc}") from exc
    ensure_input_slots(scratch.inputs, 3)
    write_u32_slice_le_bytes(scratch.inputs[0], m_inv_sqrt_fixed, _VIA)
    write_u32_slice_le_bytes(scratch.inputs[1], grad_fixed, _VIA)
    write_zero_bytes(scratch.inputs[2], n * 4)
    outputs = dispatcher.dispatch(program, scratch.inputs[:3], (ceil_div_u32(n, 256), 1, 1))
    if not outputs:
        raise OptimizerDispatchError.backend_error(
            f"{_VIA} expected at least one output buffer, got {len(outputs)}. "
            "Fix: the dispatcher must return the program's output buffers in declaration order"
        )
    decode_u32_output_exact(outputs[0], n, _VIA, out)


def autotune_step(m_inv_sqrt: Sequence[float], grad: Sequence[float], n: int,
                  learning_rate: float) -> list[float]:
    """The parameter delta ``-learning_rate · (M_inv_sqrt · grad)``."""
    out: list[float] = []
    autotune_step_into(m_inv_sqrt, grad, n, learning_rate, out)
    return out


def autotune_step_into(m_inv_sqrt: Sequence[float], grad: Sequence[float], n: int,
                       learning_rate: float, out: list[float]) -> None:
    reference_precondition_autotune_gradient_into(m_inv_sqrt, grad, n, out)
    out[:] = [-learning_rate * v for v in out]


def identity_fisher_block(n: int) -> list[float]:
    """The ``n x n`` identity: with no curvature information the natural gradient is the plain one."""
    out: list[float] = []
    identity_fisher_block_into(n, out)
    return out


def identity_fisher_block_into(n: int, out: list[float]) -> None:
    out[:] = [1.0 if i == j else 0.0 for i in range(n) for j in range(n)]


#: The ``n x n`` identity in 16.16 fixed point (the seed's name for
#: :func:`vyre.primitives.identity_fisher_q16`, the one identity Fisher).
identity_fisher_block_q16 = identity_fisher_q16


def precondition_q16_via(run: Runner | OptimizerDispatcher | None, m_q16: Sequence[int],
                         g_q16: Sequence[int], n: int) -> list[int]:
    """``M · g`` in 16.16 (u32 bit patterns, wrapping) by :func:`natural_gradient_block_apply`
    run through ``run`` (see :func:`as_runner`), on arrays: no byte round trip. Shapes are
    checked as in :func:`precondition_autotune_gradient_fixed_via`."""
    bump(NATURAL_GRADIENT_AUTOTUNER_CALLS)
    cells = checked_square_cells(n, _VIA)
    if len(m_q16) != cells or len(g_q16) != n:
        raise OptimizerDispatchError.bad_inputs(
            f"{_VIA} requires an n x n matrix and a length-n vector, got {len(m_q16)} and {len(g_q16)} "
            f"values for n={n}. Fix: pass row-major n*n and n 16.16 values")
    try:
        program = natural_gradient_block_apply("m_inv_sqrt", "grad", "grad_nat", n)
        m = np.asarray([int(v) & 0xFFFFFFFF for v in m_q16], dtype=np.uint32)
        g = np.asarray([int(v) & 0xFFFFFFFF for v in g_q16], dtype=np.uint32)
    except (PrimitiveError, TypeError, ValueError) as exc:
        raise OptimizerDispatchError.bad_inputs(f"{_VIA}: {exc}. Fix: pass u32 bit patterns") from exc
    outs = as_runner(run)(program, [m, g, np.zeros(n, np.uint32)], (ceil_div_u32(n, 256), 1, 1))
    out = np.asarray(outs[0]) if outs else np.zeros(0, np.uint32)
    if out.shape != (n,):
        raise OptimizerDispatchError.backend_error(
            f"{_VIA} expected an output of {n} u32 values, got shape {out.shape}. "
            "Fix: the runner must return the program's output buffers")
    return [int(v) for v in out]


def natural_gradient_direction(fisher: np.ndarray | Sequence[Sequence[float]], grad: Sequence[float],
                               run: Runner | OptimizerDispatcher | None = None, *, damping: float = 1e-3,
                               dtype: DataType = DataType.F32) -> list[float]:
    """The tuner's whole natural-gradient step, every number computed by IR programs:
    ``M^{-1/2}`` of ``fisher + damping·I`` by Newton-Schulz, quantised to 16.16, applied to
    ``grad`` by :func:`precondition_autotune_gradient_fixed_via`, returned as floats.

    Raises ``PrimitiveError``/``ConvergenceError`` for a bad Fisher block and
    :class:`OptimizerDispatchError` for dispatch failures; values outside the 16.16 range are a
    ``PrimitiveError`` (raise ``damping`` or rescale the gradient)."""
    f = np.asarray(fisher, dtype=np.float64)
    n = len(grad)
    if f.shape != (n, n):
        raise OptimizerDispatchError.bad_inputs(
            f"natural_gradient_direction got a Fisher block of shape {f.shape} for a gradient of length "
            f"{n}. Fix: pass an n x n Fisher block"
        )
    runner = as_runner(run)
    inv_sqrt = newton_schulz_inv_sqrt(f + damping * np.eye(n), dtype=dtype, run=runner)
    m_q = [to_q16(float(v)) for v in inv_sqrt.reshape(-1)]
    g_q = [to_q16(float(v)) for v in grad]
    return from_q16_list(precondition_q16_via(runner, m_q, g_q, n))
