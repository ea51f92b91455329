"""Every kind of @vyre.kernel parameter (Array read or written, Uniform, WriteOnly, scalar), of every
element type and declared length, against the buffers and statements built with the IR builders:
random signatures, same fingerprint, and the same results on the interpreter."""

from __future__ import annotations

import importlib.util
import itertools
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import vyre
from vyre.ir import BufferAccess, BufferDecl, DataType, Program, let, load, store, var
from vyre.ir import u32 as lit_u32
from vyre.ir.expr import LitF32, LitF64, LitI32, LitU32

_DIR = Path(tempfile.mkdtemp(prefix="vyre-frontend-params-"))
_count = itertools.count()
KINDS = ["read", "written", "uniform", "write_only", "scalar"]
TYPES = {"f32": DataType.F32, "f64": DataType.F64, "i32": DataType.I32, "u32": DataType.U32}
NP = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "u32": np.uint32}
Param = tuple[str, str, int]  # kind, element type, declared count (0: none)


def _annotation(kind: str, t: str, n: int) -> str:
    if kind == "scalar":
        return t
    head = {"read": "Array", "written": "Array", "uniform": "Uniform", "write_only": "WriteOnly"}[kind]
    return f"{head}[{t}, {n}]" if n else f"{head}[{t}]"


def _seven(t: str) -> Any:
    return {"f32": LitF32(7.0), "f64": LitF64(7.0), "i32": LitI32(7), "u32": LitU32(7)}[t]


def kernel_source(params: list[Param]) -> str:
    sig = ", ".join(f"p{k}: {_annotation(*p)}" for k, p in enumerate(params))
    body = []
    for k, (kind, _, _) in enumerate(params):
        if kind in ("read", "uniform"):
            body.append(f"    v{k} = p{k}[0]")
        elif kind == "scalar":
            body.append(f"    v{k} = p{k}")
        else:
            body.append(f"    p{k}[0] = 7")
    return ("import vyre\nfrom vyre import Array, Uniform, WriteOnly, f32, f64, i32, u32\n\n"
            f"@vyre.kernel\ndef k({sig}):\n" + "\n".join(body) + "\n")


def built(params: list[Param]) -> Program:
    """The same kernel with the builders."""
    decls, entry = [], []
    for k, (kind, t, n) in enumerate(params):
        name, dt = f"p{k}", TYPES[t]
        if kind == "scalar":
            d = BufferDecl(name, k, BufferAccess.UNIFORM, dt).with_count(1)
            entry.insert(sum(1 for q in params[:k] if q[0] == "scalar"), let(name, load(d, lit_u32(0))))
            entry.append(let(f"v{k}", var(name)))
        else:
            access = {"read": BufferAccess.READ_ONLY, "written": BufferAccess.READ_WRITE,
                      "uniform": BufferAccess.UNIFORM, "write_only": BufferAccess.WRITE_ONLY}[kind]
            d = BufferDecl(name, k, access, dt, n, is_output=kind in ("written", "write_only"))
            entry.append(let(f"v{k}", load(d, lit_u32(0))) if kind in ("read", "uniform")
                         else store(d, lit_u32(0), _seven(t)))
        decls.append(d)
    return Program.wrapped(decls, 256, entry)


def compile_kernel(source: str) -> Any:
    path = _DIR / f"params_kernel_{next(_count)}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.k


params_lists = st.lists(st.tuples(st.sampled_from(KINDS), st.sampled_from(list(TYPES)), st.integers(0, 3)),
                        min_size=1, max_size=5).map(lambda ps: [(k, t, 0 if k == "scalar" else n) for k, t, n in ps])


@settings(max_examples=40, deadline=None)
@given(params_lists)
def test_every_parameter_kind_is_the_builders_buffer(params: list[Param]) -> None:
    src = kernel_source(params)
    k = compile_kernel(src)
    want = built(params)
    assert k.program == want, f"{src}\n{k.program}\n{want}"
    assert k.program.fingerprint() == want.fingerprint()
    inputs: dict[str, Any] = {}
    for j, (kind, t, n) in enumerate(params):
        if kind == "scalar":
            inputs[f"p{j}"] = 3
        elif kind in ("read", "uniform") or not n:
            inputs[f"p{j}"] = np.arange(1, (n or 2) + 1).astype(NP[t])
    got = vyre.dispatch(k.program, dict(inputs), backend="interp", grid=(1,))
    ref = vyre.dispatch(want, dict(inputs), backend="interp", grid=(1,))
    written = [f"p{j}" for j, (kind, _, _) in enumerate(params) if kind in ("written", "write_only")]
    assert sorted(got) == sorted(ref) == sorted(written)
    for name in written:
        np.testing.assert_array_equal(got[name], ref[name])
        assert got[name][0] == 7
