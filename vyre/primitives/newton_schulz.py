"""Newton-Schulz inverse square root of a symmetric positive definite matrix, as IR programs.

The coupled iteration (Higham, *Functions of Matrices*, §6.7) on ``A = M / c`` with
``c = ||M||_F`` (so every eigenvalue of ``A`` is in ``(0, 1]`` and ``||I - A||_2 < 1``)::

    Y_0 = A, Z_0 = I
    T_k = (3 I - Z_k Y_k) / 2          # newton_schulz_t_program
    Y_{k+1} = Y_k T_k,  Z_{k+1} = T_k Z_k   # matmul_program
    Y_k -> A^{1/2},  Z_k -> A^{-1/2},  M^{-1/2} = Z / sqrt(c)

The driver reads ``T`` back after every step: ``||Z Y - I||_max = 2 ||T - I||_max`` is its stopping
test. When the iteration stalls, blows up or ends with ``||Z A Z - I||_max`` above ``tol`` it
raises :class:`ConvergenceError` instead of returning a wrong matrix.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..ir import Node, F32, F64, DataType, Program, gid, if_, let, load, loop, output, read, store, u32, var
from ..ir.builder import assign, select
from ..ir.expr import lit
from .errors import ConvergenceError, PrimitiveError
from .fixed import U32_LIMIT
from .runner import Runner, driver_runner

WORKGROUP = 64
_DEFAULT_TOL = {F32: 1e-3, F64: 1e-9}


def _check_float(dtype: DataType, what: str) -> None:
    if dtype not in (F32, F64):
        raise PrimitiveError(f"{what} got dtype {dtype.short}, expected f32 or f64. Fix: pass F32 or F64")


def _check_dims(what: str, **dims: int) -> None:
    for name, v in dims.items():
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise PrimitiveError(f"{what} got {name}={v!r}, expected a positive int. Fix: pass {name} >= 1")
    biggest = max(dims.values()) ** 2
    if biggest >= U32_LIMIT:
        raise PrimitiveError(f"{what} got dimensions {dims}: a matrix would exceed the u32 element "
                             "count. Fix: use smaller blocks")


def matmul_program(m: int, k: int, n: int, dtype: DataType = F32, *, a: str = "a", b: str = "b",
                   c: str = "c") -> Program:
    """``C = A · B`` for row-major ``A`` (m x k) and ``B`` (k x n); one invocation per cell of ``C``.

    Buffers: ``a`` (read, m·k), ``b`` (read, k·n), ``c`` (output, m·n), all ``dtype``."""
    _check_float(dtype, "matmul_program")
    _check_dims("matmul_program", m=m, k=k, n=n)
    ba = read(a, 0, dtype).with_count(m * k)
    bb = read(b, 1, dtype).with_count(k * n)
    bc = output(c, 2, dtype).with_count(m * n)
    t, i, j, p, acc = gid(), var("i"), var("j"), var("p"), var("acc")
    body: list[Node] = [
        let("i", t / u32(n)),
        let("j", t % u32(n)),
        let("acc", lit(0.0, dtype)),
        loop("p", u32(0), u32(k), [
            assign("acc", acc + load(ba, i * u32(k) + p) * load(bb, p * u32(n) + j)),
        ]),
        store(bc, t, acc),
    ]
    return Program.wrapped([ba, bb, bc], WORKGROUP, [if_(t.lt(u32(m * n)), body)])


def newton_schulz_t_program(n: int, dtype: DataType = F32, *, z: str = "z", y: str = "y",
                            t_out: str = "t") -> Program:
    """``T = 1.5 I - 0.5 Z · Y`` for ``n x n`` matrices (the product fused into the affine step)."""
    _check_float(dtype, "newton_schulz_t_program")
    _check_dims("newton_schulz_t_program", n=n)
    bz = read(z, 0, dtype).with_count(n * n)
    by = read(y, 1, dtype).with_count(n * n)
    bt = output(t_out, 2, dtype).with_count(n * n)
    t, i, j, p, acc = gid(), var("i"), var("j"), var("p"), var("acc")
    diag = select(i.eq(j), lit(1.5, dtype), lit(0.0, dtype))
    body: list[Node] = [
        let("i", t / u32(n)),
        let("j", t % u32(n)),
        let("acc", lit(0.0, dtype)),
        loop("p", u32(0), u32(n), [
            assign("acc", acc + load(bz, i * u32(n) + p) * load(by, p * u32(n) + j)),
        ]),
        store(bt, t, diag - lit(0.5, dtype) * acc),
    ]
    return Program.wrapped([bz, by, bt], WORKGROUP, [if_(t.lt(u32(n * n)), body)])


def _check_spd_input(m: np.ndarray) -> np.ndarray:
    a = np.asarray(m, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] == 0:
        raise PrimitiveError(f"newton_schulz_inv_sqrt got an array of shape {a.shape}, expected a "
                             "non-empty square matrix. Fix: pass an n x n symmetric positive definite matrix")
    if not np.all(np.isfinite(a)):
        raise PrimitiveError("newton_schulz_inv_sqrt got a matrix with NaN or inf. Fix: pass finite values")
    scale = float(np.max(np.abs(a)))
    if scale == 0.0:
        raise PrimitiveError("newton_schulz_inv_sqrt got the zero matrix, which is not positive "
                             "definite. Fix: add damping (m + eps * I)")
    asym = float(np.max(np.abs(a - a.T)))
    if asym > 1e-6 * scale:
        raise PrimitiveError(f"newton_schulz_inv_sqrt got a non-symmetric matrix (max |m - m.T| = "
                             f"{asym:.3g}). Fix: pass (m + m.T) / 2")
    return (a + a.T) / 2.0


Step = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]


def _iterate(m: np.ndarray, iters: int, tol: float, step: Step, what: str) -> np.ndarray:
    """Shared driver: scale, iterate ``step(Y, Z) -> (T, Y', Z')``, stop, check, unscale."""
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
        raise PrimitiveError(f"{what} got iters={iters!r}, expected an int >= 1. Fix: pass iters >= 1")
    if not tol > 0:
        raise PrimitiveError(f"{what} got tol={tol!r}, expected a positive number. Fix: pass tol > 0")
    spd = _check_spd_input(m)
    n = spd.shape[0]
    c = float(np.linalg.norm(spd))
    a = spd / c
    eye = np.eye(n)
    y, z = a.copy(), eye.copy()
    best = np.inf
    done = 0
    for k in range(iters):
        t, y_next, z_next = step(y, z)
        gap = 2.0 * float(np.max(np.abs(t - eye)))  # ||Z Y - I||_max
        if not np.isfinite(gap) or gap > 1e6:
            raise ConvergenceError(
                f"{what} diverged at step {k} (||ZY - I||_max = {gap:.3g}): the matrix is not positive "
                "definite, or too ill-conditioned for its dtype. Fix: check that m is SPD, add damping "
                "(m + eps * I), or use dtype=F64",
                residual=float("inf"), iterations=k)
        done = k + 1
        y, z = y_next, z_next
        if gap <= tol * 0.01 or (gap <= tol and gap >= best):
            break  # converged, or stalled at the dtype's rounding floor
        best = min(best, gap)
    residual = float(np.max(np.abs(z @ a @ z - eye)))
    if not residual <= tol:
        raise ConvergenceError(
            f"{what} did not converge: after {done} step(s) ||Z A Z - I||_max = {residual:.3g}, "
            f"expected <= {tol:.3g}. Fix: raise iters, use dtype=F64, or add damping (m + eps * I) "
            "to improve the conditioning",
            residual=residual, iterations=done)
    return z / np.sqrt(c)


def newton_schulz_inv_sqrt_reference(m: np.ndarray, iters: int = 100, tol: float = 1e-10) -> np.ndarray:
    """float64 numpy reference of :func:`newton_schulz_inv_sqrt` (same iteration and checks)."""

    def step(y: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        t = 1.5 * np.eye(y.shape[0]) - 0.5 * (z @ y)
        return t, y @ t, t @ z

    return _iterate(m, iters, tol, step, "newton_schulz_inv_sqrt_reference")


def inv_sqrt_eigh(m: np.ndarray) -> np.ndarray:
    """``M^{-1/2}`` by eigendecomposition (float64; the exact answer tests compare with)."""
    w, v = np.linalg.eigh(np.asarray(m, dtype=np.float64))
    if np.any(w <= 0):
        raise PrimitiveError(f"inv_sqrt_eigh got a matrix with eigenvalue {w.min():.3g} <= 0. "
                             "Fix: pass a positive definite matrix")
    return (v / np.sqrt(w)) @ v.T


def newton_schulz_inv_sqrt(m: np.ndarray, *, iters: int = 100, tol: float | None = None,
                           dtype: DataType = F32, run: Runner | None = None) -> np.ndarray:
    """``M^{-1/2}`` (float64 array) of the SPD matrix ``m``, computed by IR programs.

    Each step runs :func:`newton_schulz_t_program` and two :func:`matmul_program` in ``dtype``
    through ``run`` (a :mod:`runner <vyre.primitives.runner>`; default: the driver's default
    backend). ``tol`` (default 1e-3 for f32, 1e-9 for f64) bounds ``||Z A Z - I||_max`` on the
    scaled matrix. Raises :class:`PrimitiveError` for a bad matrix and :class:`ConvergenceError`
    when the iteration does not reach ``tol``. :func:`newton_schulz_inv_sqrt_reference` is the
    float64 numpy version of the same iteration."""
    _check_float(dtype, "newton_schulz_inv_sqrt")
    runner = driver_runner() if run is None else run
    n = int(np.asarray(m).shape[0]) if np.asarray(m).ndim == 2 else 0
    _check_spd_input(m)
    t_prog = newton_schulz_t_program(n, dtype)
    mm = matmul_program(n, n, n, dtype)
    nd = dtype.np_dtype
    grid = (-(-n * n // WORKGROUP), 1, 1)
    what = "newton_schulz_inv_sqrt"

    def out(arrays: list[np.ndarray]) -> np.ndarray:
        (a,) = arrays
        a = np.asarray(a)
        if a.shape != (n * n,) or a.dtype != nd:
            raise PrimitiveError(f"{what}: the runner returned an array of shape {a.shape} and dtype "
                                 f"{a.dtype}, expected ({n * n},) {nd}. Fix: the runner must return the "
                                 "program's output buffers")
        return a

    def step(y: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        yf, zf = y.astype(nd).reshape(-1), z.astype(nd).reshape(-1)
        t = out(runner(t_prog, [zf, yf, np.zeros(n * n, nd)], grid))
        y_next = out(runner(mm, [yf, t, np.zeros(n * n, nd)], grid))
        z_next = out(runner(mm, [t, zf, np.zeros(n * n, nd)], grid))
        shape = (n, n)
        return (t.astype(np.float64).reshape(shape), y_next.astype(np.float64).reshape(shape),
                z_next.astype(np.float64).reshape(shape))

    return _iterate(m, iters, _DEFAULT_TOL[dtype] if tol is None else tol, step, what)
