"""The ``vyre`` command line: demo, info, show."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import VyreError
from .ir import Program


def load_program(spec: str) -> Program:
    """A built-in example name, a ``.vyre`` text file, or a wire-format file."""
    from .examples import EXAMPLES

    if spec in EXAMPLES:
        return EXAMPLES[spec]()
    path = Path(spec)
    if not path.exists():
        raise VyreError(f"{spec!r} is neither a built-in example ({', '.join(EXAMPLES)}) nor a file. "
                        "Fix: pass an example name or the path of a .vyre / wire file")
    data = path.read_bytes()
    if data.startswith(b"VYRE"):
        return Program.from_wire(data)
    from .ir.parser import parse_program

    return parse_program(data.decode("utf-8", errors="replace"))


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import format_rows, run_demo
    from .driver.backends import default_backend

    backend = args.backend or default_backend()
    rows = run_demo(backend, args.n)
    print(format_rows(rows, backend))
    return 0 if all(r.ok for r in rows) else 1


def cmd_info(args: argparse.Namespace) -> int:
    import platform

    import numba
    import numpy as np

    from . import __version__
    from .driver.backends import BACKENDS, cuda_available, default_backend, simulator_enabled
    from .settings import cache_root, read_settings

    s = read_settings()
    print(f"vyre {__version__}  python {platform.python_version()}  numpy {np.__version__}  numba {numba.__version__}")
    try:
        from importlib.metadata import version

        print(f"numba-cuda {version('numba-cuda')}")
    except Exception:
        print("numba-cuda not installed (pip install 'vyre[cuda]')")
    avail = {"cpu": True, "interp": True, "cuda": cuda_available(), "cudasim": simulator_enabled()}
    print("backends: " + ", ".join(f"{b}{'' if avail[b] else ' (unavailable)'}" for b in BACKENDS))
    print(f"default backend: {default_backend()}")
    if avail["cuda"]:
        from numba import cuda

        dev = cuda.get_current_device()
        print(f"device: {dev.name!r} cc {dev.compute_capability}")
    print(f"cache root: {cache_root()}")
    print(f"tuner mode: {s.autotuner.value}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    prog = load_program(args.program)
    prog.validate()
    print(str(prog))
    if not args.ir_only:
        print()
        if args.backend == "cuda":
            from .codegen.cuda import emit_cuda

            print(emit_cuda(prog))
        else:
            from .codegen.cpu import emit_cpu

            print(emit_cpu(prog))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vyre", description="vyre: a Python JIT kernel compiler")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="build, compile, run, differentiate and check a workload")
    d.add_argument("--backend", choices=["cuda", "cpu", "interp", "cudasim"], default=None)
    d.add_argument("--n", type=int, default=None, help="problem size (elements)")
    d.set_defaults(fn=cmd_demo)
    i = sub.add_parser("info", help="backends, device, versions, cache and tuner state")
    i.set_defaults(fn=cmd_info)
    s = sub.add_parser("show", help="print a program's IR and generated source")
    s.add_argument("program", help="built-in example name, .vyre file or wire file")
    s.add_argument("--backend", choices=["cuda", "cpu"], default="cpu")
    s.add_argument("--ir-only", action="store_true")
    s.set_defaults(fn=cmd_show)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except VyreError as e:
        print(f"vyre: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
