"""vyre.torch.function: programs as differentiable PyTorch functions (CPU tensors; CUDA in the GPU bench)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

torch = pytest.importorskip("torch")

import vyre.torch as vt  # noqa: E402
from tests.autodiff_strategies import Case, programs  # noqa: E402
from vyre.autodiff import promote_f64, vjp  # noqa: E402
from vyre.examples import fused_chain  # noqa: E402
from vyre.ir import F64, Program, buflen, f64, gid, if_, let, output, read, store, var  # noqa: E402


def _pair(n: int = 40, seed: int = 0) -> tuple[object, object]:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, dtype=torch.float64, generator=g).requires_grad_(),
            torch.rand(n, dtype=torch.float64, generator=g).requires_grad_())


def test_forward_and_gradients_match_pytorch() -> None:
    f = vt.function(promote_f64(fused_chain()), inputs=["x", "y"], outputs=["out"])
    x, y = _pair()
    out = f(x, y)
    ref_x, ref_y = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
    ref = torch.exp(ref_x) * ref_y + torch.sin(ref_x) * ref_x
    torch.testing.assert_close(out, ref.detach())
    (out * torch.arange(40.0, dtype=torch.float64)).sum().backward()
    (ref * torch.arange(40.0, dtype=torch.float64)).sum().backward()
    torch.testing.assert_close(x.grad, ref_x.grad)
    torch.testing.assert_close(y.grad, ref_y.grad)


def test_gradcheck_float64_on_the_cpu_backend() -> None:
    f = vt.function(promote_f64(fused_chain()), inputs=["x", "y"], outputs=["out"])
    assert torch.autograd.gradcheck(f, _pair(16))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_gradcheck_on_random_programs(case: Case) -> None:
    # gathers through idx (a u32 input, no gradient), loops, branches, early returns
    names = ["x", "y", "idx", "w", "nb"]
    f = vt.function(case.program, inputs=names, outputs=["out"], backend="interp")
    ts = [torch.from_numpy(case.inputs[n].copy()) for n in names]
    ts[0].requires_grad_()
    ts[1].requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: f(a, b, *ts[2:]), (ts[0], ts[1]), atol=1e-6, rtol=1e-5)
    # and the same gradients as vyre's own vjp
    out = f(*ts)
    u = torch.linspace(-1, 1, out.numel(), dtype=torch.float64)
    gx, gy = torch.autograd.grad((out * u).sum(), (ts[0], ts[1]))
    ref = vjp(case.program, case.inputs, {"out": u.numpy()}, ["x", "y"], backend="interp")
    np.testing.assert_allclose(gx.numpy(), ref["x"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gy.numpy(), ref["y"], rtol=1e-12, atol=1e-12)


def _two_outputs() -> Program:
    x, a, b = read("x", 0, F64), output("a", 1, F64), output("b", 2, F64)
    i = var("i")
    return Program.wrapped([x, a, b], 64, [let("i", gid()), if_(i.lt(buflen(a)), [
        store(a, i, x[i] * x[i]), store(b, i, x[i] * f64(3.0))])])


def test_several_outputs_and_an_unused_one() -> None:
    f = vt.function(_two_outputs(), inputs=["x"], outputs=["a", "b"])
    x = torch.rand(10, dtype=torch.float64, requires_grad=True)
    a, b = f(x)
    torch.testing.assert_close(b, 3 * x.detach())
    a.sum().backward()  # b's cotangent is None: taken as zero
    torch.testing.assert_close(x.grad, 2 * x.detach())
    assert torch.autograd.gradcheck(lambda t: f(t), (x.detach().clone().requires_grad_(),))


def test_torch_compile_traces_it_without_a_graph_break() -> None:
    import torch._dynamo as dynamo

    f = vt.function(promote_f64(fused_chain()), inputs=["x", "y"], outputs=["out"])

    def step(a: object, b: object) -> object:
        return (f(a, b) * 2).sum()

    x, y = _pair(32, seed=1)
    explained = dynamo.explain(step)(x, y)
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    loss = compiled(x, y)
    loss.backward()
    gx, gy = x.grad.clone(), y.grad.clone()
    x.grad = y.grad = None
    step(x, y).backward()
    torch.testing.assert_close(gx, x.grad)
    torch.testing.assert_close(gy, y.grad)


def test_bad_requests_are_clear_errors() -> None:
    prog = promote_f64(fused_chain())
    with pytest.raises(vt.TorchFunctionError, match="unknown buffer 'z'"):
        vt.function(prog, inputs=["x", "z"], outputs=["out"])
    with pytest.raises(vt.TorchFunctionError, match="read-only"):
        vt.function(prog, inputs=["x"], outputs=["y"])
    with pytest.raises(vt.TorchFunctionError, match="neither an input nor an output"):
        vt.function(prog, inputs=["x"], outputs=["out"])
    f = vt.function(prog, inputs=["x", "y"], outputs=["out"])
    with pytest.raises(vt.TorchFunctionError, match="expected 2 tensors"):
        f(torch.zeros(3, dtype=torch.float64))
    with pytest.raises(vt.TorchFunctionError, match=r"not a torch\.Tensor"):
        f(torch.zeros(3, dtype=torch.float64), np.zeros(3))
