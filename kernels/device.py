"""Device mapping and the patch mechanism behind the emulated devices.

An emulated device type (``"npu"``, or ``"cuda"`` for ``emulate_cuda``) is mapped onto a real
*backing* device (CPU, or CUDA when present): every ``"npu"``/``"npu:N"`` string,
``torch.device("npu", N)`` or (where torch reads it as a device) bare int that reaches a patched
entry point is replaced by the backing device before torch sees it, so tensors really live on
the backing device.

Why not ``torch.utils.rename_privateuse1_backend("npu")``? It would make ``torch.device("npu")``
parse natively, but it cannot be undone, and from then on the whole process believes it has a
PrivateUse1 accelerator without hooks: ``torch._C._get_accelerator()`` raises and every
``optimizer.step()`` fails unless ``torch.npu`` stays registered forever. So ``torch.device`` is
replaced instead, while emulating, by a class that maps the emulated type and returns real
``torch.device`` objects (``isinstance(d, torch.device)`` still holds).

Every change is a ``Patch`` in a table; a ``PatchSet`` applies the table and restores the saved
originals in reverse order, so leaving the emulation puts torch back exactly as it was.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, List, Tuple

import torch

REAL_DEVICE = torch.device
REAL_GENERATOR = torch.Generator
MISSING = object()

# Keyword arguments that carry a device (transfer_to_npu's list, plus DDP's output_device).
DEVICE_KWARGS = frozenset({"device", "device_type", "map_location", "device_id", "device_ids", "output_device"})

# torch functions with device arguments: transfer_to_npu's ``torch_fn_white_list`` (facts §5),
# less get_device_module (handled apart) and the names this torch version lacks.
TORCH_DEVICE_FUNCTIONS = (
    "logspace", "randint", "hann_window", "rand", "full_like", "ones_like", "rand_like", "randperm",
    "arange", "frombuffer", "normal", "_empty_per_channel_affine_quantized", "empty_strided",
    "empty_like", "scalar_tensor", "tril_indices", "bartlett_window", "ones", "sparse_coo_tensor",
    "randn", "kaiser_window", "tensor", "triu_indices", "as_tensor", "zeros", "randint_like", "full",
    "eye", "_sparse_csr_tensor_unsafe", "empty", "_sparse_coo_tensor_unsafe", "blackman_window",
    "zeros_like", "range", "sparse_csr_tensor", "randn_like", "from_file", "_cudnn_init_dropout_state",
    "_empty_affine_quantized", "linspace", "hamming_window", "empty_quantized", "_pin_memory", "load",
    "set_default_device", "sparse_compressed_tensor",
)
TENSOR_DEVICE_METHODS = ("new_empty", "new_empty_strided", "new_full", "new_ones", "new_tensor", "new_zeros")

# What inductor (torch.compile's default backend) reads from ``torch.cuda.get_device_properties``
# once ``torch.cuda.is_available()`` says yes, as it does under ``emulate_cuda``: the values of an
# A100 (the capability 8.0 the emulated CUDA device reports). A CPU build of torch has no
# ``torch.version.cuda``, so inductor takes the ROCm branch and keys its cache on ``gcnArchName``
# (set to the device's name). Tensors live on the backing device, so inductor generates code for
# it; these values only feed cache keys and heuristics, never a kernel.
EMULATED_CUDA_PROPERTIES = {
    "multi_processor_count": 108, "warp_size": 32, "max_threads_per_multi_processor": 2048,
    "max_threads_per_block": 1024, "regs_per_multiprocessor": 65536, "shared_memory_per_block": 49152,
    "shared_memory_per_block_optin": 166912, "shared_memory_per_multiprocessor": 167936,
    "L2_cache_size": 41943040, "is_integrated": False, "is_multi_gpu_board": False,
}


# --------------------------------------------------------------------------- patch mechanism


@dataclass
class Patch:
    """Set ``owner.name`` (an item when ``owner`` is a dict, e.g. ``sys.modules``) to
    ``make(original)``; ``original`` is ``MISSING`` when there is none."""

    owner: Any
    name: str
    make: Callable[[Any], Any]


def replace(owner: Any, name: str, value: Any) -> Patch:
    return Patch(owner, name, lambda _original: value)


class PatchSet:
    """Applies a table of patches and undoes them (last applied, first restored)."""

    def __init__(self, patches: Iterable[Patch]):
        self.patches = list(patches)
        self._saved: List[Tuple[Patch, Any]] = []

    def apply(self) -> None:
        try:
            for patch in self.patches:
                new = patch.make(_lookup(patch.owner, patch.name))
                self._saved.append((patch, own_value(patch.owner, patch.name)))
                _assign(patch.owner, patch.name, new)
        except BaseException:
            self.restore()
            raise

    def restore(self) -> None:
        while self._saved:
            patch, saved = self._saved.pop()
            if saved is MISSING:
                _remove(patch.owner, patch.name)
            else:
                _assign(patch.owner, patch.name, saved)


def _lookup(owner: Any, name: str) -> Any:
    if isinstance(owner, dict):
        return owner.get(name, MISSING)
    return getattr(owner, name, MISSING)


def own_value(owner: Any, name: str) -> Any:
    """The value to put back: a class's own attribute only, so inherited ones are un-shadowed."""
    if isinstance(owner, dict):
        return owner.get(name, MISSING)
    return vars(owner).get(name, MISSING)


def _assign(owner: Any, name: str, value: Any) -> None:
    if isinstance(owner, dict):
        owner[name] = value
    else:
        setattr(owner, name, value)


def _remove(owner: Any, name: str) -> None:
    if isinstance(owner, dict):
        owner.pop(name, None)
    elif name in vars(owner):
        delattr(owner, name)


# --------------------------------------------------------------------------- device mapping


class DeviceMap:
    """Maps one emulated device type onto the backing device.

    With a CPU backing every index collapses onto the one CPU device; with a CUDA backing
    ``npu:N`` becomes ``cuda:N``.
    """

    def __init__(self, name: str, backing: torch.device):
        self.name = name
        self.backing = REAL_DEVICE(backing.type)
        self._pattern = re.compile(rf"{re.escape(name)}(?::(\d+))?")

    def target(self, index: int | None = None) -> torch.device:
        if self.backing.type == "cpu" or index is None:
            return self.backing
        return REAL_DEVICE(self.backing.type, index)

    def matches(self, value: Any) -> bool:
        if isinstance(value, str):
            return self._pattern.fullmatch(value) is not None
        return isinstance(value, REAL_DEVICE) and value.type == self.name

    def map(self, value: Any, ints: bool = False, deep: bool = False) -> Any:
        """``value`` with emulated devices replaced; strings stay strings.

        ``ints``: a bare int is a device index here (``.to(0)``, ``device=0``).
        ``deep``: also map inside lists, tuples and dicts (``device_ids``, ``map_location``).
        """
        if isinstance(value, str):
            match = self._pattern.fullmatch(value)
            if match is None:
                return value
            return str(self.target(int(match.group(1)) if match.group(1) else None))
        if isinstance(value, REAL_DEVICE):
            return self.target(value.index) if value.type == self.name else value
        if ints and isinstance(value, int) and not isinstance(value, bool):
            return self.target(value)
        if deep and isinstance(value, (list, tuple)):
            return type(value)(self.map(v, ints, deep) for v in value)
        if deep and isinstance(value, dict):
            return {self.map(k, ints, deep): self.map(v, ints, deep) for k, v in value.items()}
        return value

    def parses_natively(self) -> bool:
        try:
            REAL_DEVICE(self.name)
            return True
        except RuntimeError:
            return False


def with_device_args(fn: Callable, dmap: DeviceMap, ints: bool = False) -> Callable:
    """``fn`` with emulated devices in its positional args and device keywords mapped."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        args = tuple(dmap.map(a, ints) for a in args)
        for key in DEVICE_KWARGS.intersection(kwargs):
            kwargs[key] = dmap.map(kwargs[key], ints=True, deep=True)
        return fn(*args, **kwargs)

    return wrapper


class _ProxyMeta(type):
    """Metaclass of the stand-in classes: ``isinstance`` answers for the real class, and the
    stand-in compares equal to it (torch.fx's code generator tests ``obj != torch.device``)."""

    def __eq__(cls, other):
        return other is cls or other is cls._real

    def __ne__(cls, other):
        return not (other is cls or other is cls._real)

    def __hash__(cls):
        return hash(cls._real)

    def __instancecheck__(cls, obj):
        return isinstance(obj, cls._real)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, cls._real)


def device_class(dmap: DeviceMap) -> type:
    """A stand-in for ``torch.device`` that accepts the emulated type and returns real devices."""

    class device(metaclass=_ProxyMeta):
        _real = REAL_DEVICE
        __doc__ = REAL_DEVICE.__doc__

        def __new__(cls, type_or_string=MISSING, index=None, *, type=MISSING):  # noqa: A002
            spec = type if type_or_string is MISSING else type_or_string
            if isinstance(spec, str) and index is not None and ":" not in spec:
                spec = f"{spec}:{index}"
                index = None
            if dmap.matches(spec):
                return REAL_DEVICE(dmap.map(spec))
            return REAL_DEVICE(spec) if index is None else REAL_DEVICE(spec, index)

    return device


def generator_class(dmap: DeviceMap) -> type:
    """A stand-in for ``torch.Generator`` that maps its ``device`` argument."""

    class Generator(metaclass=_ProxyMeta):
        _real = REAL_GENERATOR
        __doc__ = REAL_GENERATOR.__doc__

        def __new__(cls, device="cpu"):
            return REAL_GENERATOR(device=dmap.map(device, ints=True))

    return Generator


def _autocast_init(original: Callable, dmap: DeviceMap, default_dtype: Callable[[], torch.dtype]) -> Callable:
    """``autocast.__init__`` that maps the device type; on an emulated device the default dtype
    is that device's (float16 for npu and cuda), not the backing device's (bfloat16 on CPU)."""

    @functools.wraps(original)
    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if dmap.matches(device_type):
            device_type = dmap.backing.type
            dtype = default_dtype() if dtype is None else dtype
        original(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    return __init__


def _autocast_state(original: Callable, dmap: DeviceMap, bare: int) -> Callable:
    """``torch.is_autocast_enabled`` / ``set_autocast_enabled`` with the device mapped; called with
    ``bare`` positional arguments (no device) they mean CUDA's state, so under ``emulate_cuda`` the
    emulated CUDA device's."""

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if dmap.name == "cuda" and len(args) == bare and "device_type" not in kwargs:
            args = ("cuda", *args)
        return original(*(dmap.map(a) for a in args), **{k: dmap.map(v) for k, v in kwargs.items()})

    return wrapper


def _get_device_module(original: Callable, dmap: DeviceMap, module: Any) -> Callable:
    @functools.wraps(original)
    def get_device_module(device=None):
        return module if dmap.matches(device) else original(device)

    return get_device_module


def torch_patches(dmap: DeviceMap, device_module: Any) -> List[Patch]:
    """The torch entry points that take a device, mapped for ``dmap`` (facts §5).

    ``device_module`` is the emulated ``torch.<name>``: it answers ``get_device_module`` and
    gives autocast its default dtype.
    """
    import torch.utils._device as device_context

    wrap = lambda ints=False: lambda original: with_device_args(original, dmap, ints)  # noqa: E731
    patches = [Patch(torch, n, wrap()) for n in TORCH_DEVICE_FUNCTIONS if hasattr(torch, n)]
    patches += [Patch(torch.Tensor, n, wrap()) for n in TENSOR_DEVICE_METHODS]
    patches += [
        Patch(torch.Tensor, "to", wrap(ints=True)),
        Patch(torch.nn.Module, "to", wrap(ints=True)),
        Patch(torch.nn.Module, "to_empty", wrap(ints=True)),
        Patch(torch.fft, "fftfreq", wrap()),
        Patch(torch.fft, "rfftfreq", wrap()),
        Patch(device_context.DeviceContext, "__init__", wrap()),
        Patch(torch.amp.GradScaler, "__init__", wrap()),
        Patch(torch.amp.autocast, "__init__", lambda o: _autocast_init(o, dmap, device_module.get_autocast_dtype)),
        replace(torch, "Generator", generator_class(dmap)),
    ]
    patches += [
        Patch(torch, n, wrap())
        for n in ("get_autocast_dtype", "set_autocast_dtype")
    ]
    patches += [Patch(torch, n, lambda o, bare=bare: _autocast_state(o, dmap, bare))
                for n, bare in (("is_autocast_enabled", 0), ("set_autocast_enabled", 1))]
    if dmap.name == "cuda":  # what inductor reads of the device (device_module's own answer, completed)
        patches.append(cuda_properties_patch())
    if not dmap.parses_natively():  # "npu": torch cannot parse it, so torch.device itself is stood in for
        patches += [
            replace(torch, "device", device_class(dmap)),
            Patch(torch, "get_device_module", lambda o: _get_device_module(o, dmap, device_module)),
        ]
    return patches


def cuda_properties_patch() -> Patch:
    """``torch.cuda.get_device_properties`` of the emulated CUDA device with every attribute
    inductor reads (``EMULATED_CUDA_PROPERTIES``, ``gcnArchName``, ``uuid``), so that
    ``torch.compile`` and FlexAttention work on original CUDA code run under ``emulate_cuda``."""

    def make(original: Callable) -> Callable:
        @functools.wraps(original)
        def get_device_properties(device: Any = None) -> Any:
            props = original(device)
            for name, value in {**EMULATED_CUDA_PROPERTIES, "gcnArchName": props.name, "uuid": props.name}.items():
                if not hasattr(props, name):
                    setattr(props, name, value)
            return props

        return get_device_properties

    return Patch(torch.cuda, "get_device_properties", make)


def tensor_method_patches(dmap: DeviceMap) -> List[Patch]:
    """``Tensor.<name>()`` and ``Module.<name>()`` moving to the backing device (``.npu()``,
    or ``.cuda()`` under emulate_cuda); arguments as in ``Tensor.cuda``/``Module.cuda``."""

    def tensor_method(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
        target = dmap.target() if device is None else dmap.map(device, ints=True)
        if isinstance(target, str):
            target = REAL_DEVICE(target)
        if target.type != dmap.backing.type:
            raise RuntimeError(f"Tensor.{dmap.name}(): {device!r} is not an {dmap.name} device")
        return torch.Tensor.to(self, target, non_blocking=non_blocking, memory_format=memory_format)

    def module_method(self, device=None):
        return self._apply(lambda t: getattr(t, dmap.name)(device))

    tensor_method.__name__ = module_method.__name__ = dmap.name
    return [replace(torch.Tensor, dmap.name, tensor_method), replace(torch.nn.Module, dmap.name, module_method)]


def is_on_device_patch(dmap: DeviceMap) -> Patch:
    """``Tensor.is_npu``: True for every tensor on the backing device while emulating."""
    return replace(torch.Tensor, f"is_{dmap.name}", property(lambda self: self.device.type == dmap.backing.type))
