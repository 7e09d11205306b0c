"""The query encoder: Pyserini's own class for the encoder, with texts of one token length encoded in one call
where that gives the same vectors.

Pyserini's ``FaissSearcher.batch_search`` encodes one query at a time. Its auto class averages every
token position, so a padded batch would change the vectors; texts of one length need no padding and share
one matrix product (about 3x faster on SciFact's claims than one at a time). A text encoded alone gets
Pyserini's vector bit for bit, a text in a group one within about 1e-7 (a matrix product of another shape
rounds differently). Classes marked ``batched`` in ``encoders.classes`` are grouped so; the others (their
``encode`` takes one string, or pads to a fixed length) take one text per call.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tour_pyserini._java import import_pyserini
from tour_pyserini.encoders.classes import CLASSES
from tour_pyserini.encoders.pyserini_compat import add_post_init
from tour_pyserini.encoders.spec import EncoderSpec
from tour_pyserini.errors import UserError

PYSERINI_QUERY_MAX_LENGTH = 256  # python -m pyserini.search.faiss's --max-length default
AUTO_FAMILY = ("auto", "sentence", "contriever")


def same_length_groups(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Indices of ``texts`` grouped by their length in tokens as Pyserini's query encoder tokenises them
    (special tokens added, truncated to the model's limit); groups in order of first appearance."""
    groups: dict[int, list[int]] = {}
    for i, ids in enumerate(tokenizer(list(texts), add_special_tokens=True, truncation=True)["input_ids"]):
        groups.setdefault(len(ids), []).append(i)
    return list(groups.values())


def pyserini_query_encoder(spec: EncoderSpec, device: str = "cpu"):
    """The object ``python -m pyserini.search.faiss`` builds for ``spec``: its class, with the keyword
    arguments its ``init_query_encoder`` passes. The auto classes get no prefix here: :class:`QueryEncoder`
    puts it before each text as they would, so that texts may share a call."""
    if spec.encoder_class == "st-pipeline":
        from tour_pyserini.encoders.st_pipeline import PipelineEncoder

        return PipelineEncoder(spec.path, device=device, prefix=spec.query_prefix)
    klass = CLASSES[spec.encoder_class]
    add_post_init()  # Pyserini's ANCE, CosDPR and Aggretriever models under transformers 5
    encode = import_pyserini("pyserini.encode")
    kwargs = dict(encoder_dir=spec.path, tokenizer_name=spec.tokenizer, device=device, prefix=spec.query_prefix,
                  fp16=False)  # fmt: skip
    if spec.encoder_class in AUTO_FAMILY:
        kwargs.update(pooling=spec.pooling, l2_norm=spec.l2_norm, prefix=None)
    elif spec.encoder_class == "qwen3":
        kwargs.update(l2_norm=spec.l2_norm, max_length=spec.query_max_length or PYSERINI_QUERY_MAX_LENGTH,
                      explicit_truncate=False)  # fmt: skip
    elif spec.encoder_class == "openai-api":
        kwargs.update(max_length=spec.query_max_length or PYSERINI_QUERY_MAX_LENGTH)
    try:
        return encode.query_encoder_class_map[klass.query](**kwargs)
    except (OSError, ValueError, TypeError, AttributeError) as e:  # weights another class wrote, or no weights
        raise UserError(f"--encoder {spec.name}: Pyserini's {spec.encoder_class} query encoder cannot load it "
                        f"({type(e).__name__}: {str(e).splitlines()[0][:200]})") from e  # fmt: skip


class QueryEncoder:
    """Encodes query texts to float32 vectors (n, d) through a Pyserini query encoder object.

    ``spec`` says which class the object is and which prefix goes before each text (None when unknown: one
    text per call, as Pyserini calls it). ``threads`` is the torch thread count set before each call
    (default: torch's own when made): torch and Faiss may share one OpenMP runtime, so a search on other
    threads would silently change it.
    """

    def __init__(self, pyserini_encoder, spec: EncoderSpec | None = None, threads: int | None = None):
        import torch

        self.pyserini = pyserini_encoder
        self.spec = spec  # what the vectors are (TTT-Embed states and pairings check it); None when unknown
        self.threads = threads or torch.get_num_threads()
        self._dimension: int | None = None

    @classmethod
    def build(cls, spec: EncoderSpec, device: str = "cpu") -> QueryEncoder:
        """Pyserini's query encoder class for ``spec`` (pooling, normalisation and prefix as it says), on
        ``device``."""
        return cls(pyserini_query_encoder(spec, device), spec)

    @classmethod
    def from_encoded(cls, directory: str | Path) -> QueryEncoder:
        """Pre-encoded queries in Pyserini's format (``embedding.pkl``: a text -> vector table), read by its
        own ``QueryEncoder``; a text without a vector is one line."""
        directory = check_encoded_queries(directory)
        return cls(import_pyserini("pyserini.encode").QueryEncoder(encoded_query_dir=str(directory)))

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            config = getattr(getattr(self.pyserini, "model", None), "config", None)
            if self.spec is not None and self.spec.encoder_class in (*AUTO_FAMILY, "dpr") and config is not None:
                self._dimension = config.hidden_size
            elif not getattr(self.pyserini, "has_model", True):  # pre-encoded queries only
                self._dimension = len(next(iter(self.pyserini.embedding.values())))
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
        with torch.inference_mode():
            if klass is not None and klass.name == "st-pipeline":
                return self.pyserini.encode(texts)
            if klass is None or not klass.batched:
                return np.stack([np.asarray(self.pyserini.encode(t), dtype=np.float32).reshape(-1) for t in texts])
            vectors = None
            for rows in same_length_groups(self.pyserini.tokenizer, texts):
                group = np.asarray(self.pyserini.encode([texts[i] for i in rows]), dtype=np.float32)
                group = group.reshape(len(rows), -1)
                if vectors is None:
                    vectors = np.empty((len(texts), group.shape[1]), dtype=np.float32)
                vectors[rows] = group
        return vectors

    def _look_up(self, texts: Sequence[str]) -> np.ndarray:
        table = self.pyserini.embedding
        missing = [t for t in texts if t not in table]
        if missing:
            raise UserError(f"the pre-encoded queries have no vector for the query text {missing[0][:80]!r} "
                            f"({len(missing)} of {len(texts)} texts missing)")  # fmt: skip
        return np.stack([np.asarray(table[t], dtype=np.float32).reshape(-1) for t in texts])


def check_encoded_queries(directory: str | Path) -> Path:
    """A directory of Pyserini's pre-encoded queries, or one line: a name of Pyserini's pre-encoded query sets
    would be downloaded at run time, which this toolkit never does."""
    path = Path(directory).expanduser()
    if path.is_dir():
        if not (path / "embedding.pkl").is_file():
            raise UserError(f"--encoded-queries {directory}: no embedding.pkl (Pyserini's pre-encoded query format)")
        return path
    if path.exists() or str(directory).startswith((".", "/", "~")):
        raise UserError(f"--encoded-queries {directory}: no such directory")
    raise UserError(f"--encoded-queries {directory}: a name of Pyserini's pre-encoded queries needs a download, "
                    "which this toolkit does not do at run time; download it once (pyserini.util."
                    "download_encoded_queries) and pass its directory")  # fmt: skip


def check_encoded_texts(directory: str | Path, texts: dict[str, str]) -> None:
    """Every topic's text (qid -> text) has a vector in the pre-encoded queries, or one line naming the first
    topic without one; read before any model loads."""
    import pandas as pd

    frame = pd.read_pickle(Path(check_encoded_queries(directory)) / "embedding.pkl")
    known = set(frame["text"].tolist())
    missing = [qid for qid, text in texts.items() if text not in known]
    if missing:
        raise UserError(f"--encoded-queries {directory} has no vector for topic {missing[0]}'s text "
                        f"({len(missing)} of {len(texts)} topics missing)")  # fmt: skip
