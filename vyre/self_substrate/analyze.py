"""``vyre analyze``: flag fusion-incompatible pairs in a pipeline of programs by sheaf diffusion.

1. **Dispatch graph.** Programs are nodes, in pipeline order. Program ``j`` depends on program
   ``i < j`` when ``j`` reads a storage buffer whose last writer before ``j`` is ``i`` (buffers are
   matched by name, the way a pipeline binds them).
2. **Feature stalks.** Each node gets a stalk in R^d from static IR counts
   (:mod:`vyre.self_substrate.features`: arithmetic, bytes loaded and stored, branches, loops,
   atomics, barriers, subgroup ops, workgroup size; ``log2(1 + count)``).
3. **Sheaf.** Every edge gets diagonal restriction maps ``diag(w)`` at both ends, ``w`` the
   per-feature weights of :data:`FEATURES`: the edge stalk is "the features that must agree for
   the two kernels to fuse", scaled by how much they matter.
4. **Diffusion.** ``x <- x - alpha L_F x`` runs as the IR program
   :func:`vyre.primitives.sheaf_laplacian_step` through an :class:`OptimizerDispatcher`, for a
   fixed diffusion time ``tau`` (steps of at most the stable step size).
5. **Flags.** An edge is flagged fusion-incompatible when its weighted disagreement
   ``||F_v x_v - F_u x_u||`` is above ``threshold`` both before diffusion (the two kernels really
   differ in fusion-relevant features) and after it (the difference is a boundary between
   regions that the neighbourhood does not average away). Requiring both keeps diffusion from
   flagging a pair of agreeing kernels merely because a neighbour's disagreement spread onto
   them. ``reasons`` names the features carrying most of the pair's own (pre-diffusion)
   disagreement.

docs/self_substrate.md describes the flags and how they were validated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..ir import DataType, Program
from ..primitives import SheafGraph, coboundary, sheaf_stable_alpha
from ..primitives import Runner
from .dispatcher import OptimizerDispatcher, OptimizerDispatchError, as_runner
from .features import (
    FEATURE_NAMES, FEATURES, StaticCounts, buffers_read, buffers_written, stalk, static_counts,
)
from .observability import PIPELINE_ANALYSIS_CALLS, bump
from .sheaf_heterophilic_dispatch import sheaf_diffuse_via

DEFAULT_THRESHOLD = 0.5
DEFAULT_DIFFUSION_TIME = 0.25
_MIN_NODES = 8
_REASON_SHARE = 0.2  # a feature is a reason when it carries >= 20% of the squared disagreement


@dataclass(frozen=True)
class NodeReport:
    name: str
    counts: StaticCounts
    stalk: tuple[float, ...]
    diffused: tuple[float, ...]

    @property
    def displacement(self) -> float:
        """How far diffusion moved this node's stalk (its disagreement with its neighbourhood)."""
        return math.dist(self.stalk, self.diffused)


@dataclass(frozen=True)
class EdgeReport:
    src: str
    dst: str
    buffers: tuple[str, ...]
    residual_before: float
    residual_after: float
    flagged: bool
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class PipelineReport:
    """What :func:`analyze_pipeline` found; render with :meth:`to_table` or :meth:`to_dot`."""

    nodes: tuple[NodeReport, ...]
    edges: tuple[EdgeReport, ...]
    alpha: float
    steps: int
    threshold: float

    @property
    def flagged_pairs(self) -> list[tuple[str, str]]:
        return [(e.src, e.dst) for e in self.edges if e.flagged]

    def to_table(self) -> str:
        """A plain-text report: the node features, then every edge with its flag."""
        names = ("node", *FEATURE_NAMES, "moved")
        rows = [[n.name, *(f"{v:.2f}" for v in n.stalk), f"{n.displacement:.3f}"] for n in self.nodes]
        lines = [f"dispatch graph: {len(self.nodes)} programs, {len(self.edges)} edges; sheaf diffusion "
                 f"alpha={self.alpha:.4g} x {self.steps} steps; flag threshold {self.threshold:g}", ""]
        lines += _table(names, rows)
        lines.append("")
        erows = [[e.src, e.dst, ",".join(e.buffers), f"{e.residual_before:.3f}", f"{e.residual_after:.3f}",
                  "INCOMPATIBLE" if e.flagged else "ok", ",".join(e.reasons) or "-"] for e in self.edges]
        lines += _table(("producer", "consumer", "buffers", "before", "after", "fusion", "reasons"), erows)
        return "\n".join(lines)

    def to_dot(self) -> str:
        """Graphviz DOT of the dispatch graph; flagged edges are red and labelled with reasons."""
        out = ["digraph pipeline {", "  rankdir=LR;", "  node [shape=box];"]
        for n in self.nodes:
            out.append(f'  "{n.name}";')
        for e in self.edges:
            label = ",".join(e.buffers)
            style = f', color=red, fontcolor=red, label="{label}\\n{",".join(e.reasons)}"' if e.flagged \
                else f', label="{label}"'
            out.append(f'  "{e.src}" -> "{e.dst}" [penwidth={1 + 2 * e.residual_after:.2f}{style}];')
        out.append("}")
        return "\n".join(out)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(h)), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header), fmt.format(*("-" * w for w in widths)), *(fmt.format(*r) for r in rows)]


def dispatch_graph(programs: Sequence[Program]) -> list[tuple[int, int, tuple[str, ...]]]:
    """``(producer, consumer, buffers)`` for every dependency, producer = last writer before the
    consumer of each buffer it reads."""
    last_writer: dict[str, int] = {}
    deps: dict[tuple[int, int], set[str]] = {}
    for j, prog in enumerate(programs):
        for buf in sorted(buffers_read(prog)):
            i = last_writer.get(buf)
            if i is not None:
                deps.setdefault((i, j), set()).add(buf)
        for buf in buffers_written(prog):
            last_writer[buf] = j
    return [(i, j, tuple(sorted(bufs))) for (i, j), bufs in sorted(deps.items())]


def analyze_pipeline(
    programs: Sequence[Program] | Mapping[str, Program],
    *,
    dispatcher: Runner | OptimizerDispatcher | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    diffusion_time: float = DEFAULT_DIFFUSION_TIME,
    dtype: DataType = DataType.F32,
) -> PipelineReport:
    """Build the dispatch graph of ``programs`` (a list, or names -> programs), diffuse the feature
    stalks with the sheaf Laplacian IR program, and flag fusion-incompatible pairs (module docs).

    ``dispatcher`` runs the diffusion (default ``DriverDispatcher()``, the driver's default
    backend). Raises :class:`OptimizerDispatchError` (BadInputs) for an empty pipeline or bad
    parameters."""
    bump(PIPELINE_ANALYSIS_CALLS)
    if isinstance(programs, Mapping):
        names, progs = [str(k) for k in programs], list(programs.values())
    else:
        progs = list(programs)
        names = [f"p{i}" for i in range(len(progs))]
    if not progs:
        raise OptimizerDispatchError.bad_inputs("analyze_pipeline got no programs. Fix: pass at least one")
    bad = [type(p).__name__ for p in progs if not isinstance(p, Program)]
    if bad:
        raise OptimizerDispatchError.bad_inputs(
            f"analyze_pipeline got {bad} among the programs. Fix: pass vyre.ir.Program objects")
    if not (threshold >= 0 and diffusion_time >= 0):
        raise OptimizerDispatchError.bad_inputs(
            f"analyze_pipeline got threshold={threshold}, diffusion_time={diffusion_time}. "
            "Fix: pass non-negative numbers")
    counts = [static_counts(p) for p in progs]
    x0 = np.array([stalk(c) for c in counts], dtype=np.float64)
    deps = dispatch_graph(progs)
    d = len(FEATURES)
    weights = np.array([f.weight for f in FEATURES])
    undirected = sorted({(min(i, j), max(i, j)) for i, j, _ in deps})
    # Pad with isolated nodes (they never move) to a power-of-two node count, so pipelines of
    # similar size share one compiled diffusion kernel.
    n_pad = max(_MIN_NODES, 1 << (len(progs) - 1).bit_length())
    tiled = np.tile(weights, (len(undirected), 1))
    graph = SheafGraph.from_edges(n_pad, d, undirected, tiled, tiled)
    stable = sheaf_stable_alpha(graph)
    steps = math.ceil(diffusion_time / stable) if undirected and diffusion_time > 0 else 0
    alpha = diffusion_time / steps if steps else 0.0
    if steps:
        disp = as_runner(dispatcher)
        padded = np.zeros((n_pad, d))
        padded[:len(progs)] = x0
        x = sheaf_diffuse_via(disp, graph, padded, alpha, steps, dtype).reshape(n_pad, d)[:len(progs)]
    else:
        x = x0.copy()
    small = SheafGraph.from_edges(len(progs), d, undirected, tiled, tiled)
    before = dict(zip(undirected, coboundary(small, x0), strict=True))
    after = dict(zip(undirected, coboundary(small, x), strict=True))
    edges = []
    for i, j, bufs in deps:
        key = (min(i, j), max(i, j))
        raw = before[key]
        total = float(np.sum(raw ** 2))
        r_before, r_after = math.sqrt(total), float(np.linalg.norm(after[key]))
        order = np.argsort(-raw ** 2, kind="stable")
        reasons = tuple(FEATURE_NAMES[k] for k in order if total > 0 and raw[k] ** 2 >= _REASON_SHARE * total)
        edges.append(EdgeReport(names[i], names[j], bufs, r_before, r_after,
                                r_before > threshold and r_after > threshold, reasons))
    nodes = tuple(NodeReport(names[i], counts[i], tuple(float(v) for v in x0[i]),
                             tuple(float(v) for v in x[i])) for i in range(len(progs)))
    return PipelineReport(nodes, tuple(edges), alpha, steps, threshold)
