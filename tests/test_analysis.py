from hyde_tutor.retrieval.analysis import KoreanAwareAnalyzer


def test_korean_usage_shares_morphemes_with_pattern_notation(analyzer: KoreanAwareAnalyzer) -> None:
    usage = set(analyzer.tokenize("먹고 싶어요"))
    pattern = set(analyzer.tokenize("-고 싶다"))
    assert {"먹", "고", "싶"} <= usage
    assert {"고", "싶"} <= pattern
    assert "-" not in pattern and "이" not in pattern  # no notation noise


def test_notation_brackets_and_alternatives(analyzer: KoreanAwareAnalyzer) -> None:
    assert "수" in analyzer.tokenize("-(으)ㄹ 수 있다")
    assert "더니" in analyzer.tokenize("-았/었더니")
    # an ending written alone is analysed as an ending, the same as inside a real sentence
    assert "는데" in analyzer.tokenize("-는데")
    assert "는데" in analyzer.tokenize("비가 오는데 우산이 없어요")


def test_particles_are_split_from_nouns(analyzer: KoreanAwareAnalyzer) -> None:
    terms = analyzer.tokenize("선생님께서 학교에서 책을 읽으세요")
    assert "께서" in terms and "에서" in terms and "을" in terms


def test_russian_word_forms_share_a_stem(analyzer: KoreanAwareAnalyzer) -> None:
    forms = ["желание", "желания", "желанием", "желаний"]
    stems = {analyzer.tokenize(f)[0] for f in forms}
    assert len(stems) == 1


def test_russian_function_words_dropped_and_case_folded(analyzer: KoreanAwareAnalyzer) -> None:
    terms = analyzer.tokenize("Как и что я СКАЖУ")
    assert "и" not in terms and "что" not in terms and "как" not in terms
    assert any(t.startswith("скаж") for t in terms)


def test_latin_and_digits_lowercased(analyzer: KoreanAwareAnalyzer) -> None:
    assert analyzer.tokenize("TOPIK 2 Level") == ["topik", "2", "level"]


def test_mixed_text_keeps_order_and_empty_text(analyzer: KoreanAwareAnalyzer) -> None:
    assert analyzer.tokenize("") == []
    terms = analyzer.tokenize("Пример: 가고 싶어요 — хочу пойти")
    assert terms.index("가") < terms.index("хоч")


def test_analyser_is_thread_safe(analyzer: KoreanAwareAnalyzer) -> None:
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"Желания учеников {i} хотеть поехать 가고 싶어요" for i in range(400)]
    expected = [analyzer.tokenize(t) for t in texts]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(analyzer.tokenize, texts)) == expected
