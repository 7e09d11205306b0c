"""The peak of each arithmetic's matrix product under the kernels this process was started with: the floor a
model's FLOPs set on its speed, measured under each kernel set of bench/runtime_rounds.py (an AVX2-only CPU's
int8 peak is a fraction of the same processor's with VNNI).

A 4096x1024x1024 product, best of 20: float32 (torch's or ONNX Runtime's, the faster), torch's bfloat16 (where
torch multiplies in bfloat16 natively) and ONNX Runtime's dynamically quantised int8 (the kernel the int8 graphs
run), in GFLOPS (int8: GOPS).
Usage (as a child of the runtime benches): python bench/peaks.py [--threads 2], one line of JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cross_encoder_speed import matmul_gflops  # noqa: E402
from query_encoding import best_seconds  # noqa: E402

SHAPE = (4096, 1024, 1024)


def ort_gflops(threads: int, quantised: bool, shape: tuple[int, int, int] = SHAPE, repeats: int = 20) -> float:
    """Best GFLOPS of ONNX Runtime's (m x k) @ (k x n) product in float32, or ``quantised`` as int8 graphs run it
    (weights int8 per column, the input quantised as it arrives)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from tour_pyserini.runtime.onnx import quiet_root_logger

    m, k, n = shape
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((k, n)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [weight],
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
        if quantised:
            path, plain = Path(tmp) / "q.onnx", path
            with quiet_root_logger():  # the quantiser's advice on pre-processing
                quantize_dynamic(str(plain), str(path), weight_type=QuantType.QInt8, per_channel=True)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        x = np.random.default_rng(1).standard_normal((m, k)).astype(np.float32)
        session.run(None, {"x": x})
        best = min(best_seconds(lambda: session.run(None, {"x": x}), 1) for _ in range(repeats))
    return 2 * m * k * n / best / 1e9


def peaks(threads: int) -> dict[str, float]:
    """GFLOPS of each arithmetic's product on ``threads`` threads: fp32 (the faster of torch's and ONNX Runtime's:
    MKL runs AVX2 kernels on an AMD processor that has AVX-512), int8, and bf16 where native."""
    import torch

    from tour_pyserini.devices import native_bf16

    fp32 = max(matmul_gflops(threads, torch.float32, SHAPE), ort_gflops(threads, quantised=False))
    measured = {"fp32": fp32, "int8": ort_gflops(threads, quantised=True)}
    if native_bf16("cpu"):
        measured["bf16"] = matmul_gflops(threads, torch.bfloat16, SHAPE)
    return measured


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    print(json.dumps(peaks(ap.parse_args().threads)))
