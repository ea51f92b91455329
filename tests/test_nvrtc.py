"""The NVRTC compile route of the CUDA backend (vyre/driver/cuda_route.py, nvrtc.py, codegen/cuda_c.py).

Without a GPU: every kernel kind the tests generate compiles through the locally installed NVRTC
(Hypothesis programs, op tables, examples, interleave and warp-add cases, integer edge cases, the
vyre.ops programs and autodiff gradients) with the PTX checks numba's kernels pass; the printed C++,
run on the host against a shim of the CUDA built-ins (tests/cuda_c_host.py), agrees with the
interpreter; the route is chosen and keyed as documented; a cold CUDA compile through a fake libcuda
imports no numba, and a second process launches the saved cubin. On a GPU: bench/gpu_bench.py's
parity section.
"""

from __future__ import annotations

import ctypes
import struct
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.cuda_c_host import CXX
from vyre.codegen.cuda_c import emit_cuda_c
from vyre.driver import cuda_route, nvrtc
from vyre.ir import Program
from vyre.settings import read_settings

ROOT = Path(__file__).resolve().parent.parent
needs_nvrtc = pytest.mark.skipif(nvrtc.find() is None, reason=f"no NVRTC here: {nvrtc.unavailable()}")
needs_cxx = pytest.mark.skipif(CXX is None, reason="needs a host C++ compiler (g++ or clang++)")


def backward(p: Program) -> Program:
    """The gradient of every float output with respect to every float input."""
    from vyre.autodiff import grad

    outs = [b.name for b in p.buffers if b.access.writable and not b.is_workgroup and b.element.is_float]
    ins = [b.name for b in p.buffers if not b.access.writable and b.element.is_float]
    return grad(p, outs, ins)


def _ptx(prog: Program) -> str:
    return nvrtc.compile_cuda(emit_cuda_c(prog).source, 90, ptx=True).decode()


def _problems(name: str, prog: Program, expect: dict[str, tuple[tuple[str, ...], tuple[str, ...]]]) -> list[str]:
    try:
        ptx = _ptx(prog)
    except nvrtc.NvrtcError as e:
        return [f"{name}: {e}"]
    must, must_not = expect.get(name, ((), ()))
    out = [] if ".entry vyre_kernel" in ptx and ".target sm_90" in ptx else [f"{name}: no sm_90 vyre_kernel entry"]
    out += [f"{name}: PTX lacks {s!r}" for s in must if s not in ptx]
    return out + [f"{name}: PTX has {s!r}" for s in must_not if s in ptx]


@needs_nvrtc
def test_every_generated_and_saved_kernel_compiles_through_nvrtc() -> None:
    from tests import int_edge_cases
    from tests.backend_runner import cases, sample_programs
    from tests.interleave_cases import interleave_cases
    from tests.test_cpu_index_family import family_cases
    from tests.warp_add_cases import PTX_EXPECT, ptx_programs

    progs = [(name, prog) for name, prog, *_ in cases()]
    progs += [(f"generated_{i}", p) for i, p in enumerate(sample_programs(60))]
    progs += [(f"interleave_{name}", prog) for name, prog, _ in interleave_cases()]
    progs += ptx_programs()
    progs += [(name, prog) for name, prog, _ in int_edge_cases.cases()]
    progs += [(name, prog) for name, prog, *_ in family_cases(4)]
    expect = {**PTX_EXPECT, **int_edge_cases.PTX_EXPECT}
    assert len(progs) >= 100
    problems = [p for name, prog in progs for p in _problems(name, prog, expect)]
    assert problems == []


def _ops_runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Program, dict[str, np.ndarray], int]]:
    """The GPU-form programs of the vyre.ops functions, each with the inputs and grid of one of its
    passes (run on the interpreter, recorded before the pass ran)."""
    import vyre.ops as vo
    from vyre.ops import _launch, _runtime

    seen: dict[bytes, tuple[Program, dict[str, np.ndarray], int]] = {}
    real = _launch.dispatch

    def record(program: Program, arrays: Any, *, backend: str, grid: int, **kw: Any) -> Any:
        seen.setdefault(program.fingerprint(), (program, {k: np.array(v) for k, v in arrays.items()}, grid))
        return real(program, arrays, backend=backend, grid=grid, **kw)

    monkeypatch.setattr(_launch, "dispatch", record)
    init = _runtime.Ctx.__init__

    def gpu_form(self: Any, *a: Any) -> None:  # the GPU-form programs, run on the interpreter
        init(self, *a)
        self.gpu_form = True

    monkeypatch.setattr(_runtime.Ctx, "__init__", gpu_form)
    rng = np.random.default_rng(3)
    for dt in (np.float32, np.float64):
        x, y = rng.standard_normal(300).astype(dt), rng.standard_normal(300).astype(dt)
        m = rng.standard_normal((5, 40)).astype(dt)
        for fn in (vo.sum, vo.max, vo.min, vo.norm, vo.argmax, vo.mean):
            fn(x, backend="interp")
        vo.dot(x, y, backend="interp")
        vo.softmax(m, backend="interp")
        vo.matvec(m, m[0], backend="interp")
    return list(seen.values())


@needs_cxx
def test_ops_programs_printed_as_cxx_agree_with_the_interpreter_on_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every GPU-form pass of vyre.ops (subgroup reductions, workgroup memory, barriers, atomics),
    printed as C++ and run on the host shim (tests/cuda_c_host.py), against the interpreter."""
    from tests.cuda_c_host import HostKernels
    from tests.parity import differences
    from vyre.driver.dispatch import compile as vcompile

    runs = _ops_runs(monkeypatch)
    assert len(runs) >= 6
    kernels = HostKernels([p for p, _, _ in runs])
    problems = []
    for i, (prog, arrays, grid) in enumerate(runs):
        ref = vcompile(prog, "interp")({k: v.copy() for k, v in arrays.items()}, grid=grid)
        problems += [f"ops_{i}: {d}" for d in differences(kernels.run(i, arrays, grid), ref, exact=False)]
    assert problems == []


@needs_nvrtc
def test_ops_and_gradient_programs_compile_through_nvrtc(monkeypatch: pytest.MonkeyPatch) -> None:
    from vyre.examples import EXAMPLES

    progs = [(f"ops_{i}", p) for i, (p, _, _) in enumerate(_ops_runs(monkeypatch))]
    assert len(progs) >= 6
    for name in ("saxpy", "fused_chain", "matvec", "block_sum", "subgroup_sum"):
        progs.append((f"grad_{name}", backward(EXAMPLES[name]())))
    progs += [(f"grad_case_{i}", g) for i, (g, _, _) in enumerate(_grad_runs())]
    problems = [p for name, prog in progs for p in _problems(name, prog, {})]
    assert problems == []


@needs_cxx
def test_the_printed_cxx_agrees_with_the_interpreter_when_run_on_the_host() -> None:
    """tests/cuda_c_host.py: the C++ compiled for the host against a shim of the CUDA built-ins
    (threads per invocation, barriers, warp exchanges), every case against the interpreter."""
    from tests.subproc import run_checks

    rows = run_checks("cuda_c_host", "40", env={"NUMBA_ENABLE_CUDASIM": "0"}, timeout=600)
    assert len(rows) >= 100
    problems = [f"{r['case']}: {p}" for r in rows for p in r["problems"]]
    assert problems == []


#: names that are C++ keywords, CUDA built-ins, or the printer's own helpers and locals
C_COLLIDING = ["int", "float", "return", "class", "template", "asm", "threadIdx", "__syncthreads", "vy_ld",
               "vyre_kernel", "_ret", "_gid0_0", "n0_x", "atomicAdd", "unsigned", "main", "NULL", "vy_invocation",
               "_q", "_c6", "_v10", "b0_x_meminfo", "bool", "long", "do", "while", "goto", "extern"]


@needs_cxx
def test_names_colliding_with_cxx_compile_through_nvrtc_and_run_like_the_interpreter() -> None:
    """tests/test_codegen_security.py's programs (every kernel form) with every user name replaced by
    a C++ keyword, CUDA built-in or printer-internal name: NVRTC compiles them, and on the host
    shim they compute what the interpreter does (user names only reach the C++ inside mangled ones)."""
    from tests.cuda_c_host import HostKernels
    from tests.test_codegen_security import FORMS, _inputs

    progs, inputs = [], []
    for form, build in sorted(FORMS.items()):
        mapping: dict[str, str] = {}

        def rename(name: str, mapping: dict[str, str] = mapping) -> str:
            return mapping.setdefault(name, C_COLLIDING[len(mapping)])  # each name its own

        prog = build(rename).validate()
        progs.append((prog, mapping))
        inputs.append({mapping[k]: v for k, v in _inputs(form).items()})
        assert _ptx(prog)
    kernels = HostKernels([p for p, _ in progs])
    import vyre

    for i, ((prog, mapping), arrays) in enumerate(zip(progs, inputs, strict=True)):
        want = vyre.compile(prog, "interp")({k: v.copy() for k, v in arrays.items()})
        got = kernels.run(i, arrays)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=f"{k} ({mapping})")


def test_the_c_tables_cover_every_op() -> None:
    from vyre.codegen import cuda_c
    from vyre.codegen.c_ops import C_BINOP, C_UNOP
    from vyre.ir import AtomicOp, BinOpKind, UnOpKind

    assert set(C_BINOP) == set(BinOpKind) and set(C_UNOP) == set(UnOpKind)
    assert set(cuda_c._ATOMIC_FN) == set(AtomicOp)


def _grad_runs() -> list[tuple[Program, dict[str, np.ndarray], tuple[int, int, int] | None]]:
    """Backward programs of the autodiff test classes (tests/autodiff_classes.py: carried loops,
    initial reads, guarded singular values, workgroup-synchronised stages) with their inputs: the
    case's forward inputs, a cotangent of ones, zero-filled gradients and flags."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tests.autodiff_classes import carried_loops, guarded_singular, initial_reads, sync_programs

    gathered: list[Any] = []

    @settings(max_examples=24, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.one_of(carried_loops(), initial_reads(), guarded_singular(), sync_programs()))
    def collect(case: Any) -> None:
        gathered.append(case)

    collect()
    out: list[tuple[Program, dict[str, np.ndarray], tuple[int, int, int] | None]] = []
    for case in gathered:
        p = case.program
        outs = [b.name for b in p.buffers if b.access.writable and not b.is_workgroup and b.element.is_float]
        g = backward(p)
        arrays = {k: np.array(v) for k, v in case.inputs.items()}
        for b in g.buffers:
            if b.is_workgroup or b.name in arrays:
                continue
            base = b.name.split("_", 1)[1] if b.name.startswith(("grad_", "stored_")) else b.name
            n = b.count if b.count > 0 else len(arrays.get(base, np.zeros(1)))
            fill = 1 if b.name.startswith("grad_") and base in outs else 0
            arrays[b.name] = np.full(n, fill, b.element.np_dtype)
        # the forward's grid, as the runners dispatch a backward (tests/autodiff_classes.py directional_check)
        grid = (max(1, case.inputs["x"].size // p.workgroup_size[0]), 1, 1) if hasattr(case, "stages") else None
        out.append((g, arrays, grid))
    return out


@needs_cxx
def test_gradient_programs_printed_as_cxx_agree_with_the_interpreter_on_the_host() -> None:
    from tests.cuda_c_host import HostKernels
    from tests.parity import differences
    from vyre.driver.dispatch import compile as vcompile

    runs = _grad_runs()
    kernels = HostKernels([p for p, _, _ in runs])
    problems = []
    for i, (prog, arrays, grid) in enumerate(runs):
        ref = vcompile(prog, "interp")({k: v.copy() for k, v in arrays.items()}, grid=grid)
        problems += [f"grad_{i}: {d}" for d in differences(kernels.run(i, arrays, grid), ref, exact=False)]
    assert problems == []


# -- routes and keys -----------------------------------------------------------------------------------


def test_the_route_setting_is_parsed_and_unknown_values_warn() -> None:
    assert read_settings({}).cuda_compiler is None
    assert read_settings({"VYRE_CUDA_COMPILER": " NVRTC "}).cuda_compiler == "nvrtc"
    assert read_settings({"VYRE_CUDA_COMPILER": "numba"}).cuda_compiler == "numba"
    with pytest.warns(UserWarning, match="VYRE_CUDA_COMPILER='nvcc'.*Fix: set it to nvrtc or numba"):
        assert read_settings({"VYRE_CUDA_COMPILER": "nvcc"}).cuda_compiler is None


def test_route_choice_and_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VYRE_CUDA_COMPILER", raising=False)
    assert cuda_route.lookup_routes() == ("nvrtc", "numba")
    monkeypatch.setenv("VYRE_CUDA_COMPILER", "numba")
    assert cuda_route.lookup_routes() == ("numba",)
    assert cuda_route.compile_route("9.0") == ("numba", "VYRE_CUDA_COMPILER=numba")
    monkeypatch.delenv("VYRE_CUDA_COMPILER")
    monkeypatch.setattr(nvrtc, "find", lambda: None)
    monkeypatch.setattr(nvrtc, "unavailable", lambda: "libnvrtc was not found")
    assert cuda_route.compile_route("9.0") == ("numba", "libnvrtc was not found")
    monkeypatch.setenv("VYRE_CUDA_COMPILER", "nvrtc")
    with pytest.warns(UserWarning, match="VYRE_CUDA_COMPILER=nvrtc, but libnvrtc was not found.*through numba"):
        assert cuda_route.compile_route("9.0")[0] == "numba"


def test_no_pathfinder_or_no_library_means_no_nvrtc_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VYRE_CUDA_COMPILER", raising=False)
    nvrtc.find.cache_clear()
    try:
        monkeypatch.setitem(sys.modules, "cuda.pathfinder", None)  # not installed
        assert nvrtc.find() is None
        assert "cuda-pathfinder is not installed" in (nvrtc.unavailable() or "")
        assert cuda_route.compile_route("9.0")[0] == "numba"
        monkeypatch.delitem(sys.modules, "cuda.pathfinder")
        nvrtc.find.cache_clear()
        import cuda.pathfinder as pf

        def missing(name: str) -> object:
            raise pf.DynamicLibNotFoundError(f"{name}: not found anywhere")

        monkeypatch.setattr(pf, "load_nvidia_dynamic_lib", missing)
        assert nvrtc.find() is None
        assert "libnvrtc could not be loaded (DynamicLibNotFoundError: nvrtc: not found" in (nvrtc.unavailable() or "")
    finally:
        nvrtc.find.cache_clear()


@needs_nvrtc
def test_an_architecture_or_driver_nvrtc_does_not_serve_goes_to_numba(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from vyre.driver import cuda_driver

    major = nvrtc.find().version[0]  # type: ignore[union-attr]
    drv = types.SimpleNamespace(version=lambda: (major, 4))
    monkeypatch.setattr(cuda_driver, "driver", lambda: drv)
    monkeypatch.delenv("VYRE_CUDA_COMPILER", raising=False)
    route, why = cuda_route.compile_route("1.0")
    assert route == "numba" and why is not None and "cannot compile for sm_10" in why
    assert cuda_route.compile_route("9.0") == ("nvrtc", None)
    drv.version = lambda: (major - 1, 8)  # an older driver: NVRTC's cubins would not load
    route, why = cuda_route.compile_route("9.0")
    assert route == "numba" and why is not None and "newer than the driver's CUDA" in why


def test_binary_keys_differ_by_route_and_cover_the_nvrtc_wheel_and_printer(monkeypatch: pytest.MonkeyPatch) -> None:
    from vyre.codegen import emit
    from vyre.driver.backend import CudaBackend
    from vyre.examples import saxpy

    b, p, parts = CudaBackend(), saxpy(), ["fp", "cuda", "", "cc=9.0"]
    numba_key, nvrtc_key = b._binary_key(p, parts, "numba"), b._binary_key(p, parts, "nvrtc")  # type: ignore[arg-type]
    assert numba_key != nvrtc_key
    monkeypatch.setattr(emit, "CUDA_C_VERSION", emit.CUDA_C_VERSION + 1)
    assert b._binary_key(p, parts, "nvrtc") != nvrtc_key  # type: ignore[arg-type]
    assert b._binary_key(p, parts, "numba") == numba_key  # type: ignore[arg-type]
    cuda_route.nvrtc_dist.cache_clear()
    monkeypatch.setattr(cuda_route, "nvrtc_dist", lambda: "nvidia-cuda-nvrtc=99.0")
    assert "nvrtc=nvidia-cuda-nvrtc=99.0" in cuda_route.route_part("nvrtc")


def test_a_kernel_nvrtc_refuses_is_warned_about_and_left_to_numba(monkeypatch: pytest.MonkeyPatch) -> None:
    """A printer bug NVRTC catches never fails a dispatch silently or gives a wrong kernel: the
    backend warns with NVRTC's log and compiles the program through numba (``None`` here)."""
    from vyre.driver.backend import CudaBackend
    from vyre.examples import saxpy

    def refuse(source: str, arch: int, **kw: object) -> bytes:
        raise nvrtc.NvrtcError("NVRTC could not compile a generated kernel for sm_90:\nerror: something")

    monkeypatch.setattr(nvrtc, "compile_cuda", refuse)
    with pytest.warns(UserWarning, match=r"(?s)could not compile.*error: something.*through numba instead"):
        assert CudaBackend()._compile_nvrtc(saxpy(), "k" * 40, ["fp"], False, "9.0", None) is None


def test_an_nvrtc_failure_is_a_codegen_error_with_the_log() -> None:
    if nvrtc.find() is None:
        with pytest.raises(nvrtc.NvrtcError, match=r"NVRTC is unavailable.*Fix:"):
            nvrtc.compile_cuda("x", 90)
        return
    with pytest.raises(nvrtc.NvrtcError, match=r"(?s)could not compile.*undefined.*Fix: report"):
        nvrtc.compile_cuda('extern "C" __global__ void k() { undefined_thing(); }', 90)


@needs_nvrtc
def test_cubins_are_elf_for_the_asked_architecture() -> None:
    from vyre.examples import EXAMPLES

    for name in EXAMPLES:
        for arch in (80, 90):
            cubin = nvrtc.compile_cuda(emit_cuda_c(EXAMPLES[name]()).source, arch)
            # an ELF whose e_flags (offset 48) carry the SM version in bits 8-15
            assert cubin[:4] == b"\x7fELF" and (struct.unpack_from("<I", cubin, 48)[0] >> 8) & 0xFF == arch, name


# -- the cold path through a fake driver: no numba -----------------------------------------------------


def child(mode: str) -> None:
    """A process with a fake libcuda (tests/fake_cuda.py) that accepts NVRTC's real cubin as a
    module holding ``vyre_kernel`` and runs a Python stand-in for it: the whole dispatch path."""
    from tests.fake_cuda import FakeCuda
    from vyre.driver import cuda_driver, fast_launch

    class ElfFake(FakeCuda):
        def _cuModuleLoadData(self, p: Any, image: int) -> int:
            if ctypes.string_at(image, 4) != b"\x7fELF":
                return super()._cuModuleLoadData(p, image)
            handle = 0x5000 + len(self.modules)
            self.modules[handle] = ["vyre_kernel"]
            p[0] = handle
            return 0

        def _cuDriverGetVersion(self, p: Any) -> int:
            p[0] = 1000 * nvrtc.find().version[0] + 40  # type: ignore[union-attr]  # a driver of NVRTC's CUDA
            return 0

    f = ElfFake()
    cuda_driver.install(f.driver())
    fast_launch._launcher = f.launcher

    def run(arrays: list[np.ndarray], scalars: list[int], launch: dict[str, Any]) -> None:
        x, out = arrays
        n = scalars[0]
        out[:n] = np.exp(x[:n]) * np.float32(2)

    f.register("vyre_kernel", [np.float32, np.float32], 2, run)
    import vyre
    from vyre.codegen import cuda as numba_printer, cuda_c
    from vyre.driver.dispatch import _kernel_for
    from tests.test_cuda_binary import _program

    if mode == "warm":
        def no(*a: object, **k: object) -> object:
            raise AssertionError("a printer ran on a cubin hit")

        cuda_c.emit_cuda_c = no  # type: ignore[assignment]
        numba_printer.emit_cuda = no  # type: ignore[assignment]
    p = _program()
    xs = np.linspace(0, 1, 300, dtype=np.float32)
    got = vyre.dispatch(p, {"x": xs, "out": np.zeros_like(xs)}, backend="cuda")["out"]
    k = _kernel_for(p, "cuda")
    print(json.dumps({"ok": bool(np.allclose(got, np.exp(xs) * 2, rtol=1e-6)), "hit": k.cache_hit,
                      "compiler": getattr(k._fn, "compiler", "numba-dispatcher"),
                      "numba": sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "numba_cuda", "llvmlite")),
                      "launches": len(f.launches)}), flush=True)


def _run(root: Path, mode: str) -> dict[str, Any]:
    env = {**os.environ, "VYRE_CACHE_DIR": str(root), "VYRE_AUTOTUNER": "off", "PYTHONPATH": str(ROOT)}
    for k in ("VYRE_BINARY_CACHE", "VYRE_CUDA_COMPILER", "NUMBA_ENABLE_CUDASIM"):
        env.pop(k, None)
    out = subprocess.run([sys.executable, "-m", "tests.test_nvrtc", mode], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert out.returncode == 0 and len(rows) == 1, out.stderr[-3000:]
    return rows[0]


@needs_nvrtc
@pytest.mark.skipif(__import__("importlib").util.find_spec("numba_cuda") is None, reason="needs numba-cuda installed")
def test_a_cold_cuda_compile_imports_no_numba_and_a_second_process_reuses_its_cubin(tmp_path: Path) -> None:
    cold = _run(tmp_path, "cold")
    assert cold == {"ok": True, "hit": False, "compiler": "nvrtc", "numba": [], "launches": 1}
    (entry,) = (tmp_path / "kernels" / "cuda").glob("b_*.vbin")
    warm = _run(tmp_path, "warm")
    assert warm == {"ok": True, "hit": True, "compiler": "nvrtc", "numba": [], "launches": 1}
    assert list((tmp_path / "kernels" / "cuda").glob("b_*.vbin")) == [entry]


if __name__ == "__main__":
    child(sys.argv[1])
