"""The interface every model component implements; the runtime calls nothing else.

Entry points are methods named after the `.walk` entry. They are batched: one
call receives every pending invocation of that entry across requests (and
across the lanes of a fused parallel block) and returns one result per call,
in order. Per-request state (KV pages per cache label) is the component's to
keep; the runtime tells it when a label forks, moves between ranks, or when a
request ends.

Start-up (runtime/worker/startup.py): the rank constructs each component (loading its weights),
then calls `capture` once per CaptureSpec of the plan on that rank, and only then reports ready.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, NamedTuple

from wgc.runtime.engines.capture_report import CaptureReport

from wgc.plan.model import ComponentSpec


class Call(NamedTuple):
    """One invocation of an entry point: whose, on which cache label, with which arguments.

    A NamedTuple rather than a dataclass: one is built per request per step, on the hot path.
    """

    request: int
    label: str  # "" means the component's default label
    args: tuple[Any, ...]
    budget: int = 0  # tokens the scheduler lets it write this round (0: all); see `demands`


class Partial:
    """The result of a call that wrote only part of its input this round (a chunk of a long prompt,
    under the scheduler's token budget): the instance stays at its RUN and calls again next round."""

    def __repr__(self) -> str:
        return "PARTIAL"


PARTIAL = Partial()


class CallError(Exception):
    """Raised by an entry that can tell which call is bad: only that call's request fails, with this
    message (which names the request's own input, never another request), and the rest of the batch
    is run again without it."""

    def __init__(self, request: int, message: str) -> None:
        super().__init__(message)
        self.request = request


class Component:
    """Base class. Subclasses define entry methods `def decode(self, calls: list[Call]) -> list[Any]`.

    An entry returns one result per call, in order, and each result is data the codec
    (runtime/protocol/codec.py) can send to any rank, whatever the placement:

    - None, bool, int, float, str, bytes;
    - a torch tensor, on any device (it travels as its CPU bytes and arrives as a CPU tensor);
    - a numpy array: `call` turns it into a tensor with torch.from_numpy (copied first when it is
      not C-contiguous or not writable); a numpy scalar becomes the Python scalar (`.item()`);
    - a list, tuple, dict or set of these, nested as deep as needed (a tuple arrives as a list on
      another rank, a set as a frozenset);
    - PARTIAL, for a call that wrote only part of its input this round.

    Anything else (an object-dtype array, a dtype torch cannot hold, any other object) fails in
    `call` with a TypeError naming `component.entry`, the request and what it returned.
    """

    def __init__(self, spec: ComponentSpec, rank: int, device: str) -> None:
        self.spec = spec
        self.rank = rank
        self.device = device

    @classmethod
    def tiny(cls, spec: ComponentSpec, rank: int, device: str) -> Component:
        """The preset tests and CPU demos run: random weights, seconds on two cores."""
        return cls(spec, rank, device)

    def call(self, entry: str, calls: list[Call]) -> list[Any]:
        method = getattr(self, entry, None)
        if method is None:
            raise NotImplementedError(f"{type(self).__name__} has no entry point `{entry}`")
        out = method(calls)
        if len(out) != len(calls):
            raise RuntimeError(f"{self.spec.name}.{entry} returned {len(out)} results for {len(calls)} calls")
        for i, value in enumerate(out):
            if type(value) in _PLAIN:  # the hot path: one type check per result
                continue
            try:
                sendable = portable(value)
            except Unsendable as bad:
                inside = " (inside its result)" if bad.value is not value else ""
                raise UnsendableResult(calls[i].request, f"{self.spec.name}.{entry} returned {bad.what}{inside} "
                                       f"for request {calls[i].request}{bad.why}") from None
            if sendable is not value:
                out = out if isinstance(out, list) else list(out)
                out[i] = sendable
        return out

    def default_label(self) -> str:
        return self.spec.labels[0] if self.spec.labels else "default"

    def describe(self) -> str:
        """What was loaded, for the start-up log (`tiny preset, random weights`, a weights directory)."""
        return ""

    # ---- start-up: warm-up, CUDA graphs -----------------------------------------------------

    def warm_up(self, progress: Callable[[str], None]) -> None:
        """Run the shapes this component will see once, before the rank reports ready, so that no
        request pays a first-call cost (a CPU convolution builds its kernels per input shape:
        100-200 ms for each new batch size). `progress` takes one line per step. Default: nothing."""


    def capture(self, entry: str, walk: str, buckets: list[int], progress: Callable[[str], None]) -> CaptureReport:
        """Capture CUDA graphs of `entry` (as `walk` runs it) for these batch buckets, largest first,
        before the rank reports ready; `progress` takes one line per step. A bucket that fails is
        reported, not raised. The default: the entry runs eagerly."""
        where = "not on CUDA" if not self.device.startswith("cuda") else f"{type(self).__name__} captures no graphs"
        return CaptureReport.eager_only(f"{where}: {self.spec.name}.{entry} runs eagerly")

    # ---- per-request state: kv components override these ---------------------------

    def fork(self, request: int, target: str, source: str) -> None:
        """Make label `target` a snapshot of label `source` for this request."""

    def export_label(self, request: int, label: str) -> Any:
        """The label's state, to ship to another rank (a plain value or tensors)."""
        return None

    def import_label(self, request: int, label: str, state: Any) -> None:
        """Install a label's state shipped from another rank."""

    def checkpoint(self, request: int, label: str) -> Any:
        """Remember a label's extent before a speculative step (a KV cache: its length)."""
        return None

    def restore(self, request: int, label: str, checkpoint: Any) -> None:
        """Undo a speculative step that turned out to be past the loop's stop."""

    def release(self, request: int) -> None:
        """The request ended or was cancelled: free everything it holds."""

    # ---- memory-aware scheduling: kv components override these (runtime/engines/kv_component.py) --

    def demands(self, entry: str, calls: list[Call]) -> list[Any] | None:
        """One `scheduler.Demand` per call (tokens to write, pages they take, a limit it can never
        meet), or None: the entry takes no pool memory and every call runs as it comes."""
        return None

    def preempt(self, request: int) -> int:
        """Give back the request's pages, keeping what is needed to resume it exactly; pages freed."""
        return 0

    def pool_holders(self) -> dict[int, int]:
        """Pages held per request in this component's pool (whom the scheduler may preempt)."""
        return {}

    def pool_free(self) -> int:
        """Free pages in this component's pool."""
        return 0

    def counters(self) -> dict[str, int]:
        """Live resource counts (pages, labels, requests) for health reporting and leak tests."""
        return {}


_PLAIN = frozenset({int, float, bool, str, bytes, type(None), Partial})
_SENDS = ("; an entry returns None, bool, int, float, str, bytes, tensors, numpy arrays, "
          "or lists, tuples, dicts and sets of them")


class UnsendableResult(CallError, TypeError):
    """An entry returned something the codec cannot send for one call: that call's request fails."""


class Unsendable(Exception):
    """A value (or a part of it) the codec cannot send: `what` it is and `why`."""

    def __init__(self, value: Any, what: str, why: str) -> None:
        super().__init__(what + why)
        self.value, self.what, self.why = value, what, why


def portable(value: Any) -> Any:
    """`value` as the codec can send it: numpy arrays (also inside containers) as tensors, numpy
    scalars as Python scalars; the value itself when nothing needed converting. Unsendable otherwise."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind.__module__.startswith("torch"):
        import torch

        if isinstance(value, torch.Tensor):
            return value
    elif kind.__module__ == "numpy":
        import numpy as np

        if isinstance(value, np.ndarray):
            return _from_numpy(value)
        if isinstance(value, np.generic) and value.dtype.kind in "biufcSU":
            return portable(value.item())
    elif kind in (list, tuple, set, frozenset):
        items = [portable(v) for v in value]
        return value if all(a is b for a, b in zip(items, value)) else kind(items)
    elif kind is dict:
        pairs = [(portable(k), portable(v)) for k, v in value.items()]
        return value if all(k is a and v is b for (k, v), (a, b) in zip(pairs, value.items())) else dict(pairs)
    raise Unsendable(value, f"a {kind.__name__}", ", which cannot be sent between ranks" + _SENDS)


def _from_numpy(array: Any) -> Any:
    import numpy as np
    import torch

    if array.dtype.hasobject:
        raise Unsendable(array, "a numpy array of dtype object",
                         ": an object array is not data; return a tensor, or lists of numbers or strings")
    if not (array.flags.c_contiguous and array.flags.writeable):
        array = np.array(array, order="C")  # a copy: torch.from_numpy takes no negative strides, warns on read-only
    try:
        return torch.from_numpy(array)
    except TypeError:
        raise Unsendable(array, f"a numpy array of dtype {array.dtype}", ", which torch cannot hold" + _SENDS) from None


def load_class(path: str) -> type[Component]:
    """`package.module.Class` → the class; a clear error naming what is missing."""
    module_name, _, class_name = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ImportError(f"component class {path}: cannot import {module_name} ({err})") from err
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Component)):
        raise ImportError(f"component class {path}: {module_name} has no Component subclass {class_name}")
    return cls
