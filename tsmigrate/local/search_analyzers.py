"""Analyzers of TEXT fields: how text becomes the tokens that match queries.

- single_word (the default): Latin letters and digits form words, every CJK character is a
  token of its own (as the service's standard tokenizer); lower-cased unless case_sensitive.
- split: split on the delimiter (default whitespace), lower-cased.
- min_word / max_word: dictionary-based Chinese segmentation with jieba's dictionary (the
  optional extra `tsmigrate[analyzers]`): min_word is jieba's accurate mode (fewest words);
  max_word, as the service's finest-grained mode, every dictionary word at every position
  (菊花茶 -> 菊花, 菊花茶, 花茶; 梨花茶 -> 梨花, 花茶), and the characters no word covers. Latin
  letters and digits form words as in single_word. Phrase matching on them uses the accurate
  mode, whose tokens do not overlap.
- fuzzy: n-grams of `min_chars` to `max_chars` characters (default 1 to 7), lower-cased; match
  and match-phrase queries on a fuzzy field find the text as a substring, as the n-grams do.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from tsmigrate.local.errors import invalid

DICTIONARY_ANALYZERS = ("max_word", "min_word")
_SINGLE_WORD = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]|"
                          r"[^\W\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")
_jieba: Any = None


def _segmenter() -> Any:
    global _jieba
    if _jieba is None:
        try:
            import jieba  # the optional extra, loaded on first use
        except ImportError:
            raise invalid("The max_word and min_word analyzers need a Chinese segmenter: "
                          "install tsmigrate[analyzers] (jieba).") from None
        jieba.setLogLevel(logging.WARNING)
        _jieba = jieba
    return _jieba


def _words(tokens: Any) -> list[str]:
    return [t.lower() for t in tokens if t.strip() and _SINGLE_WORD.match(t)]


_MAX_WORD_CHARS = 8
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


def _max_word_positions(text: str) -> list[list[str]]:
    """Every dictionary word of every CJK run, grouped by the position it starts at, and the
    characters no word covers; the rest as single_word analyses it (a word per position)."""
    words = _segmenter().dt
    words.check_initialized()
    freq = words.FREQ
    positions: list[list[str]] = []
    pos = 0
    for run in _CJK.finditer(text):
        positions += [[w] for w in _SINGLE_WORD.findall(text[pos:run.start()].lower())]
        chunk = run.group()
        covered = [False] * len(chunk)
        for i in range(len(chunk)):
            found = [chunk[i:j] for j in range(i + 2, min(len(chunk), i + _MAX_WORD_CHARS) + 1)
                     if freq.get(chunk[i:j])]
            for word in found:
                covered[i:i + len(word)] = [True] * len(word)
            if not found and not covered[i]:
                found = [chunk[i]]
            if found:
                positions.append(found)
        pos = run.end()
    positions += [[w] for w in _SINGLE_WORD.findall(text[pos:].lower())]
    return positions


def analyze(analyzer: str | None, text: str, *, case_sensitive: bool = False,
            delimiter: str | None = None, ngram: tuple[int, int] = (1, 7)) -> list[str]:
    """The tokens of `text`, in order."""
    return analyze_with_length(analyzer, text, case_sensitive=case_sensitive, delimiter=delimiter,
                               ngram=ngram)[0]


def analyze_with_length(analyzer: str | None, text: str, *, case_sensitive: bool = False,
                        delimiter: str | None = None,
                        ngram: tuple[int, int] = (1, 7)) -> tuple[list[str], int]:
    """The tokens of `text`, in order, and its length for relevance scores: the positions the
    tokens take (the words max_word finds at one position count once, as Lucene discounts
    overlapping tokens)."""
    if analyzer == "max_word":
        positions = _max_word_positions(text)
        return [w for words in positions for w in words], len(positions)
    tokens = _tokens(analyzer, text, case_sensitive, delimiter, ngram)
    return tokens, len(tokens)


def _tokens(analyzer: str | None, text: str, case_sensitive: bool, delimiter: str | None,
            ngram: tuple[int, int]) -> list[str]:
    if analyzer == "split":
        return [t for t in text.lower().split(delimiter) if t]
    if analyzer == "min_word":
        return _words(_segmenter().cut(text))
    if analyzer == "fuzzy":
        low, high = ngram
        lowered = text.lower()
        return [lowered[i:i + n] for n in range(low, high + 1) for i in range(len(lowered) - n + 1)]
    return _SINGLE_WORD.findall(text if case_sensitive else text.lower())


def phrase_tokens(analyzer: str | None, text: str, **options: Any) -> list[str]:
    """The tokens a phrase is matched with: non-overlapping ones (accurate mode for max_word)."""
    if analyzer in DICTIONARY_ANALYZERS:
        return _words(_segmenter().cut(text))
    return analyze(analyzer, text, **options)
