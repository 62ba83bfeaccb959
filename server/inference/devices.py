"""The compute devices llama.cpp offers, and the one a model runs on (`--device`).

llama.cpp registers every backend its build has (the CPU always; Vulkan, CUDA or Metal where it
was built with them) and each lists its devices: `Vulkan0`, `CUDA0`, `CPU`. A spec names one the
way a user writes it: `cpu`, `vulkan:0`, `cuda:1`, `auto` (the first GPU when layers are
offloaded, else the CPU) or `gpu` (the first GPU if there is one, else the CPU: a shipped game on
a player's machine, where no GPU is not an error). The model is loaded with exactly the chosen device, so a CPU run never
sends work to a GPU it did not ask for, and a Vulkan run never to another GPU.

Mesa's lavapipe (Vulkan on the CPU) is a CPU-type device that ggml skips unless
`GGML_VK_VISIBLE_DEVICES` names it; the GPU tests and CI use it that way (docs/gpu.md).
"""

from __future__ import annotations

import ctypes
import importlib.util
import re
import sys
from pathlib import Path
from typing import Literal

from loreguard.schemas.base import FrozenModel
from loreguard.server.inference.base import BackendError
from loreguard.server.inference.gguf_header import NotGGUF, read_header

DeviceKind = Literal["cpu", "gpu", "igpu", "accel"]
#: ggml_backend_dev_type's values, in its enum's order (META is ggml's own split device).
_KINDS: tuple[str, ...] = ("cpu", "gpu", "igpu", "accel", "meta")
_SPEC = re.compile(r"^(?P<backend>[a-z]+)(?::(?P<index>\d+))?$")


class DeviceError(BackendError):
    """A device spec that names nothing this build offers, or a device the model cannot fit:
    raised before anything loads, so a command can say so in one line."""


class Device(FrozenModel):
    """One device llama.cpp can run a model on."""

    #: What `--device` takes: `cpu`, `vulkan:0`, `cuda:1`.
    spec: str
    #: ggml's own name: `CPU`, `Vulkan0`, `CUDA1`.
    name: str
    kind: DeviceKind
    #: The driver's name for it: "NVIDIA H100 80GB HBM3", "llvmpipe (LLVM 15.0.6, 256 bits)".
    description: str
    memory_total_mib: int
    memory_free_mib: int

    def describe(self) -> str:
        return f"{self.spec} ({self.description}, {self.memory_free_mib} of {self.memory_total_mib} MiB free)"


class _Ggml:
    """ggml's device registry, bound on first use (llama-cpp-python binds none of it)."""

    def __init__(self) -> None:
        lib_dir = _lib_dir()
        # The very file libllama was linked against (its soname): the wheel ships `libggml.so`
        # as a separate copy, and opening that would map a second ggml with its own registry.
        names = {"win32": ("ggml.dll",), "darwin": ("libggml.0.dylib", "libggml.dylib")}.get(
            sys.platform, ("libggml.so.0", "libggml.so")
        )
        found = next((lib_dir / n for n in names if (lib_dir / n).exists()), lib_dir / names[-1])
        lib = ctypes.CDLL(str(found))
        lib.ggml_backend_dev_count.restype = ctypes.c_size_t
        lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
        lib.ggml_backend_dev_get.restype = ctypes.c_void_p
        for fn in (lib.ggml_backend_dev_name, lib.ggml_backend_dev_description):
            fn.argtypes = [ctypes.c_void_p]
            fn.restype = ctypes.c_char_p
        lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
        lib.ggml_backend_dev_type.restype = ctypes.c_int
        size_p = ctypes.POINTER(ctypes.c_size_t)
        lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, size_p, size_p]
        lib.ggml_backend_dev_memory.restype = None
        self.lib = lib

    def handles(self) -> list[int]:
        return [self.lib.ggml_backend_dev_get(i) for i in range(self.lib.ggml_backend_dev_count())]

    def device(self, handle: int) -> Device:
        lib = self.lib
        name = (lib.ggml_backend_dev_name(handle) or b"").decode("utf-8", "replace")
        kind_id = lib.ggml_backend_dev_type(handle)
        kind = _KINDS[kind_id] if 0 <= kind_id < len(_KINDS) else "accel"
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(handle, ctypes.byref(free), ctypes.byref(total))
        return Device(
            spec=spec_of(name),
            name=name,
            kind="accel" if kind == "meta" else kind,
            description=(lib.ggml_backend_dev_description(handle) or b"").decode("utf-8", "replace"),
            memory_total_mib=total.value >> 20,
            memory_free_mib=free.value >> 20,
        )


_ggml: _Ggml | None = None


def _registry() -> _Ggml:
    global _ggml
    if _ggml is None:
        _ggml = _Ggml()
    return _ggml


def spec_of(name: str) -> str:
    """`Vulkan0` -> `vulkan:0`, `CUDA1` -> `cuda:1`, `CPU` -> `cpu`, `Metal` -> `metal:0`."""
    match = re.fullmatch(r"(?P<backend>.*?)(?P<index>\d*)", name)
    assert match is not None  # the pattern matches every string
    backend = match["backend"].lower()
    if backend == "cpu":
        return "cpu"
    return f"{backend}:{match['index'] or 0}"


def available_devices() -> tuple[Device, ...]:
    """Every device of this build, in llama.cpp's order (GPUs first, the CPU last)."""
    ggml = _registry()
    return tuple(ggml.device(h) for h in ggml.handles())


def _lib_dir() -> Path:
    """llama-cpp-python's folder of shared libraries, found without importing (loading) it."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        raise DeviceError("llama-cpp-python is not installed")
    return Path(spec.origin).parent / "lib"


def built_backends() -> tuple[str, ...]:
    """The GPU backends this llama-cpp-python was built with (`vulkan`, `cuda`, `metal`...), read
    from the libraries it ships: a built backend can still find no device."""
    names = {p.name.split(".")[0] for p in _lib_dir().glob("*ggml-*")}
    found = {n.removeprefix("lib").removeprefix("ggml-") for n in names}
    return tuple(sorted(found - {"base", "cpu"}))


def _listing(devices: tuple[Device, ...]) -> str:
    return ", ".join(d.describe() for d in devices)


def _no_gpu(asked: str, devices: tuple[Device, ...], fix: str) -> DeviceError:
    built = built_backends()
    if not built:
        why = f"this llama.cpp build has no GPU backend, only {_listing(devices)}. Build with Vulkan or CUDA (docs/gpu.md)"
    else:
        why = (
            f"this {'/'.join(built)} build of llama.cpp finds no GPU on this machine (it has {_listing(devices)}); "
            "check the GPU driver, or GGML_VK_VISIBLE_DEVICES for a CPU Vulkan device such as lavapipe (docs/gpu.md)"
        )
    return DeviceError(f"{asked}: {why}, {fix}")


class DeviceChoice(FrozenModel):
    """Where a model runs: the device (None: the CPU alone) and the layers offloaded to it."""

    device: Device | None
    #: -1: every layer; 0 on the CPU.
    gpu_layers: int

    @property
    def spec(self) -> str:
        return self.device.spec if self.device is not None else "cpu"


def choose_device(spec: str, gpu_layers: int | None) -> DeviceChoice:
    """The device `spec` names and the layers to offload to it.

    `gpu_layers` None means every layer on a GPU the spec names (or `gpu` finds) and none on
    `auto`. Raises
    DeviceError, naming what was asked and what exists, for a device this build lacks, layers
    asked of the CPU, or layers asked of a build with no GPU backend.
    """
    text = spec.strip().lower()
    match = _SPEC.match(text)
    if match is None:
        raise DeviceError(f"--device {spec!r}: write auto, cpu, gpu, or BACKEND:INDEX such as vulkan:0 or cuda:0")
    if text == "cpu":
        if gpu_layers:
            raise DeviceError(f"--gpu-layers {gpu_layers} with --device cpu: the CPU runs every layer; drop one of the two")
        return DeviceChoice(device=None, gpu_layers=0)
    devices = available_devices()
    gpus = tuple(d for d in devices if d.kind in ("gpu", "igpu"))
    if text == "gpu":
        if not gpus or gpu_layers == 0:
            return DeviceChoice(device=None, gpu_layers=0)
        return DeviceChoice(device=gpus[0], gpu_layers=-1 if gpu_layers is None else gpu_layers)
    if text == "auto":
        if not gpu_layers:
            return DeviceChoice(device=None, gpu_layers=0)
        if not gpus:
            raise _no_gpu(f"--gpu-layers {gpu_layers} asks for a GPU", devices, "or drop --gpu-layers")
        return DeviceChoice(device=gpus[0], gpu_layers=gpu_layers)
    if match["index"] is None:
        text = f"{text}:0"
    for device in devices:
        if device.spec == text and device.kind in ("gpu", "igpu"):
            return DeviceChoice(device=device, gpu_layers=-1 if gpu_layers is None else gpu_layers)
    if not gpus:
        raise _no_gpu(f"--device {spec}", devices, "or use --device cpu")
    raise DeviceError(f"--device {spec}: no such device; this build offers {_listing(devices)}")


def device_array(choice: DeviceChoice) -> ctypes.Array[ctypes.c_void_p]:
    """The NULL-terminated device list llama_model_params.devices takes: the chosen device
    alone, or none at all for the CPU (so no operation is offloaded anywhere)."""
    handles: list[int] = []
    if choice.device is not None:
        ggml = _registry()
        name = choice.device.name.encode()
        handles = [h for h in ggml.handles() if ggml.lib.ggml_backend_dev_name(h) == name]
    return (ctypes.c_void_p * (len(handles) + 1))(*handles, None)


def kv_shape(model: Path) -> tuple[int, int] | None:
    """The model's layer count and f16 KV cache bytes per token, from its GGUF header (None for
    a file or an architecture this estimate does not know: llama.cpp's own load decides)."""
    try:
        meta = read_header(model).metadata
    except (NotGGUF, OSError):
        return None
    arch = meta.get("general.architecture", "")
    n_layer, n_embd, n_head = (meta.get(f"{arch}.{key}") for key in ("block_count", "embedding_length", "attention.head_count"))
    n_head_kv = meta.get(f"{arch}.attention.head_count_kv", n_head)
    if not (isinstance(n_layer, int) and isinstance(n_embd, int) and isinstance(n_head, int) and isinstance(n_head_kv, int)):
        return None
    if min(n_layer, n_embd, n_head, n_head_kv) <= 0:
        return None
    return n_layer, 2 * n_layer * n_head_kv * (n_embd // n_head) * 2


def check_fits(choice: DeviceChoice, *, weights_bytes: int, n_layer: int, kv_bytes: int) -> None:
    """Refuse, with the numbers, a device with too little free memory for the offloaded share
    of the weights plus the KV cache (llama.cpp keeps an offloaded layer's cache with it)."""
    if choice.device is None:
        return
    layers = n_layer + 1  # llama.cpp counts the output layer too
    offloaded = layers if choice.gpu_layers < 0 else min(choice.gpu_layers, layers)
    weights_mib = -(-weights_bytes * offloaded // layers // 2**20)
    kv_mib = -(-kv_bytes * min(offloaded, n_layer) // max(1, n_layer) // 2**20)
    # Compute buffers and the driver's own allocations: llama.cpp's typical margin for a small model.
    needed = weights_mib + kv_mib + 256
    if needed > choice.device.memory_free_mib:
        raise DeviceError(
            f"{choice.device.describe()} is too small: {offloaded} of {layers} layers take about {weights_mib} MiB, "
            f"their KV cache {kv_mib} MiB, plus 256 MiB of working buffers = {needed} MiB. "
            "Lower --kv-budget-mib or --gpu-layers, or use a smaller model"
        )


def is_software_vulkan(choice: DeviceChoice) -> bool:
    """The model runs on lavapipe (Mesa's Vulkan on the CPU, `llvmpipe`): the GPU tests' device.
    Its Mesa 22 build crashes in its own worker thread on a decode of 2 to 8 tokens after a
    single-token step and a larger batch (`llama_get_logits_ith` then faults), the shapes the
    grammar's forced runs make every line; a player's GPU driver is not lavapipe."""
    return choice.device is not None and choice.gpu_layers != 0 and "llvmpipe" in choice.device.description.lower()
