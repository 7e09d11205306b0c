"""A torch model through ONNX Runtime: exported once, cached beside its weights, run with the process's threads.

The graph of a model directory lives in ``<model>/tour_pyserini_onnx/<weights SHA-256, 16
digits>-<precision>-<recipe>/`` (``model.onnx`` and ``graph.json``, its SHA-256 and the versions that wrote it), or
under ``$XDG_CACHE_HOME/tour_pyserini/tour_pyserini_onnx/`` (by default ``~/.cache``) where that folder cannot be
written and holds no whole graph (a model installed as a package, a cache folder left read-only): written whole or
not at all (staged apart, synced, then renamed), one process at a time (the others wait for it and read its graph),
read on later runs only if its bytes are still the SHA-256 recorded (else exported again, with a warning); weights
that change get a new folder. The fp32 graph is the model exported with eager attention, then rewritten by
ONNX Runtime's transformer fusions (each attention layer one ``Attention`` kernel, layer norms and GELUs fused),
kept only where its outputs on the export's examples match the plain graph's. ``int8`` is the fp32 graph with its
matrix products' weights quantised to signed 8 bits (per output column) and their inputs quantised as they arrive
(dynamic quantisation): see docs/algorithms.md. ONNX Runtime runs as many threads as torch was given (the command's
``--threads``, else torch's default), so what else runs on the machine does not change its arithmetic.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np

from tour_pyserini.errors import UserError
from tour_pyserini.files.digest import file_sha256
from tour_pyserini.runtime.choice import INT8

log = logging.getLogger(__name__)

CACHE = "tour_pyserini_onnx"
GRAPH = "model.onnx"
RECORD = "graph.json"  # what made the graph beside it, its SHA-256 included
OPSET = 17
RECIPE = "fused"  # names the export's steps in the cache folder: graphs made another way are never read back
PLAIN = "plain"  # the graph as traced, for runtimes that fuse it themselves (OpenVINO)
FUSED_TOLERANCE = 1e-4  # the most a fused graph's output may differ from the plain graph's on the examples


def graph_path(model_dir: str | Path, weights_sha256: str, precision: str, recipe: str = RECIPE) -> Path:
    """Where the graph of the model in ``model_dir`` with these weights is cached at ``precision``: beside the
    weights where that cache folder can be written (or made) or holds the graph whole, else in the user's cache
    (the weights' hash keys both)."""
    name = f"{weights_sha256[:16]}-{precision}-{recipe}"
    beside = Path(model_dir) / CACHE / name / GRAPH
    if writable(beside.parents[1]) or graph_fault(beside) is None:
        return beside
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tour_pyserini" / CACHE / name / GRAPH


def writable(folder: Path) -> bool:
    """Whether this process may write in ``folder``, or make it: the nearest of it and the folders above it that
    exists is a directory it may write in."""
    nearest = next(p for p in (folder, *folder.parents) if p.exists())
    return nearest.is_dir() and os.access(nearest, os.W_OK | os.X_OK)


def graph_fault(path: Path) -> str | None:
    """Why the cached graph at ``path`` must not be read, or None: its record must name the SHA-256 its bytes had
    when it was written (a graph corrupted, truncated or emptied since has another)."""
    try:
        recorded = json.loads((path.parent / RECORD).read_text())["graph_sha256"]
    except (OSError, ValueError):
        return f"its record {RECORD} is missing or unreadable"
    except (KeyError, TypeError):
        return f"its record {RECORD} names no SHA-256 of it (an earlier version's record)"
    try:
        return None if file_sha256(path) == recorded else "its bytes are not the SHA-256 its record names"
    except OSError:
        return "its graph is missing or unreadable"


def traceable(model, names: list[str], output: str):
    """``model`` (a HuggingFace model, or a module returning a dict) as the exporter traces it: inputs by position,
    in the order of ``names``, and one output, ``output`` (a model's output is no tensor)."""
    import torch

    class Traced(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *tensors):
            return self.model(**dict(zip(names, tensors)))[output]

    # in eval mode: the exporter restores the mode it found, which would otherwise switch the model's dropout on
    return Traced().eval()


@contextlib.contextmanager
def eager_attention(model) -> Iterator[None]:
    """``model`` (a HuggingFace model, or one that passes the call on) with eager attention while it is traced:
    eager attention exports as the matrix products ONNX Runtime's attention fusion recognises; the model's own
    implementation is restored after."""
    before = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        yield
    finally:
        model.set_attn_implementation(before)


def export_graph(model, inputs: Mapping, output: str, path: Path) -> None:
    """Export ``model`` (a HuggingFace encoder in eval mode) called on ``inputs``
    (name -> tensor, padded examples of a batch) to an ONNX graph at ``path`` whose batch and sequence axes are
    free, with one output ``output`` (:func:`trace_graph`), then fused (:func:`fuse_graph`)."""
    trace_graph(model, inputs, output, path)
    fuse_graph(path, model.config.num_attention_heads, model.config.hidden_size, inputs)


def trace_graph(model, inputs: Mapping, output: str, path: Path) -> None:
    """The plain ONNX graph of ``model`` traced on ``inputs`` at ``path``, as :func:`export_graph` describes."""
    import torch

    names = list(inputs)
    axes = {name: {0: "batch", 1: "sequence"} for name in names} | {output: {0: "batch"}}
    # the tracer's notes on Python branches, which the examples' padding settles, are not shown
    with eager_attention(model), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            traceable(model, names, output),
            tuple(inputs[n] for n in names),
            str(path),
            input_names=names,
            output_names=[output],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )


def fuse_graph(path: Path, heads: int, hidden: int, inputs: Mapping) -> bool:
    """Rewrite the graph at ``path`` with ONNX Runtime's BERT fusions (``heads`` attention heads of a ``hidden``
    wide model), unless the fused graph's output on ``inputs`` differs from the plain one's by more than
    :data:`FUSED_TOLERANCE` (a model the fusions misread). Whether it was rewritten."""
    from onnxruntime.transformers.optimizer import optimize_model

    fused = path.with_name("fused.onnx")
    with quiet_root_logger():  # the optimiser reports each fusion it tries
        optimize_model(str(path), model_type="bert", num_heads=heads, hidden_size=hidden).save_model_to_file(str(fused))
    plain, candidate = OnnxModel(path)(inputs), OnnxModel(fused)(inputs)
    if np.abs(plain - candidate).max() > FUSED_TOLERANCE:
        log.warning("ONNX Runtime's fusions change this model's output; keeping its unfused graph")
        fused.unlink()
        return False
    fused.replace(path)
    return True


@contextlib.contextmanager
def quiet_root_logger():
    """The root logger at ERROR for the block: ONNX Runtime's tools advise and note each tensor on it."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))
    try:
        yield
    finally:
        root.setLevel(level)


def quantize_graph(fp32: Path, path: Path) -> None:
    """The int8 graph of ``fp32``: its matrix products' weights as signed 8-bit integers with one scale per
    output column, inputs quantised as they arrive. Per column, not per matrix: a fused attention's weight is
    its three projections side by side, and one scale for all three cost SciFact training claims 0.0034
    nDCG@10 at rerank@20 (per column: 0.0000; docs/benchmarks.md)."""
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with quiet_root_logger():  # the fused kernels' outputs have no types shape inference knows: they are floats
        quantize_dynamic(
            str(fp32),
            str(path),
            weight_type=QuantType.QInt8,
            per_channel=True,
            extra_options={"DefaultTensorType": TensorProto.FLOAT},
        )


def cached_graph(
    model_dir: str | Path, weights_sha256: str, precision: str, export: Callable[[Path], None], recipe: str = RECIPE
) -> Path:
    """The graph at ``precision`` (fp32 or int8) of the model in ``model_dir``: read from the cache where its bytes
    are those recorded (:func:`graph_fault`), else made there once: ``export(path)`` writes the fp32 graph, int8
    quantises it. ``recipe`` names how ``export`` makes it (:data:`RECIPE`, or :data:`PLAIN` for the graph as
    traced). A damaged graph is made again, with a warning; processes making one graph take turns."""
    path = graph_path(model_dir, weights_sha256, precision, recipe)
    if graph_fault(path) is None:
        return path
    source = cached_graph(model_dir, weights_sha256, "fp32", export, recipe) if precision == INT8 else None
    with export_lock(path.parent):
        fault = graph_fault(path)  # None where another process made it while this one waited
        if fault is None:
            return path
        if path.parent.exists():
            log.warning("not reading the ONNX graph cached in %s (%s): exporting it again", path.parent, fault)
        log.info("exporting %s to ONNX (%s), once: %s", model_dir, precision, path.parent)
        with staged_graph(path.parent) as staged:
            if source is None:
                export(staged / GRAPH)
            else:
                quantize_graph(source, staged / GRAPH)
            record = graph_record(staged / GRAPH, weights_sha256, precision, recipe)
            (staged / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return path


@contextlib.contextmanager
def export_lock(folder: Path) -> Iterator[None]:
    """The graph folder ``folder``'s lock across processes for the block (``flock`` on a file beside it, which the
    kernel releases when its holder dies): a second process exporting the same graph waits for the first."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        lock = open(folder.with_name(f".{folder.name}.lock"), "a")
    except OSError as e:
        raise UserError(f"cannot write the ONNX graph cache {folder.parent}: {e.strerror}") from None
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("another process is making the ONNX graph in %s: waiting for it", folder)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@contextlib.contextmanager
def staged_graph(folder: Path) -> Iterator[Path]:
    """A folder beside ``folder``, named as no graph is, that replaces it (on disk first) when the block succeeds:
    a crash leaves no half graph under ``folder``'s name, and what it left is removed by the next export (under
    :func:`export_lock`, so no other process is writing it)."""
    staged = folder.with_name(f".{folder.name}.partial")
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir()
    try:
        yield staged
        for written in (*staged.iterdir(), staged):
            sync(written)
        try:
            shutil.rmtree(folder, ignore_errors=True)  # a damaged graph's
            os.replace(staged, folder)
        except OSError as e:
            raise UserError(f"cannot write the ONNX graph cache {folder}: {e.strerror}") from None
        sync(folder.parent)
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def sync(path: Path) -> None:
    """``path``'s bytes (a file's, or a folder's entries) on disk: a graph renamed into place is whole after a
    power cut too."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def graph_record(graph: Path, weights_sha256: str, precision: str, recipe: str) -> dict:
    """What made the cached graph ``graph`` and its SHA-256: the weights, the precision, the recipe and the versions
    of the tools that made it (ONNX Runtime's only where it fused or quantised the graph: a plain graph needs no
    ONNX Runtime)."""
    import onnx
    import torch

    record = {
        "graph_sha256": file_sha256(graph),
        "weights_sha256": weights_sha256,
        "precision": precision,
        "recipe": recipe,
        "opset": OPSET,
        "torch": torch.__version__,
        "onnx": onnx.__version__,
    }
    if recipe != PLAIN:
        import onnxruntime

        record["onnxruntime"] = onnxruntime.__version__
    return record


class OnnxModel:
    """An ONNX graph run by ONNX Runtime on the CPU with torch's thread count; idle threads sleep where the
    command found the cores shared (``OMP_WAIT_POLICY=PASSIVE``), as torch's do."""

    def __init__(self, path: Path):
        import onnxruntime as ort
        import torch

        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.inter_op_num_threads = 1
        if os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE":
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.path = path
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def __call__(self, inputs: Mapping) -> np.ndarray:
        """The graph's first output for ``inputs`` (name -> integer array or tensor; names it lacks are left)."""
        return self.session.run(None, {name: np.asarray(inputs[name], dtype=np.int64) for name in self.inputs})[0]
