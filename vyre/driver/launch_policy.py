"""The launch-policy hook: how a flat kernel's launch knobs are chosen for one call.

The driver calls the installed policy after a call's arguments are checked and bound; the
autotuner registers itself as the policy (the driver imports nothing of it), and with no policy
every call runs the kernel's default launch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import DispatchError

if TYPE_CHECKING:
    from .dispatch import Kernel, Launch

__all__ = ["MIN_TUNE_INVOCATIONS", "LaunchPolicy", "choose_launch", "launch_policy", "measurable",
           "set_launch_policy"]

#: ``policy(kernel, arrays, invocations) -> Launch | None``: the launch of a flat kernel for one
#: call. ``arrays`` maps every storage buffer to its checked, bound array (numpy on the CPU, a
#: numba device array on CUDA); None means the kernel's default launch. See
#: :func:`set_launch_policy`.
LaunchPolicy = Callable[["Kernel", Mapping[str, Any], int], "Launch | None"]
_policy: LaunchPolicy | None = None
#: The autotuner measures nothing below this many invocations (launch overhead dominates any
#: choice there), unless a CPU call's estimated work reaches ``dispatch.PARALLEL_MIN_WORK``.
MIN_TUNE_INVOCATIONS = 1 << 15


def set_launch_policy(policy: LaunchPolicy | None) -> LaunchPolicy | None:
    """Install the launch policy flat kernels consult on every checked call (None: every call runs
    the kernel's default launch) and return the previous one. The autotuner (``vyre.tuning``)
    registers itself here when imported; the driver itself imports nothing of it. The policy runs
    after the arguments have been checked and bound, so it never sees a bad call."""
    global _policy
    if policy is not None and not callable(policy):
        raise DispatchError(f"a launch policy must be callable, got {type(policy).__name__}. "
                            "Fix: pass policy(kernel, arrays, invocations) -> Launch | None, or None")
    previous, _policy = _policy, policy
    return previous


def measurable(kernel: Kernel, arrays: Mapping[str, Any], invocations: int) -> bool:
    """Would a tuner measure this call? Not below :data:`MIN_TUNE_INVOCATIONS` (launch overhead
    dominates any choice), unless a CPU call's estimated work reaches ``PARALLEL_MIN_WORK`` (few
    heavy invocations, such as the rows of a softmax), counting a transcendental call as one
    statement: its weight in the serial-or-parallel choice would have a short chain of ``exp`` over
    16K elements measured for a second and a half on its first call."""
    if invocations >= MIN_TUNE_INVOCATIONS:
        return True
    if kernel.backend != "cpu":
        return False
    from .dispatch import PARALLEL_MIN_WORK
    from .work import work_per_invocation

    return invocations * work_per_invocation(kernel.program, arrays, libm=False) >= PARALLEL_MIN_WORK


def launch_policy() -> LaunchPolicy | None:
    """The installed launch policy (None: default launches)."""
    return _policy


def choose_launch(kernel: Kernel, arrays: Mapping[str, Any], invocations: int) -> Launch | None:
    """The launch policy's choice for this call (None without a policy)."""
    policy = _policy
    if policy is None or kernel.backend not in ("cpu", "cuda"):
        return None
    return policy(kernel, arrays, invocations)
