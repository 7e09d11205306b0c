"""Train a cross-encoder teacher on training queries.

From a local encoder (default: the bundled MiniLM, given a one-logit classification head), on
*training* queries only. Positives come from qrels (or, without ``--qrels``, are the retrieved candidates
that contain one of the topic's answer strings, DPR's has-answer rule); each step pairs a positive of
each query with ``--negatives`` hard negatives drawn from the dense and BM25 top ``--hard-depth``, and
the loss is listwise: -log softmax over (positive, negatives). By default the model is *residual*: its
score is ``--residual-scale`` times the retriever's similarity plus the model's logit, whose head
starts at zero, so training starts at the retriever's ranking. AdamW with warm-up and linear decay.

Checkpoints are chosen by the metric users read, re-ranking the dense top ``--dev-depth`` of a dev
split of the training queries (nDCG@10 with qrels, else Acc@1), grouped so that no dev query shares a
relevant document with a training query. The best is saved where ``cross-encoder:PATH`` loads it.

    python -m tour_pyserini train-reranker --index indexes/scifact.minilm \\
        --topics collections/scifact/topics.train.tsv --qrels qrels/scifact.train.txt \\
        --exclude-texts-from collections/scifact/topics.test.tsv --output models/scifact-rce
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tour_pyserini.encoders.spec import EncoderSpec, check_model
from tour_pyserini.errors import UserError
from tour_pyserini.numbers import (
    check_fields,
    fraction,
    non_negative_float,
    non_negative_int,
    param,
    positive_float,
    positive_int,
)
from tour_pyserini.pipeline.resources import Resources
from tour_pyserini.training.examples import Example, TrainingList, draw_lists
from tour_pyserini.training.loop import LEARNING_RATE, LoopSettings, TrainerSettings

PSEUDO = ("none", "ict", "ensemble")


@dataclass
class TrainConfig(TrainerSettings):
    """The training's parameters, each declared once: train-reranker's flags, their help and ranges derive from it."""

    epochs: int = param(3, positive_int, "passes over the training queries")
    queries_per_step: int = param(8, positive_int, "training queries per optimiser step")
    negatives: int = param(7, positive_int, "hard negatives per positive")
    lr: float = param(4e-5, like=LEARNING_RATE, help="AdamW learning rate of the encoder")
    head_lr: float = param(
        1e-3, positive_float, "learning rate of the new head (pooler and classifier), which starts at zero"
    )
    max_length: int = param(256, positive_int, "tokens of a query and document pair")
    hard_depth: int = param(30, positive_int, "negatives come from the dense and BM25 top hard-depth")
    # MiniLM's training scale (cos / 0.05)
    residual_scale: float = param(
        20.0,
        non_negative_float,
        "times the retriever's similarity, added to the model's logit (0: a plain cross-encoder)",
    )
    dev_fraction: float = param(0.2, fraction, "fraction of the training queries held out as the dev split")
    dev_depth: int = param(20, positive_int, "dev queries re-rank the dense top dev-depth")
    evals_per_epoch: int = param(2, positive_int, "dev evaluations per epoch")
    pseudo: str = param(
        "none",
        str,
        "corpus-only pseudo-queries (sentences of documents) mixed into every step: ict "
        "(the sentence's own document, read without it) or ensemble (the document BM25 and the "
        "retriever rank first, the sentence's own left out)",
        choices=PSEUDO,
    )
    extra_per_step: int = param(4, non_negative_int, "lists per step from --pseudo or --extra-topics")
    max_steps: int = param(
        0, non_negative_int, "stop after this many steps, on the schedule of the full run (0: no limit, every epoch)"
    )
    precision: str = "auto"  # of the forward and backward passes (TrainerSettings' default is fp32)

    def check(self) -> None:
        check_fields(self)

    def loop(self, examples: int) -> LoopSettings:
        """The loop's settings for ``examples`` training examples: epochs of shuffled batches, evaluated
        ``evals_per_epoch`` times each; step 0 (the retriever's ranking, when residual) is reported only."""
        per_epoch = math.ceil(examples / self.queries_per_step)
        return LoopSettings(
            steps=per_epoch * self.epochs,
            batch_size=self.queries_per_step,
            lr=self.lr,
            warmup=self.warmup,
            eval_every=max(1, per_epoch // self.evals_per_epoch),
            seed=self.seed,
            precision=self.precision,
            max_grad_norm=None,
            epochs=self.epochs,
            stop_after=self.max_steps,
            initial="reported",
        )


def positives_of(rankings: dict[str, list], topics, qrels, docstore=None) -> dict[str, list[str]]:
    """Relevant docids per qid: from ``qrels``, or (``qrels=None``) the retrieved ones containing an answer string."""
    from tour_pyserini.eval.answers import AnswerMatcher, answer_qrels

    if qrels is None:
        run = {qid: {h.docid: -rank for rank, h in enumerate(hits)} for qid, hits in rankings.items()}
        qrels = answer_qrels(run, topics, AnswerMatcher(docstore), max(map(len, rankings.values()), default=0))
    return {t.qid: [d for d, rel in qrels.get(t.qid, {}).items() if rel > 0] for t in topics}


def build_examples(topics, positives: dict[str, list[str]], *pools: dict[str, list]) -> list[Example]:
    """One example per topic with a positive and a hard negative: negatives are the docids of ``pools``
    (rankings keyed by qid), in order, without positives or repeats."""
    examples = []
    for t in topics:
        pos = positives.get(t.qid, [])
        negatives = list(dict.fromkeys(h.docid for pool in pools for h in pool.get(t.qid, []) if h.docid not in pos))
        if pos and negatives:
            examples.append(Example(t.qid, t.text, pos, negatives))
    return examples


def mine_examples(searcher, bm25, topics, qrels, *, depth: int, hits: int = 100):
    """(examples, dense rankings, positives) of ``topics``: positives from ``qrels``, or the candidates of the
    dense top ``max(depth, hits)`` that contain an answer string; hard negatives from the dense and BM25 top
    ``depth``."""
    texts, qids = [t.text for t in topics], [t.qid for t in topics]
    dense_top = searcher.batch_search(texts, qids, k=max(depth, hits))
    bm25_top = {r.qid: r.hits for r in bm25.retrieve(texts, qids, depth)}
    positives = positives_of(dense_top, topics, qrels, searcher.docstore)
    hard = {q: ranking[:depth] for q, ranking in dense_top.items()}
    return build_examples(topics, positives, hard, bm25_top), dense_top, positives


class ListwiseTask:
    """The training loop's task: a sequence-classification model whose (residual) score puts the positive first.

    A batch is training examples; each step also reads the next ``config.extra_per_step`` of ``extra``
    (``--pseudo`` or ``--extra-topics`` examples, drawn from ``extra_rng``). Dev re-ranks each ``dev``
    query's candidates, judged by ``dev_qrels`` with ``dev_measure``.
    """

    name = "train"

    def __init__(
        self,
        base_model: str,
        docstore,
        dense,
        config: TrainConfig,
        *,
        encoder: dict | None,
        dev: list | None = None,
        dev_qrels: dict | None = None,
        dev_measure: str = "nDCG@10",
    ):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        torch.manual_seed(config.seed)
        self.config = config
        self.docstore = docstore
        self.dense = dense  # the retriever's similarity, added at residual_scale
        self.encoder = encoder or {}  # the index's document encoder, for texts the index does not hold
        self.document_encoder: tuple[EncoderSpec, Any, Any] | None = None  # (spec, tokenizer, model), on first use
        self.dev, self.dev_qrels, self.dev_measure = dev or [], dev_qrels or {}, dev_measure
        self.metric = f"dev_{dev_measure}"
        self.extra: list[Example] = []
        self.extra_rng = random.Random(config.seed + 1)  # its own stream: the training queries' draws stay as without
        self.tokenizer = AutoTokenizer.from_pretrained(base_model)
        # no dropout on attention probabilities lets torch's fused attention run: 1.5x faster training here
        self.model = AutoModelForSequenceClassification.from_pretrained(
            base_model, num_labels=1, dtype=torch.float32, attn_implementation="sdpa", attention_probs_dropout_prob=0.0
        )
        if config.residual_scale > 0:  # the score starts as the retriever's: the head's output is 0
            torch.nn.init.zeros_(self.model.classifier.weight)
            torch.nn.init.zeros_(self.model.classifier.bias)
        self.modules = [self.model]

    def parameters(self) -> list[dict]:
        # Adam moves every weight by about lr per step: a head started at zero needs larger steps than the
        # pretrained body to contribute within a few hundred steps
        head = {
            id(p)
            for m in (self.model.classifier, self.model.base_model.pooler)
            if m is not None
            for p in m.parameters()
        }
        params = list(self.model.parameters())
        return [
            {"params": [p for p in params if id(p) not in head]},
            {"params": [p for p in params if id(p) in head], "lr": self.config.head_lr},
        ]

    def scores(self, lists: list[TrainingList], bf16: bool = False):
        """(lists, candidates) score matrix: the model's logits plus residual_scale x similarity.

        A list's ``texts`` replace the stored texts of those candidates, which need not be in this index.
        """
        import torch

        from tour_pyserini.teachers.base import ScoreRequest
        from tour_pyserini.teachers.cross_encoder import pair_inputs, pair_text
        from tour_pyserini.training.schedule import autocast

        stored = [[d for d in x.docids if d not in x.texts] for x in lists]
        texts = []
        for x, own in zip(lists, stored):
            read = {doc.docid: pair_text(doc) for doc in self.docstore.get(own)}
            texts += [x.texts[d] if d in x.texts else read[d] for d in x.docids]
        queries = [x.query for x in lists for _ in x.docids]
        with autocast(bf16):
            logits = self.model(**pair_inputs(self.tokenizer, queries, texts, self.config.max_length)).logits
        scores = logits.float()[:, 0].view(len(lists), -1)
        if self.config.residual_scale > 0:
            requests = [ScoreRequest(f"q{i}", x.query, own) for i, (x, own) in enumerate(zip(lists, stored)) if own]
            from_index = iter(self.dense.score(requests)) if requests else iter(())
            sims = np.zeros(scores.shape)
            for i, (x, own) in enumerate(zip(lists, stored)):
                by_docid = dict(zip(own, next(from_index))) if own else {}
                # the stored vector is of the stored text, not of what the model reads
                by_docid.update(x.similarities or self.text_similarities(x.query, x.texts))
                sims[i] = [by_docid[d] for d in x.docids]
            scores = scores + self.config.residual_scale * torch.as_tensor(sims, dtype=torch.float32)
        return scores

    def text_similarities(self, query: str, texts: dict[str, str]) -> dict[str, float]:
        """The retriever's similarity of a query to texts that are not in the index, encoded as the index was."""
        import torch

        from tour_pyserini.training.encoder_io import encode, load_encoder

        if not texts:
            return {}
        if self.document_encoder is None:
            self.document_encoder = load_encoder(self.encoder["name"])
            self.document_encoder[2].eval()
        spec, tokenizer, model = self.document_encoder
        with torch.inference_mode():
            vectors = encode(
                model,
                tokenizer,
                list(texts.values()),
                max_length=spec.max_length,
                pooling=spec.pooling,
                l2_norm=spec.l2_norm,
            ).numpy()
        return dict(zip(texts, (vectors @ self.dense.query_encoder.encode([query])[0]).tolist()))

    def loss(self, batch: list[Example], run):
        """The listwise loss of a random positive and ``negatives`` hard negatives per example: -log softmax at
        the positive, averaged over the step's lists (``batch``'s and the step's extra examples')."""
        import torch

        from tour_pyserini.training.losses import marginal_nll

        n, negatives = self.config.extra_per_step, self.config.negatives
        mixed = self.extra[(run.step - 1) * n : run.step * n]
        lists = draw_lists(batch, negatives, run.rng) + draw_lists(mixed, negatives, self.extra_rng)
        scores = self.scores(lists, run.bf16)
        first = torch.zeros_like(scores, dtype=torch.bool)
        first[:, 0] = True  # the positive
        return marginal_nll(scores, first)[0].mean(), {}

    def evaluate(self, run) -> dict[str, float]:
        from tour_pyserini.eval import evaluate

        run_of_dev = self.rerank(self.dev, run.bf16)
        return {self.metric: evaluate(self.dev_qrels, run_of_dev, [self.dev_measure]).means[self.dev_measure]}

    def rerank(self, dev: list[tuple[str, str, list[str]]], bf16: bool = False) -> dict[str, dict[str, float]]:
        """Run {qid: {docid: score}} of the dev queries' candidates, scored as the saved teacher scores them."""
        from tqdm import tqdm

        run = {}
        for start in tqdm(range(0, len(dev), 4), desc="dev", unit="batch", leave=False):
            chunk = dev[start : start + 4]
            for (qid, _, docids), row in zip(chunk, self.scores([TrainingList(q, d, {}) for _, q, d in chunk], bf16)):
                run[qid] = dict(zip(docids, row.tolist()))
        return run

    def save(self, output: Path) -> None:
        """The model in float16 and, if residual, which bi-encoder (the index's) it was trained on top of."""
        from tour_pyserini.encoders.pairing import index_document_sha
        from tour_pyserini.teachers.cross_encoder import write_residual

        save_compact(self.model, self.tokenizer, output, self.config.max_length)
        if self.config.residual_scale > 0:
            write_residual(
                output,
                scale=self.config.residual_scale,
                encoder=self.encoder.get("name", "?"),
                encoder_sha256=index_document_sha(self.encoder),
            )


def save_compact(model, tokenizer, output: Path, max_length: int) -> None:
    """Save in float16 (half the size; teachers load it back as float32) with the length it was trained at.

    The tokenizer's ``model_max_length`` becomes ``max_length``, so ``cross-encoder:PATH`` reads as many
    tokens as training did unless told otherwise.
    """
    import copy

    copy.deepcopy(model).half().save_pretrained(output)
    tokenizer.model_max_length = max_length
    tokenizer.save_pretrained(output)


def pseudo_examples(kind: str, count: int, searcher, bm25, *, depth: int, rng: random.Random) -> list[Example]:
    """``count`` corpus-only examples (training/pseudo_queries.py): sentences of random documents labelled
    by ``kind`` ("ict" or "ensemble"), candidates from the dense and BM25 top ``depth`` + 1 of each sentence."""
    from tour_pyserini.training.pseudo_queries import draw_sentences, ensemble_example, ict_example

    docids = searcher.faiss.docids
    docs = searcher.docstore.get(rng.sample(docids, min(len(docids), 2 * count)))
    drawn = draw_sentences(docs, count, rng)
    texts, qids = [p.query for p in drawn], [f"p{i}" for i in range(count)]
    dense = searcher.batch_search(texts, qids, k=depth + 1)
    lexical = {r.qid: r.hits for r in bm25.retrieve(texts, qids, depth + 1)}
    examples = []
    for i, (qid, pq) in enumerate(zip(qids, drawn)):
        ranked = [[h.docid for h in dense[qid]], [h.docid for h in lexical[qid]]]
        if kind == "ict":
            examples.append(ict_example(i, pq, list(dict.fromkeys(ranked[0] + ranked[1]))))
        else:
            examples.append(ensemble_example(i, pq, *ranked))
    return [ex for ex in examples if ex.positives and ex.negatives]


def question_examples(
    index: str,
    topics,
    qrels,
    count: int,
    *,
    depth: int,
    rng: random.Random,
    encoder: dict | None = None,
    resources: Resources | None = None,
) -> list[Example]:
    """``count`` examples (:func:`mine_examples`) from another collection's training questions, each with its
    candidates' texts, which this index does not hold; cycled when there are fewer than ``count``.

    Where ``index`` was built by ``encoder`` (the retriever's record: class, pooling, prefixes, weights), its
    stored vectors are what encoding those texts would give, up to the last bits, so each example gets its
    similarities from them once instead of the trainer encoding its texts at every step. ``resources``: what the
    training index's search has loaded already (its query encoder), shared.
    """
    from tour_pyserini.index.layout import IndexMeta
    from tour_pyserini.pipeline import SearchSpec, build, plan
    from tour_pyserini.search.bm25 import Bm25Searcher
    from tour_pyserini.teachers.base import ScoreRequest
    from tour_pyserini.teachers.bm25 import sibling_bm25_index

    # through torch, as the dense teacher encodes: one encoding serves both, and the shipped teachers' examples
    spec = SearchSpec(index=str(index), teacher="dense", encoder_runtime="torch")
    opened = build(plan(spec, resources, asks_teacher=True))
    searcher = opened.searcher
    chosen = rng.sample(list(topics), min(len(topics), count))
    bm25 = Bm25Searcher.from_index(sibling_bm25_index(index))
    examples, _, _ = mine_examples(searcher, bm25, chosen, qrels, depth=depth)
    if not examples:
        raise UserError(f"no question of --extra-topics has a relevant document among its candidates in {index}")
    for ex in examples:
        ex.texts = {doc.docid: doc.contents for doc in searcher.docstore.get(ex.positives + ex.negatives)}
    meta = IndexMeta.read(index)
    if encoder is not None and meta is not None and meta.encoder == encoder:
        rows = opened.asked_teacher.score([ScoreRequest(ex.qid, ex.query, list(ex.texts)) for ex in examples])
        for ex, row in zip(examples, rows):
            ex.similarities = dict(zip(ex.texts, row.tolist()))
    return (examples * math.ceil(count / len(examples)))[:count]


def train(
    index: str,
    topics,
    qrels,
    output: str | Path,
    base_model: str,
    config: TrainConfig,
    *,
    questions: tuple[str, Any, Any] | None = None,
) -> dict:
    """Train and save the best checkpoint at ``output``; returns the training report (also in training.json).

    ``questions``, (index, topics, qrels or None) of another collection, adds its training questions to
    every step, ``config.extra_per_step`` at a time.
    """
    from tour_pyserini.index.layout import IndexMeta
    from tour_pyserini.training.loop import Trainer

    config.check()  # the command line checked its flags already; a library caller gets the same rules
    check_model("base model", base_model)  # before the index is read and candidates are mined
    resources, searcher, dense, bm25 = training_search(index, residual=config.residual_scale > 0)
    examples, dense_top, positives = mine_examples(
        searcher, bm25, topics, qrels, depth=config.hard_depth, hits=max(config.dev_depth, 100)
    )
    measure = "nDCG@10" if qrels is not None else "Success@1"  # Success@1 on answer qrels is Acc@1
    judged = {q: {d: 1 for d in docs} for q, docs in positives.items()} if qrels is None else qrels
    if len(examples) < 2:
        raise UserError("fewer than two training queries with a relevant document and a retrieved negative")
    train_set, dev_qids = split_examples(examples, config)
    dev = [(q, text, [h.docid for h in dense_top[q][: config.dev_depth]]) for q, text in dev_qids.items()]
    settings = config.loop(len(train_set))
    meta = IndexMeta.read(index)
    encoder = meta.encoder if meta else None
    task = ListwiseTask(
        base_model,
        searcher.docstore,
        dense,
        config,
        encoder=encoder,
        dev=dev,
        dev_qrels={q: judged.get(q, {}) for q in dev_qids},
        dev_measure=measure,
    )
    count = settings.last * config.extra_per_step
    if config.pseudo != "none":
        task.extra = pseudo_examples(config.pseudo, count, searcher, bm25, depth=config.hard_depth, rng=task.extra_rng)
    elif questions is not None:
        task.extra = question_examples(
            *questions,
            count,
            depth=config.hard_depth,
            rng=task.extra_rng,
            encoder=encoder if dense is not None else None,
            resources=resources,
        )
    about = {
        "config": asdict(config),
        "base_model": base_model,
        "index": str(index),
        "train_queries": len(train_set),
        "extra_examples": len(task.extra),
        "extra_questions": extra_questions(questions, task.extra),
        # the dev queries are never trained on: safe for tuning what uses this teacher
        "dev_queries": len(dev),
        "dev_qids": sorted(dev_qids),
        "dev_metric": measure,
    }
    return Trainer(task, settings).fit(train_set, output, about)


def extra_questions(questions: tuple[str, Any, Any] | None, extra: list[Example]) -> dict | None:
    """What the training report says of another collection's questions added to every step."""
    if questions is None:
        return None
    return {
        "index": str(questions[0]),
        "topics": len(questions[1]),
        "similarities": "stored vectors" if extra and extra[0].similarities else "encoded each step",
    }


def training_search(index: str, *, residual: bool):
    """The search command's assembly over the training ``index`` (through torch, as mining's), with the dense
    teacher when the model is residual (its scores come from the searcher's own index and encoder), and the BM25
    index beside it: (the resources they share, the searcher, the dense teacher or None, the BM25 searcher)."""
    from tour_pyserini.pipeline import SearchSpec, build, plan
    from tour_pyserini.search.bm25 import Bm25Searcher
    from tour_pyserini.teachers.bm25 import sibling_bm25_index

    resources = Resources()
    spec = SearchSpec(index=str(index), encoder_runtime="torch", teacher="dense" if residual else None)
    opened = build(plan(spec, resources, asks_teacher=True))
    if opened.searcher.docstore is None:
        raise UserError(f"index {index} has no document store; rebuild it with python -m tour_pyserini.index")
    return resources, opened.searcher, opened.teacher, Bm25Searcher.from_index(sibling_bm25_index(index))


def split_examples(examples: list[Example], config: TrainConfig) -> tuple[list[Example], dict[str, str]]:
    """(training examples, {dev qid: query}): a grouped dev split, no dev query sharing a positive with training."""
    from tour_pyserini.training.splits import grouped_split

    by_qid = {ex.qid: ex for ex in examples}
    train_qids, dev_qids = grouped_split(
        list(by_qid),
        {q: set(ex.positives) for q, ex in by_qid.items()},
        dev_fraction=config.dev_fraction,
        seed=config.seed,
    )
    return [by_qid[q] for q in train_qids], {q: by_qid[q].query for q in dev_qids}
