"""The cross-encoder teacher: a HuggingFace sequence-classification model reading query and document.

A *residual* cross-encoder (what ``train_reranker`` makes by default) scores a pair as the retriever's
similarity, scaled, plus the model's logit: ``s * x_q . z_d + h(q, d)``. Its directory says so in
``tour_pyserini_residual.json`` (the scale and the bi-encoder's weights fingerprint); the similarity
comes from the dense index being searched, whose encoder must be that bi-encoder.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tour_pyserini.devices import DEFAULT_PRECISION
from tour_pyserini.encoders import weights_sha256
from tour_pyserini.encoders.checkpoints import checked_loading
from tour_pyserini.encoders.spec import check_model, check_weights
from tour_pyserini.errors import UserError
from tour_pyserini.index.docstore import Document
from tour_pyserini.numbers import Param
from tour_pyserini.runtime import (
    AUTO,
    RECIPE,
    RUNTIME_CHOICES,
    check_model_directory,
    resolve_runtime,
    resolve_runtime_precision,
)
from tour_pyserini.teachers.base import TEACHERS, ScoreRequest, Teacher, TeacherContext
from tour_pyserini.teachers.dense import DenseTeacher

RESIDUAL_FILE = "tour_pyserini_residual.json"
RUNTIME = Param(
    "runtime",
    str,
    AUTO,
    flag="--teacher-runtime",
    choices=RUNTIME_CHOICES,
    help="what runs a cross-encoder teacher: auto (default: openvino on the CPU for a local model "
    "directory where the runtime extra is installed, the fastest within the ranking bounds "
    "measured; else torch), torch, onnx (ONNX Runtime on the CPU: the model exported once, fused, "
    "cached beside its weights; --teacher-precision fp32, int8 or auto) or openvino (OpenVINO on "
    "the CPU, the same export unfused; fp32, bf16 or auto); onnx and openvino need the runtime "
    "extra",
)
# how a fingerprint names a runtime's scores: the way the graph was made is part of them
RUNTIME_NAMES = {"onnx": f"onnx {RECIPE}", "openvino": "openvino"}


def pair_text(doc: Document) -> str:
    """The document side of a pair: title and text joined by one space (what the shipped teachers read)."""
    return doc.contents


def pair_inputs(tokenizer, queries: Sequence[str], texts: Sequence[str], max_length: int):
    """Model inputs for (query, document text) pairs, shared by training and scoring so they cannot drift.

    ``[CLS] query [SEP] text [SEP]`` cut to ``max_length`` tokens, longest side first: the document is
    cut until it is as short as the query, then both; so a short query is never cut, and a query longer
    than the model's length (long information needs) still leaves room for the document.
    """
    return tokenizer(
        list(queries), list(texts), truncation="longest_first", max_length=max_length, padding=True, return_tensors="pt"
    )


def logits_to_scores(logits):
    """One relevance score per row: the logit of a one-output model; l1 - l0 (log-odds) of a two-output one."""
    return logits[:, 0] if logits.shape[1] == 1 else logits[:, 1] - logits[:, 0]


def head_modules(model) -> list:
    """The modules that turn the encoder's hidden states into the score: every child of the model but the
    encoder, and the encoder's pooler when it has one (BERT's)."""
    encoder = model.base_model
    heads = [child for child in model.children() if child is not encoder]
    return heads + ([encoder.pooler] if getattr(encoder, "pooler", None) is not None else [])


def run_in_float32(module, device_type: str) -> None:
    """Make ``module`` compute in float32 inside autocast: its inputs cast up, autocast off within.

    A score rounded to bfloat16 keeps 8 significant bits and ties candidates of a query; the head is a
    sliver of the work, so it keeps full precision.
    """
    import torch

    def cast_up(_, args):
        return tuple(a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args)

    module.register_forward_pre_hook(cast_up)
    module.forward = torch.autocast(device_type, enabled=False)(module.forward)


def write_residual(model_dir: str | Path, *, scale: float, encoder: str, encoder_sha256: str | None) -> None:
    """Mark ``model_dir`` as a residual cross-encoder over the bi-encoder ``encoder`` at ``scale``."""
    record = {"dense_scale": scale, "encoder": encoder, "encoder_weights_sha256": encoder_sha256}
    (Path(model_dir) / RESIDUAL_FILE).write_text(json.dumps(record, indent=2) + "\n")


def read_residual(model_dir: str | Path) -> dict | None:
    path = Path(model_dir).expanduser() / RESIDUAL_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def residual_dense(model_dir: str, residual: dict, context: TeacherContext) -> DenseTeacher:
    """The dense scorer a residual cross-encoder adds to its logits: the index's, if built by the encoder
    the cross-encoder was trained on top of (sharing the search's encoder and index)."""
    from tour_pyserini.encoders.pairing import index_document_sha
    from tour_pyserini.index.layout import IndexMeta

    index_dir = context.index_dir
    if index_dir is None:
        raise UserError(
            f"cross-encoder {model_dir} is residual (it adds the retriever's similarity): "
            "it needs a dense index to score with"
        )
    meta = IndexMeta.read(index_dir)
    built_by = index_document_sha(meta.encoder if meta else None)
    wanted = residual.get("encoder_weights_sha256")
    if wanted and built_by != wanted:
        raise UserError(
            f"cross-encoder {model_dir} was trained on top of encoder {residual['encoder']} "
            f"(weights {wanted[:12]}), but index {index_dir} was built by another encoder "
            f"(weights {(built_by or 'unknown')[:12]})"
        )
    return DenseTeacher.of(index_dir, context)


def check_runtime(precision: str, runtime: str, device: str) -> str:
    """The arithmetic of a cross-encoder at ``precision`` through ``runtime``, or one line naming the flag."""
    return resolve_runtime_precision(precision, runtime, device, "cross-encoder precision", RUNTIME.option)


def load_classifier(path: str, device: str, **options):
    """The sequence classifier at ``path`` in float32 (whatever the stored precision: CPU kernels for float16 are
    slow or missing), in eval mode on ``device``; ``options`` go to ``from_pretrained``."""
    import torch
    from transformers import AutoModelForSequenceClassification

    with checked_loading(f"cross-encoder {path!r}"):
        model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32, **options)
    return model.eval().to(device)


def exported_classifier(path: str, tokenizer, precision: str, runtime: str):
    """The classifier at ``path`` through ``runtime`` (onnx or openvino) at ``precision``: its graph from the cache
    beside the weights, exported there the first time (the torch model loads only then)."""
    from tour_pyserini.runtime import exported_model

    def export(write, graph: Path) -> None:
        examples = pair_inputs(tokenizer, ["a query", "another query"], ["a document", "a longer document text"], 32)
        write(load_classifier(path, "cpu"), examples, "logits", graph)

    return exported_model(path, weights_sha256(path), precision, runtime, export, f"cross-encoder {path!r}")


@TEACHERS.register
class CrossEncoderTeacher(Teacher):
    """Scores (query, "title text") pairs with a sequence-classification model.

    Pairs are sorted by length and scored in batches under ``torch.inference_mode`` (less padding,
    same scores); inputs are cut to ``max_length`` tokens (at most the tokenizer's ``model_max_length``,
    which ``train_reranker`` sets to the training length) by :func:`pair_inputs`. ``runtime`` is auto
    (:func:`~tour_pyserini.runtime.resolve_runtime`), torch, onnx (ONNX Runtime, CPU) or openvino (OpenVINO,
    CPU). ``precision`` is one of :data:`~tour_pyserini.runtime.RUNTIME_PRECISIONS`:
    ``bf16`` (torch) runs the encoder under bfloat16 autocast and the head in float32; ``int8`` (onnx) the
    graph with 8-bit weights; bf16 (openvino) OpenVINO's bfloat16 inference precision;
    ``auto`` (the default) is bf16 where the device has bfloat16 arithmetic, else fp32, through torch and
    OpenVINO, and :data:`~tour_pyserini.runtime.ONNX_AUTO` through ONNX Runtime where the CPU has VNNI, else fp32.
    """

    name = "cross-encoder"
    usage = "cross-encoder:PATH"
    options = (RUNTIME,)

    def __init__(
        self,
        path: str | Path,
        max_length: int = 512,
        batch_size: int = 32,
        device: str = "cpu",
        precision: str = DEFAULT_PRECISION,
        dense: DenseTeacher | None = None,
        dense_scale: float = 0.0,
        runtime: str = RUNTIME.default,
    ):
        import torch
        from transformers import AutoConfig, AutoTokenizer

        path = str(path)
        self.precision = check_runtime(precision, runtime, device)
        check_model("cross-encoder", path)
        check_weights("cross-encoder", path)
        self.runtime = runtime = resolve_runtime(runtime, device, path, RUNTIME.option, f"cross-encoder {path!r}")
        check_model_directory(path, runtime, RUNTIME.option, f"cross-encoder {path!r}")
        try:
            config = AutoConfig.from_pretrained(path)
        except OSError as e:
            raise UserError(f"cross-encoder {path!r} cannot be loaded: {str(e).splitlines()[0]}") from None
        architectures = config.architectures or []
        if not any(a.endswith("ForSequenceClassification") for a in architectures):
            raise UserError(
                f"cross-encoder {path!r} is not a sequence-classification model (architectures: "
                f"{architectures or 'none'}); its classification head would be random"
            )
        self.path = path
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.device = device
        self.model: Any = None  # the torch model, where torch runs the teacher
        self.graph: Callable[[Any], np.ndarray] | None = None  # else its exported graph, of pair_inputs' batches
        if runtime != "torch":
            self.graph = exported_classifier(path, self.tokenizer, self.precision, runtime)
        else:
            self.model = load_classifier(path, device)
            if self.precision == "bf16":
                for module in head_modules(self.model):
                    run_in_float32(module, torch.device(device).type)
        self.max_length = min(max_length, self.tokenizer.model_max_length)
        self.batch_size = batch_size
        self.dense = dense  # a residual cross-encoder's retriever similarity, times dense_scale
        self.dense_scale = dense_scale

    @classmethod
    def from_spec(cls, argument: str | None, context: TeacherContext) -> CrossEncoderTeacher:
        if not argument:
            raise UserError("the cross-encoder teacher needs a model: cross-encoder:PATH_OR_HUB_ID")
        options: dict[str, Any] = {} if context.max_length is None else {"max_length": context.max_length}
        options["runtime"] = RUNTIME.check(context.option(RUNTIME))
        options["precision"] = context.precision or DEFAULT_PRECISION
        check_runtime(options["precision"], options["runtime"], context.device)  # before the index opens
        residual = read_residual(argument)
        if residual:
            options["dense"] = residual_dense(argument, residual, context)
            options["dense_scale"] = float(residual["dense_scale"])
        return cls(argument, device=context.device, **options)

    def score_pairs(self, queries: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        import torch

        order = sorted(range(len(texts)), key=lambda i: len(queries[i]) + len(texts[i]))
        scores = np.empty(len(texts))
        bf16 = torch.autocast(
            torch.device(self.device).type,
            dtype=torch.bfloat16,
            enabled=self.model is not None and self.precision == "bf16",
        )
        with torch.inference_mode(), bf16:
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                inputs = pair_inputs(
                    self.tokenizer, [queries[i] for i in idx], [texts[i] for i in idx], self.max_length
                ).to(self.device)
                scores[idx] = logits_to_scores(self.logits(inputs))
        return scores

    def logits(self, inputs) -> np.ndarray:
        """The classifier's logits of a batch of :func:`pair_inputs`."""
        if self.graph is not None:
            return self.graph(inputs)
        return self.model(**inputs).logits.float().cpu().numpy()

    def score(self, requests: Sequence[ScoreRequest]) -> list[np.ndarray]:
        queries = [r.query for r in requests for _ in r.docids]
        texts = [pair_text(doc) for r in requests for doc in r.documents]
        flat = self.score_pairs(queries, texts)
        bounds = np.cumsum([0] + [len(r.docids) for r in requests])
        scores = [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        if self.dense is not None:
            scores = [s + self.dense_scale * d for s, d in zip(scores, self.dense.score(requests))]
        return scores

    @property
    def label(self) -> str:
        return f"cross-encoder:{Path(self.path).name}"

    @property
    def fingerprint(self) -> str:
        """The label, the length read, the precision and the weights' hash: a retrained, re-cut or
        differently rounded teacher never reuses scores. float32 is the precision left unnamed, so stores
        written before precisions existed (float32 scores) stay usable; a runtime other than torch is named.
        A residual teacher adds the dense
        scorer's own fingerprint (its index's content and encoder), so its scores on one index are never
        served on another, even one of the same name."""
        sha = weights_sha256(self.path)
        precision = "" if self.precision == "fp32" else f" precision {self.precision}"
        precision += "" if self.runtime == "torch" else f" runtime {RUNTIME_NAMES[self.runtime]}"
        residual = f" + {self.dense_scale} x {self.dense.fingerprint}" if self.dense is not None else ""
        weights = sha[:16] if sha else self.path
        return f"{self.label} max_length {self.max_length}{precision} weights {weights}{residual}"
