"""A stand-in accelerator: catch device faults of a GPU path on a CPU-only machine.

Real CPU memory runs the code (the data-dependent decode loop included), but under
`audit()` every tensor is labelled "device" or "host" as it is made:
- made with `device=STAND_IN` ("cpu:0", a device unequal to "cpu"), moved there with
  `.to(STAND_IN)` / `module.to(STAND_IN)`, or computed from a device tensor: "device";
- everything else (host factories, `.cpu()`, `.to("cpu")`): "host".
It then records, with the ablate file:line that caused it, what a CUDA device would refuse
or pay for:
- `mix`: one op over device tensors and host tensors of one or more dimensions (host
  0-dim tensors are legal CUDA operands; a host index into a device tensor is a legal
  upload, a device index into a host tensor is not: "indices should be either on cpu or
  on the same device");
- `cpu_kernel`: a CPU-only kernel (`*_for_cpu`, `mkldnn*`) called on device tensors;
- `cpu_generator`: random draws for device tensors from a `torch.Generator` made for the
  host (CUDA refuses it: "Expected a 'cuda' device type for generator");
- `syncs`: device -> host reads that stall the stream (`.item()`, `.tolist()`, `int()`,
  `bool()`, `.cpu()`, `nonzero`, ...), counted per location, not faults by themselves.

The technique is torch's `TorchFunctionMode` (torch/overrides.py), which sees every torch
function and Tensor method called from Python, `torch.ops.aten.*` included. Kernels that
exist on CUDA but not on CPU cannot be told apart here: what only a GPU shows stays for the
GPU smoke (benchmarks/gpu_smoke.sh).

    with audit() as a:
        sampler = HFSampler(model, tok, device=STAND_IN)
        sampler.generate(...)
    assert not a.faults, a.report()
"""
from __future__ import annotations

import collections
import contextlib
import os
import sys
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakIdKeyDictionary

STAND_IN = torch.device("cpu", 0)
HOST = torch.device("cpu")
_DEVICE_ATTR = torch._C.TensorBase.device          # the `tensor.device` property
_DATA_ATTR = torch._C.TensorBase.data              # `param.data = moved` (module.to)
# the checkout (ablate/, tests/, benchmarks/): faults are located at its innermost frame
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_TORCH = os.path.dirname(os.path.abspath(torch.__file__))
_SYNCS = {"item", "tolist", "__int__", "__float__", "__bool__", "__index__", "nonzero",
          "numpy", "__array__", "masked_select", "unique", "equal", "allclose"}
_FACTORIES = {"tensor", "as_tensor", "zeros", "ones", "empty", "full", "arange", "rand",
              "randn", "randint", "randperm", "linspace", "eye", "tril_indices",
              "from_numpy", "frombuffer", "empty_strided", "scalar_tensor", "zeros_like",
              "ones_like", "empty_like", "full_like", "rand_like", "randn_like",
              "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"}
# moves, metadata and queries: no kernel that would refuse mixed devices
_NOT_COMPUTE = {"to", "cpu", "cuda", "copy_", "__set__", "__get__",
                "_has_compatible_shallow_copy_type", "size", "dim", "data_ptr",
                "is_floating_point", "requires_grad_", "detach", "__repr__", "__format__"}
_INDEXING = {"__getitem__", "__setitem__", "index_select", "index_put_", "index_put",
             "index_copy_", "index_add_", "gather", "scatter_", "scatter", "take"}


@dataclass
class Finding:
    kind: str            # mix | cpu_kernel | cpu_generator
    func: str
    where: str           # the innermost file:line of the checkout on the stack
    inner: str           # the innermost frame outside torch (a library's, or ablate's)


@dataclass
class Audit:
    faults: list[Finding] = field(default_factory=list)
    syncs: collections.Counter = field(default_factory=collections.Counter)

    def sync_count(self, path_part: str = "") -> int:
        return sum(n for where, n in self.syncs.items() if path_part in where)

    def report(self) -> str:
        seen = collections.Counter((f.kind, f.func, f.where, f.inner) for f in self.faults)
        lines = [f"{k} {fn} at {w} (innermost {i}) x{n}" for (k, fn, w, i), n in seen.items()]
        return "\n".join(lines) or "no device faults"


def _is_device(dev) -> bool:
    return dev is not None and torch.device(dev) != HOST and torch.device(dev).type == "cpu"


class _AuditGenerator(torch.Generator):
    """torch.Generator remembering the device it was made for (a stand-in generator
    reports "cpu" like any other)."""

    def __new__(cls, device="cpu"):
        gen = super().__new__(cls, device="cpu")
        gen.requested = torch.device(device)
        return gen


def _tensors(obj, out):
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            _tensors(x, out)
    elif isinstance(obj, dict):
        for x in obj.values():
            _tensors(x, out)
    return out


def _frames() -> tuple[str, str]:
    """(innermost file:line of the checkout outside this module, innermost frame outside
    torch)."""
    f, where, inner = sys._getframe(2), "?", None
    while f is not None:
        path = os.path.abspath(f.f_code.co_filename)
        here = f"{os.path.relpath(path, _ROOT)}:{f.f_lineno}"
        if path != __file__ and not path.startswith(_TORCH):
            inner = inner or here
            if path.startswith(_ROOT + os.sep) and "site-packages" not in path:
                return here, inner
        f = f.f_back
    return where, inner or where


class _Mode(TorchFunctionMode):
    def __init__(self, record: Audit):
        super().__init__()
        self.a, self.labels = record, WeakIdKeyDictionary()

    def _dev(self, t) -> bool:
        return self.labels.get(t, False)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if name == "__get__" and getattr(func, "__self__", None) is _DEVICE_ATTR:
            # `x.device` of a device tensor names the stand-in, as a CUDA tensor's names
            # cuda: code placing new tensors "where x is" then places them on the device
            return STAND_IN if self._dev(args[0]) else func(*args, **kwargs)
        ins = _tensors(list(args), []) + _tensors(kwargs, [])
        on_dev = any(self._dev(t) for t in ins)
        self._check(name, args, kwargs, ins, on_dev)
        out = func(*args, **kwargs)
        target = self._target(name, args, kwargs, on_dev)
        if isinstance(out, torch.Tensor) and name in ("to", "cpu", "cuda") and \
                any(out is x for x in ins) and target != self._dev(out):
            out = out.clone()          # a real move copies; here it may return self
        if name == "__set__" and getattr(func, "__self__", None) is _DATA_ATTR:
            self.labels[args[0]] = self._dev(args[1])     # param.data = moved
        for t in _tensors(out, []):
            if any(t is x for x in ins) and target == on_dev:
                continue                                   # in place: label unchanged
            self.labels[t] = target
        return out

    def _target(self, name, args, kwargs, on_dev) -> bool:
        """Whether the result lives on the device."""
        if name in ("to", "cuda", "cpu"):
            return self._moved(name, args, kwargs, on_dev)
        if "device" in kwargs and kwargs["device"] is not None:
            return _is_device(kwargs["device"])
        if name in _FACTORIES and not name.startswith("new_") and not name.endswith("_like"):
            return False
        return on_dev

    def _moved(self, name, args, kwargs, on_dev) -> bool:
        if name == "cpu":
            return False
        if name == "cuda":
            return True
        rest = args[1:]
        if rest and isinstance(rest[0], torch.Tensor):
            return self._dev(rest[0])
        dev = torch._C._nn._parse_to(*rest, **kwargs)[0]
        return on_dev if dev is None else _is_device(dev)

    def _check(self, name, args, kwargs, ins, on_dev):
        if on_dev and ("_for_cpu" in name or name.startswith("mkldnn")):
            self._fault("cpu_kernel", name)
        gen = kwargs.get("generator")
        if gen is not None and (on_dev or _is_device(kwargs.get("device"))) \
                and not _is_device(getattr(gen, "requested", HOST)):
            self._fault("cpu_generator", name)
        if on_dev and (name in _SYNCS or (name in ("cpu", "to") and
                                          not self._moved(name, args, kwargs, True))):
            self.a.syncs[_frames()[0]] += 1
        if on_dev and name not in _NOT_COMPUTE and self._mixed(name, ins):
            self._fault("mix", name)

    def _mixed(self, name, ins) -> bool:
        host = [t for t in ins if not self._dev(t) and t.dim() > 0]
        if not host:
            return False
        if name in _INDEXING and self._dev(ins[0]):
            # a host index into a device tensor is an upload CUDA accepts; host values
            # written into a device tensor by __setitem__ likewise (a copy)
            return False
        return True

    def _fault(self, kind, name):
        where, inner = _frames()
        self.a.faults.append(Finding(kind, name, where, inner))


@contextlib.contextmanager
def audit():
    """Record device faults and syncs of the code run inside (see the module doc)."""
    record, real = Audit(), torch.Generator
    torch.Generator = _AuditGenerator
    try:
        with _Mode(record):
            yield record
    finally:
        torch.Generator = real
