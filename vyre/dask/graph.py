"""The dask arrays vyre writes itself (``vyre.dask.reduce`` over a ``map_blocks`` result): graphs
that are cheap for Dask to prepare on every ``compute``.

Every ``dask.compute`` hands each collection's graph to its low-level optimizer before the first
task runs. Dask's array optimizer (blockwise fusion, root fusion, a layer-by-layer cull, the
conversion of tuple tasks into task objects, linear fusion, slice fusion) costs milliseconds for a
few passes of a few chunks, and for vyre's graphs it finds nothing to do: they are already one
task per chunk, with exact dependencies. So vyre writes them as Dask's task objects
(``dask.task_spec.Task``: nothing to convert) in one materialized layer, and returns them as a
:class:`VyreArray`, whose optimizer only culls (:func:`optimize`). On several GPUs that host time
is time both GPUs wait (docs/scale_out.md; BENCHMARKS.md has the measurements).

Graphs whose inputs are not materialized (a ``Blockwise`` layer upstream, e.g. arithmetic on dask
arrays that was not persisted) still get Dask's full array optimization, which may fuse them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import dask
import dask.array as da
from dask.core import flatten
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer
from dask.utils import ensure_dict

try:  # the public module of newer Dask; the same classes live in dask._task_spec before it
    from dask.task_spec import Task, TaskRef
except ImportError:  # pragma: no cover - older dask
    from dask._task_spec import Task, TaskRef
from dask._task_spec import convert_legacy_graph  # what Dask's scheduler runs on every graph

__all__ = ["Task", "TaskRef", "VyreArray", "optimize", "vyre_array"]


def optimize(dsk: Any, keys: Any, **kwargs: Any) -> Any:
    """Dask's low-level optimization of a graph that holds vyre's layers: the cull alone, when
    every layer is materialized (vyre's own, persisted or literal chunks, other materialized
    graphs); Dask's array optimizer otherwise, or when ``array_optimize`` is configured.

    The graph comes back as a dict of task objects: tuple tasks of other layers are converted
    (as Dask's scheduler would), task objects and data pass through as they are."""
    if dask.config.get("array_optimize", None) is not None or (
            isinstance(dsk, HighLevelGraph)
            and not all(isinstance(layer, MaterializedLayer) for layer in dsk.layers.values())):
        return da.Array.__dask_optimize__(dsk, keys, **kwargs)
    return _cull(convert_legacy_graph(ensure_dict(dsk)), flatten(keys))


def _cull(graph: dict[Any, Any], keys: Iterable[Any]) -> dict[Any, Any]:
    """The part of ``graph`` (task objects) that ``keys`` need; keys not in the graph (results
    that live elsewhere, e.g. futures) are left for the scheduler to find."""
    out: dict[Any, Any] = {}
    work = list(keys)
    while work:
        k = work.pop()
        if k in out or k not in graph:
            continue
        out[k] = node = graph[k]
        work.extend(node.dependencies)
    return out


class VyreArray(da.Array):
    """A dask array whose graph vyre wrote (task objects, one task per chunk): a plain
    ``dask.array.Array`` in every respect but its low-level optimizer (:func:`optimize`).
    Arrays derived from it (arithmetic, slicing, persisting) are plain dask arrays again."""

    __slots__ = ()
    __dask_optimize__ = staticmethod(optimize)


def vyre_array(name: str, layer: Mapping[Any, Task], dependencies: Iterable[Any], *,
               chunks: Any, meta: Any) -> VyreArray:
    """The :class:`VyreArray` ``name`` made of ``layer`` (task objects keyed by ``(name, *index)``)
    on top of the graphs of ``dependencies`` (the arrays the tasks read)."""
    graph = HighLevelGraph.from_collections(name, dict(layer), dependencies=list(dependencies))
    return VyreArray(graph, name, chunks=chunks, dtype=meta.dtype, meta=meta)
