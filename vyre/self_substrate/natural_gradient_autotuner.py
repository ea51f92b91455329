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
    PrimitiveError, from_q16_list, natural_gradient_block_apply, natural_gradient_block_apply_cpu,
    newton_schulz_inv_sqrt, to_q16,
)
from ..primitives.fixed import Q16_ONE
from .dispatch_buffers import (
    ceil_div_u32, checked_square_cells, decode_u32_output_exact, ensure_input_slots,
    write_u32_slice_le_bytes, write_zero_bytes,
)
from .dispatcher import OptimizerDispatcher, OptimizerDispatchError
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


def identity_fisher_block_q16(n: int) -> list[int]:
    """The ``n x n`` identity in 16.16 fixed point."""
    return [Q16_ONE if i == j else 0 for i in range(n) for j in range(n)]


def natural_gradient_direction(fisher: np.ndarray | Sequence[Sequence[float]], grad: Sequence[float],
                               dispatcher: OptimizerDispatcher, *, damping: float = 1e-3,
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
    inv_sqrt = newton_schulz_inv_sqrt(f + damping * np.eye(n), dtype=dtype, dispatcher=dispatcher)
    m_q = [to_q16(float(v)) for v in inv_sqrt.reshape(-1)]
    g_q = [to_q16(float(v)) for v in grad]
    return from_q16_list(precondition_autotune_gradient_fixed_via(dispatcher, m_q, g_q, n))
