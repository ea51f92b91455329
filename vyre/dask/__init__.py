"""vyre over Dask: run a program on every chunk of dask arrays (NumPy chunks on the CPU backend,
CuPy chunks on CUDA), with halos for stencils, gradients over chunked data, and reductions.

vyre builds no scheduler of its own: Dask (threads, ``dask.distributed`` processes, or a cluster)
decides where each chunk runs. Programs travel to the workers as their wire format
(:func:`vyre.ir.to_wire`, digest-checked), are decoded once per worker process, and every worker
uses the disk kernel cache (``VYRE_CACHE_DIR``), so workers that share it compile a kernel once.

The contract of :func:`map_blocks`: the program is run on each chunk *as if the chunk were the whole
array* (one dispatch per chunk, the chunk's elements flattened in C order). That is exact for
programs whose invocation ``i`` only touches element ``i`` of the chunked buffers (elementwise
maps); stencils that read neighbours need :func:`map_overlap`, which gives each chunk a halo.
Buffers passed as plain arrays (not dask arrays) are given whole to every chunk: weights, tables.

For several GPUs in one process, :func:`on_gpus` lays the chunks out round robin (docs/scale_out.md
says why the layout decides whether the GPUs run side by side).
"""

from __future__ import annotations

try:
    import dask
    import dask.array  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("vyre.dask needs Dask. Fix: pip install 'vyre[dask]' (or dask[array])") from e

# after the check that Dask is there
from .chunks import map_blocks, map_overlap
from .gpus import on_gpus
from .grad import value_and_grad
from .reductions import reduce

__all__ = ["map_blocks", "map_overlap", "on_gpus", "reduce", "value_and_grad"]
