"""Sheaf diffusion primitives.

Two kernels:

* :func:`sheaf_diffusion_step` is the seed's per-cell decay ``s - fmul(fmul(damping, r), s)`` in
  16.16 fixed point (wrapping). It has no neighbour term; it is kept because the self-substrate's
  fixed-point contract (and its test vectors) are defined on it.
* :func:`sheaf_laplacian_step` is real sheaf diffusion ``x <- x - alpha * L_F x``. Every node
  carries a stalk in R^d; every edge ``e = (u, v)`` carries diagonal restriction maps ``F_u◁e`` and
  ``F_v◁e`` into an edge stalk R^d; the coboundary is ``(δx)_e = F_v◁e x_v - F_u◁e x_u`` and
  ``L_F = δᵀδ``, so per component ``k``::

      (L_F x)_{u,k} = Σ_{e = (u, v)} a_{e,u,k} * (a_{e,u,k} x_{u,k} - a_{e,v,k} x_{v,k})

  The graph travels in CSR form (each undirected edge as two half-edges) and the kernel runs one
  invocation per (node, component) gathering over its own half-edges, so it needs no atomics.
  Its kernel ``ker L_F`` is the space of global sections (stalks that agree across every edge).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..ir import (
    Node,
    F32, F64, U32, DataType, Program, fixed_mul, gid, if_, let, load, loop, output, read, store, u32,
    var,
)
from ..ir.builder import assign
from ..ir.expr import lit
from .errors import PrimitiveError
from .fixed import U32_LIMIT, fmul_q16, sub_u32

WORKGROUP = 256


def checked_cells(n_nodes: int, d: int, what: str) -> int:
    """``n_nodes * d`` as a u32 lane count; :class:`PrimitiveError` when empty or too large."""
    for name, v in (("n_nodes", n_nodes), ("d", d)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise PrimitiveError(f"{what} got {name}={v!r}, expected a positive int. Fix: pass {name} >= 1")
    cells = n_nodes * d
    if cells >= U32_LIMIT:
        raise PrimitiveError(
            f"{what} got n_nodes={n_nodes}, d={d}: n_nodes*d={cells} exceeds the u32 lane limit. "
            "Fix: split the graph or reduce the stalk dimension"
        )
    return cells


# --------------------------------------------------------------------------------------------
# The seed's elementwise decay (16.16 fixed point).

def sheaf_diffusion_step(stalks: str, restriction_diag: str, damping: str, stalks_next: str,
                         n_nodes: int, d: int) -> Program:
    """``next[t] = s - fmul(fmul(damping[0], r[t]), s)`` for every cell ``t < n_nodes*d``.

    Buffers in declaration order: stalks, restriction_diag (u32, n_nodes·d, read), damping (u32,
    1, read), stalks_next (u32, n_nodes·d, output). Subtraction wraps."""
    cells = checked_cells(n_nodes, d, "sheaf_diffusion_step")
    names = (stalks, restriction_diag, damping, stalks_next)
    if len(set(names)) != 4:
        raise PrimitiveError(f"sheaf_diffusion_step got buffer names {names}, expected four distinct "
                             "names. Fix: rename the buffers")
    s = read(stalks, 0, U32).with_count(cells)
    r = read(restriction_diag, 1, U32).with_count(cells)
    k = read(damping, 2, U32).with_count(1)
    out = output(stalks_next, 3, U32).with_count(cells)
    t = gid()
    body: list[Node] = [
        let("s", load(s, t)),
        store(out, t, var("s") - fixed_mul(fixed_mul(load(k, u32(0)), load(r, t)), var("s"))),
    ]
    return Program.wrapped([s, r, k, out], WORKGROUP, [if_(t.lt(u32(cells)), body)])


def _check_same_len(stalks_len: int, restriction_len: int, what: str) -> None:
    if stalks_len != restriction_len:
        raise PrimitiveError(
            f"{what} requires len(restriction_diag) == len(stalks), got {restriction_len} and "
            f"{stalks_len}. Fix: pass one restriction coefficient per stalk cell"
        )


def sheaf_diffusion_step_cpu(stalks: Sequence[float], restriction_diag: Sequence[float],
                             damping: float) -> list[float]:
    """Float reference of the seed step: ``s - damping * r * s`` per cell."""
    _check_same_len(len(stalks), len(restriction_diag), "sheaf_diffusion_step_cpu")
    return [s - damping * r * s for s, r in zip(stalks, restriction_diag, strict=True)]


def sheaf_diffusion_step_exact(stalks: Sequence[int], restriction_diag: Sequence[int],
                               damping: int) -> list[int]:
    """Exact integer oracle of :func:`sheaf_diffusion_step` on u32 bit patterns."""
    _check_same_len(len(stalks), len(restriction_diag), "sheaf_diffusion_step_exact")
    return [sub_u32(s, fmul_q16(fmul_q16(damping, r), s))
            for s, r in zip(stalks, restriction_diag, strict=True)]


# --------------------------------------------------------------------------------------------
# Real sheaf diffusion.

@dataclass(frozen=True, eq=False)
class SheafGraph:
    """An undirected graph with a diagonal cellular sheaf: stalks R^d on nodes and edges.

    ``edges[e] = (u, v)``; ``maps_u[e]`` is the diagonal of ``F_u◁e`` and ``maps_v[e]`` that of
    ``F_v◁e`` (both float64, shape ``(E, d)``). The CSR arrays are derived: half-edges of node
    ``u`` are ``row_ptr[u] .. row_ptr[u+1]``; ``col`` names the neighbour, ``r_self``/``r_nbr``
    (shape ``(H, d)``, H = 2E) the maps on this end and the far end."""

    n_nodes: int
    d: int
    edges: tuple[tuple[int, int], ...]
    maps_u: np.ndarray
    maps_v: np.ndarray
    row_ptr: np.ndarray = field(init=False)
    col: np.ndarray = field(init=False)
    r_self: np.ndarray = field(init=False)
    r_nbr: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        checked_cells(self.n_nodes, self.d, "SheafGraph")
        n_e = len(self.edges)
        for name, arr in (("maps_u", self.maps_u), ("maps_v", self.maps_v)):
            if arr.shape != (n_e, self.d):
                raise PrimitiveError(f"SheafGraph {name} has shape {arr.shape}, expected ({n_e}, {self.d}). "
                                     "Fix: give one length-d diagonal per edge")
            if not np.all(np.isfinite(arr)):
                raise PrimitiveError(f"SheafGraph {name} holds NaN or inf. Fix: pass finite restriction maps")
        halves: list[list[tuple[int, int, int]]] = [[] for _ in range(self.n_nodes)]
        for e, (u, v) in enumerate(self.edges):
            if not (0 <= u < self.n_nodes and 0 <= v < self.n_nodes) or u == v:
                raise PrimitiveError(
                    f"SheafGraph edge {e} is ({u}, {v}); expected two distinct nodes in [0, {self.n_nodes}). "
                    "Fix: drop self-loops and out-of-range endpoints"
                )
            halves[u].append((v, e, 0))
            halves[v].append((u, e, 1))
        row_ptr = np.zeros(self.n_nodes + 1, dtype=np.uint32)
        cols: list[int] = []
        r_self: list[np.ndarray] = []
        r_nbr: list[np.ndarray] = []
        for node, hs in enumerate(halves):
            for nbr, e, end in hs:
                cols.append(nbr)
                mine, far = (self.maps_u, self.maps_v) if end == 0 else (self.maps_v, self.maps_u)
                r_self.append(mine[e])
                r_nbr.append(far[e])
            row_ptr[node + 1] = len(cols)
        empty = np.zeros((0, self.d))
        object.__setattr__(self, "row_ptr", row_ptr)
        object.__setattr__(self, "col", np.asarray(cols, dtype=np.uint32))
        object.__setattr__(self, "r_self", np.asarray(r_self).reshape(-1, self.d) if r_self else empty)
        object.__setattr__(self, "r_nbr", np.asarray(r_nbr).reshape(-1, self.d) if r_nbr else empty)

    @staticmethod
    def from_edges(n_nodes: int, d: int, edges: Sequence[tuple[int, int]],
                   maps_u: Sequence[Sequence[float]] | np.ndarray | None = None,
                   maps_v: Sequence[Sequence[float]] | np.ndarray | None = None) -> SheafGraph:
        """A sheaf on ``edges``; maps default to identity (the constant sheaf: plain graph diffusion
        per component)."""
        n_e = len(edges)

        def maps(given: Sequence[Sequence[float]] | np.ndarray | None, name: str) -> np.ndarray:
            if given is None:
                return np.ones((n_e, d))
            arr = np.asarray(given, dtype=np.float64)
            if arr.size != n_e * d:
                raise PrimitiveError(f"SheafGraph {name} has {arr.size} values for {n_e} edges of dimension "
                                     f"{d}. Fix: give one length-d diagonal per edge")
            return arr.reshape(n_e, d)

        return SheafGraph(n_nodes, d, tuple((int(u), int(v)) for u, v in edges), maps(maps_u, "maps_u"),
                          maps(maps_v, "maps_v"))

    @property
    def n_cells(self) -> int:
        return self.n_nodes * self.d

    def dispatch_inputs(self, x: np.ndarray, alpha: float, dtype: DataType = F32) -> dict[str, np.ndarray]:
        """The arrays :func:`sheaf_laplacian_step` reads, in its default buffer names."""
        nd = dtype.np_dtype
        # An edgeless graph still binds one (never read) element: zero-length arrays are not
        # portable across backends.
        col = self.col if self.col.size else np.zeros(1, dtype=np.uint32)
        r_self = self.r_self.reshape(-1) if self.r_self.size else np.zeros(self.d)
        r_nbr = self.r_nbr.reshape(-1) if self.r_nbr.size else np.zeros(self.d)
        return {
            "x": np.ascontiguousarray(np.asarray(x, dtype=nd).reshape(-1)),
            "row_ptr": self.row_ptr.copy(),
            "col": col.copy(),
            "r_self": np.ascontiguousarray(r_self, dtype=nd),
            "r_nbr": np.ascontiguousarray(r_nbr, dtype=nd),
            "alpha": np.asarray([alpha], dtype=nd),
        }


def sheaf_laplacian_step(n_nodes: int, d: int, *, dtype: DataType = F32, x: str = "x",
                         row_ptr: str = "row_ptr", col: str = "col", r_self: str = "r_self",
                         r_nbr: str = "r_nbr", alpha: str = "alpha", x_next: str = "x_next") -> Program:
    """One step ``x_next = x - alpha[0] * L_F x`` over a :class:`SheafGraph` in CSR form.

    Buffers in declaration order: ``x`` (n·d), ``row_ptr`` (u32, n+1), ``col`` (u32, H), ``r_self``,
    ``r_nbr`` (H·d), ``alpha`` (1), ``x_next`` (n·d, output); floats are ``dtype`` (f32 or f64).
    One invocation per cell ``t = node*d + k``; no atomics."""
    cells = checked_cells(n_nodes, d, "sheaf_laplacian_step")
    if dtype not in (F32, F64):
        raise PrimitiveError(f"sheaf_laplacian_step got dtype {dtype.short}, expected f32 or f64. "
                             "Fix: pass dtype=F32 or F64")
    names = (x, row_ptr, col, r_self, r_nbr, alpha, x_next)
    if len(set(names)) != len(names):
        raise PrimitiveError(f"sheaf_laplacian_step got buffer names {names}, expected distinct names. "
                             "Fix: rename the buffers")
    bx = read(x, 0, dtype).with_count(cells)
    brp = read(row_ptr, 1, U32).with_count(n_nodes + 1)
    bcol = read(col, 2, U32)
    bself = read(r_self, 3, dtype)
    bnbr = read(r_nbr, 4, dtype)
    balpha = read(alpha, 5, dtype).with_count(1)
    bout = output(x_next, 6, dtype).with_count(cells)
    t, node, k, h, xu, acc = gid(), var("node"), var("k"), var("h"), var("xu"), var("acc")
    a = load(bself, h * u32(d) + k)
    b = load(bnbr, h * u32(d) + k)
    xv = load(bx, load(bcol, h) * u32(d) + k)
    body: list[Node] = [
        let("node", t / u32(d)),
        let("k", t % u32(d)),
        let("xu", load(bx, t)),
        let("acc", lit(0.0, dtype)),
        loop("h", load(brp, node), load(brp, node + u32(1)), [
            assign("acc", acc + a * (a * xu - b * xv)),
        ]),
        store(bout, t, xu - load(balpha, u32(0)) * acc),
    ]
    return Program.wrapped([bx, brp, bcol, bself, bnbr, balpha, bout], WORKGROUP,
                           [if_(t.lt(u32(cells)), body)])


def _stalks(graph: SheafGraph, x: np.ndarray | Sequence[float]) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.size != graph.n_cells:
        raise PrimitiveError(f"stalk vector has {arr.size} values, the sheaf has n_nodes*d={graph.n_cells}. "
                             "Fix: pass one value per (node, component)")
    return arr.reshape(graph.n_nodes, graph.d)


def coboundary(graph: SheafGraph, x: np.ndarray | Sequence[float]) -> np.ndarray:
    """``(δx)_e = F_v◁e x_v - F_u◁e x_u``, shape ``(E, d)``, float64."""
    xs = _stalks(graph, x)
    if not graph.edges:
        return np.zeros((0, graph.d))
    u = np.fromiter((e[0] for e in graph.edges), dtype=np.int64)
    v = np.fromiter((e[1] for e in graph.edges), dtype=np.int64)
    return graph.maps_v * xs[v] - graph.maps_u * xs[u]


def sheaf_laplacian_apply(graph: SheafGraph, x: np.ndarray | Sequence[float]) -> np.ndarray:
    """``L_F x`` in float64, flat (n·d)."""
    xs = _stalks(graph, x)
    delta = coboundary(graph, xs)
    out = np.zeros_like(xs)
    for e, (u, v) in enumerate(graph.edges):
        out[u] -= graph.maps_u[e] * delta[e]
        out[v] += graph.maps_v[e] * delta[e]
    return out.reshape(-1)


def sheaf_laplacian_step_reference(graph: SheafGraph, x: np.ndarray | Sequence[float],
                                   alpha: float) -> np.ndarray:
    """float64 reference of :func:`sheaf_laplacian_step`."""
    return _stalks(graph, x).reshape(-1) - alpha * sheaf_laplacian_apply(graph, x)


def sheaf_laplacian_dense(graph: SheafGraph) -> np.ndarray:
    """The dense ``(n·d) x (n·d)`` sheaf Laplacian (small graphs, tests and analysis)."""
    n = graph.n_cells
    basis = np.eye(n)
    return np.stack([sheaf_laplacian_apply(graph, basis[i]) for i in range(n)], axis=1)


def sheaf_dirichlet_energy(graph: SheafGraph, x: np.ndarray | Sequence[float]) -> float:
    """``xᵀ L_F x = Σ_e ||F_v◁e x_v - F_u◁e x_u||²`` (zero exactly on global sections)."""
    return float(np.sum(coboundary(graph, x) ** 2))


def sheaf_stable_alpha(graph: SheafGraph) -> float:
    """A step size for which diffusion never increases the Dirichlet energy.

    ``1 / G`` where ``G`` is the Gershgorin bound on ``λ_max(L_F)``; any ``0 < alpha <= 2/λ_max``
    keeps ``|1 - alpha λ| <= 1`` on every eigenvalue, and ``1/G <= 1/λ_max`` is inside that."""
    rows = np.zeros((graph.n_nodes, graph.d))
    for e, (u, v) in enumerate(graph.edges):
        au, av = np.abs(graph.maps_u[e]), np.abs(graph.maps_v[e])
        rows[u] += au * au + au * av
        rows[v] += av * av + au * av
    bound = float(rows.max(initial=0.0))
    # Below 1e-300 the Laplacian is numerically zero (and 1/bound could overflow): any step is stable.
    return 1.0 if bound < 1e-300 else 1.0 / bound
