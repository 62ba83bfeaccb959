"""The model fingerprint of the in-process llama.cpp backend, written in every receipt: what a
replay compares to say whether another model, build, sampler or device wrote a line."""

from __future__ import annotations

from pathlib import Path

import llama_cpp

from loreguard.schemas.receipt import ModelFingerprint
from loreguard.server.inference.devices import DeviceChoice
from loreguard.server.inference.llama_native import NativeModel, supports_gpu_offload
from loreguard.server.inference.model_files import file_prefix_sha256
from loreguard.server.inference.sampling import SAMPLER
from loreguard.server.inference.token_masks import llguidance_version


def llama_fingerprint(
    model: NativeModel, model_path: Path, *, n_ctx: int, device: DeviceChoice, extra: dict[str, object]
) -> ModelFingerprint:
    """What a receipt records of the loaded model: the file, the build, the sampler, the device;
    `extra`: the backend's own (offloaded layers, engine, chat template...)."""
    description = model.description()
    return ModelFingerprint(
        backend="llama.cpp",
        file_name=model_path.name,
        size_bytes=model_path.stat().st_size,
        header_sha256=file_prefix_sha256(model_path),
        quantization=description.rsplit(" ", 1)[-1] if description else "",
        n_ctx=n_ctx,
        extra={
            "description": description,
            "llama_cpp_python": llama_cpp.__version__,
            "sampler": SAMPLER,
            "llguidance": llguidance_version(),
            "gpu_offload_supported": supports_gpu_offload(),
            "device": device.spec,
            "device_name": device.device.description if device.device else "CPU",
            **extra,
        },
    )
