"""A torch model through OpenVINO on the CPU: the plain exported ONNX graph (cached as :mod:`.onnx` caches graphs),
compiled with the process's thread count, in float32 or, where the CPU multiplies in bfloat16 natively, bfloat16.

OpenVINO fuses the graph itself, so it reads the graph as traced, not ONNX Runtime's fused one (whose kernels are
ONNX Runtime's own). bf16 is OpenVINO's inference precision hint: its matrix products, and what else it chooses to
run in bfloat16, round to bfloat16 (docs/algorithms.md).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path

import numpy as np

HINTS = {"fp32": "f32", "bf16": "bf16"}


class OpenVinoModel:
    """An ONNX graph compiled by OpenVINO for the CPU at ``precision`` (fp32 or bf16) on torch's thread count,
    for the lowest latency of one request at a time (an infer request serves one caller: calls take turns)."""

    def __init__(self, path: Path, precision: str):
        import openvino
        import torch

        config = {
            "INFERENCE_NUM_THREADS": torch.get_num_threads(),
            "INFERENCE_PRECISION_HINT": HINTS[precision],
            "PERFORMANCE_HINT": "LATENCY",
        }
        self.path = path
        self.compiled = openvino.Core().compile_model(str(path), "CPU", config)
        self.inputs = [port.get_any_name() for port in self.compiled.inputs]
        self.request = self.compiled.create_infer_request()
        self.lock = threading.Lock()

    def __call__(self, inputs: Mapping) -> np.ndarray:
        """The graph's first output for ``inputs`` (name -> integer array or tensor; names it lacks are left)."""
        feed = {name: np.asarray(inputs[name], dtype=np.int64) for name in self.inputs}
        with self.lock:
            return np.array(self.request.infer(feed)[0])
