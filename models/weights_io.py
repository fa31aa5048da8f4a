"""Reading local checkpoints, for every model family: safetensors headers checked against the
model's own parameters before any tensor is read, tensors then streamed one at a time into a model
built empty, and every problem one line (`WeightsError`) naming the file, the tensor and what is
wrong. Also the choice between a weights directory and a random tiny preset, and the one log line
a component writes about it.

A checkpoint is never held twice: `meta_module` builds the model on the meta device (the names and
shapes to check), `allocate` gives its parameters uninitialised memory on the target device, and `load_tensors` reads
each tensor once (`safe_open`, one tensor alive at a time) and copies it into its parameter in place.
`read_checkpoint` reads a directory's headers: its model.safetensors, or the shards its
model.safetensors.index.json names (each tensor in the shard the index places it in).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor, nn

from wgc import settings

FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")  # safetensors' names of the dtypes a weight may be stored in
INDEX = "model.safetensors.index.json"  # a sharded checkpoint's map of tensor name -> shard file
SINGLE = "model.safetensors"  # an unsharded checkpoint's one file


class WeightsError(ValueError):
    """A checkpoint that cannot be loaded; the message is one line naming what is wrong."""


class Entry(NamedTuple):
    """One tensor of a safetensors header: its file, shape and safetensors dtype ("BF16", ...)."""

    path: Path
    shape: tuple[int, ...]
    dtype: str


Found = Mapping[str, Entry]


class Part(NamedTuple):
    """The part of a whole tensor one reader keeps (a tensor-parallel rank): [start, end) along `dim`
    (0: rows, 1: columns)."""

    dim: int
    start: int
    end: int

    def of(self, t: Tensor) -> Tensor:
        """This part of a tensor in memory (a view)."""
        return t.narrow(self.dim, self.start, self.end - self.start)

    def read(self, piece: Any) -> Tensor:
        """This part of a safetensors slice (`safe_open(...).get_slice(name)`): only its bytes are read."""
        if self.dim == 0:
            return piece[self.start:self.end]
        return piece[:, self.start:self.end]


def one_line(err: BaseException, limit: int = 200) -> str:
    """A library's error message as one line (its first), cut to `limit` characters."""
    lines = str(err).strip().splitlines()
    text = lines[0] if lines else type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def names_list(names: list[str]) -> str:
    """'s a, b, c (and 4 more)' or ' a': the tail of 'missing tensor' for one name or several."""
    shown = ", ".join(names[:3])
    more = f" (and {len(names) - 3} more)" if len(names) > 3 else ""
    return f"{'s' if len(names) > 1 else ''} {shown}{more}"


def read_json(path: Path, missing: str) -> dict[str, Any]:
    """A JSON object from `path`; WeightsError `missing` when the file is absent, or naming bad JSON."""
    path = Path(path)
    if not path.is_file():
        raise WeightsError(missing)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise WeightsError(f"{path}: not readable JSON ({one_line(err)})") from None
    if not isinstance(raw, dict):
        raise WeightsError(f"{path}: expected a JSON object")
    return raw


@contextmanager
def opened(path: Path) -> Iterator[Any]:
    """`safe_open` of one file, its errors as one-line WeightsErrors naming the file."""
    try:
        with safe_open(str(path), framework="pt") as f:
            yield f
    except SafetensorError as err:
        raise WeightsError(f"{path}: corrupt safetensors file ({one_line(err)})") from None
    except OSError as err:
        raise WeightsError(f"{path}: cannot be read ({one_line(err)})") from None


def read_headers(files: Iterable[Path]) -> dict[str, Entry]:
    """name -> Entry from the files' headers (no tensor is read); a corrupt file or a name in two files
    is an error."""
    out: dict[str, Entry] = {}
    for path in files:
        with opened(path) as f:
            for name in f.keys():
                if name in out:
                    raise WeightsError(f"tensor {name} is in both {out[name].path.name} and {path.name}")
                piece = f.get_slice(name)
                out[name] = Entry(Path(path), tuple(piece.get_shape()), str(piece.get_dtype()))
    return out


def read_index(directory: Path) -> dict[str, str] | None:
    """The weight_map of the directory's model.safetensors.index.json (tensor name -> shard file
    name), or None when it has no index."""
    index = Path(directory) / INDEX
    if not index.is_file():
        return None
    weight_map = read_json(index, f"{index}: missing").get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise WeightsError(f"{index}: not a safetensors index (needs a weight_map object of tensor names to shard files)")
    return weight_map


def safetensors_files(directory: Path, weight_map: Mapping[str, str] | None = None) -> list[Path]:
    """The files holding a checkpoint's weights: the shards its index names (`weight_map`, read when
    not given), else model.safetensors; a shard the index names must be there."""
    directory = Path(directory)
    weight_map = read_index(directory) if weight_map is None else weight_map
    if weight_map is not None:
        files = sorted(set(weight_map.values()))
        missing = [f for f in files if not (directory / f).is_file()]
        if missing:
            raise WeightsError(f"{directory / INDEX}: shard {missing[0]} is missing from {directory}")
        return [directory / f for f in files]
    if (directory / SINGLE).is_file():
        return [directory / SINGLE]
    raise WeightsError(f"{directory}: no {SINGLE} and no {INDEX}")


def read_checkpoint(directory: Path) -> dict[str, Entry]:
    """Every tensor of a checkpoint directory (one file, or shards with an index) from the headers; each
    tensor the index names must be in the shard it names."""
    directory = Path(directory)
    weight_map = read_index(directory)
    found = read_headers(safetensors_files(directory, weight_map))
    for name, shard in (weight_map or {}).items():
        entry = found.get(name)
        if entry is None or entry.path.name != shard:
            elsewhere = "" if entry is None else f" (it is in {entry.path.name})"
            raise WeightsError(f"{directory / shard}: missing tensor {name}, which {INDEX} places there{elsewhere}")
    return found


def check_tensors(found: Found, expected: Mapping[str, tuple[int, ...]], where: Path,
                  ignore: Callable[[str], bool] = lambda name: False) -> None:
    """One line for the first kind of problem: missing tensors (named with `where`), then unexpected
    ones (not `ignore`d; named with the first one's file), then a wrong shape, then a dtype that is
    not floating point."""
    missing = [n for n in expected if n not in found]
    if missing:
        raise WeightsError(f"{where}: missing tensor{names_list(missing)}")
    unexpected = [n for n in found if n not in expected and not ignore(n)]
    if unexpected:
        raise WeightsError(f"{found[unexpected[0]].path}: unexpected tensor{names_list(unexpected)}")
    for name, shape in expected.items():
        entry = found[name]
        if entry.shape != tuple(shape):
            raise WeightsError(f"{entry.path}: tensor {name} has shape {list(entry.shape)}, expected {list(shape)}")
        if entry.dtype not in FLOAT_DTYPES:
            raise WeightsError(f"{entry.path}: tensor {name} has dtype {entry.dtype}, expected a floating-point "
                               f"one ({', '.join(FLOAT_DTYPES)})")


def shapes(module: nn.Module, name: Callable[[str], str] = lambda n: n) -> dict[str, tuple[int, ...]]:
    """The checkpoint names (`name` of each parameter name) and shapes of a module's parameters."""
    return {name(n): tuple(p.shape) for n, p in module.named_parameters()}


def meta_module(build: Callable[[], nn.Module]) -> nn.Module:
    """`build()` on the meta device: every parameter's name and shape, no memory and no initialisation."""
    with torch.device("meta"):
        return build()


def allocate(module: nn.Module, device: torch.device | str, dtype: torch.dtype) -> nn.Module:
    """A meta-built module's parameters allocated uninitialised on `device` in `dtype`, for a loader to
    fill: nothing is initialised and nothing allocated twice. Buffers its constructor computed off the
    meta device (a rotary table) keep their values and their dtype."""
    kept = {name: b for name, b in module.named_buffers() if not b.is_meta}
    module = nn.Module.to(module, dtype).to_empty(device=device)  # nn.Module.to: diffusers' own `to` warns
    for name, value in kept.items():
        owner, _, leaf = name.rpartition(".")
        module.get_submodule(owner)._buffers[leaf] = value.to(device)
    return module


def load_tensors(targets: Mapping[str, Tensor], found: Found, parts: Mapping[str, Part] | None = None) -> None:
    """Copy each named checkpoint tensor into its target (a parameter, in place), reading each once,
    file by file; a tensor with the target's element count but another shape (a 1x1 conv into a
    linear) is reshaped. A tensor named in `parts` is read as that part only (a slice of the file,
    the rest never read). The dtype and device are converted by the copy."""
    parts = parts or {}
    by_file: dict[Path, list[str]] = {}
    for name in targets:
        by_file.setdefault(found[name].path, []).append(name)
    with torch.no_grad():
        for path, names in by_file.items():
            with opened(path) as f:
                for name in names:
                    target, part = targets[name], parts.get(name)
                    value = f.get_tensor(name) if part is None else part.read(f.get_slice(name))
                    target.copy_(value.reshape(target.shape))
                    del value  # one tensor read at a time: the next read must not find this one still held


def read_rows(entry: Entry, name: str, rows: Sequence[int]) -> Tensor:
    """Some rows of a 2-D checkpoint tensor, [len(rows), columns] in its stored dtype: each row read by
    itself (a slice of the file), the table never whole."""
    with opened(entry.path) as f:
        piece = f.get_slice(name)
        return torch.cat([piece[row:row + 1] for row in rows])  # [len(rows), columns]


def choose(weights: str | Path | None, chosen: bool, knob: str) -> tuple[Path | None, bool]:
    """The directory a component loads, and whether it falls back to its tiny preset: `weights` if
    given; none when a preset or config was `chosen`; else the knob's directory (WGC_ORPHEUS_DIR, ...),
    and with the knob unset, none and a fallback (which `announce` then reports)."""
    if weights is not None:
        return Path(weights), False
    if chosen:
        return None, False
    directory = settings.weights_dir(knob)
    return directory, directory is None


def announce(family: str, component: str, knob: str | None, fallback: str, source: str, detail: str) -> None:
    """The one line a component logs (logger `wgc.models.<family>`) about what it runs. With `knob`
    (the weights' WGC_ variable, left unset), a warning that it fell back to `fallback` on random
    weights; else what it loaded."""
    log = logging.getLogger(f"wgc.models.{family}")
    if knob is not None:
        log.warning("%s %s: no weights given (%s unset), running %s with random weights; %s",
                    family, component, knob, fallback, detail)
    else:
        log.info("%s %s: %s; %s", family, component, source, detail)
