"""Paired significance tests and the compare command."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
from scipy.stats import ttest_rel

from tour_pyserini.commands.compare import main as compare_main
from tour_pyserini.errors import UserError
from tour_pyserini.eval.significance import paired_t_test, randomization_test, win_tie_loss
from tour_pyserini.files.runs import read_run


def test_t_test_agrees_with_scipy():
    rng = np.random.default_rng(3)
    base = rng.random(50)
    run = base + rng.normal(0.05, 0.1, 50)
    assert paired_t_test(run, base) == pytest.approx(ttest_rel(run, base).pvalue, rel=1e-12)
    assert paired_t_test(base, base) == 1.0


def test_randomization_test_is_seeded_and_sensible():
    rng = np.random.default_rng(4)
    base = rng.random(40)
    better = base + 0.2
    noisy = base + rng.normal(0, 0.1, 40)
    assert randomization_test(better, base, 2000, seed=1) == pytest.approx(1 / 2001)  # no flip reaches +0.2
    assert randomization_test(noisy, base, 2000, seed=1) == randomization_test(noisy, base, 2000, seed=1)
    assert randomization_test(noisy, base, 2000, seed=1) != randomization_test(noisy, base, 2000, seed=2)
    assert randomization_test(noisy, base) > 0.05
    assert randomization_test(base, base) == 1.0
    # the randomisation and t-test p-values agree roughly on a clear but noisy effect
    effect = base + 0.03 + rng.normal(0, 0.05, 40)
    assert abs(randomization_test(effect, base) - paired_t_test(effect, base)) < 0.02


def test_win_tie_loss():
    assert win_tie_loss([1, 0.5, 0.2, 0.3], [0.5, 0.5, 0.4, 0.3]) == (1, 2, 1)


def test_compare_cli_csv(tmp_path, capsys):
    qrels = tmp_path / "q.txt"
    qrels.write_text("".join(f"{q} 0 d{q} 1\n" for q in range(1, 7)))
    base, run = tmp_path / "base.trec", tmp_path / "run.trec"
    # the run puts the relevant document first for every query, the baseline second (and misses query 6)
    base.write_text("".join(f"{q} Q0 x 1 2.0 b\n{q} Q0 d{q} 2 1.0 b\n" for q in range(1, 6)))
    run.write_text("".join(f"{q} Q0 d{q} 1 2.0 r\n{q} Q0 x 2 1.0 r\n" for q in range(1, 7)))
    compare_main(
        [
            "--qrels",
            str(qrels),
            "--baseline",
            str(base),
            "--run",
            str(run),
            "--metrics",
            "RR@10",
            "--format",
            "csv",
            "--trials",
            "500",
            "--plot",
            str(tmp_path / "diff.png"),
        ]
    )
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[0][:4] == ["run", "metric", "mean", "Δ vs baseline"]
    run_row = rows[2]
    assert run_row[0] == "run.trec" and float(run_row[2]) == 1.0
    assert float(run_row[3]) == pytest.approx(1.0 - 5 * 0.5 / 6, abs=1e-4)  # query 6 missing from the baseline: 0
    assert run_row[6] == "6/0/0"
    assert (tmp_path / "diff.png").stat().st_size > 0


def test_holm_adjustment_matches_statsmodels_values():
    """Known values (statsmodels' multipletests(method="holm") gives the same): order kept, monotone, capped at 1."""
    from tour_pyserini.eval.significance import holm

    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    assert holm([0.02]) == [0.02]


def test_compare_diff_says_how_runs_differ_without_judgements(tmp_path, capsys):
    base, near, far = tmp_path / "base.trec", tmp_path / "near.trec", tmp_path / "far.trec"
    base.write_text("1 Q0 a 1 0.900000 t\n1 Q0 b 2 0.800004 t\n1 Q0 c 3 0.800000 t\n2 Q0 d 1 0.5 t\n")
    # b and c swap within 1e-5 of each other; a moves by 3e-6
    near.write_text("1 Q0 a 1 0.900003 t\n1 Q0 c 2 0.800003 t\n1 Q0 b 3 0.800001 t\n2 Q0 d 1 0.5 t\n")
    far.write_text("1 Q0 b 1 0.900000 t\n1 Q0 a 2 0.800004 t\n1 Q0 c 3 0.800000 t\n2 Q0 d 1 0.5 t\n")
    compare_main(["--diff", "--baseline", str(base), "--run", str(near)])
    assert capsys.readouterr().out == (
        f"{near}: 2 queries: 1 identical, 1 the same up to ties within 1e-05, "
        "0 different (largest score difference 3e-06)\n"
    )
    with pytest.raises(SystemExit) as exit_:
        compare_main(["--diff", "--baseline", str(base), "--run", str(near), str(far)])
    out = capsys.readouterr().out.splitlines()
    assert exit_.value.code == 1 and len(out) == 2
    assert out[1].startswith(f"{far}: 2 queries: 1 identical, 0 the same up to ties within 1e-05, 1 different")
    assert "first: query 1: document a scores 0.9 against 0.800004" in out[1]


def test_compare_diff_reads_runs_as_rankings_not_as_file_order(tmp_path, capsys):
    """The same docid -> score pairs in another line order are the same run; ties follow the rank column."""
    base, reversed_, by_rank = tmp_path / "base.trec", tmp_path / "reversed.trec", tmp_path / "by-rank.trec"
    lines = ["1 Q0 a 1 0.9 t\n", "1 Q0 b 2 0.8 t\n", "1 Q0 c 3 0.8 t\n", "2 Q0 d 1 0.5 t\n", "2 Q0 e 2 0.4 t\n"]
    base.write_text("".join(lines))
    reversed_.write_text("".join(reversed(lines)))
    by_rank.write_text("".join(lines).replace("b 2", "b 3").replace("c 3", "c 2"))  # c above b on equal scores
    compare_main(["--diff", "--baseline", str(base), "--run", str(reversed_)])
    assert capsys.readouterr().out == (
        f"{reversed_}: 2 queries: 2 identical, 0 the same up to ties within 1e-05, "
        "0 different (largest score difference 0)\n"
    )
    assert list(read_run(by_rank)["1"]) == ["a", "c", "b"]
    by_rank.write_text("1 Q0 a first 0.9 t\n")
    with pytest.raises(UserError, match="by-rank.trec:1: rank 'first' is not an integer"):
        read_run(by_rank)


def test_a_count_is_compared_as_its_sum_and_accuracy_over_the_queries_it_has():
    from tour_pyserini.eval.compare import compare

    per_query = {
        "base": {"NumRet": {"1": 10.0, "2": 5.0, "3": 1.0}, "Accuracy": {"1": 0.5, "3": 0.25}},
        "run": {"NumRet": {"1": 10.0, "2": 10.0, "3": 1.0}, "Accuracy": {"1": 1.0, "2": 0.5, "3": 0.5}},
    }
    rows = {(r.run, r.metric): r for r in compare(per_query, "base", ["1", "2", "3"], trials=100)}
    assert (rows["base", "NumRet"].mean, rows["run", "NumRet"].mean, rows["run", "NumRet"].delta) == (16, 21, 5)
    # Accuracy: no value for query 2 in the baseline (no relevant document retrieved): left out of its mean and
    # of the pairs, as ir-measures leaves it out
    assert (rows["base", "Accuracy"].mean, rows["run", "Accuracy"].mean) == (0.375, pytest.approx(2 / 3))
    assert (rows["run", "Accuracy"].wins, rows["run", "Accuracy"].ties, rows["run", "Accuracy"].losses) == (2, 0, 0)
