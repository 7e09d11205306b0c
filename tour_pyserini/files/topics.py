"""Topics (queries, with answers for open-domain QA) from every format the project meets.

``read_topics(source)`` accepts:

- TSV: ``qid<TAB>text`` (TREC/BEIR/Pyserini topics), or DPR's ``question<TAB>['answer', ...]`` (NQ,
  TriviaQA), whose qids are 0-based line numbers as in Pyserini's DPR topics;
- JSON lines: ``{"qid"|"_id"|"id", "question"|"text"|"query", "answers"|"answer"}`` — DPR's CuratedTrec,
  WebQuestions and SQuAD files and NQ-open have no qid, so the 0-based line number is used;
- a JSON list of ``{"question", "answers"}`` (one EntityQuestions relation file, e.g. ``P106.test.json``),
  or a directory of such files (all relations), with the relation kept in ``Topic.relation``;
- a BEIR folder (its ``queries.jsonl``);
- an ``ir_datasets`` id such as ``beir/scifact/test``, when the data is under ``IR_DATASETS_HOME``;
- a registered collection's split by name, ``COLLECTION-SPLIT`` (``scifact-test``: ``collections/*/collection.yaml``);
- a Pyserini topics name such as ``dpr-nq-test`` (downloaded by Pyserini, so it needs network).

Malformed input raises :class:`~tour_pyserini.errors.UserError` naming the file and line; an answer must be a
string, and blank answers are dropped.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tour_pyserini.errors import UserError
from tour_pyserini.files.collections import named_split
from tour_pyserini.files.lines import blank, read_text, text_lines

_QID_KEYS = ("qid", "_id", "id", "query_id")
_TEXT_KEYS = ("question", "text", "query", "title")


@dataclass(frozen=True)
class Topic:
    qid: str
    text: str
    answers: tuple[str, ...] = ()
    relation: str = ""  # EntityQuestions relation (e.g. "P106"), for per-relation breakdowns


def _all_lines(path: Path) -> Iterator[tuple[int, str]]:
    for lineno, line in text_lines(path):
        yield lineno, line.rstrip("\n").rstrip("\r")


def _blank_line(path: Path, lineno: int) -> UserError:
    return UserError(f"{path}:{lineno}: a blank line (Pyserini's topic readers stop on one)")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """The lines of a TSV or JSONL topics file; a blank one raises, as Anserini's readers, which Pyserini reads
    topics files with (TsvIntTopicReader, TsvStringTopicReader, JsonStringTopicReader, DprJsonlTopicReader), fail
    on one."""
    for lineno, line in _all_lines(path):
        if not line.strip():
            raise _blank_line(path, lineno)
        yield lineno, line


def _first(obj: dict, keys: tuple[str, ...]):
    return next((obj[k] for k in keys if k in obj), None)


def _answers(value, where: str) -> tuple[str, ...]:
    """The gold answers of one question: strings, blank ones dropped (an empty answer is found in every passage
    and equals an empty prediction); a question left with none has no answer and is not judged."""
    if not isinstance(value, list):
        raise UserError(f"{where}: 'answers' must be a list, got {type(value).__name__}")
    for answer in value:
        if not isinstance(answer, str):  # str() would judge null as the answer "None"
            got = json.dumps(answer, default=repr)[:40]
            raise UserError(f"{where}: each answer must be a string, got {got}")
    return tuple(a for a in value if a.strip())


def _from_object(obj: dict, default_qid: str, where: str, relation: str = "") -> Topic:
    qid, text = _first(obj, _QID_KEYS), _first(obj, _TEXT_KEYS)
    if text is None:
        raise UserError(f"{where}: expected a text field ({'/'.join(_TEXT_KEYS)})")
    answers = _answers(obj.get("answers", obj.get("answer", [])), where)
    return Topic(str(default_qid if qid is None else qid), str(text), answers, relation)


def _parse_jsonl(path: Path) -> Iterator[tuple[int, Topic]]:
    for index, (lineno, line) in enumerate(_lines(path)):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
        yield lineno, _from_object(obj, str(index), f"{path}:{lineno}")


def _parse_json_list(path: Path) -> Iterator[tuple[int, Topic]]:
    try:
        items = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise UserError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(items, list):
        raise UserError(f"{path}: expected a JSON list of {{question, answers}} objects")
    relation = path.name.split(".")[0]
    for i, obj in enumerate(items):
        yield i + 1, _from_object(obj, f"{relation}-{i}", f"{path}: item {i}", relation)


def _dpr_answers(field: str) -> list | None:
    """The answers of a DPR ``question<TAB>['a', ...]`` line, or None if the field is not such a list."""
    if field.startswith('"') and field.endswith('"'):  # CSV-style quoting, as Pyserini unquotes it
        field = field[1:-1].replace('""', '"')
    if not field.startswith("["):
        return None
    try:
        value = ast.literal_eval(field)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, list) else None


def _parse_tsv(path: Path) -> Iterator[tuple[int, Topic]]:
    dpr, index, empty = None, -1, None
    for lineno, line in _all_lines(path):
        if not line.strip():
            if line == "" and dpr is not False:  # DprNqTopicReader's CSV parser skips an empty line, and counts none
                empty = empty or lineno
                continue
            raise _blank_line(path, lineno)
        index += 1
        first, tab, second = line.partition("\t")
        if not tab:
            raise UserError(f"{path}:{lineno}: expected 'qid<TAB>text', found no tab")
        if dpr is None:  # the first line decides the format
            dpr = _dpr_answers(second) is not None
        if not dpr and empty:  # an empty line before the first: Anserini's TSV readers stop on it
            raise _blank_line(path, empty)
        if dpr:
            answers = _dpr_answers(second)
            if answers is None:
                raise UserError(f"{path}:{lineno}: expected 'question<TAB>[answers]' as in the first line")
            yield lineno, Topic(str(index), first, _answers(answers, f"{path}:{lineno}"))
        else:
            yield lineno, Topic(first.strip(), second)


def _from_ir_datasets(dataset_id: str) -> Iterator[tuple[int, Topic]]:
    import ir_datasets

    try:
        dataset = ir_datasets.load(dataset_id)
    except KeyError:
        raise FileNotFoundError(f"unknown topics {dataset_id!r}: no such file, and not an ir_datasets id") from None
    try:
        for i, query in enumerate(dataset.queries_iter(), 1):
            yield i, Topic(query.query_id, getattr(query, "text", None) or query[1])
    except Exception:  # ir_datasets downloads what is missing, which fails offline
        home = ir_datasets.util.home_path()
        raise FileNotFoundError(
            f"ir_datasets {dataset_id!r}: its source files are missing under {home} (IR_DATASETS_HOME) "
            "and could not be downloaded"
        ) from None


def _from_pyserini(name: str) -> Iterator[tuple[int, Topic]]:
    from tour_pyserini._java import import_pyserini

    try:
        topics = import_pyserini("pyserini.search").get_topics(name)
    except ValueError:
        raise FileNotFoundError(f"unknown topics {name!r}: no such file, and not a Pyserini topics name") from None
    except OSError as e:  # Pyserini 2.x fetches its topics catalogue, then the file: URLError offline
        raise UserError(
            f"topics {name!r}: no such file, and Pyserini's topics could not be fetched "
            f"({getattr(e, 'reason', e)}); without network, pass a topics file"
        ) from None
    except Exception as e:  # Pyserini 1.6.0's Anserini downloads the topics file: a JavaException offline
        if type(e).__name__ != "JavaException":
            raise
        raise UserError(
            f"Pyserini topics {name!r} could not be downloaded; without network, pass a topics file"
        ) from None
    for i, (qid, topic) in enumerate(topics.items(), 1):
        yield i, Topic(str(qid), topic["title"], tuple(topic.get("answers", ())))


_FILE_SUFFIXES = (".tsv", ".txt", ".json", ".jsonl", ".gz")


def _records(source: Path) -> Iterator[tuple[str, int, Topic]]:
    if source.is_dir():
        if (source / "queries.jsonl").is_file():  # a BEIR folder
            for lineno, topic in _parse_jsonl(source / "queries.jsonl"):
                yield str(source / "queries.jsonl"), lineno, topic
            return
        files = sorted(source.glob("*.json"))
        if not files:
            raise FileNotFoundError(f"unknown topics {str(source)!r}: a directory without queries.jsonl or *.json")
        for path in files:
            for lineno, topic in _parse_json_list(path):
                yield str(path), lineno, topic
        return
    name = source.name.removesuffix(".gz")
    if name.endswith(".jsonl"):
        parse = _parse_jsonl
    elif name.endswith(".json"):
        parse = _parse_json_list if read_text(source).lstrip().startswith("[") else _parse_jsonl
    else:  # DPR ships JSON lines as .txt too (CuratedTrec, WebQuestions, SQuAD)
        first = next((line for _, line in _all_lines(source) if line.strip()), "")
        parse = _parse_jsonl if first.lstrip().startswith("{") else _parse_tsv
    for lineno, topic in parse(source):
        yield str(source), lineno, topic


def read_topics(source: str | Path) -> list[Topic]:
    """Topics in file order. Empty texts, duplicate qids, qids with whitespace and malformed lines raise."""
    path = Path(source)
    if path.exists():
        records = _records(path)
    elif (named := named_split(str(source))) is not None:
        records = _records(named[1].topics)
    elif "/" in str(source) and not path.suffix:
        records = ((str(source), i, t) for i, t in _from_ir_datasets(str(source)))
    elif "/" not in str(source) and path.suffix not in _FILE_SUFFIXES:
        records = ((str(source), i, t) for i, t in _from_pyserini(str(source)))
    else:
        raise FileNotFoundError(f"unknown topics {str(source)!r}: no such file")
    topics, seen = [], set()
    for where, lineno, topic in records:
        if blank(topic.text):
            raise UserError(f"{where}:{lineno}: query {topic.qid!r} has empty text")
        if not topic.qid or any(c.isspace() for c in topic.qid):
            # a run line is whitespace-separated: such a qid would break every run written for it
            raise UserError(f"{where}:{lineno}: qid {topic.qid!r} is empty or contains whitespace")
        if topic.qid in seen:
            raise UserError(f"{where}:{lineno}: duplicate qid {topic.qid!r}")
        seen.add(topic.qid)
        topics.append(topic)
    if not topics:
        raise UserError(f"{source}: no topics")
    return topics


def check_queries(texts: Sequence[str], qids: Sequence[str]) -> None:
    """Queries given through the Python API: one non-empty text per qid, qids unique and free of whitespace
    (a qid is the first field of a TREC run line)."""
    if len(texts) != len(qids):
        raise ValueError(f"{len(texts)} queries but {len(qids)} qids")
    if len(set(qids)) != len(qids):
        raise UserError("qids of one batch must be unique")
    for qid, text in zip(qids, texts):
        if not qid or any(c.isspace() for c in qid):
            raise UserError(f"qid {qid!r} is empty or contains whitespace")
        if not isinstance(text, str) or blank(text):
            raise UserError(f"query {qid!r} has empty text")
