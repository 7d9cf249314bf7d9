"""Domains (full-token filter, merging, categories) and the choice of inputs X."""

from __future__ import annotations

import codecs

import pytest

from lincorr.domains import build_domain, classify_first_token, read_word_file
from lincorr.errors import InputError, LincorrError
from lincorr.inputs import read_inputs_file, sample_vocab_inputs, usable_vocab_word


class PieceTokenizer:
    """A SentencePiece-like tokenizer over a fixed piece list, greedy longest match."""

    def __init__(self, pieces):
        self.pieces = list(pieces)

    def __call__(self, text, add_special_tokens=False):
        text = text.replace(" ", "▁")
        ids = []
        while text:
            match = max((p for p in self.pieces if text.startswith(p)), key=len)
            ids.append(self.pieces.index(match))
            text = text[len(match):]
        return {"input_ids": ids}

    def decode(self, ids):
        return "".join(self.pieces[i] for i in ids).replace("▁", " ")


PIECES = ["▁", "▁China", "▁France", "▁South", "▁Korea", "▁Africa", "▁Br", "unei", "▁Coca", "-", "Cola", "中", "国"] + list("abcdefghijklmnopqrstuvwxyzBCSK")


def test_full_token_filter_keeps_words_and_phrase_heads_and_drops_fragments():
    domain = build_domain(["China", "South Korea", "Brunei", "South Africa", "France", "Coca-Cola", "  "], PieceTokenizer(PIECES), name="country")
    assert domain.words == ("China", "South Korea", "France", "Coca-Cola")
    assert domain.categories == ("whole_word", "word_in_phrase", "whole_word", "word_in_phrase")
    reasons = {d.word: d.reason for d in domain.dropped}
    assert "fragment" in reasons["Brunei"]
    assert "South Korea" in reasons["South Africa"]  # merged: same first token
    assert domain.index("south korea") == 1
    with pytest.raises(LincorrError, match="not in the country domain"):
        domain.index("Atlantis")


def test_subwords_kept_on_request_and_counted():
    domain = build_domain(["China", "Brunei"], PieceTokenizer(PIECES), keep_subwords=True)
    assert domain.category_counts() == {"whole_word": 1, "word_in_phrase": 0, "subword": 1}


def test_no_answer_prefix_for_languages_without_spaces():
    domain = build_domain(["中国"], PieceTokenizer(PIECES), answer_prefix="", keep_subwords=True)
    assert domain.tokens == ("中",) and domain.categories == ("subword",)


def test_empty_domain_is_an_error_unless_allowed():
    with pytest.raises(LincorrError, match="no usable word"):
        build_domain(["Brunei"], PieceTokenizer(PIECES), name="tiny")
    assert len(build_domain(["Brunei"], PieceTokenizer(PIECES), allow_empty=True)) == 0


@pytest.mark.parametrize("word, token, category", [("Paris", " Paris", "whole_word"), ("New York", " New", "word_in_phrase"), ("Brunei", " Br", "subword"), ("Newark", " New", "subword")])
def test_classify_first_token(word, token, category):
    assert classify_first_token(word, token) == category


def test_vocab_sample_is_seeded_distinct_and_skips_special_tokens(tokenizer):
    first = sample_vocab_inputs(tokenizer, 40, seed=1)
    assert first == sample_vocab_inputs(tokenizer, 40, seed=1)
    assert first != sample_vocab_inputs(tokenizer, 40, seed=2)
    assert len(set(first)) == 40
    assert not {"<pad>", "<bos>", "<unk>"} & set(first)
    with pytest.raises(LincorrError, match="at most"):
        sample_vocab_inputs(tokenizer, 10_000)


@pytest.mark.parametrize("text, usable", [("Paris", True), ("42", True), ("", False), ("...", False), ("<unused3>", False), ("a\ufffd", False), ("\n", False)])
def test_usable_vocab_word(text, usable):
    assert usable_vocab_word(text) is usable


def test_word_and_input_files(tmp_path):
    words = tmp_path / "cities.txt"
    words.write_text("# cities\nParis\n\nTokyo\n", encoding="utf-8")
    assert read_word_file(words) == ["Paris", "Tokyo"]
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("Alice\nBob\nAlice\n", encoding="utf-8")
    assert read_inputs_file(inputs) == ["Alice", "Bob"]
    (tmp_path / "empty.txt").write_text("\n", encoding="utf-8")
    with pytest.raises(InputError):
        read_inputs_file(tmp_path / "empty.txt")
    with pytest.raises(InputError):
        read_inputs_file(tmp_path / "missing.txt")
    (tmp_path / "binary.txt").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InputError):
        read_word_file(tmp_path / "binary.txt")


def test_a_byte_order_mark_and_windows_line_ends_lose_no_word(tmp_path):
    """Windows editors start UTF-8 files with a byte-order mark and end lines with CRLF: the first word stays whole."""
    for reader, text, expected in ((read_word_file, "Paris\r\nTokyo\r\n", ["Paris", "Tokyo"]),
                                   (read_inputs_file, "Alice\r\nBob\r\n", ["Alice", "Bob"])):
        path = tmp_path / "windows.txt"
        path.write_bytes(codecs.BOM_UTF8 + text.encode("utf-8"))
        assert reader(path) == expected
