"""Python with no IR meaning is rejected when the kernel is decorated, at the user's line, with a fix.

Each case is a small module written to a file (the frontend reads source from files); the line
marked ``# <-`` is where the error must point."""

from __future__ import annotations

import importlib.util
import itertools
import textwrap
from pathlib import Path

import pytest

from vyre.errors import FrontendError

HEAD = "import math\nimport numpy as np\nimport vyre\nfrom vyre import Array, Uniform, WriteOnly, f32, i32, u32\n"
_count = itertools.count()

CASES: dict[str, tuple[str, str]] = {
    "numpy's name for max": ("""
@vyre.kernel
def k(x: Array[f32], out: Array[f32]):
    out[0] = vyre.max(x[0], 0.0)  # <-
""", "max(a, b), or vyre.maximum(a, b)"),
    "a misspelt intrinsic": ("""
@vyre.kernel
def k(x: Array[f32], out: Array[f32]):
    out[0] = vyre.sqr(x[0])  # <-
""", "did you mean vyre.sqrt"),
    "while": ("""
@vyre.kernel
def k(x: Array[f32], out: Array[f32]):
    i = vyre.gid()
    while x[i] > 0.0:  # <-
        out[i] = 1.0
""", "for k in range(n)"),
    "break": ("""
@vyre.kernel
def k(out: Array[f32]):
    for j in range(4):
        break  # <-
""", "guard the rest of the body"),
    "print": ("""
@vyre.kernel
def k(out: Array[f32]):
    print(out[0])  # <-
""", "remove it"),
    "list comprehension": ("""
@vyre.kernel
def k(out: Array[f32]):
    out[0] = [v for v in range(3)]  # <-
""", "loop with for k in range(n)"),
    "closure over an array": ("""
table = np.ones(4, np.float32)
@vyre.kernel
def k(out: Array[f32]):
    out[0] = table[1]  # <-
""", "make it a parameter: `table: Array[f32]`"),
    "recursion": ("""
@vyre.func
def f(a: f32) -> f32:
    return f(a)  # <-
@vyre.kernel
def k(out: Array[f32]):
    out[0] = f(out[1])
""", "write it as a loop"),
    "nested function": ("""
@vyre.kernel
def k(out: Array[f32]):
    def g(a):  # <-
        return a
""", "@vyre.func"),
    "lambda": ("""
@vyre.kernel
def k(out: Array[f32]):
    out[0] = (lambda a: a)(1.0)  # <-
""", "@vyre.func"),
    "type change": ("""
@vyre.kernel
def k(x: Array[f32], out: Array[f32]):
    acc = 0
    acc = x[0]  # <-
""", "convert: acc = vyre.u32(...)"),
    "mixed types": ("""
@vyre.kernel
def k(x: Array[f32], out: Array[f32]):
    out[0] = x[0] + vyre.gid()  # <-
""", "convert one side explicitly"),
    "true division of integers": ("""
@vyre.kernel
def k(out: Array[u32]):
    out[0] = vyre.gid() / 2  # <-
""", "write // for integer division"),
    "floor division of floats": ("""
@vyre.kernel
def k(x: Array[f32], out: Array[f32]):
    out[0] = x[0] // 2.0  # <-
""", "vyre.floor(a / b)"),
    "used after its block": ("""
@vyre.kernel
def k(x: Array[f32], out: Array[f32]):
    if x[0] > 0.0:
        t = 1.0
    out[0] = t  # <-
""", "give `t` a value before the block"),
    "loop variable after the loop": ("""
@vyre.kernel
def k(out: Array[u32]):
    for j in range(4):
        out[j] = j
    out[0] = j  # <-
""", "give `j` a value before the block"),
    "assign to a loop variable": ("""
@vyre.kernel
def k(out: Array[u32]):
    for j in range(4):
        j = j + 1  # <-
""", "copy it first"),
    "tuple index": ("""
@vyre.kernel
def k(x: Array[f32], out: Array[f32]):
    out[0] = x[1, 2]  # <-
""", "x[row * n_cols + col]"),
    "signed index": ("""
@vyre.kernel
def k(x: Array[f32], out: Array[f32], j: i32):
    out[0] = x[j]  # <-
""", "vyre.u32(j)"),
    "non-bool condition": ("""
@vyre.kernel
def k(x: Array[f32], out: Array[f32]):
    if x[0]:  # <-
        out[0] = 1.0
""", "!= 0"),
    "range over an array": ("""
@vyre.kernel
def k(x: Array[f32], out: Array[f32]):
    for v in x:  # <-
        out[0] = v
""", "for k in range(len(x))"),
    "negative step": ("""
@vyre.kernel
def k(out: Array[u32]):
    for j in range(4, 0, -1):  # <-
        out[j] = j
""", "index from the end"),
    "returning a value from a kernel": ("""
@vyre.kernel
def k(out: Array[f32]):
    return 1.0  # <-
""", "out[i] = ..."),
    "early return in a func": ("""
@vyre.func
def f(a):
    if a > 0.0:
        return a  # <-
    b = a * 2.0
    return b
@vyre.kernel
def k(out: Array[f32]):
    out[0] = f(out[1])
""", "return it once at the end"),
    "missing annotation": ("""
@vyre.kernel
def k(out):  # <-
    pass
""", "annotate it"),
    "bad array length": ("""
@vyre.kernel
def k(out: Array[f32, 0]):  # <-
    pass
""", "write a literal or a module-level int constant"),
    "unknown name": ("""
@vyre.kernel
def k(out: Array[f32]):
    out[0] = nope  # <-
""", "define `nope`"),
    "unknown call": ("""
import os
@vyre.kernel
def k(out: Array[f32]):
    out[0] = os.getpid()  # <-
""", "decorate the helper with @vyre.func"),
    "atomic inside an expression": ("""
@vyre.kernel
def k(out: Array[u32]):
    out[1] = vyre.atomic_add(out, 0, 1) + 1  # <-
""", "assign it first: old = vyre.atomic_add(out, 0, 1)"),
    "barrier as a value": ("""
@vyre.kernel
def k(out: Array[u32]):
    out[0] = vyre.barrier()  # <-
""", "call it on its own line"),
    "workgroup array in a branch": ("""
@vyre.kernel
def k(out: Array[u32]):
    if vyre.gid() == 0:
        t = vyre.workgroup_array(4, u32)  # <-
""", "kernel's top level"),
    "barrier in a branch (validation, mapped back)": ("""
@vyre.kernel(workgroup_size=32)
def k(out: Array[u32]):
    if out[vyre.gid()] == 0:
        vyre.barrier()  # <-
""", "Fix:"),
    "unused value": ("""
@vyre.kernel
def k(x: Array[f32], out: Array[f32]):
    x[0] + 1.0  # <-
""", "assign it to a local or store it"),
    "scalar parameter written": ("""
@vyre.kernel
def k(a: f32, out: Array[f32]):
    a[0] = 1.0  # <-
""", "use it directly: a"),
    "scalar parameter reassigned": ("""
@vyre.kernel
def k(a: f32, out: Array[f32]):
    a = 2.0  # <-
""", "copy it to a new local first"),
    "store into a Uniform array": ("""
@vyre.kernel
def k(u: Uniform[f32, 4], out: Array[f32]):
    u[1] = out[0]  # <-
""", "make it an output array (`u: Array[f32]`"),
    "in-place update of a Uniform array": ("""
@vyre.kernel
def k(u: Uniform[f32], out: Array[f32]):
    u[0] += 1.0  # <-
""", "make it an output array"),
    "atomic on a Uniform array": ("""
@vyre.kernel
def k(u: Uniform[u32], out: Array[u32]):
    vyre.atomic_add(u, 0, 1)  # <-
""", "make it an output array (`u: Array[u32]`"),
    "a function storing into a Uniform array": ("""
@vyre.func
def put(buf, i, v):
    buf[i] = v  # <-
@vyre.kernel
def k(u: Uniform[f32], out: Array[f32]):
    put(u, 0, 1.0)
""", "make it an output array (`u: Array[f32]`"),
    "load from a WriteOnly array": ("""
@vyre.kernel
def k(x: Array[f32], w: WriteOnly[f32]):
    w[0] = x[0]
    x[1] = w[0]  # <-
""", "declare it `w: Array[f32]` (read-write)"),
    "in-place update of a WriteOnly array": ("""
@vyre.kernel
def k(w: WriteOnly[u32]):
    w[0] += 1  # <-
""", "declare it `w: Array[u32]` (read-write)"),
    "atomic on a WriteOnly array": ("""
@vyre.kernel
def k(w: WriteOnly[u32]):
    old = vyre.atomic_add(w, 0, 1)  # <-
""", "declare it `w: Array[u32]` (read-write)"),
    "a function loading from a WriteOnly array": ("""
@vyre.func
def get(buf, i):
    return buf[i]  # <-
@vyre.kernel
def k(x: Array[f32], w: WriteOnly[f32]):
    x[0] = get(w, 0)
""", "or keep the value in a local"),
    "a WriteOnly function parameter is loaded": ("""
@vyre.func
def get(buf: WriteOnly[f32], i: u32) -> f32:
    return buf[i]  # <-
@vyre.kernel
def k(x: Array[f32], out: Array[f32]):
    out[0] = get(x, 0)
""", "declare it `buf: Array[f32]` (read-write)"),
    "a Uniform function parameter is stored into": ("""
@vyre.func
def put(buf: Uniform[f32], i: u32):
    buf[i] = 1.0  # <-
@vyre.kernel
def k(out: Array[f32]):
    put(out, 0)
""", "make it an output array (`buf: Array[f32]`"),
    "a Uniform array passed as a WriteOnly parameter": ("""
@vyre.func
def put(buf: WriteOnly[f32], i: u32):
    buf[i] = 1.0
@vyre.kernel
def k(u: Uniform[f32], out: Array[f32]):
    put(u, 0)  # <-
""", "annotate `buf` as Array[f32]"),
    "an array of another element type passed to a function": ("""
@vyre.func
def put(buf: Array[f32], i: u32):
    buf[i] = 1.0
@vyre.kernel
def k(out: Array[u32]):
    put(out, 0)  # <-
""", "pass an array of f32"),
    "Uniform length zero": ("""
@vyre.kernel
def k(u: Uniform[f32, 0], out: Array[f32]):  # <-
    out[0] = u[0]
""", "a module-level int constant"),
    "WriteOnly without an element type": ("""
@vyre.kernel
def k(w: WriteOnly[int]):  # <-
    w[0] = 1
""", "WriteOnly[vyre.f32]"),
    "literal out of range": ("""
@vyre.kernel
def k(out: Array[u32]):
    out[0] = 5000000000  # <-
""", "use a value in range"),
    "chained assignment": ("""
@vyre.kernel
def k(out: Array[f32]):
    a = b = 1.0  # <-
""", "assign each local on its own line"),
    "try": ("""
@vyre.kernel
def k(out: Array[f32]):
    try:  # <-
        out[0] = 1.0
    except Exception:
        pass
""", "remove it"),
    "is comparison": ("""
@vyre.kernel
def k(out: Array[f32]):
    if out[0] is None:  # <-
        out[0] = 1.0
""", "compare with == or !="),
    "bool invert": ("""
@vyre.kernel
def k(out: Array[f32]):
    out[0] = vyre.select(~(out[0] > 1.0), 1.0, 2.0)  # <-
""", "write `not c`"),
    "shape attribute": ("""
@vyre.kernel
def k(out: Array[f32]):
    out[0] = out.shape  # <-
""", "write len(out)"),
    "one-sided return in a func": ("""
@vyre.func
def f(a):
    if a > 0.0:  # <-
        return a
@vyre.kernel
def k(out: Array[f32]):
    out[0] = f(out[1])
""", "add an else"),
    "kernel calls a kernel": ("""
@vyre.kernel
def inner(out: Array[f32]):
    out[0] = 1.0
@vyre.kernel
def k(out: Array[f32]):
    inner(out)  # <-
""", "make the callee a @vyre.func"),
    "float for a u32 loop bound": ("""
@vyre.kernel
def k(out: Array[f32]):
    for j in range(out[0]):  # <-
        out[j] = 1.0
""", "vyre.u32(out[0])"),
    "bit op on floats": ("""
@vyre.kernel
def k(out: Array[f32]):
    out[0] = out[1] & out[2]  # <-
""", "need integers"),
}


def _load(tmp_path: Path, text: str) -> None:
    path = tmp_path / f"fe_case_{next(_count)}.py"
    path.write_text(HEAD + textwrap.dedent(text))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


@pytest.mark.parametrize("name", list(CASES))
def test_rejected_constructs_point_at_the_line_with_a_fix(name: str, tmp_path: Path) -> None:
    body, fix = CASES[name]
    lines = (HEAD + textwrap.dedent(body)).splitlines()
    want_line = next(k + 1 for k, line in enumerate(lines) if line.rstrip().endswith("# <-"))
    with pytest.raises(FrontendError) as info:
        _load(tmp_path, body)
    e = info.value
    msg = str(e)
    assert e.lineno == want_line, msg
    assert e.filename.endswith(".py") and f":{want_line}:" in msg.splitlines()[0]
    shown, caret = msg.splitlines()[1:3]
    assert shown.strip() == lines[want_line - 1].strip()  # the source line, then a caret under it
    assert caret.strip() and set(caret.strip()) == {"^"}
    fix_text = msg[msg.index("Fix: "):]
    assert fix in fix_text, msg
    # the user's error alone: no "during handling of the above exception" with the frontend's own
    assert e.__suppress_context__ or e.__context__ is None


def test_source_must_be_readable() -> None:
    import vyre

    ns: dict[str, object] = {"vyre": vyre, "Array": vyre.Array, "f32": vyre.f32}
    with pytest.raises(FrontendError, match=r"Fix: define it in a \.py file"):
        exec("@vyre.kernel\ndef k(out: Array[f32]):\n    out[0] = 1.0\n", ns)


def test_bad_workgroup_size() -> None:
    import vyre

    with pytest.raises(FrontendError, match="workgroup_size"):
        vyre.kernel(workgroup_size=0)(lambda: None)


def test_branches_that_disagree_on_a_type_leave_the_local_inside(tmp_path: Path) -> None:
    body = """
@vyre.kernel
def k(x: Array[f32], out: Array[f32]):
    if x[0] > 0.0:
        t = 1.0
    else:
        t = 1
    out[0] = t  # <-
"""
    with pytest.raises(FrontendError, match="give `t` a value before the block"):
        _load(tmp_path, body)


def test_a_function_that_writes_arrays_is_called_only_as_a_whole_statement(tmp_path: Path) -> None:
    body = """
@vyre.func
def bump(buf, i):
    buf[i] = buf[i] + 1.0
    return buf[i]
@vyre.kernel
def k(x: Array[f32], out: Array[f32]):
    out[0] = x[0] + bump(x, 0)  # <-
"""
    with pytest.raises(FrontendError, match=r"assign its result first: r = bump\(x, 0\)") as info:
        _load(tmp_path, body)
    lines = (HEAD + textwrap.dedent(body)).splitlines()
    assert info.value.lineno == lines.index("    out[0] = x[0] + bump(x, 0)  # <-") + 1
    ok = """
@vyre.func
def bump(buf, i):
    buf[i] = buf[i] + 1.0
    return buf[i]
@vyre.kernel
def k(x: Array[f32], out: Array[f32]):
    r = bump(x, 0)
    out[0] = bump(x, 1)
    bump(x, 2)
"""
    _load(tmp_path, ok)
