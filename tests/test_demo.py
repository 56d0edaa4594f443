"""The demo's option handling and figure helpers (``python -m skprivfact``)."""

import numpy as np
import pytest
import scipy.sparse as sp

from skprivfact.__main__ import _feature_columns, _match, main


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--input", "nonexist.npz"], "--input nonexist.npz: no such file"),
        (["--input", "counts.csv"], "must be a .npz sparse matrix or a .npy array"),
        (["--figure", "/nonexist/figure.png"], "directory /nonexist does not exist"),
        (["--figure", "figure.txt"], "expected a .png, .pdf, .svg or .jpg"),
        (["--vocab", "words.txt"], "--vocab needs --input"),
        (["--rank", "0"], "--rank must be >= 1"),
    ],
)
def test_bad_options_exit_with_one_line_before_any_work(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no section ran
    lines = captured.err.splitlines()
    assert len(lines) == 1 and message in lines[0]


@pytest.mark.parametrize(
    "counts, message",
    [
        (np.array([[1.5, 2.0]]), "non-negative integer counts"),
        (np.array([[-1, 2]]), "non-negative integer counts"),
        (np.ones(3), "2-D"),
    ],
)
def test_bad_input_contents_exit_with_one_line(tmp_path, counts, message, capsys):
    path = tmp_path / "counts.npy"
    np.save(path, counts)
    with pytest.raises(SystemExit):
        main(["--input", str(path)])
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and message in lines[0]


def test_vocabulary_must_match_the_features(tmp_path, capsys):
    path = tmp_path / "counts.npz"
    sp.save_npz(path, sp.csr_matrix(np.ones((20, 3), dtype=np.int64)))
    (tmp_path / "counts_vocab.txt").write_text("a\nb\n")  # found next to the input
    with pytest.raises(SystemExit):
        main(["--input", str(path), "--rank", "2"])
    error = capsys.readouterr().err
    assert "2 words for 3 features" in error and "found next to --input" in error
    assert "--vocab " + str(tmp_path) not in error  # no option the user did not give


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--epsilon", "inf"], "--epsilon must lie in [1e-06, 700]"),
        (["--epsilon", "1e-9"], "--epsilon must lie in [1e-06, 700]"),
        (["--seed", "-1"], "--seed must lie in [0, 2**32)"),
        (["--rank", "400"], "--rank must be at most 30 for the generated 600 x 300"),
    ],
)
def test_out_of_range_options_exit_before_any_work(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and message in captured.err


def test_an_input_too_small_to_hold_out_rows_exits_with_one_line(tmp_path, capsys):
    path = tmp_path / "counts.npy"
    np.save(path, np.ones((1, 5), dtype=np.int64))
    with pytest.raises(SystemExit):
        main(["--input", str(path), "--rank", "1"])
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "has 1 rows; the demo needs at least 10" in lines[0]


def test_match_finds_the_permutation():
    rng = np.random.default_rng(0)
    reference = rng.gamma(0.3, size=(4, 50))
    permuted = reference[[2, 0, 3, 1]] * 5.0  # scale does not matter
    order, cosine = _match(reference, permuted)
    np.testing.assert_allclose(permuted[order] / 5.0, reference)
    np.testing.assert_allclose(cosine, 1.0)


def test_feature_columns_group_by_component_and_label_top_words():
    reference = np.array([[0.0, 5.0, 1.0, 0.0], [3.0, 0.0, 0.0, 2.0]])
    columns, labels = _feature_columns(reference, None)
    np.testing.assert_array_equal(columns, [1, 2, 0, 3])
    assert labels is None
    columns, labels = _feature_columns(reference, np.array(list("abcd")), 1)
    assert list(labels) == ["b", "a"]
