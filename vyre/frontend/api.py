"""``@vyre.kernel``, ``@vyre.func`` and the call of a compiled kernel.

A decorated function is read and lowered once, when it is decorated: problems are reported then,
against the user's file and line, and nothing of its body ever runs as Python. Names the body uses
(``vyre``, ``math``, module-level constants, other ``@vyre.func`` functions) are looked up in the
function's globals and closure at that moment, so they must be defined before the decorated
function; constants are baked into the program.

Parameters: ``x: Array[T]`` is a buffer (read-only unless the body stores into it or uses it in an
atomic; then read-write and an output), bound in parameter order (binding 0, 1, ...). ``a: T`` for a
scalar type ``T`` is a *scalar parameter*: it is compiled as a 1-element uniform buffer named ``a``
(so a new value is new data, never a recompile), read once at the kernel's start into a local
``a``, and passed as a Python number, to the kernel or by name to ``vyre.dispatch``. Uniform
buffers are the IR's existing read-only, same-for-every-invocation storage: loads of them at
uniform indices are uniform (docs/errors.md), so a scalar may bound a loop that holds barriers.

``u: Uniform[T]`` / ``Uniform[T, n]`` is such a uniform buffer of any length, indexed like an array
and never written; ``w: WriteOnly[T]`` / ``WriteOnly[T, n]`` a WRITE_ONLY output buffer, stored
into and never loaded (nor updated in place or used in an atomic, which read it).
"""

from __future__ import annotations

import ast
import functools
import inspect
from collections import ChainMap
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import DispatchError, FrontendError
from ..ir import DataType, Program
from ..ir.program import program_of as _program_of
from .intrinsics import SCALAR_TYPES
from .markers import _ArrayType
from .lower import lower_kernel
from .source import Source, read_source
from .values import BufRef

Annotation = DataType | _ArrayType | None


def _env(fn: Any) -> ChainMap[str, Any]:
    """The names a function body sees: its closure cells, then its (live) globals, so a
    ``@vyre.func`` sees functions defined after it by the time a kernel calls it."""
    cells: dict[str, Any] = {}
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__, strict=True):
            try:
                cells[name] = cell.cell_contents
            except ValueError:  # an empty cell: defined later
                continue
    return ChainMap(cells, fn.__globals__)


def _annotation(src: Source, env: Mapping[str, Any], node: ast.expr | None, what: str,
                required: bool) -> Annotation:
    """Resolve an annotation from its AST (``Array[f32]``, ``f32``, ``vyre.u32``, ``np.float32``)."""
    if node is None:
        if required:
            raise src.error(None, f"{what} has no type annotation", "annotate it: x: Array[vyre.f32] or a: vyre.f32")
        return None

    def resolve(n: ast.expr) -> Any:
        match n:
            case ast.Name(id=name) if name in env:
                return env[name]
            case ast.Name(id=name):
                import builtins

                if hasattr(builtins, name):
                    return getattr(builtins, name)
                raise src.error(n, f"the annotation name `{name}` is not defined",
                                "import it: from vyre import Array, f32")
            case ast.Attribute(value=base, attr=attr):
                obj = resolve(base)
                if not hasattr(obj, attr):
                    raise src.error(n, f"`{ast.unparse(n)}` does not exist", "check the spelling")
                return getattr(obj, attr)
            case ast.Subscript(value=base, slice=idx):
                arr = resolve(base)
                if not isinstance(arr, _ArrayType):
                    raise src.error(n, f"`{ast.unparse(n)}` is not an array type", "write Array[vyre.f32]")
                kw = arr.spelling
                if isinstance(idx, ast.Tuple):
                    if len(idx.elts) != 2:
                        raise src.error(n, f"`{ast.unparse(n)}`: an array type is {kw}[T] or {kw}[T, n]",
                                        f"write {kw}[vyre.f32] or {kw}[vyre.f32, 16]")
                    count = resolve(idx.elts[1])
                    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                        raise src.error(idx.elts[1], f"an array length must be a positive int, got {count!r}",
                                        "write a literal or a module-level int constant")
                    return _ArrayType(resolve(idx.elts[0]), count, arr.kind)
                return _ArrayType(resolve(idx), 0, arr.kind)
            case ast.Constant(value=int(v)) if not isinstance(v, bool):
                return v
            case ast.Constant(value=str(text)):
                return resolve(ast.parse(text, mode="eval").body)
        raise src.error(n, f"`{ast.unparse(n)}` is not a vyre type", "write Array[vyre.f32] or vyre.f32")

    got = resolve(node)
    if isinstance(got, _ArrayType):
        el = SCALAR_TYPES.get(id(got.element))
        if el is None:
            raise src.error(node, f"`{ast.unparse(node)}`: arrays need an element type",
                            f"write {got.spelling}[vyre.f32] (or f64, i32, u32, boolean)")
        return _ArrayType(el, got.count, got.kind)
    t = SCALAR_TYPES.get(id(got))
    if t is None:
        raise src.error(node, f"`{ast.unparse(node)}` is not a vyre type",
                        "use Array[vyre.f32] for arrays, vyre.f32 / vyre.u32 / ... for scalars")
    return t


def _params(src: Source, env: Mapping[str, Any], decorator: str, required: bool) -> list[tuple[str, Annotation]]:
    a = src.tree.args
    for bad, what in ((a.vararg, "*args"), (a.kwarg, "**kwargs")):
        if bad is not None:
            raise src.error(bad, f"{what} has no IR meaning", "list every parameter by name")
    if a.defaults or (a.kw_defaults and any(d is not None for d in a.kw_defaults)):
        node = (a.defaults or [d for d in a.kw_defaults if d is not None])[0]
        raise src.error(node, f"{decorator} parameters have no defaults", "pass every argument")
    return [(p.arg, _annotation(src, env, p.annotation, f"parameter `{p.arg}`", required))
            for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]]


class DeviceFunction:
    """A ``@vyre.func`` function: callable from kernels (inlined, or an IR ``Call`` when its body
    is one pure ``return`` over annotated scalars), never from Python."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.name: str = fn.__name__
        self.source = read_source(fn, "@vyre.func")
        self.env = _env(fn)
        self.params = _params(self.source, self.env, "@vyre.func", required=False)
        ret = self.source.tree.returns
        res = _annotation(self.source, self.env, ret, "the result", False) if ret is not None else None
        if isinstance(res, _ArrayType):
            raise self.source.error(ret, "a @vyre.func returns a value, not an array", "return a scalar")
        self.result: DataType | None = res
        body = [s for k, s in enumerate(self.source.tree.body)
                if not (k == 0 and isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        # stores into arrays or atomics: then calls may only be whole statements / right-hand sides
        self.writes = any(
            (isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store))
            or (isinstance(n, ast.Call) and "atomic" in ast.unparse(n.func))
            for n in ast.walk(self.source.tree))
        self.pure_candidate = (len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None
                               and all(isinstance(t, DataType) for _, t in self.params))
        self.__doc__ = fn.__doc__
        self.__name__ = self.name
        self.__qualname__ = fn.__qualname__
        self.__wrapped__ = fn

    @property
    def param_types(self) -> list[tuple[str, DataType]]:
        return [(p, t) for p, t in self.params if isinstance(t, DataType)]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise FrontendError(f"{self.name} is a @vyre.func: it runs only inside a kernel. Fix: call it "
                            "from a @vyre.kernel function (or call the undecorated Python function)")

    def __repr__(self) -> str:
        return f"<vyre.func {self.__qualname__}>"


class KernelFunction:
    """A ``@vyre.kernel`` function: ``.program`` is the validated IR; calling it dispatches.

    ``k(x, y, out)`` or ``k(x=..., y=..., out=...)`` equals ``vyre.dispatch(k.program, {...})``;
    keyword arguments that are not parameters (``backend=``, ``grid=``, ...) pass through to
    :func:`vyre.dispatch`. Scalar parameters take Python numbers."""

    def __init__(self, fn: Any, workgroup_size: int | Sequence[int]) -> None:
        self.fn = fn
        self.name: str = fn.__name__
        self.source = read_source(fn, "@vyre.kernel")
        env = _env(fn)
        params = _params(self.source, env, "@vyre.kernel", required=True)
        refs: list[BufRef] = []
        for name, ann in params:
            if isinstance(ann, _ArrayType):
                assert isinstance(ann.element, DataType)
                refs.append(BufRef(name, ann.element, ann.kind, ann.count))
            else:
                assert isinstance(ann, DataType)
                refs.append(BufRef(name, ann, "scalar"))
        self.params: tuple[BufRef, ...] = tuple(refs)
        self._order = tuple(p.name for p in refs)
        self._names = frozenset(self._order)
        self.program: Program = lower_kernel(self.source, env, refs, _wg3(workgroup_size, self.source))
        self.__doc__ = fn.__doc__
        self.__name__ = self.name
        self.__qualname__ = fn.__qualname__
        self.__wrapped__ = fn

    def inputs(self, *args: Any, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """Split a call's arguments into dispatch inputs (by parameter name) and dispatch options."""
        order = self._order
        if len(args) > len(order):
            raise DispatchError(f"{self.name}() takes {len(order)} arguments, got {len(args)}. "
                                f"Fix: pass {', '.join(order)}")
        given = dict(zip(order, args, strict=False))
        options: dict[str, Any] = {}
        for k, v in kwargs.items():
            if k in self._names:
                if k in given:
                    raise DispatchError(f"{self.name}() got `{k}` twice. Fix: pass it once")
                given[k] = v
            else:
                options[k] = v
        if options:
            accepted = _dispatch_options()
            unknown = [k for k in options if k not in accepted]
            if unknown:
                raise DispatchError(f"{self.name}() got unknown argument(s) {unknown}; parameters are "
                                    f"{list(order)} and dispatch options {sorted(accepted)}. "
                                    "Fix: check the names")
        return given, options  # dispatch turns numbers for scalar parameters into arrays

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        inputs, options = self.inputs(*args, **kwargs)
        return _dispatch()(self.program, inputs, **options)  # type: ignore[no-any-return]

    def __str__(self) -> str:
        return str(self.program)

    def __repr__(self) -> str:
        return f"<vyre.kernel {self.__qualname__}: {len(self.params)} params>"


@functools.cache
def _dispatch() -> Any:
    from ..driver.dispatch import dispatch

    return dispatch


@functools.cache
def _dispatch_options() -> frozenset[str]:
    """The keyword options ``vyre.dispatch`` accepts (whatever it grows: grid=, dim=, ...)."""
    from ..driver.dispatch import dispatch

    params = inspect.signature(dispatch).parameters
    return frozenset(k for k, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY)


def _wg3(wg: int | Sequence[int], src: Source) -> tuple[int, int, int]:
    sizes = (wg,) if isinstance(wg, int) else tuple(wg)
    if not sizes or len(sizes) > 3 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in sizes):
        raise FrontendError(f"workgroup_size={wg!r} is not 1 to 3 positive ints. Fix: e.g. "
                            "@vyre.kernel(workgroup_size=128) or (16, 16)", src.filename, src.tree.lineno)
    s3 = (*sizes, 1, 1)[:3]
    return (s3[0], s3[1], s3[2])


def kernel_in_file(spec: str) -> KernelFunction:
    """``path.py:name`` (or ``path.py`` defining one kernel): run the file as a script, as the CLI
    does for ``vyre show kernels.py:chain``, and return that ``@vyre.kernel``."""
    import runpy
    from pathlib import Path

    path, _, name = spec.rpartition(".py:") if ".py:" in spec else (spec[:-3], "", "")
    file = Path(path + ".py")
    if not file.exists():
        raise DispatchError(f"no file {str(file)!r}. Fix: pass the path of a Python file, e.g. kernels.py:chain")
    ns = runpy.run_path(str(file), run_name="__vyre_show__")
    kernels = {k: v for k, v in ns.items() if isinstance(v, KernelFunction)}
    if name:
        if name not in kernels:
            raise DispatchError(f"{file} defines no @vyre.kernel {name!r}; it defines {sorted(kernels)}. "
                                "Fix: pick one of those")
        return kernels[name]
    if len(kernels) != 1:
        raise DispatchError(f"{file} defines {len(kernels)} kernels {sorted(kernels)}. Fix: name one: "
                            f"{file}:{next(iter(sorted(kernels)), 'name')}")
    return next(iter(kernels.values()))


def program_of(obj: Any) -> Program:
    """A Program, or the program of a ``@vyre.kernel`` function (:func:`vyre.ir.program.program_of`)."""
    return _program_of(obj, DispatchError)


def grad(kernel_or_program: Any, wrt: str | Sequence[str], outputs: str | Sequence[str] | None = None,
         **options: Any) -> Program:
    """The backward program of a kernel or program (``vyre.autodiff.grad``): ``wrt`` names the
    inputs (a name or a list), ``outputs`` the differentiated outputs (default: every output).

    >>> back = vyre.grad(chain, wrt=["x"])   # same as vyre.autodiff.grad(chain.program, ["out"], ["x"])
    """
    from ..autodiff import grad as ad_grad

    prog = program_of(kernel_or_program)
    outs = [b.name for b in prog.outputs] if outputs is None else names_list(outputs)
    return ad_grad(prog, outs, names_list(wrt), **options)


def names_list(names: str | Sequence[str] | Mapping[str, Any]) -> list[str]:
    """A name or a list of names, as a list."""
    if isinstance(names, str):
        return [names]
    return list(names)
