"""Transfer protocols: whether TTT-Embed's shared states carry over to queries nobody judged, one YAML file each
(``experiments/NAME.yaml`` with ``folds:``)::

    name: transfer
    title: TTT-Embed's shared states on queries nobody judged
    split: test
    folds: 5                        # each collection's judged queries dealt into folds; every query unseen once
    judged: 10                      # judgments per rewarded query: its base top 10
    collections:                    # each with the one metric its rows report (one of those it scores)
      scifact: {metric: nDCG@10}
      nq-oracle: {metric: Acc@1}
    teachers:                       # a name: a teacher spec, or one per collection; oracle is the split's labels
      oracle: oracle
      bm25: bm25
      ce: {scifact: "cross-encoder:models/scifact-rce", nq-oracle: "cross-encoder:models/nq-oracle-ce"}
      scifact@nq-qa:                # the same queries and index, the queries encoded by another encoder
        {collection: scifact, encoder: models/orqa/nq-oracle-qa, base: scifact, metric: nDCG@10}
    tables:
      main: {scopes: [task, global, neighbours], rules: [count, cv], shares: [0.8]}
      curve: {scopes: [task], rules: [count, cv], shares: [0.1, 0.4, 0.8], teachers: [oracle, bm25]}
      leave-one-out: {scopes: [global], rules: [count, cv], held_out: true}
      forgetting: {scopes: [task], rules: [count], shares: [0.8], collections: [scifact@nq-qa]}
    tolerance: 0.00005
    expect:                         # TABLE TEACHER SCOPE RULE SHARE: {collection: Δ of its metric}
      main oracle task count 0.8: {scifact: 0.0167}

A table's row is a teacher, a scope, a magnitude rule (count or cv) and the share of each collection's queries
rewarded; with ``held_out: true`` a global state is fitted on every other collection's rewarded queries (all of
them) and applied to each collection in turn, every one of whose queries is unseen.

A collection entry may name a registered collection (``collection:``) under a name of its own, with the query encoder
that encodes its queries (``encoder:``, as ``search --encoder`` takes it) and the entry whose dense run it is also
compared with (``base:``): each row then also reports the moved queries' Δ against that entry's dense retrieval. A
table runs on the entries its ``collections:`` names; by default on those without an encoder of their own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from tour_pyserini.errors import UserError
from tour_pyserini.files.collections import Collection, find_collection
from tour_pyserini.files.declarations import read_declaration, read_tolerance

FIELDS = {"name", "title", "split", "folds", "judged", "collections", "teachers", "tables", "tolerance", "expect"}
TABLE_FIELDS = {"scopes", "rules", "shares", "teachers", "held_out", "collections"}
COLLECTION_FIELDS = {"metric", "collection", "encoder", "base"}
# TTT-Embed's words, which this floor may not import (a test holds them equal to tour_pyserini.ttt's)
SHARED_SCOPES = ("task", "global", "neighbours")  # a query state moves only its own query: nothing to carry over
ALPHA_RULES = ("count", "cv", "ranking")
AUTO_SCOPE = "auto"  # the scope chosen by cross-validation over the rewarded queries, with its α (rule cv or ranking)
ORACLE = "oracle"  # the split's own labels (qrels grades, or whether a passage holds an answer): an upper bound


@dataclass(frozen=True)
class TransferCollection:
    collection: Collection
    metric: str
    teachers: dict[str, str]  # teacher name: its spec on this collection
    entry: str | None = None  # the name rows know it by, where not its collection's
    encoder: str | None = None  # the query encoder, where not the index's own
    base: str | None = None  # the entry whose dense run its rows are also compared with

    @property
    def name(self) -> str:
        return self.entry or self.collection.name

    @property
    def index(self) -> str:
        return self.collection.index_path("minilm")


@dataclass(frozen=True)
class Variant:
    """One row of a table on every collection: a teacher's rewards, a scope, an α rule and the share rewarded."""

    table: str
    teacher: str
    scope: str
    rule: str
    share: float  # of each collection's queries; 1 with held_out (every other collection's queries)
    held_out: bool
    collections: tuple[str, ...] = ()  # the entries its table runs on

    @property
    def key(self) -> str:
        return f"{self.table} {self.teacher} {self.scope} {self.rule} {self.share:g}"


@dataclass(frozen=True)
class Transfer:
    name: str
    path: Path
    title: str
    split: str
    folds: int
    judged: int
    collections: dict[str, TransferCollection]
    teachers: tuple[str, ...]
    variants: tuple[Variant, ...]
    tolerance: float
    expect: dict[str, dict[str, float]]  # variant key: {collection: Δ}


def is_transfer(raw: dict) -> bool:
    return "folds" in raw


def _count(value: object, where: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise UserError(f"{where}: a whole number of at least {low} was expected, got {value!r}")
    return value


def _names(value: object, where: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or any(v not in allowed for v in value):
        raise UserError(f"{where}: a list of some of {', '.join(allowed)} was expected, got {value!r}")
    return tuple(value)


def _share(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1 or not math.isfinite(value):
        raise UserError(f"{where}: shares are in (0, 1], got {value!r}")
    return float(value)


def _collection(path: Path, name: str, raw: object, split: str) -> TransferCollection:
    where = f"{path}: collection {name!r}"
    if not isinstance(raw, dict) or set(raw) - COLLECTION_FIELDS:
        raise UserError(f"{where}: a mapping of {', '.join(sorted(COLLECTION_FIELDS))} was expected")
    registered = str(raw.get("collection", name))
    collection = find_collection(registered)
    collection.split(split)
    metric = raw.get("metric", collection.metrics[0])
    if metric not in collection.metrics:
        raise UserError(f"{where}: metric {metric!r} is not one it scores ({', '.join(collection.metrics)})")
    encoder, base = raw.get("encoder"), raw.get("base")
    for field, value in (("encoder", encoder), ("base", base)):
        if value is not None and not (isinstance(value, str) and value):
            raise UserError(f"{where}: {field} names a directory or an entry, got {value!r}")
    entry = None if registered == name else name
    return TransferCollection(collection, metric, {}, entry, encoder, base)


def _teachers(path: Path, raw: object, collections: dict[str, TransferCollection]) -> tuple[str, ...]:
    if not isinstance(raw, dict) or not raw:
        raise UserError(f"{path}: teachers must map names to a teacher spec, or to one spec per collection")
    for name, spec in raw.items():
        where = f"{path}: teacher {name!r}"
        if isinstance(spec, dict):  # by entry, or by the registered collection an entry names
            specs = {c: spec.get(c, spec.get(col.collection.name)) for c, col in collections.items()}
            known = set(collections) | {col.collection.name for col in collections.values()}
        else:
            specs, known = dict.fromkeys(collections, spec), set()
        if set(spec if isinstance(spec, dict) else ()) - known or not all(
            isinstance(s, str) and s for s in specs.values()
        ):
            raise UserError(f"{where}: one spec, or a spec for each of {', '.join(collections)}")
        for collection, one in specs.items():
            collections[collection].teachers[str(name)] = str(one)
    return tuple(map(str, raw))


def _variants(
    path: Path, raw: object, teachers: tuple[str, ...], collections: dict[str, TransferCollection]
) -> tuple[Variant, ...]:
    if not isinstance(raw, dict) or not raw:
        raise UserError(f"{path}: tables must map table names to their scopes, rules and shares")
    variants = []
    for table, fields in raw.items():
        where = f"{path}: table {table!r}"
        if not isinstance(fields, dict) or (unknown := sorted(set(fields) - TABLE_FIELDS)):
            raise UserError(f"{where}: unknown field {unknown[0]!r}" if fields else f"{where}: a mapping")
        held_out = fields.get("held_out", False)
        if not isinstance(held_out, bool):
            raise UserError(f"{where}: held_out is true or false")
        scopes = _names(
            fields.get("scopes"), f"{where}: scopes", ("global",) if held_out else (*SHARED_SCOPES, AUTO_SCOPE)
        )
        rules = _names(fields.get("rules", list(ALPHA_RULES)), f"{where}: rules", ALPHA_RULES)
        if AUTO_SCOPE in scopes and "count" in rules:
            raise UserError(f"{where}: scope auto chooses its alpha by cross-validation: its rules are cv or ranking")
        if held_out and "shares" in fields:
            raise UserError(f"{where}: a held-out collection's state is fitted on all the others' queries: no shares")
        shares = [1.0] if held_out else [_share(s, f"{where}: shares") for s in fields.get("shares") or [None]]
        chosen = _names(fields.get("teachers", list(teachers)), f"{where}: teachers", teachers)
        plain = [c for c, col in collections.items() if col.encoder is None]
        on = _names(fields.get("collections", plain), f"{where}: collections", tuple(collections))
        if held_out and len(on) < 2:
            raise UserError(f"{where}: a held-out table needs two collections or more")
        variants += [
            Variant(str(table), teacher, scope, rule, share, held_out, on)
            for teacher in chosen
            for share in shares
            for scope in scopes
            for rule in rules
        ]
    return tuple(variants)


def _expect(path: Path, raw: object, transfer: Transfer) -> dict[str, dict[str, float]]:
    if raw is None:
        return {}
    keys = {v.key for v in transfer.variants}
    if not isinstance(raw, dict):
        raise UserError(f"{path}: expect maps a row (TABLE TEACHER SCOPE RULE SHARE) to each collection's Δ")
    expect = {}
    for key, values in raw.items():
        if key not in keys:
            raise UserError(f"{path}: expect {key!r}: no such row (TABLE TEACHER SCOPE RULE SHARE)")
        if not isinstance(values, dict) or not all(
            c in transfer.collections and isinstance(v, int | float) and not isinstance(v, bool)
            for c, v in values.items()
        ):
            raise UserError(f"{path}: expect {key!r}: a mapping of collections to the Δ expected")
        expect[key] = {c: float(v) for c, v in values.items()}
    return expect


def read_transfer(path: Path, raw: dict | None = None) -> Transfer:
    """One transfer file, checked whole before anything runs: one line naming the file where it is wrong."""
    raw = read_declaration(path, FIELDS) if raw is None else raw
    split = str(raw.get("split", "test"))
    cols = raw.get("collections")
    if not isinstance(cols, dict) or not cols:
        raise UserError(f"{path}: collections must map collection names to their metric")
    collections = {str(n): _collection(path, str(n), c or {}, split) for n, c in cols.items()}
    teachers = _teachers(path, raw.get("teachers"), collections)
    for name, col in collections.items():
        if col.base is not None and (col.base not in collections or col.base == name):
            raise UserError(f"{path}: collection {name!r}: base {col.base!r} is not another of its collections")
    variants = _variants(path, raw.get("tables"), teachers, collections)
    transfer = Transfer(
        raw["name"],
        path,
        str(raw.get("title", raw["name"])),
        split,
        _count(raw.get("folds"), f"{path}: folds", 2),
        _count(raw.get("judged", 10), f"{path}: judged", 1),
        collections,
        teachers,
        variants,
        read_tolerance(raw.get("tolerance", 0.00005), f"{path}: tolerance"),
        {},
    )
    return Transfer(**{**transfer.__dict__, "expect": _expect(path, raw.get("expect"), transfer)})
