"""One folding function for retrieval, task classification and the gate, in every script."""

from __future__ import annotations

import pytest

from loreguard.memory import RetrievalQuery, keywords, retrieve_episodic
from loreguard.schemas import Authority, EpisodicEntry
from loreguard.schemas.text import fold, words
from loreguard.text.phrases import contains_phrase, reveals
from loreguard.text.words import stem, word_tokens


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Where is the DRAGON's Café?", {"dragon", "cafe"}),  # Latin: accents and case folded
        ("Где ключ от Северных ворот?", {"где", "ключ", "северных", "ворот"}),  # Cyrillic
        ("北の門の鍵はどこ", {"北の", "の門", "門の", "の鍵", "鍵は", "はど", "どこ", "北", "門", "鍵"}),  # Japanese
    ],
)
def test_keywords_in_three_scripts(text: str, expected: set[str]) -> None:
    assert keywords(text) == expected


def test_full_width_and_accented_forms_fold_to_plain_ones() -> None:
    assert fold("ＫＥＹ Ключ̆ é Ёж") == "key ключ e еж" and word_tokens("ＫＥＹ-Ключ") == ("key", "ключ")
    assert fold("どこ") == "どこ" != fold("とこ")  # a Japanese voicing mark is part of the word, not an accent


def test_the_gate_and_retrieval_split_words_alike() -> None:
    for text in ("The Dragon's café, north_gate!", "Не говори о драконе, стражник.", "ＦＵＬＬ width"):
        assert words(text).split() == list(word_tokens(text))


def test_forbidden_phrases_and_secrets_match_outside_ascii() -> None:
    assert contains_phrase("Я видел ДРАКОНА на холме.", "дракона")
    assert not contains_phrase("Я видел драконов.", "дракона")  # whole words only, as in English
    assert reveals("Пароль: серебряная луна", "серебряная луна")
    assert reveals("с-е-р-е-б-р-я-н-а-я л-у-н-а", "серебряная луна")  # spaced out, like Latin markers


def _episode(seq: int, text: str, *, at: int) -> EpisodicEntry:
    return EpisodicEntry(id=f"e{seq}", seq=seq, text=text, significance=0.5, at_interaction=at, source=Authority.VALIDATED_OUTPUT)


def test_a_player_line_in_russian_or_japanese_retrieves_the_memory_it_names() -> None:
    entries = [
        _episode(1, "Игрок спросил про ключ от ворот.", at=1),
        _episode(2, "Шёл дождь весь день.", at=2),
        _episode(3, "プレイヤーは門の鍵について聞いた。", at=1),
        _episode(4, "一日中雨が降っていた。", at=2),
    ]
    for line, wanted in (("Где ключ?", 1), ("鍵はどこ?", 3)):
        best, score = retrieve_episodic(entries, RetrievalQuery(player_input=line, now_interaction=3, max_episodic=1))[0]
        assert best.seq == wanted, (line, best.text, score)


@pytest.mark.parametrize(
    ("plural", "singular"),
    [("quests", "quest"), ("pennies", "penny"), ("boxes", "box"), ("glasses", "glass"), ("horses", "horse"),
     ("puertas", "puerta"), ("portes", "porte"), ("status", "status"), ("gas", "gas"), ("ворота", "ворота")],
)  # fmt: skip
def test_a_plural_and_its_singular_are_one_keyword(plural: str, singular: str) -> None:
    assert stem(plural) == stem(singular) == singular
    assert keywords(f"Any {plural}?") == keywords(f"Any {singular}?")
