"""Generated source is built only from the IR: hostile names never reach it, valid names only as parts of
mangled identifiers, literals only as typed values.

- hostile names (code, newlines, look-alike letters, over-long, non-str) are rejected by validation,
  before any emitter runs;
- valid names that collide with Python keywords, builtins, the modules and helpers the generated
  module uses, or its own mangled and internal names compile and run correctly on the CPU (every form:
  flat, independent, lockstep with barriers and subgroups, inlined calls);
- emitting a program with those names and with neutral placeholder names gives the same token stream
  once mangled identifiers are mapped: no user string appears anywhere else (strings, comments, bare
  names); function op_ids and Region labels never appear at all;
- float literals of every kind and extreme integers produce the right values.
"""

from __future__ import annotations

import io
import math
import re
import struct
import tokenize
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import vyre
from vyre.codegen.cpu import emit_cpu
from vyre.codegen.cuda import emit_cuda
from vyre.errors import DispatchError, ValidationError
from vyre.ir import (
    F32, F64, I32, U32, Assign, BinOp, BinOpKind, BufferAccess, BufferDecl, Call, Expr, FunctionDef, LitF32,
    LitF64, LitI32, LitU32, Loop, Node, Program, UnOp, UnOpKind, Var, assign, atomic_add, ballot, barrier,
    buflen, call, cast, f32, gid, if_, let, lid, load, loop, output, read, region, shuffle, store,
    subgroup_reduce, u32, var, wgid, workgroup,
)

HOSTILE = {
    "statement": "x; import os",
    "call": "__import__('os')",
    "newline": "a\nb",
    "nul": "x\x00",
    "fullwidth x": "\uff58",
    "cyrillic": "\u0445\u0430",
    "dash": "a-b",
    "digit first": "1x",
    "empty": "",
    "space": " x",
    "attribute": "os.system",
    "quote": "x'",
    "65 chars": "a" * 65,
    "10k chars": "a" * 10_000,
}

OUT = output("out", 0, U32).with_count(4)


def _programs(h: str) -> dict[str, Program]:
    """``h`` in every place a name can stand."""
    return {
        "buffer": Program.wrapped([BufferDecl.output(h, 0, U32).with_count(4)], 32, [store(h, u32(0), u32(1))]),
        "workgroup buffer": Program.wrapped([OUT, workgroup(h, 32, U32)], 32, [store(h, lid(), u32(1))]),
        "let": Program.wrapped([OUT], 32, [let(h, u32(1)), store(OUT, u32(0), Var(h))]),
        "assign": Program.wrapped([OUT], 32, [Assign(h, LitU32(1))]),
        "loop variable": Program.wrapped([OUT], 32, [Loop(h, LitU32(0), LitU32(2), ())]),
        "function parameter": Program.wrapped([OUT], 32, [let("q", call("f", u32(1))), store(OUT, u32(0), var("q"))],
                                              [FunctionDef("f", ((h, U32),), U32, Var(h))]),
        "function op_id": Program.wrapped([OUT], 32, [let("q", Call(h, (LitU32(1),))), store(OUT, u32(0), var("q"))],
                                          [FunctionDef(h, (("a", U32),), U32, Var("a"))]),
    }


@pytest.fixture(scope="module", autouse=True)
def _isolated(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VYRE_CACHE_DIR", str(tmp_path_factory.mktemp("vyre-cache")))
        yield


@pytest.fixture
def no_codegen(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a: object, **_k: object) -> str:
        raise AssertionError("an emitter ran for an invalid program")

    monkeypatch.setattr("vyre.codegen.cpu.emit_cpu", refuse)
    monkeypatch.setattr("vyre.codegen.cuda.emit_cuda", refuse)


@pytest.mark.parametrize("label", sorted(HOSTILE))
def test_hostile_names_are_rejected_before_codegen(label: str, no_codegen: None) -> None:
    for where, p in _programs(HOSTILE[label]).items():
        codes = {d.code for d in p.diagnostics()}
        assert "V002" in codes, (where, codes)  # "not an identifier"
        with pytest.raises(ValidationError):
            vyre.compile(p, "cpu")
        with pytest.raises(ValidationError):
            vyre.dispatch(p, {}, backend="cpu")


@pytest.mark.parametrize("name", [5, None, b"x", ("x",)], ids=repr)
def test_non_str_names_are_rejected(name: Any, no_codegen: None) -> None:
    p = Program((BufferDecl(name, 0, BufferAccess.READ_WRITE, U32, 4, True),), (32, 1, 1), ())
    assert "V001" in {d.code for d in p.diagnostics()}
    with pytest.raises(ValidationError):
        vyre.compile(p, "cpu")


@pytest.mark.parametrize("label", ["statement", "newline", "10k chars"])
def test_hostile_input_keys_are_unknown_buffers(label: str) -> None:
    with pytest.raises(DispatchError, match="unknown buffer"):
        vyre.dispatch(Program.wrapped([OUT], 32, [store(OUT, u32(0), u32(1))]),
                      {HOSTILE[label]: np.zeros(4, np.uint32)}, backend="cpu")


# ---- valid names that collide with what the generated module uses --------------------------------
COLLIDING = [
    "math", "np", "numba", "cuda", "types", "uint32", "float32", "int64", "boolean", "range", "min", "abs",
    "print", "exec", "eval", "__import__", "__class__", "__builtins__", "if", "def", "for", "return",
    "lambda", "True", "None", "pass", "_vy_ld", "_vy_at_add", "_vy_invocation", "_vy_workgroup", "_dev",
    "vyre_kernel", "vyre_kernel_py", "VYRE_FLAT", "VYRE_SIGNATURE", "_gid0", "_lid0", "_wg0", "_lane",
    "_lin", "_l", "_r", "_n", "_chunk", "_gx", "_acc", "_b", "_s", "_k", "_i1", "_it2", "_sg2",
    "_sgs_f32", "b0_x", "v1_i", "la1_v", "s0_tile", "_none",
]
Names = Callable[[str], str]


def flat_program(n: Names) -> Program:
    """Flat form, a loop, an assign, an inlined call with colliding parameter names, an atomic."""
    a, b, out = read(n("math"), 0, F32), read(n("np"), 1, F32), output(n("uint32"), 2, F32)
    cnt = BufferDecl.read_write(n("range"), 3, U32).with_count(1)
    i = var(n("_vy_ld"))
    fn = FunctionDef(n("exec"), ((n("math"), F32), (n("None"), F32)), F32,
                     BinOp(BinOpKind.ADD, Var(n("math")), BinOp(BinOpKind.MUL, Var(n("None")), LitF32(2.0))))
    return Program.wrapped([a, b, out, cnt], 32, [
        let(n("_vy_ld"), gid()),
        if_(i.lt(buflen(out)), [
            region(n("evil; import os"), [
                let(n("vyre_kernel"), a[i] * b[i]),
                let(n("if"), f32(0.0)),
                loop(n("def"), u32(0), u32(3), [assign(n("if"), var(n("if")) + var(n("vyre_kernel")))]),
                let(n("True"), Call(n("exec"), (var(n("if")), var(n("vyre_kernel"))))),
                store(out, i, var(n("True"))),
                let(n("__class__"), atomic_add(cnt, u32(0), u32(1))),
            ]),
        ]),
    ], [fn])


def independent_program(n: Names) -> Program:
    """Independent CPU form (workgroup ids), names of the driver's own locals."""
    out = output(n("_gid0"), 0, U32)
    return Program.wrapped([out], 32, [
        let(n("_l"), wgid()),
        let(n("_wg0"), lid()),
        let(n("_r"), var(n("_l")) * u32(100) + var(n("_wg0"))),
        if_(gid().lt(buflen(out)), [store(out, gid(), var(n("_r")))]),
    ])


def lockstep_program(n: Names) -> Program:
    """Lockstep CPU form: workgroup memory, a barrier, every subgroup op, lane-array look-alikes."""
    x, out = read(n("numba"), 0, F32), output(n("cuda"), 1, F32).with_count(64)
    tile = workgroup(n("_vy_workgroup"), 64, F32)
    return Program.wrapped([x, out, tile], 64, [
        let(n("_lane"), load(x, gid())),
        store(tile, lid(), var(n("_lane"))),
        barrier(),
        let(n("la1_v"), load(tile, (lid() + u32(1)) & u32(63))),
        let(n("_acc"), subgroup_reduce(BinOpKind.ADD, var(n("la1_v")))),
        let(n("_b"), shuffle(var(n("_lane")), lid() ^ u32(1))),
        let(n("_s"), ballot(var(n("_lane")).gt(f32(3.0)))),
        store(out, gid(), var(n("_acc")) + var(n("_b")) + cast(F32, var(n("_s")) & u32(255))),
    ])


FORMS: dict[str, Callable[[Names], Program]] = {
    "flat": flat_program, "independent": independent_program, "lockstep": lockstep_program,
}


def _inputs(form: str) -> dict[str, np.ndarray]:
    if form == "flat":
        return {"math": np.arange(8, dtype=np.float32), "np": np.full(8, 2.0, np.float32),
                "uint32": np.zeros(8, np.float32), "range": np.zeros(1, np.uint32)}
    if form == "independent":
        return {"_gid0": np.zeros(70, np.uint32)}
    return {"numba": np.arange(64, dtype=np.float32)}


def _same(s: str) -> str:
    return s


@pytest.mark.parametrize("form", sorted(FORMS))
def test_colliding_names_compile_and_run_like_the_interpreter(form: str) -> None:
    p = FORMS[form](_same).validate()
    want = vyre.compile(p, "interp")(_inputs(form))
    got = vyre.compile(p, "cpu", parallel=False)(_inputs(form))
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    if form == "flat":  # the values, not only agreement: 3 * (i * 2) + 2 * (i * 2)
        np.testing.assert_array_equal(got["uint32"], 10.0 * np.arange(8, dtype=np.float32))
        assert got["range"][0] == 8


def test_every_colliding_name_is_exercised() -> None:
    """COLLIDING lists names for the reader; make sure the programs above use each one somewhere
    (as a name, or as a prefix-free collision target)."""
    used: set[str] = set()
    for build in FORMS.values():
        build(lambda s: used.add(s) or s)  # type: ignore[func-returns-value]
    assert {"math", "np", "uint32", "_vy_ld", "vyre_kernel", "range", "if", "def", "True", "None", "_lane",
            "_gid0", "_l", "_r", "la1_v", "_acc"} <= used


@pytest.mark.parametrize("part", range(3))
def test_each_colliding_name_works_as_buffer_and_variable(part: int) -> None:
    """Every name of COLLIDING is a storage buffer and a variable at once (a third of them per program:
    more than 29 buffers hit a numba limit, see test_many_buffers_compile)."""
    names = COLLIDING[part::3]
    bufs = [output(name, k, U32).with_count(4) for k, name in enumerate(names)]
    body: list[Node] = []
    for k, name in enumerate(names):
        body += [let(name, gid() * u32(k + 1)), store(name, gid(), var(name) + u32(k))]
    p = Program.wrapped(bufs, 4, body).validate()
    src = emit_cpu(p, parallel=False)
    for k, name in enumerate(names):
        assert re.search(rf"\bb{k}_{re.escape(name)}\b", src), name
    got = vyre.compile(p, "cpu", parallel=False)({})
    for k, name in enumerate(names):
        np.testing.assert_array_equal(got[name], np.arange(4, dtype=np.uint32) * (k + 1) + k, err_msg=name)


def test_many_buffers_compile() -> None:
    n = 30
    p = Program.wrapped([output(f"o{k}", k, U32).with_count(2) for k in range(n)], 2,
                        [store(f"o{k}", gid(), u32(k)) for k in range(n)]).validate()
    got = vyre.compile(p, "cpu", parallel=False)({})
    assert all((got[f"o{k}"] == k).all() for k in range(n))


# ---- the source scan -----------------------------------------------------------------------------
MANGLED = re.compile(r"^((?:b|s|v|la)\d+_)(.+)$")


def _tokens(src: str, rename: dict[str, str] | None = None) -> list[tuple[int, str]]:
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        s = tok.string
        if rename is not None and tok.type == tokenize.NAME:
            m = MANGLED.match(s)
            if m and m.group(2) in rename:
                s = m.group(1) + rename[m.group(2)]
        out.append((tok.type, s))
    return out


def _emitters() -> dict[str, Callable[[Program], str]]:
    return {"cpu": lambda p: emit_cpu(p), "cpu-serial": lambda p: emit_cpu(p, parallel=False),
            "cuda": lambda p: emit_cuda(p), "cudasim": lambda p: emit_cuda(p, simulator=True)}


@pytest.mark.parametrize("target", sorted(_emitters()))
@pytest.mark.parametrize("form", sorted(FORMS))
def test_user_strings_appear_only_inside_mangled_identifiers(form: str, target: str) -> None:
    placeholders: dict[str, str] = {}

    def neutral(s: str) -> str:
        return placeholders.setdefault(s, f"zq{len(placeholders)}")

    emit = _emitters()[target]
    real = emit(FORMS[form](_same).validate())
    plain = emit(FORMS[form](neutral).validate())
    back = {v: k for k, v in placeholders.items()}
    assert _tokens(plain, rename=None) != _tokens(real, rename=None)  # the names did reach the source
    assert _tokens(real, rename={k: v for k, v in placeholders.items()}) == _tokens(plain)
    # and nowhere else: no placeholder survives outside a mangled identifier
    for typ, s in _tokens(plain):
        if typ == tokenize.NAME and not MANGLED.match(s):
            assert s not in back, s
        if typ in (tokenize.STRING, tokenize.COMMENT):
            assert not any(re.search(rf"\b{p}\b", s) for p in back), s
    assert "import os" not in real and "evil" not in real


def test_user_variable_named_like_an_internal_subgroup_temporary() -> None:
    x, out = read("x", 0, U32), output("out", 1, U32).with_count(32)

    def build(names: list[str]) -> Program:
        total: Expr = var(names[0])
        for name in names[1:]:
            total = total + var(name)
        return Program.wrapped([x, out], 32, [
            *(let(name, u32(1 << k)) for k, name in enumerate(names)),
            let("s", subgroup_reduce(BinOpKind.ADD, load(x, gid()))),
            let("t", shuffle(load(x, gid()), lid() ^ u32(1))),
            store(out, gid(), total + (var("s") + var("t")) * u32(0)),
        ]).validate()

    # the temporaries' numbers do not depend on the user's names: read them off a neutral emission
    internal = re.findall(r"\bla\d+_(sg(?:op|lane)_\d+)\b", emit_cpu(build(["n0", "n1", "n2"])))
    names = sorted(set(internal))
    assert len(names) == 3  # two operands and one shuffle lane
    p = build(names)
    got = vyre.compile(p, "cpu", parallel=False)({"x": np.arange(32, dtype=np.uint32)})["out"]
    assert (got == (1 << len(names)) - 1).all(), got


# ---- literals ------------------------------------------------------------------------------------
def _f32(bits: int) -> float:
    return float(struct.unpack("<f", struct.pack("<I", bits))[0])


F32_BITS = [0x00000000, 0x80000000, 0x3FC00000, 0x3DCCCCCD, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7FC00001,
            0xFFC00000, 0x7F800001, 0x00000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x4B800001]
F64_BITS = [0x0000000000000000, 0x8000000000000000, 0x7FEFFFFFFFFFFFFF, 0xFFEFFFFFFFFFFFFF, 0x0000000000000001,
            0x000FFFFFFFFFFFFF, 0x0010000000000000, 0x7FF0000000000000, 0xFFF0000000000000, 0x7FF8000000000000,
            0x7FF0000000000001, 0xFFF8000000000000, 0x3FB999999999999A, 0x7FE1CCF385EBC8A0]  # last: 1e308
I32_VALUES = [-(2**31), 2**31 - 1, 0, -1]
U32_VALUES = [0, 2**32 - 1, 2**31, 1]


def literal_program() -> Program:
    x = read("one", 0, F32).with_count(1)
    of32, of64 = output("f32", 1, F32).with_count(32), output("f64", 2, F64).with_count(32)
    oi32, ou32 = output("i32", 3, I32).with_count(16), output("u32", 4, U32).with_count(16)
    body = [store(of32, u32(k), LitF32(bits=b)) for k, b in enumerate(F32_BITS)]
    body += [store(of64, u32(k), LitF64(bits=b)) for k, b in enumerate(F64_BITS)]
    body += [store(oi32, u32(k), LitI32(v)) for k, v in enumerate(I32_VALUES)]
    body += [store(ou32, u32(k), LitU32(v)) for k, v in enumerate(U32_VALUES)]
    imin, imax, umax = LitI32(-(2**31)), LitI32(2**31 - 1), LitU32(2**32 - 1)
    body += [  # literals inside arithmetic: wrapping and signed zero
        store(oi32, u32(8), BinOp(BinOpKind.ADD, imax, LitI32(1))),
        store(oi32, u32(9), BinOp(BinOpKind.SUB, imin, LitI32(1))),
        store(oi32, u32(10), UnOp(UnOpKind.NEGATE, imin)),
        store(oi32, u32(11), BinOp(BinOpKind.DIV, imin, LitI32(-1))),
        store(oi32, u32(12), BinOp(BinOpKind.MUL, imin, LitI32(-1))),
        store(ou32, u32(8), BinOp(BinOpKind.ADD, umax, LitU32(1))),
        store(ou32, u32(9), BinOp(BinOpKind.SUB, LitU32(0), LitU32(1))),
        store(ou32, u32(10), BinOp(BinOpKind.MUL, umax, umax)),
        store(of32, u32(20), load(x, u32(0)) * LitF32(-0.0)),
        store(of32, u32(21), load(x, u32(0)) * LitF32(bits=0x7F7FFFFF) * LitF32(2.0)),
        store(of64, u32(20), cast(F64, load(x, u32(0))) * LitF64(1e308) * LitF64(10.0)),
        store(of64, u32(21), cast(F64, load(x, u32(0))) * LitF64(bits=1) / LitF64(2.0)),
    ]
    return Program.wrapped([x, of32, of64, oi32, ou32], 1, [if_(gid().eq(u32(0)), body)]).validate()


@pytest.fixture(scope="module")
def literal_results() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    p = literal_program()
    inputs = {"one": np.ones(1, np.float32)}
    return vyre.compile(p, "cpu", parallel=False)(inputs), vyre.compile(p, "interp")(inputs)


def _bits_equal_or_both_nan(a: np.ndarray, b: np.ndarray) -> None:
    nan = np.isnan(a)
    np.testing.assert_array_equal(nan, np.isnan(b))
    np.testing.assert_array_equal(a[~nan].view(np.uint8), b[~nan].view(np.uint8))  # -0.0 vs 0.0 counts


def test_float_literals_keep_their_values(literal_results: Any) -> None:
    got, ref = literal_results
    want32 = np.array(F32_BITS, np.uint32).view(np.float32)
    want64 = np.array(F64_BITS, np.uint64).view(np.float64)
    _bits_equal_or_both_nan(got["f32"][: len(F32_BITS)], want32)
    _bits_equal_or_both_nan(got["f64"][: len(F64_BITS)], want64)
    _bits_equal_or_both_nan(got["f32"], ref["f32"])
    _bits_equal_or_both_nan(got["f64"], ref["f64"])
    assert math.copysign(1.0, got["f32"][20]) == -1.0 and got["f32"][20] == 0.0
    assert got["f32"][21] == np.inf and got["f64"][20] == np.inf and got["f64"][21] == 0.0


def test_integer_literals_and_wrapping(literal_results: Any) -> None:
    got, ref = literal_results
    np.testing.assert_array_equal(got["i32"][:4], np.array(I32_VALUES, np.int32))
    np.testing.assert_array_equal(got["u32"][:4], np.array(U32_VALUES, np.uint32))
    assert list(got["i32"][8:11]) == [-(2**31), 2**31 - 1, -(2**31)]
    assert list(got["u32"][8:11]) == [0, 2**32 - 1, 1]
    np.testing.assert_array_equal(got["i32"], ref["i32"])
    np.testing.assert_array_equal(got["u32"], ref["u32"])


@pytest.mark.parametrize("target", ["cpu", "cuda", "cudasim"])
def test_literal_source_text(target: str) -> None:
    src = _emitters()[target](literal_program())
    for text in ("float32(math.nan)", "float32(math.inf)", "float32(-math.inf)", "float32(-0.0)",
                 "float64(5e-324)", "float64(1e+308)", "float32(1.401298464324817e-45)",
                 "int32(-2147483648)", "int32(2147483647)", "uint32(4294967295)"):
        assert text in src, text
    # a float constructor's argument is an expression's source, a math constant or a float's own repr
    for m in re.finditer(r"float(?:32|64)\(([^()]*)\)", src):
        arg = m.group(1)
        if arg.lstrip("-")[:1].isdigit():
            assert repr(float(arg)) == arg.lstrip("-").join(["-" if arg[0] == "-" else "", ""]) or arg == "0", arg
        elif "math." in arg:
            assert arg in ("math.nan", "math.inf", "-math.inf"), arg
    compile(src, "<vyre-test>", "exec")
