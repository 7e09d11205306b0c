"""The query encoder: Pyserini's own class for the encoder, with texts batched where that gives the same vectors.

Pyserini's ``FaissSearcher.batch_search`` encodes one query at a time. Its auto class (also Pyserini's
sentence and contriever classes) averages every token position, so handing it a padded batch would change
the vectors. We run its model ourselves instead: texts sorted by token length, padded in chunks of
``PADDED_CHUNK``, pooled over the real tokens only (or the first token), normalised as Pyserini normalises.
A chunk that needs no padding is Pyserini's own call. Other classes marked ``batched`` in
``encoders.classes`` (DPR) get texts of one token length per call. Either way a text encoded alone gets
Pyserini's vector bit for bit, a text in a batch one within about 2e-7: a matrix product of another shape
rounds differently. The remaining classes (their ``encode`` takes one string, or pads to a fixed length)
take one text per call.

``precision`` bf16 runs the model's matrix products in bfloat16 (autocast), about 2x faster in batches on a
CPU with bfloat16 units; its vectors differ from float32's by about 1e-3 (docs/algorithms.md, "Query encoding").
``runtime`` onnx or openvino runs the auto classes' transformer through that runtime (:mod:`.exported`), every
chunk padded and pooled here: fp32 vectors within about 3e-7 of torch's, int8 (onnx) or bf16 (openvino) as the
precision says.
"""

from __future__ import annotations

import json
import pickle
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tour_pyserini._java import import_pyserini
from tour_pyserini.encoders.checkpoints import POOLER, checked_loading
from tour_pyserini.encoders.classes import CLASSES
from tour_pyserini.encoders.exported import INPUTS, exported_transformer
from tour_pyserini.encoders.pyserini_compat import add_post_init, encoded_queries, encoded_table
from tour_pyserini.encoders.spec import EncoderSpec, encoder_identity
from tour_pyserini.errors import UserError
from tour_pyserini.runtime import RUNTIMES, resolve_runtime_precision

PYSERINI_QUERY_MAX_LENGTH = 256  # python -m pyserini.search.faiss's --max-length default
AUTO_FAMILY = ("auto", "sentence", "contriever")
# texts per padded forward pass, sorted by length: of 8, 16 and 32, within 3% of the fastest at batch 32 (the
# batch TOUR is timed at) in fp32 and bf16 on 2 cores (a settled study: docs/benchmarks.md, "Query encoding")
PADDED_CHUNK = 16
# what --encoder-precision auto means: bf16 moved 73 of SciFact's 300 test claims and 129 of nq-oracle's 1,000
# questions below Kendall tau 0.99 over their float32 top 100 (nDCG@10 within 0.0004), failing the bound
# the cross-encoder's bf16 passed (docs/benchmarks.md, "Query encoding"), so auto keeps float32
AUTO_PRECISION = "fp32"


def resolve_query_precision(precision: str | None, device: str = "cpu", runtime: str = "torch") -> str:
    """The arithmetic ``--encoder-precision`` (None: auto) means through ``runtime`` (``--encoder-runtime``) on
    ``device``: auto is :data:`AUTO_PRECISION` through every runtime; a precision the runtime or the device
    cannot run is the user's error, in one line, before any model loads."""
    return resolve_runtime_precision(
        precision or "auto",
        runtime,
        device,
        "--encoder-precision",
        "--encoder-runtime",
        auto=dict.fromkeys(RUNTIMES, AUTO_PRECISION),
    )


def same_length_groups(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Indices of ``texts`` grouped by their length in tokens as Pyserini's query encoder tokenises them
    (special tokens added, truncated to the model's limit); groups in order of first appearance."""
    groups: dict[int, list[int]] = {}
    for i, ids in enumerate(tokenizer(list(texts), add_special_tokens=True, truncation=True)["input_ids"]):
        groups.setdefault(len(ids), []).append(i)
    return list(groups.values())


def padded_chunks(lengths: Sequence[int], size: int = PADDED_CHUNK) -> list[list[int]]:
    """Indices sorted by length (stable), in chunks of ``size``: each chunk pads to its longest text only."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    return [order[i : i + size] for i in range(0, len(order), size)]


def pyserini_query_encoder(spec: EncoderSpec, device: str = "cpu"):
    """The object ``python -m pyserini.search.faiss`` builds for ``spec``: its class, with the keyword
    arguments its ``init_query_encoder`` passes. The auto classes get no prefix here: :class:`QueryEncoder`
    puts it before each text as they would, so that texts may share a call. Its checkpoint must fit the class."""
    with checked_loading(f"--encoder {spec.name} (the {spec.encoder_class} query encoder)", unused=POOLER):
        return _pyserini_query_encoder(spec, device)


def _pyserini_query_encoder(spec: EncoderSpec, device: str):
    if spec.encoder_class == "st-pipeline":
        from tour_pyserini.encoders.st_pipeline import PipelineEncoder

        return PipelineEncoder(spec.path, device=device, prefix=spec.query_prefix)
    klass = CLASSES[spec.encoder_class]
    add_post_init()  # Pyserini's ANCE, CosDPR and Aggretriever models under transformers 5
    encode = import_pyserini("pyserini.encode")
    kwargs: dict[str, Any] = dict(  # the keyword arguments of a Pyserini query encoder class
        encoder_dir=spec.path, tokenizer_name=spec.tokenizer, device=device, prefix=spec.query_prefix, fp16=False
    )
    if spec.encoder_class in AUTO_FAMILY:
        kwargs.update(pooling=spec.pooling, l2_norm=spec.l2_norm, prefix=None)
    elif spec.encoder_class == "qwen3":
        kwargs.update(
            l2_norm=spec.l2_norm, max_length=spec.query_max_length or PYSERINI_QUERY_MAX_LENGTH, explicit_truncate=False
        )
    elif spec.encoder_class == "openai-api":
        kwargs.update(max_length=spec.query_max_length or PYSERINI_QUERY_MAX_LENGTH)
    try:
        return encode.query_encoder_class_map[klass.query](**kwargs)
    except (OSError, ValueError, TypeError, AttributeError) as e:  # weights another class wrote, or no weights
        raise UserError(
            f"--encoder {spec.name}: Pyserini's {spec.encoder_class} query encoder cannot load it "
            f"({type(e).__name__}: {str(e).splitlines()[0][:200]})"
        ) from e


class QueryEncoder:
    """Encodes query texts to float32 vectors (n, d) through a Pyserini query encoder object.

    ``spec`` says which class the object is and which prefix goes before each text (None when unknown: one
    text per call, as Pyserini calls it). ``threads`` is the torch thread count set before each call
    (default: torch's own when made): torch and Faiss may share one OpenMP runtime, so a search on other
    threads would silently change it. ``graph``: the transformer through another runtime
    (:func:`~tour_pyserini.encoders.exported.exported_transformer`), which then runs every chunk; ``runtime``
    names it.
    """

    def __init__(
        self,
        pyserini_encoder,
        spec: EncoderSpec | None = None,
        threads: int | None = None,
        precision: str = "fp32",
        graph=None,
        runtime: str = "torch",
    ):
        import torch

        if precision not in ("fp32", "bf16", "int8"):
            raise UserError(f"query encoder precision {precision!r}: fp32, bf16 or int8 (resolve 'auto' first)")
        self.pyserini = pyserini_encoder
        self.spec = spec  # what the vectors are (TTT-Embed states and pairings check it); None when unknown
        self.threads = threads or torch.get_num_threads()
        self.precision = precision
        self.graph = graph
        self.runtime = runtime
        self.chunk = PADDED_CHUNK  # texts per padded forward pass (auto classes)
        self._dimension: int | None = None

    @classmethod
    def build(
        cls, spec: EncoderSpec, device: str = "cpu", precision: str = "fp32", runtime: str = "torch", loaded=None
    ) -> QueryEncoder:
        """Pyserini's query encoder class for ``spec`` (pooling, normalisation and prefix as it says), on
        ``device``, its matrix products in ``precision`` as ``runtime`` runs it (resolved and checked by
        :func:`resolve_query_precision` and :func:`~tour_pyserini.encoders.exported.check_exportable`);
        ``loaded``: that Pyserini object, already loaded for ``spec`` on ``device``, to share."""
        pyserini = loaded if loaded is not None else pyserini_query_encoder(spec, device)
        graph = None
        if runtime != "torch":
            graph = exported_transformer(pyserini.model, pyserini.tokenizer, spec.path, precision, runtime)
        return cls(pyserini, spec, precision=precision, graph=graph, runtime=runtime)

    @classmethod
    def from_encoded(cls, directory: str | Path) -> QueryEncoder:
        """Pre-encoded queries in Pyserini's format (``embedding.pkl``: a text -> vector table), read by its
        own ``QueryEncoder``; a text without a vector is one line."""
        directory = check_encoded_queries(directory)
        return cls(encoded_queries(directory))

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            config = getattr(getattr(self.pyserini, "model", None), "config", None)
            if self.spec is not None and self.spec.encoder_class in (*AUTO_FAMILY, "dpr") and config is not None:
                self._dimension = config.hidden_size
            elif not getattr(self.pyserini, "has_model", True):  # pre-encoded queries only
                self._dimension = len(next(iter(encoded_table(self.pyserini).values())))
            else:  # projection heads (ANCE, aggretriever, pipelines' Dense layers): what one text gives
                self._dimension = len(self.encode(["dimension"])[0])
        return self._dimension

    def _texts(self, texts: Sequence[str]) -> list[str]:
        prefix = self.spec.query_prefix if self.spec and self.spec.encoder_class in AUTO_FAMILY else None
        return [f"{prefix} {t}" for t in texts] if prefix else list(texts)  # Pyserini's auto classes' rule

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        torch.set_num_threads(self.threads)
        if not texts:
            return np.empty((0, self.dimension), dtype=np.float32)
        texts = self._texts(texts)
        if not getattr(self.pyserini, "has_model", True):
            return self._look_up(texts)
        klass = CLASSES.get(self.spec.encoder_class) if self.spec else None
        device = getattr(self.pyserini, "device", "cpu")
        bf16 = self.precision == "bf16" and self.graph is None  # a runtime's bf16 is its own
        with torch.inference_mode(), torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
            if klass is not None and klass.name == "st-pipeline":
                return self.pyserini.encode(texts)
            if klass is None or not klass.batched:
                return np.stack([np.asarray(self.pyserini.encode(t), dtype=np.float32).reshape(-1) for t in texts])
            if klass.name in AUTO_FAMILY:
                ids = self.pyserini.tokenizer(
                    texts, add_special_tokens=True, truncation=True, return_token_type_ids=False
                )["input_ids"]
                return self._assemble(
                    padded_chunks([len(i) for i in ids], self.chunk),
                    lambda rows: self._padded([texts[r] for r in rows], [ids[r] for r in rows]),
                )
            return self._assemble(
                same_length_groups(self.pyserini.tokenizer, texts),
                lambda rows: self._pyserini_batch([texts[r] for r in rows]),
            )

    @staticmethod
    def _assemble(groups: list[list[int]], encode) -> np.ndarray:
        """One matrix from ``encode(rows)`` of each group of row indices (one group at least)."""
        first, *rest = groups
        group = encode(first)  # its width is the matrix's
        vectors = np.empty((sum(map(len, groups)), group.shape[1]), dtype=np.float32)
        vectors[first] = group
        for rows in rest:
            vectors[rows] = encode(rows)
        return vectors

    def _pyserini_batch(self, texts: list[str]) -> np.ndarray:
        """Pyserini's own call on texts of one token length (no padding): a text alone gets its vector bit for bit."""
        return np.asarray(self.pyserini.encode(texts), dtype=np.float32).reshape(len(texts), -1)

    def _padded(self, texts: list[str], ids: list[list[int]]) -> np.ndarray:
        """Pyserini's ``AutoQueryEncoder.encode`` (mean or first-token pooling, L2 normalisation) of texts
        tokenised as it tokenises them (``ids``), padded to the longest: the mean is over real tokens only."""
        import torch

        width = max(map(len, ids))
        if self.graph is None and all(len(i) == width for i in ids):
            return self._pyserini_batch(texts)
        encoder = self.pyserini
        input_ids = torch.full((len(ids), width), encoder.tokenizer.pad_token_id or 0, dtype=torch.long)
        mask = torch.zeros((len(ids), width), dtype=torch.long)
        for j, row in enumerate(ids):
            input_ids[j, : len(row)] = torch.tensor(row)
            mask[j, : len(row)] = 1
        if self.graph is not None:
            hidden = torch.from_numpy(self.graph(dict(zip(INPUTS, (input_ids, mask)))))
        else:
            hidden = encoder.model(input_ids=input_ids.to(encoder.device), attention_mask=mask.to(encoder.device))[0]
            hidden = hidden.float().cpu()
        if encoder.pooling == "mean":
            weights = mask.unsqueeze(-1).float()
            pooled = ((hidden * weights).sum(dim=1) / weights.sum(dim=1)).numpy()
        else:  # Pyserini's auto class takes the first token for every pooling but mean
            pooled = hidden[:, 0].numpy()
        if encoder.l2_norm:
            pooled = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled

    def _look_up(self, texts: Sequence[str]) -> np.ndarray:
        table = encoded_table(self.pyserini)
        missing = [t for t in texts if t not in table]
        if missing:
            raise UserError(
                f"the pre-encoded queries have no vector for the query text {missing[0][:80]!r} "
                f"({len(missing)} of {len(texts)} texts missing)"
            )
        return np.stack([np.asarray(table[t], dtype=np.float32).reshape(-1) for t in texts])


ENCODED_FILE = "embedding.pkl"  # Pyserini's pre-encoded queries: a pandas table of 'text' and 'embedding'
# what unpickling a file that is not a pickle, or one cut short, raises (pickle's own errors and its decoders')
_NOT_A_PICKLE = (
    pickle.UnpicklingError,
    EOFError,
    ValueError,
    TypeError,
    AttributeError,
    ImportError,
    IndexError,
    KeyError,
    UnicodeDecodeError,
    OverflowError,
)


class QueryEncoders:
    """The query encoders one process uses, each built once: the searcher's, and that of every teacher asking for
    the same encoder (its identity, weights hashed), device, precision and runtime — the dense teacher, a residual
    cross-encoder's similarity, an ensemble's parts. Loading a model is seconds and its memory; one copy serves all,
    and ways of running one model (a teacher's torch float32 beside the searcher's OpenVINO graph) share its
    loaded weights."""

    def __init__(self) -> None:
        self._built: dict[tuple, QueryEncoder] = {}

    @staticmethod
    def key(spec: EncoderSpec, device: str, precision: str, runtime: str) -> tuple:
        return json.dumps(encoder_identity(spec), sort_keys=True), device, precision, runtime

    def add(self, encoder: QueryEncoder, device: str = "cpu") -> QueryEncoder:
        """Share ``encoder`` (built elsewhere) with those asking for its spec on ``device``."""
        if encoder.spec is not None:
            self._built.setdefault(self.key(encoder.spec, device, encoder.precision, encoder.runtime), encoder)
        return encoder

    def get(
        self, spec: EncoderSpec, device: str = "cpu", precision: str = "fp32", runtime: str = "torch"
    ) -> QueryEncoder:
        key = self.key(spec, device, precision, runtime)
        if key not in self._built:
            loaded = next((e.pyserini for k, e in self._built.items() if k[:2] == key[:2]), None)
            self._built[key] = QueryEncoder.build(spec, device, precision, runtime, loaded=loaded)
        return self._built[key]


def _encoded_directory(directory: str | Path) -> Path:
    """A directory of Pyserini's pre-encoded queries, or one line: a name of Pyserini's pre-encoded query sets
    would be downloaded at run time, which this toolkit never does."""
    path = Path(directory).expanduser()
    if path.is_dir():
        if not (path / ENCODED_FILE).is_file():
            raise UserError(f"--encoded-queries {directory}: no {ENCODED_FILE} (Pyserini's pre-encoded query format)")
        return path
    if path.exists() or str(directory).startswith((".", "/", "~")):
        raise UserError(f"--encoded-queries {directory}: no such directory")
    raise UserError(
        f"--encoded-queries {directory}: a name of Pyserini's pre-encoded queries needs a download, "
        "which this toolkit does not do at run time; download it once (pyserini.util."
        "download_encoded_queries) and pass its directory"
    )


def as_vector(value) -> np.ndarray | None:
    """``value`` as a flat array of numbers if it is a vector of them (an array, list or tuple, or a 1 x d
    matrix), else None."""
    if not isinstance(value, (np.ndarray, list, tuple)):
        return None
    try:
        array = np.asarray(value)
    except ValueError:  # a ragged sequence
        return None
    if array.dtype.kind not in "fiu" or array.ndim not in (1, 2) or array.size != array.shape[-1]:
        return None
    return array.reshape(-1)


def vector_problem(vector: np.ndarray | None, dimension: int) -> str | None:
    """Why ``vector`` (as :func:`as_vector` gives it) is not a query vector of ``dimension`` numbers (None when
    it is one)."""
    if vector is None:
        return "not a vector of numbers"
    if vector.size != dimension:
        return f"{vector.size} numbers, not {dimension}"
    if not np.all(np.isfinite(vector)):
        return "not finite"
    return None


def read_encoded_queries(directory: str | Path, dimension: int | None = None) -> tuple[dict[str, str | None], int]:
    """Pyserini's pre-encoded queries in ``directory``, checked before the JVM or a model loads: ``{text: why its
    vector is unusable, or None}`` and the vectors' dimension (``dimension``, the index's, when given; else the
    commonest). A file that is not a table of 'text' and 'embedding', or is empty, is one line."""
    import pandas as pd

    path = _encoded_directory(directory) / ENCODED_FILE
    where = f"--encoded-queries {directory}"
    try:
        frame = pd.read_pickle(path)
    except _NOT_A_PICKLE as e:
        reason = str(e).splitlines()[0][:120] if str(e) else "the file ends too soon"
        raise UserError(
            f"{where}: {ENCODED_FILE} cannot be read as a pickled table ({type(e).__name__}: {reason})"
        ) from None
    if not isinstance(frame, pd.DataFrame):
        raise UserError(
            f"{where}: {ENCODED_FILE} holds a {type(frame).__name__}, not a table (a pandas DataFrame "
            "with columns 'text' and 'embedding', as Pyserini writes)"
        )
    if missing := [c for c in ("text", "embedding") if c not in frame.columns]:
        raise UserError(
            f"{where}: {ENCODED_FILE} has no column {' or '.join(map(repr, missing))} (Pyserini's "
            "table has 'text' and 'embedding')"
        )
    if frame.empty:
        raise UserError(f"{where}: {ENCODED_FILE} holds no queries")
    rows = [(text, as_vector(v)) for text, v in zip(frame["text"].tolist(), frame["embedding"].tolist())]
    sizes = Counter(v.size for _, v in rows if v is not None and vector_problem(v, v.size) is None)
    if sizes:
        table_dimension = sizes.most_common(1)[0][0]
    elif dimension is not None:
        table_dimension = dimension
    else:
        raise UserError(f"{where}: {ENCODED_FILE} holds no finite vector of numbers")
    if dimension is not None and sizes and table_dimension != dimension:
        raise UserError(f"{where} holds {table_dimension}-d vectors; the index holds {dimension}-d ones")
    return {text: vector_problem(v, table_dimension) for text, v in rows if isinstance(text, str)}, table_dimension


def check_encoded_queries(directory: str | Path, dimension: int | None = None) -> Path:
    """The directory of Pyserini's pre-encoded queries, once its table reads and its vectors have the index's
    ``dimension`` (:func:`read_encoded_queries`)."""
    read_encoded_queries(directory, dimension)
    return _encoded_directory(directory)


def check_encoded_texts(directory: str | Path, texts: dict[str, str], dimension: int | None = None) -> None:
    """Every topic's text (qid -> text) has a usable vector in the pre-encoded queries, or one line counting the
    topics without one, by cause; read before any model loads."""
    table, _ = read_encoded_queries(directory, dimension)
    causes: dict[str, list[str]] = {}
    for qid, text in texts.items():
        problem = table[text] if text in table else "missing"
        if problem:
            causes.setdefault(problem, []).append(qid)
    if causes:
        found = "; ".join(f"{len(qids)} {cause} (first: topic {qids[0]})" for cause, qids in causes.items())
        raise UserError(
            f"--encoded-queries {directory}: {sum(map(len, causes.values()))} of {len(texts)} topics "
            f"have no usable vector: {found}"
        )
