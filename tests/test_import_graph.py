"""The package graph: no import circle spans vyre's packages, and the driver knows nothing of the
tuner. Every import counts, including function-local and ``TYPE_CHECKING`` ones (those are how
the old circle was held together)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "vyre"
WATCHED = ("driver", "tuning", "primitives", "self_substrate")


def _package_of(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "vyre":
        return None
    return parts[1] if (ROOT / parts[1]).is_dir() else None


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Absolute names of every vyre module ``path`` imports, anywhere in the file."""
    me = _module_name(path)
    pkg = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[: len(pkg) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)  # `from . import x` names a module
    return {m for m in out if m.startswith("vyre")}


def package_graph() -> dict[str, set[str]]:
    """Edges between vyre's subpackages (a package importing itself is not an edge)."""
    graph: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        src = _package_of(_module_name(path))
        if src is None:
            continue
        for mod in _imports(path):
            dst = _package_of(mod)
            if dst is not None and dst != src:
                graph.setdefault(src, set()).add(dst)
    return graph


def _reach(graph: dict[str, set[str]], start: str) -> dict[str, list[str]]:
    """Every package reachable from ``start``, with one path to it."""
    paths = {start: [start]}
    todo = [start]
    while todo:
        node = todo.pop()
        for nxt in graph.get(node, ()):
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                todo.append(nxt)
    return paths


def test_the_scanner_sees_function_local_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a probe module in a copy of the package: the real tree stays untouched for the tests that
    # scan it at the same time (the suite runs on several workers)
    copy = tmp_path / "vyre"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "driver" / "_probe_for_test.py").write_text(
        "def f():\n    from ..tuning import autotune\n    from . import cache\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", copy)
    assert "tuning" in package_graph()["driver"]


@pytest.mark.parametrize("package", WATCHED)
def test_no_import_circle_spans_two_of_the_watched_packages(package: str) -> None:
    # (other circles, such as driver <-> interp, are outside this rule)
    graph = package_graph()
    there = _reach(graph, package)
    for other in WATCHED:
        if other != package and other in there:
            back = _reach(graph, other)
            assert package not in back, f"import circle: {' -> '.join(there[other] + back[package][1:])}"


def test_the_driver_imports_nothing_of_the_tuner_or_the_self_hosted_programs() -> None:
    assert package_graph().get("driver", set()).isdisjoint({"tuning", "primitives", "self_substrate"})


def test_dispatch_works_with_the_tuner_absent(tmp_path: Path) -> None:
    # a process where vyre.tuning cannot be imported at all: flat kernels still dispatch (default
    # launch, the launch policy is removed) and nothing imported it
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'vyre.tuning' or name.startswith('vyre.tuning.'):\n"
        "            raise ImportError('tuner absent')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import numpy as np, vyre\n"
        "from vyre.driver.launch_policy import set_launch_policy\n"
        "set_launch_policy(None)\n"
        "from vyre.examples import saxpy\n"
        "n = 1 << 16\n"
        "x = np.arange(n, dtype=np.float32)\n"
        "out = vyre.dispatch(saxpy(), {'a': np.full(1, 2, np.float32), 'x': x, 'y': x, "
        "'out': np.empty_like(x)}, backend='cpu')['out']\n"
        "assert (out == 3 * x).all()\n"
        "assert not any(m.startswith('vyre.tuning') for m in sys.modules), sorted(sys.modules)\n"
        "print('ok')\n"
    )
    env = {"PYTHONPATH": str(ROOT.parent), "VYRE_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]
