"""How a case fails on one side: a ``CaseFailure`` carries the message, what kind of failure it
is, and, when a forward raised, where (``raised_in``).

Kinds:

- ``setup``: the case could not be set up: a spec reference that names no code the side may use,
  a migrated tree without the model's code, a checkpoint that does not fit. The CLI adds the
  configuration-error bit to its exit code.
- ``not supported``: the emulation cannot run the model (graph capture, an API the emulated
  device does not provide, an op the backing device does not implement on the original side).
- ``error``: anything else the side's code raised: importing, building or running the model.
- ``timed out``: the run exceeded its time limit and was stopped (``parity.run``).

A raise in the forward or the training step is localised: the innermost module whose forward
raised (``ModuleRecorder``), the op that raised (the op trace, on the migrated side), and the
innermost frame of the tree's own code.
"""

from __future__ import annotations

import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from npu_migrate.migrate.parity.coverage import OpTrace, exception_chain
from npu_migrate.migrate.parity.resolve import inside

SETUP, UNSUPPORTED, ERROR = "setup", "not supported", "error"
TIMED_OUT = "timed out"
RAISED = "raised"  # a case verdict: the migrated model raised in its forward or training step
TRACEBACK_FRAMES = 3
NOT_EMULATED = "is not emulated"  # the emulated device's words for an API it does not provide


class CaseFailure(Exception):
    """A stage of a case failed; ``message`` says which and why, ``cause`` is what was raised."""

    def __init__(self, message: str, kind: str = ERROR, raised_in: Optional[Dict[str, Any]] = None,
                 cause: Optional[BaseException] = None):
        super().__init__(message)
        self.message, self.kind, self.raised_in, self.cause = message, kind, raised_in, cause

    def for_side(self, side: str) -> "CaseFailure":
        """This failure, classed ``not supported`` when its cause says the side cannot run the model."""
        if self.kind == ERROR and self.cause is not None and unsupported(self.cause, side):
            stage_name, _, tail = self.message.partition(": ")
            message = f"not supported ({stage_name}): {tail}"
            return CaseFailure(message, UNSUPPORTED, self.raised_in, self.cause)
        return self

    def to_json(self) -> Dict[str, Any]:
        return {"error": self.message, "kind": self.kind, "raised_in": self.raised_in}


def _describe(what: str, exc: BaseException) -> str:
    lines = traceback.format_exception(exc)
    tail = "".join(lines[-(TRACEBACK_FRAMES + 1):]).rstrip()
    return f"{what}: {type(exc).__name__}: {exc}\n{tail}"


def unsupported(exc: BaseException, side: str) -> bool:
    """True when ``exc`` says the emulation (or, on the original side, the backing device) cannot
    run the model, rather than that the model's code is wrong."""
    from npu_migrate.kernels.npu_api import NotEmulatedError

    for error in exception_chain(exc):
        if isinstance(error, NotEmulatedError) or (isinstance(error, AttributeError) and NOT_EMULATED in str(error)):
            return True
        if side == "original" and isinstance(error, NotImplementedError):
            return True
    return False


@contextmanager
def stage(what: str, kind: str = ERROR, locate: Optional[Callable[[BaseException], Dict[str, Any]]] = None):
    """Turn any exception in the block into a ``CaseFailure`` with the traceback's tail; ``locate``
    says where in the model it was raised."""
    try:
        yield
    except CaseFailure:
        raise
    except BaseException as exc:  # noqa: BLE001  (user code may raise anything, even SystemExit)
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise CaseFailure(_describe(what, exc), kind, locate(exc) if locate else None, exc) from None


def raised_where(exc: BaseException, side: str, recorder, trace: Optional[OpTrace], tree: Path) -> Dict[str, Any]:
    """``{side, module, call, op, at, error}`` for an exception that escaped the model."""
    found = recorder.raised_in(exc)
    op = None
    if trace is not None and trace.raised is not None and any(e is trace.raised[1] for e in exception_chain(exc)):
        op = trace.raised[0]
    root = list(exception_chain(exc))[-1]
    return {
        "side": side,
        "module": found[0] if found else None,
        "call": found[1] if found else None,
        "op": op,
        "at": _innermost_frame(root, tree),
        "error": f"{type(root).__name__}: {root}".splitlines()[0],
    }


def _innermost_frame(exc: BaseException, tree: Path) -> Optional[str]:
    """``file:line in function`` of the innermost frame in the tree's own code (else the last)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return None
    tree = tree.resolve()
    own = [f for f in frames if inside(Path(f.filename).resolve(), tree)]
    frame = (own or frames)[-1]
    return f"{Path(frame.filename).resolve().relative_to(tree) if own else frame.filename}:{frame.lineno} in {frame.name}"
