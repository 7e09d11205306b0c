"""The floor a model's arithmetic sets on its speed: its FLOPs over the machine's measured matrix-product peak.

A transformer encoder's FLOPs are counted from its configuration on each text's real tokens (no padding); the peak
is the best of a 4096x1024x1024 product in float32 (torch's or ONNX Runtime's, the faster: MKL runs AVX2 kernels on
AMD processors that have AVX-512) and, where the CPU multiplies in bfloat16 natively, torch's bfloat16, measured
in a process started under the kernel set being timed (:func:`peaks`, called by the timing runner's child).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

SHAPE = (4096, 1024, 1024)


def layer_flops(tokens: int, hidden: int, intermediate: int) -> int:
    """Multiply-adds x 2 of one encoder layer over ``tokens``: the Q, K, V and output projections (4 T H^2), the
    feed-forward block (2 T H I) and attention's scores and weighted sum (2 T^2 H)."""
    return 2 * (4 * tokens * hidden**2 + 2 * tokens * hidden * intermediate + 2 * tokens**2 * hidden)


def encoder_gflop(layers: int, hidden: int, intermediate: int, tokens: Sequence[int]) -> float:
    """Mean GFLOP a text of an encoder of ``layers`` layers, over texts of ``tokens`` real tokens each."""
    return sum(layers * layer_flops(t, hidden, intermediate) for t in tokens) / len(tokens) / 1e9


def best_seconds(work: Callable[[], object], repeats: int) -> float:
    work()  # the first call allocates and picks kernels
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best


def torch_gflops(threads: int, dtype_name: str, repeats: int = 20) -> float:
    import torch

    torch.set_num_threads(threads)
    m, k, n = SHAPE
    dtype = getattr(torch, dtype_name)
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    return 2 * m * k * n / best_seconds(lambda: a @ b, repeats) / 1e9


def onnx_gflops(threads: int, repeats: int = 20) -> float | None:
    """ONNX Runtime's float32 product, or None where ONNX Runtime and onnx are not installed."""
    try:
        import numpy as np
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    m, k, n = SHAPE
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((k, n)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((m, k)).astype(np.float32)
    return 2 * m * k * n / best_seconds(lambda: session.run(None, {"x": x}), repeats) / 1e9


def peaks(threads: int) -> dict[str, float]:
    """GFLOPS of each arithmetic's product on ``threads`` threads in this process: fp32, and bf16 where native."""
    from tour_pyserini.devices import native_bf16

    measured = {"fp32": max(torch_gflops(threads, "float32"), onnx_gflops(threads) or 0.0)}
    if native_bf16("cpu"):
        measured["bf16"] = torch_gflops(threads, "bfloat16")
    return measured
