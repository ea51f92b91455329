"""Bad caches, bad inputs and odd grids give a VyreError or a rebuild, never a raw Python error or a
silent difference between backends (issue 10's smaller findings).

- tuner cache files Python cannot read (valid TOML nested past the recursion limit, 5000-digit
  integers) are skipped with a warning and rewritten;
- a dispatch whose inputs are not a mapping is a DispatchError on the cached path too;
- ``\\u{...}`` escapes past U+10FFFF (or lone surrogates) are ParseErrors;
- bindings outside [0, 2^32) are ValidationErrors (V006);
- grids whose invocation ids overflow u32 are DispatchErrors; a 2-D grid on a flat program runs
  the x-row once per y, on every backend, as the interpreter does;
- a damaged kernel cache (a file where a directory belongs, module files or numba's files garbled
  while processes compile) is rebuilt.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from dataclasses import replace
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import vyre
from vyre.driver import cache
from vyre.driver.dispatch import compile as vcompile
from vyre.errors import DispatchError, ParseError, TunerError, ValidationError
from vyre.ir import (
    F32, U32, BufferDecl, Program, atomic_add, gid, let, load, output, read, store, u32,
)
from vyre.ir.parser import parse_program
from vyre.tuning import autotune
from vyre.tuning.cache import TunerCache, TunerCacheWarning
from vyre.tuning.tuner import Tuner

ROOT = Path(__file__).resolve().parent.parent


def _double() -> Program:
    x, out = read("x", 0, F32), output("out", 1, F32)
    return Program.wrapped([x, out], 64, [store(out, gid(), x[gid()] * 2.0)])


@pytest.fixture
def own_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("VYRE_CACHE_DIR", str(tmp_path))
    autotune.reset()
    cache.clear_memory()
    yield tmp_path
    autotune.reset()
    cache.clear_memory()


# ---- tuner cache --------------------------------------------------------------------------------
DEEP = '"k" = ' + "[" * 2000 + "1" + "]" * 2000 + "\n"
HUGE = '"k" = [' + "9" * 5000 + ", 1, 1]\n"


@pytest.mark.parametrize("text", [DEEP, HUGE], ids=["deep", "huge"])
def test_unreadable_tuner_cache_is_a_tuner_error(text: str) -> None:
    with pytest.raises(TunerError, match=r"could not be read.*Fix: delete"):
        TunerCache.from_toml(text)


@given(st.one_of(
    st.text(max_size=200),
    st.integers(1, 3000).map(lambda d: '"k" = ' + "[" * d + "]" * d),
    st.lists(st.sampled_from(['"k" = ', "[", "]", "1", ",", "{", "}", "a = 1", "\n", '"', "1e999",
                              "9" * 40, "inf", "nan", "[[1,2,3]]", "1979-05-27"]), max_size=60).map("".join),
))
def test_any_tuner_cache_text_loads_or_is_a_tuner_error(text: str) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TunerCacheWarning)
            TunerCache.from_toml(text)
    except TunerError:
        pass


def test_flat_cpu_dispatch_skips_a_deeply_nested_tuner_cache(own_cache: Path) -> None:
    path = Tuner.cache_path_for_adapter(autotune.adapter_fingerprint("cpu"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(DEEP)
    x = np.arange(256, dtype=np.float32)
    for _ in range(2):
        with pytest.warns(TunerCacheWarning, match="could not be read"):
            got = vyre.dispatch(_double(), {"x": x, "out": np.empty_like(x)}, backend="cpu")["out"]
        assert np.array_equal(got, x * 2)
        autotune.reset()


# ---- inputs that are not a mapping --------------------------------------------------------------
@pytest.mark.parametrize("backend", ["cpu", "interp"])
def test_inputs_not_a_mapping_after_a_cached_dispatch(backend: str) -> None:
    prog = _double()
    x = np.ones(64, np.float32)
    for _ in range(2):
        vyre.dispatch(prog, {"x": x, "out": np.empty_like(x)}, backend=backend)
    for bad in (None, 5, [x]):
        for _ in range(2):
            with pytest.raises(DispatchError, match="must be a mapping"):
                vyre.dispatch(prog, bad, backend=backend)  # type: ignore[arg-type]


def test_inputs_not_a_mapping_on_the_simulator() -> None:
    code = textwrap.dedent("""
        import numpy as np, vyre
        from vyre.errors import DispatchError
        from tests.test_reliability import _double
        prog, x = _double(), np.ones(64, np.float32)
        vyre.dispatch(prog, {"x": x, "out": np.empty_like(x)}, backend="cudasim")
        for bad in (None, 5, [x], None):
            try:
                vyre.dispatch(prog, bad, backend="cudasim")
            except DispatchError as e:
                assert "must be a mapping" in str(e)
            else:
                raise AssertionError("accepted")
        print("OK")
    """)
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.stdout.strip().endswith("OK"), proc.stderr[-3000:]


# ---- parser escapes -----------------------------------------------------------------------------
@given(st.integers(0, 0xFFFFFF))
def test_escapes_name_a_character_or_are_a_parse_error(code: int) -> None:
    text = f'program wg(1, 1, 1) {{ region "\\u{{{code:x}}}" {{ }} }}'
    if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        with pytest.raises(ParseError, match="not a Unicode character"):
            parse_program(text)
    else:
        assert parse_program(text).entry[0].generator == chr(code)  # type: ignore[union-attr]


def test_the_reported_escape() -> None:
    with pytest.raises(ParseError, match=r"\\u\{110000\}.*\n.*\n.*\^\nFix:"):
        parse_program("program wg(1, 1, 1) { let `\\u{110000}` = 1u32 }")


# ---- bindings -----------------------------------------------------------------------------------
@pytest.mark.parametrize("binding", [-1, 2**32, 2**40])
def test_bindings_outside_u32_are_validation_errors(binding: int) -> None:
    prog = Program.wrapped([BufferDecl.read("x", binding, F32), output("out", 1, F32)], 1,
                           [store("out", u32(0), load("x", u32(0)))])
    with pytest.raises(ValidationError) as e:
        prog.validate()
    assert e.value.codes == ["V006"]
    with pytest.raises(ValidationError):
        vcompile(prog, "cpu")


def test_the_largest_binding_is_valid() -> None:
    prog = Program.wrapped([BufferDecl.read("x", 2**32 - 1, F32), output("out", 1, F32)], 1,
                           [store("out", u32(0), load("x", u32(0)))])
    prog.validate()
    prog.fingerprint()


# ---- grids --------------------------------------------------------------------------------------
def _counts() -> Program:
    """``hist[gid % 4] += 1``: every invocation that runs is counted."""
    hist = output("hist", 0, U32).with_count(4)
    return Program.wrapped([hist], 64, [let("old", atomic_add(hist, gid() % u32(4), u32(1)))])


@pytest.mark.parametrize("backend", ["cpu", "interp"])
@pytest.mark.parametrize("grid", [(2**31 - 1,), (2**26 + 1,), (2**26 + 1, 2)])
def test_grids_whose_ids_overflow_u32_are_dispatch_errors(backend: str, grid: tuple[int, ...]) -> None:
    for prog in (_counts(), _double()):
        with pytest.raises(DispatchError, match="invocation ids are u32"):
            vcompile(prog, backend)(_inputs(prog), grid=grid)


def _inputs(prog: Program) -> dict[str, np.ndarray]:
    if prog.buffers[0].name == "hist":
        return {"hist": np.zeros(4, np.uint32)}
    return {"x": np.zeros(4, np.float32), "out": np.zeros(4, np.float32)}


def test_ids_fit_axis_by_axis() -> None:
    """2^26 workgroups of 64: ids 0 .. 2^32-1 fit (only checked here, not run); along y with
    workgroups 64 high, one more workgroup does not."""
    from vyre.driver.geometry import check_ids_fit

    check_ids_fit(_counts(), (2**26, 1, 1))
    tall = replace(_counts(), workgroup_size=(1, 64, 1))
    check_ids_fit(tall, (2**31 - 1, 2**26, 1))
    with pytest.raises(DispatchError, match="along axis 1"):
        check_ids_fit(tall, (1, 2**26 + 1, 1))


@pytest.mark.parametrize("grid", [(2, 3), (1, 2, 2), (3, 1, 2)])
def test_a_2d_grid_on_a_flat_program_agrees_with_the_interpreter(grid: tuple[int, ...]) -> None:
    prog = _counts()
    want = vcompile(prog, "interp")({"hist": np.zeros(4, np.uint32)}, grid=grid)["hist"]
    assert want.sum() == 64 * int(np.prod(grid))
    k = vcompile(prog, "cpu")
    assert k.flat
    got = k({"hist": np.zeros(4, np.uint32)}, grid=grid)["hist"]
    assert np.array_equal(got, want)
    got = vyre.dispatch(prog, {"hist": np.zeros(4, np.uint32)}, backend="cpu", dim=(64 * grid[0], *grid[1:]))
    assert np.array_equal(got["hist"], want)


def test_a_2d_grid_on_a_flat_program_on_the_simulator() -> None:
    code = textwrap.dedent("""
        import numpy as np
        from vyre.driver.dispatch import compile as vcompile
        from tests.test_reliability import _counts
        prog = _counts()
        want = vcompile(prog, "interp")({"hist": np.zeros(4, np.uint32)}, grid=(2, 2))["hist"]
        got = vcompile(prog, "cudasim")({"hist": np.zeros(4, np.uint32)}, grid=(2, 2))["hist"]
        assert np.array_equal(got, want), (got, want)
        print("OK")
    """)
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.stdout.strip().endswith("OK"), proc.stderr[-3000:]


# ---- kernel cache -------------------------------------------------------------------------------
@pytest.mark.parametrize("blocked", ["kernels/cpu", "kernels"])
def test_a_file_where_the_kernel_directory_belongs_is_replaced(own_cache: Path, blocked: str) -> None:
    (own_cache / blocked).parent.mkdir(parents=True, exist_ok=True)
    (own_cache / blocked).write_text("not a directory")
    x = np.arange(64, dtype=np.float32)
    got = vcompile(_double(), "cpu")({"x": x, "out": np.empty_like(x)})["out"]
    assert np.array_equal(got, x * 2)
    assert (own_cache / "kernels" / "cpu").is_dir()


def test_a_damaged_compiled_file_is_dropped_and_the_module_loaded_again(
        own_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = cache._exec
    calls = []

    def flaky(name, path, text):  # numba reads a damaged index (another process half-way), once
        calls.append(path)
        if len(calls) == 1:
            raise pickle.UnpicklingError("invalid load key")
        return real(name, path, text)

    monkeypatch.setattr(cache, "_exec", flaky)
    mod, _ = cache.load_module("cpu", "k" * 40, "VALUE = 42\n")
    assert mod.VALUE == 42 and len(calls) == 2


def test_a_module_that_never_loads_is_a_dispatch_error(own_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(name, path, text):
        raise pickle.UnpicklingError("invalid load key")

    monkeypatch.setattr(cache, "_exec", broken)
    with pytest.raises(DispatchError, match=r"could not be loaded.*UnpicklingError.*Fix:"):
        cache.load_module("cpu", "j" * 40, "VALUE = 1\n")


WORKER = textwrap.dedent("""
    import sys, numpy as np
    from vyre.driver.dispatch import compile as vcompile
    from vyre.errors import VyreError
    from tests.test_reliability import _double
    x = np.arange(64, dtype=np.float32)
    ok = 0
    for _ in range(3):
        try:
            got = vcompile(_double(), "cpu")({"x": x, "out": np.empty_like(x)})["out"]
            assert np.array_equal(got, x * 2)
            ok += 1
        except VyreError as e:
            print("VYRE", type(e).__name__, str(e)[:200])
        from vyre.driver import cache
        cache.clear_memory()
    print("DONE", ok)
""")


def test_concurrent_compiles_survive_a_corrupted_cache(own_cache: Path) -> None:
    """Processes compile the same kernel while its module and compiled files are garbled: every
    dispatch is right or a VyreError, never a raw SyntaxError or UnpicklingError."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VYRE_CACHE_DIR": str(own_cache), "VYRE_BINARY_CACHE": "off"}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    kdir = own_cache / "kernels" / "cpu"
    rng = np.random.default_rng(0)
    while any(p.poll() is None for p in procs):
        time.sleep(0.02)
        for f in [*kdir.glob("k_*.py"), *kdir.glob("__pycache__/k_*")] if kdir.is_dir() else []:
            try:
                f.write_bytes(rng.bytes(int(rng.integers(1, 64))))
            except OSError:
                pass
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0 and "DONE" in out, err[-3000:]
        assert "Traceback" not in err, err[-3000:]
