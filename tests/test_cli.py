"""The ``vyre`` command line: tune, analyze, info (and show)."""

from __future__ import annotations

import io
import shutil
import sys
import tomllib
import types
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from vyre import cli
from vyre.tuning import autotune
from vyre.tuning.autotune import DecisionSource, Launch, TuneOutcome
from vyre.examples import fused_chain
from vyre.settings import Mode

N = str(1 << 13)


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vyre-cli-cache")


@pytest.fixture
def env(cache_root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("VYRE_CACHE_DIR", str(cache_root))
    monkeypatch.setenv("VYRE_AUTOTUNER", "off")
    shutil.rmtree(cache_root / "tuner", ignore_errors=True)
    autotune.reset()
    yield cache_root
    autotune.reset()


def tuner_entries(root: Path) -> dict[str, list[int]]:
    (path,) = (root / "tuner").glob("*.toml")
    return tomllib.loads(path.read_text())


def test_tune_prints_a_table_saves_the_decision_and_reports_progress(
        env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["tune", "saxpy", "--n", N, "--backend", "cpu", "--repeats", "2"]) == 0
    cap = capsys.readouterr()
    # 8192 invocations: chunks of 64, 256, 1024, 2048 and 4096, and the serial entry
    assert "saxpy on cpu" in cap.out and "mode on, 6 measurements" in cap.out
    assert cap.out.count("us") >= 6 and "<- decision" in cap.out and "(sweep), saved to" in cap.out
    # not a terminal: one plain progress line per measurement
    assert [line.split("]")[0] for line in cap.err.splitlines()] == [f"[{i}/6" for i in range(1, 7)]
    outcome = autotune.recent_outcomes()[-1]
    assert tuner_entries(env) == {outcome.key: [outcome.launch.wg, outcome.launch.ipt, 1]}
    assert cli.main(["info"]) == 0
    info = capsys.readouterr().out
    assert "tuner mode: off" in info and "(1 cached decision)" in info and str(env / "tuner") in info


def test_tune_accepts_wire_files_and_shaped_examples(env: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    wire = tmp_path / "chain.wire"
    wire.write_bytes(fused_chain().to_wire())
    assert cli.main(["tune", str(wire), "--n", N, "--backend", "cpu", "--repeats", "1"]) == 0
    assert "8192 invocations" in capsys.readouterr().out
    inputs, grid = cli.tuning_problem("matvec", cli.load_program("matvec"), 1000)
    assert inputs["m"].size == 64_000 and inputs["v"].size == 64 and inputs["out"].size == 1000
    assert grid is None
    inputs, grid = cli.tuning_problem("histogram", cli.load_program("histogram"), 1000)
    assert inputs["keys"].size == 1000 and inputs["counts"].size == 256 and grid == (8, 1, 1)
    assert not inputs["counts"].any() and inputs["keys"].dtype == np.uint32


def test_tune_natural_mode(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["tune", "fused_chain", "--n", N, "--backend", "cpu", "--mode", "natural",
                     "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "mode natural" in out and "(natural), saved to" in out


def test_tune_refuses_untunable_programs_and_backends(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["tune", "block_sum", "--backend", "cpu"]) == 2
    assert "not tunable" in capsys.readouterr().err
    assert cli.main(["tune", "nonexistent_example"]) == 2
    assert "Fix:" in capsys.readouterr().err


def test_plot_needs_matplotlib_or_writes_a_png(env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    png = tmp_path / "lat.png"
    args = ["tune", "saxpy", "--n", N, "--backend", "cpu", "--repeats", "1", "--plot", str(png)]
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "needs matplotlib" in err and "Fix: pip install matplotlib" in err and not png.exists()
    monkeypatch.delitem(sys.modules, "matplotlib")
    if not _has_matplotlib():
        return
    assert cli.main(args) == 0 and png.read_bytes().startswith(b"\x89PNG")


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def test_outcome_table_marks_failed_and_unmeasured_candidates() -> None:
    cands = (Launch(1024, 1), Launch(1024, 2), Launch(1024, 4))
    o = TuneOutcome("cpu", "v1-x", 4096, Mode.NATURAL_GRADIENT, DecisionSource.NATURAL, cands[0], cands,
                    ((cands[0], 2000.0), (cands[1], float("inf"))))
    lines = cli.outcome_table(o).splitlines()
    assert "2.0 us" in lines[2] and "1.000" in lines[2] and "<- decision" in lines[2]
    assert "failed" in lines[3] and "not measured" in lines[4]


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_without_tqdm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)
    stream = FakeTTY()
    p = cli.Progress(2, stream)
    p(1, Launch(64, 2), 1500.0)
    p(2, Launch(64, 4), float("inf"))
    p.close()
    text = stream.getvalue()
    assert text.startswith("\r[##########..........] 1/2 wg=64 ipt=2: 1.5 us")
    assert "2/2 wg=64 ipt=4: failed" in text and text.endswith("\n")


def test_progress_uses_tqdm_on_a_terminal_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, object]] = []

    class Bar:
        def __init__(self, **kw: object) -> None:
            calls.append(("init", kw["total"]))

        def set_postfix_str(self, s: str) -> None:
            calls.append(("postfix", s))

        def update(self, k: int) -> None:
            calls.append(("update", k))

        def close(self) -> None:
            calls.append(("close", None))

    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=Bar))
    p = cli.Progress(3, FakeTTY())
    p(1, Launch(32, 1), 10.0)
    p.close()
    assert calls == [("init", 3), ("postfix", "wg=32 ipt=1: 0.0 us"), ("update", 1), ("close", None)]


def test_analyze_prints_the_report_and_writes_dot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dot = tmp_path / "p.dot"
    assert cli.main(["analyze", "demo-pipeline", "--dot", str(dot), "--backend", "interp"]) == 0
    out = capsys.readouterr().out
    assert "dispatch graph: 2 programs" in out and "fused_chain_grad" in out
    assert dot.read_text().startswith("digraph pipeline {")
    assert cli.main(["analyze", "fused_chain", "saxpy", "fused_chain", "--backend", "interp"]) == 0
    out = capsys.readouterr().out
    assert "dispatch graph: 3 programs" in out and "fused_chain#2" in out


def test_show_still_prints_ir_and_source(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["show", "saxpy", "--ir-only"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("program wg(256, 1, 1) {") and "buffer out: f32" in out


def test_show_a_kernel_from_a_python_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "kernels.py"
    f.write_text("import vyre\nfrom vyre import Array, f32\n\n@vyre.kernel\n"
                 "def double(x: Array[f32], out: Array[f32]):\n    out[vyre.gid()] = x[vyre.gid()] * 2.0\n\n"
                 "@vyre.kernel\ndef triple(x: Array[f32], out: Array[f32]):\n"
                 "    out[vyre.gid()] = x[vyre.gid()] * 3.0\n")
    assert cli.main(["show", f"{f}:triple", "--ir-only"]) == 0
    assert "out[gid(0)] = (x[gid(0)] * 3.0f32)" in capsys.readouterr().out
    assert cli.main(["show", str(f), "--ir-only"]) == 2
    assert "Fix: name one" in capsys.readouterr().err


def test_show_prints_the_nvrtc_routes_cxx(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["show", "saxpy", "--backend", "cuda-c"]) == 0
    out = capsys.readouterr().out
    assert 'extern "C" __global__ void vyre_kernel(' in out and "vy_interleaved" in out
