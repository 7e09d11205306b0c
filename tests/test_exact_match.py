"""Exact match and token F1: each normalisation rule by hand, parity with SQuAD's and DPR's reference scripts,
regex answers, the maximum over gold answers, and ``eval`` / ``compare --predictions`` on the command line."""

from __future__ import annotations

import json
import logging
import re
import string
from collections import Counter

import pytest

from tour_pyserini.commands.compare import main as compare_main
from tour_pyserini.commands.eval import main as eval_main
from tour_pyserini.commands.runner import run_cli
from tour_pyserini.errors import UserError
from tour_pyserini.eval.exact_match import (
    answer_scores,
    evaluate_predictions,
    exact_match,
    normalize_answer,
    regex_match,
    token_f1,
)
from tour_pyserini.files import read_topics
from tour_pyserini.files.predictions import Prediction, PredictionWriter, read_predictions
from tour_pyserini.files.topics import Topic

# ---- the reference code, as SQuAD v1.1's evaluate-v1.1.py and DPR's dpr/data/qa_validation.py define it ----


def squad_normalize_answer(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def squad_f1_score(prediction, ground_truth):
    prediction_tokens = squad_normalize_answer(prediction).split()
    ground_truth_tokens = squad_normalize_answer(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def dpr_exact_match_score(prediction, ground_truth):  # DPR: SQuAD's normalisation, then equality
    return squad_normalize_answer(prediction) == squad_normalize_answer(ground_truth)


def drqa_regex_match_score(prediction, pattern):
    try:
        compiled = re.compile(pattern, flags=re.IGNORECASE + re.UNICODE + re.MULTILINE)
    except BaseException:
        return False
    return compiled.match(prediction) is not None


# ---- each rule by hand ----


@pytest.mark.parametrize(
    "text, normal",
    [
        ("Barack OBAMA", "barack obama"),  # lower case
        ("U.S.A.!", "usa"),  # punctuation deleted, not replaced by a space
        ("rock-n-roll", "rocknroll"),
        ("The Beatles", "beatles"),  # articles as whole words only
        ("an apple a day", "apple day"),
        ("Theatre anthem", "theatre anthem"),  # "the" and "an" inside words stay
        ("  May   18,\t2018 \n", "may 18 2018"),  # whitespace collapsed
        ("the. a, an!", ""),  # punctuation goes before articles are found
        ("Röntgen – “X-rays”", "röntgen – “xrays”"),  # non-ASCII punctuation is kept, as in SQuAD
    ],
)
def test_each_normalisation_rule(text, normal):
    assert normalize_answer(text) == normal == squad_normalize_answer(text)


def test_hand_worked_em_and_f1():
    assert exact_match("the Eiffel Tower.", "Eiffel tower") == 1.0
    assert exact_match("Eiffel", "Eiffel Tower") == 0.0
    # prediction "eiffel tower paris" vs gold "eiffel tower": 2 common, P = 2/3, R = 1, F1 = 0.8
    assert token_f1("Eiffel Tower, Paris", "the Eiffel Tower") == pytest.approx(0.8)
    # bags, not sets: "new new york" vs "new york": common = min counts = {new: 1, york: 1} = 2, P 2/3, R 1
    assert token_f1("new new york", "new york") == pytest.approx(0.8)
    assert token_f1("london", "paris") == 0.0
    # both sides normalise to nothing: EM 1, and F1 1 (SQuAD v2's rule; v1.1 would give 0)
    assert exact_match("The", "the!") == 1.0 and token_f1("The", "the!") == 1.0 and squad_f1_score("The", "the!") == 0
    assert token_f1("", "Paris") == 0.0


def test_the_maximum_over_gold_answers():
    # EM from the second answer, F1 from the first: each is its own maximum
    em, f1 = answer_scores("Super Bowl LII", ["Super Bowl LII, 2018", "super bowl lii"])
    assert (em, f1) == (1.0, 1.0)
    em, f1 = answer_scores("the 2017 season", ["2017", "season of 2017 and 2018"])
    assert em == 0.0
    # "2017 season" vs "2017": P 1/2, R 1 -> 2/3; vs "season of 2017 and 2018": P 1, R 2/5 -> 4/7
    assert f1 == pytest.approx(2 / 3)
    assert answer_scores("anything", []) == (0.0, 0.0)


def test_regex_answers_match_at_the_start_case_insensitively():
    assert regex_match("Michael Jordan", r"(Michael )?Jordan") == 1.0
    assert regex_match("MICHAEL JORDAN", r"michael jordan") == 1.0
    assert regex_match("1996 and 1997", r"1996") == 1.0  # anchored at the start only, as in DrQA and ORQA
    assert regex_match("in 1996", r"1996") == 0.0
    assert regex_match("x", r"(unclosed") == 0.0  # a pattern that does not compile matches nothing
    assert answer_scores("in 1996", [r"1996", r"in \d+"], regex=True) == (1.0, 1.0)


def test_parity_with_squad_and_dpr_on_the_nq_oracle_answers():
    """Every answer of nq-oracle test, against every other answer of its question and against variants with
    the cases, articles, punctuation and spacing the rules remove: ours equals the reference code."""
    topics = read_topics("collections/nq-oracle/topics.test.jsonl")
    pairs = []
    for topic in topics:
        answers = list(topic.answers)
        for a in answers:
            variants = [a.upper(), f"The {a}.", f" {a} ,", a.replace(" ", "  "), f"an {a} of the year"]
            variants.append(a[: len(a) // 2])
            pairs += [(v, a) for v in variants] + [(b, a) for b in answers]
    assert len(pairs) == 14783
    for pred, gold in pairs:
        assert normalize_answer(pred) == squad_normalize_answer(pred)
        assert (exact_match(pred, gold) == 1.0) == dpr_exact_match_score(pred, gold)
        if squad_normalize_answer(pred) and squad_normalize_answer(gold):  # the empty case is SQuAD v2's rule
            assert token_f1(pred, gold) == pytest.approx(squad_f1_score(pred, gold), abs=1e-12)
        pattern = re.escape(gold)
        assert (regex_match(pred, pattern) == 1.0) == drqa_regex_match_score(pred, pattern)


# ---- predictions files, eval and compare ----

TOPICS = [Topic("1", "who", ("Paris",)), Topic("2", "when", ("1999", "the year 1999")), Topic("3", "what", ("x",))]


def test_missing_predictions_score_zero_and_unknown_questions_are_refused():
    preds = {"1": Prediction("1", "paris", "d1", 2.0), "2": Prediction("2", "year 1999", "d2", 1.0)}
    ev = evaluate_predictions(preds, TOPICS)
    assert ev.per_query["EM"] == {"1": 1.0, "2": 1.0, "3": 0.0}
    assert ev.means["EM"] == pytest.approx(2 / 3)
    with pytest.raises(UserError, match="1 predictions for questions not in the topics"):
        evaluate_predictions({**preds, "9": Prediction("9", "a", "d", 0.0)}, TOPICS)
    with pytest.raises(UserError, match="no topic has answers"):
        evaluate_predictions(preds, [Topic("1", "who")])


def write_topics(path, topics):
    path.write_text(
        "".join(json.dumps({"qid": t.qid, "question": t.text, "answers": list(t.answers)}) + "\n" for t in topics)
    )
    return path


def write_predictions(path, rows):
    with PredictionWriter(path) as writer:
        writer.write_batch([Prediction(q, a, "d", 1.0) for q, a in rows])
    return path


def test_eval_and_compare_predictions(tmp_path, capsys):
    topics = write_topics(tmp_path / "t.jsonl", TOPICS)
    base = write_predictions(tmp_path / "base.jsonl", [("1", "Paris"), ("2", "2000"), ("3", "y")])
    better = write_predictions(tmp_path / "better.jsonl", [("1", "Paris"), ("2", "1999"), ("3", "x")])
    assert read_predictions(better)["2"] == Prediction("2", "1999", "d", 1.0)
    eval_main(["--answers", str(topics), "--predictions", str(base), "--json"])
    assert json.loads(capsys.readouterr().out) == {"EM": pytest.approx(1 / 3), "F1": pytest.approx(1 / 3)}
    compare_main(
        ["--answers", str(topics), "--predictions", "--baseline", str(base), "--run", str(better), "--format", "csv"]
    )
    rows = [line.split(",") for line in capsys.readouterr().out.splitlines()]
    em = next(r for r in rows if r[0] == "better.jsonl" and r[1] == "EM")
    assert em[2] == "1.0000" and em[3] == "+0.6667" and em[6] == "2/1/0"


@pytest.mark.parametrize(
    "case, message",
    [
        ("unknown-qid", "predictions for questions not in the topics"),
        ("no-answers", "no topic has answers"),
        ("twice", "predicted twice"),
        ("bad-json", "not valid JSON"),
        ("no-answers-flag", "--predictions needs --answers"),
        ("null-answer", "p.jsonl:1: 'answer' must be a string (\"\" for no answer), got null"),
        ("number-answer", "p.jsonl:1: 'answer' must be a string (\"\" for no answer), got 1815"),
        ("empty-file", "p.jsonl holds no predictions"),
    ],
)
def test_bad_predictions_input_is_one_line_and_exit_2(tmp_path, capsys, case, message):
    topics = write_topics(tmp_path / "t.jsonl", TOPICS)
    preds = tmp_path / "p.jsonl"
    preds.write_text('{"qid": "1", "answer": "Paris", "docid": "d", "score": 1}\n')
    argv = ["--answers", str(topics), "--predictions", str(preds)]
    if case == "unknown-qid":
        preds.write_text('{"qid": "42", "answer": "Paris", "docid": "d", "score": 1}\n')
    elif case == "no-answers":
        (tmp_path / "t.jsonl").write_text('{"qid": "1", "question": "who"}\n')
    elif case == "twice":
        preds.write_text(preds.read_text() * 2)
    elif case == "bad-json":
        preds.write_text("{not json\n")
    elif case == "no-answers-flag":
        argv = ["--qrels", str(topics), "--predictions", str(preds)]
    elif case in ("null-answer", "number-answer"):  # str() scored them as the answers "None" and "1815"
        preds.write_text(f'{{"qid": "1", "answer": {"null" if case == "null-answer" else 1815}, "docid": "d"}}\n')
    elif case == "empty-file":  # not a score of 0
        preds.write_text("\n")
    with pytest.raises(SystemExit) as exit_info:
        run_cli(eval_main, argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "name, content, where, got",
    [
        (
            "t.jsonl",
            '{"qid": "1", "question": "who", "answers": ["Paris"]}\n'
            '{"qid": "2", "question": "when", "answers": ["1999", 1999]}\n',
            "t.jsonl:2",
            "1999",
        ),
        ("t.jsonl", '{"qid": "1", "question": "who", "answers": [null]}\n', "t.jsonl:1", "null"),
        ("t.txt", "who\t['Paris']\nwhen\t['1999', None]\n", "t.txt:2", "null"),  # DPR's question<TAB>[answers]
        ("P1.test.json", '[{"question": "who", "answers": [["Paris"]]}]', "P1.test.json: item 0", '["Paris"]'),
    ],
)
def test_gold_answers_that_are_not_strings_are_one_line_naming_file_and_line(
    tmp_path, capsys, name, content, where, got
):
    """str() judged null as the answer "None" and 1999 as "1999": a gold answer must be written as a string."""
    topics = tmp_path / name
    topics.write_text(content)
    preds = write_predictions(tmp_path / "p.jsonl", [("0", "Paris")])
    with pytest.raises(SystemExit) as exit_info:
        run_cli(eval_main, ["--answers", str(topics), "--predictions", str(preds)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err == f"error: {tmp_path / where}: each answer must be a string, got {got}\n"


def test_blank_gold_answers_are_dropped_and_a_question_left_without_any_is_skipped(tmp_path, capsys, caplog):
    """An empty gold answer equals an empty prediction: it scored EM 1 for "no answer". Blank answers are dropped,
    and a question left with none is not judged (a warning counts them), nor is its prediction refused."""
    topics = tmp_path / "t.jsonl"
    topics.write_text(
        '{"qid": "1", "question": "who", "answers": ["Paris", ""]}\n'
        '{"qid": "2", "question": "when", "answers": ["", "  "]}\n'
        '{"qid": "3", "question": "what", "answers": ["x"]}\n'
    )
    assert [t.answers for t in read_topics(topics)] == [("Paris",), (), ("x",)]
    preds = write_predictions(tmp_path / "p.jsonl", [("1", ""), ("2", ""), ("3", "x")])
    with caplog.at_level(logging.WARNING, logger="tour_pyserini"):
        eval_main(["--answers", str(topics), "--predictions", str(preds), "--json", "--per-query"])
    result = json.loads(capsys.readouterr().out)
    assert result["per_query"]["EM"] == {"1": 0.0, "3": 1.0}  # "" is no longer a gold answer of 1, nor of 2
    assert result["EM"] == 0.5
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [f"{topics}: 1 of 3 questions have no answer and are skipped"]
