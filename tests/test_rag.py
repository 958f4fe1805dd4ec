import pytest

from ragcritic_lib.retrieval.rag import ANSWER_PREFIX, build_rag_messages, extract_answer, format_passages


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("Passage [2] says so. So the final answer is: Paris", ("Paris", True)),
        ("so the final answer is: **Paris**.", ("Paris", True)),
        ("The final answer is Leonardo da Vinci. It was painted in 1503.", ("Leonardo da Vinci", True)),
        ("Final answer: 1,642 metres.\nQuestion: next", ("1,642 metres", True)),
        ("First guess. So the final answer is: Rome. Then: So the final answer is: Milan", ("Milan", True)),
        ("The answer is Mount Everest.", ("Mount Everest", False)),
        ("The answer is: Sweden", ("Sweden", False)),
        ("Luke was there. So the answer is: Luke Ambrose", ("Luke Ambrose", False)),
        ("The answer to this question is: Axiom.", ("Axiom", False)),
        ("Mount Everest", ("Mount Everest", False)),
        ("", ("", False)),
        ("So the final answer is:", ("", False)),
        ("\n\n  Tokyo\nmore text", ("Tokyo", False)),
        ("So the final answer is: U.S. Army", ("U.S. Army", True)),
        ("So the final answer is: insufficient information<|im_end|>", ("insufficient information", True)),
    ],
)
def test_extract_answer(raw, expected):
    assert extract_answer(raw) == expected


def test_extract_answer_prefilled_and_word_cap():
    assert extract_answer(" Lake Baikal.", prefilled=True) == ("Lake Baikal", True)
    long = "So the final answer is: " + " ".join(f"w{i}" for i in range(40))
    ans, ok = extract_answer(long, max_words=5)
    assert ok and ans == "w0 w1 w2 w3 w4"


def test_extract_answer_survives_adversarial_text():
    for raw in ["\x00\x01", "}{][", "So the final answer is: " + "ha" * 5000, None]:
        ans, _ = extract_answer(raw)
        assert isinstance(ans, str) and len(ans.split()) <= 16


def test_messages_variants():
    msgs = build_rag_messages("Who?", ["T1\nbody one", "T2\nbody two"])
    assert msgs[0]["role"] == "system" and ANSWER_PREFIX in msgs[0]["content"]
    assert msgs[-1]["role"] == "user" and "[1] T1: body one" in msgs[-1]["content"]
    # Two worked examples (an answer, then an abstention) before the question.
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert msgs[4]["content"].endswith(f"{ANSWER_PREFIX} insufficient information")
    pre = build_rag_messages("Who?", ["T\nb"], variant="prefill")
    assert pre[-1] == {"role": "assistant", "content": ANSWER_PREFIX}
    terse = build_rag_messages("Who?", ["T\nb"], variant="terse")
    assert [m["role"] for m in terse] == ["system", "user"]
    closed = build_rag_messages("Who?", ["T\nb"], variant="closed_book")
    assert "Passages" not in closed[-1]["content"]
    extra = build_rag_messages("Who?", ["T\nb"], additional_instruction="Be precise.")
    assert extra[-1]["content"].endswith("Instruction: Be precise.")
    with pytest.raises(ValueError, match="unknown RAG prompt variant"):
        build_rag_messages("Who?", [], variant="nope")


def test_format_passages_truncates():
    text = format_passages(["Title\n" + " ".join(["w"] * 100)], max_words=10)
    assert text == "[1] Title: " + " ".join(["w"] * 10) + " ..."


@pytest.mark.parametrize("raw,expected", [
    (" Dr. Nils Larkin.", "Dr. Nils Larkin"),
    (" St. Louis, Missouri. It lies on a river.", "St. Louis, Missouri"),
    (" J. R. R. Tolkien wrote it.", "J. R. R. Tolkien wrote it"),
    (" 2023. So the revenue changed.", "2023"),
    (" 3.5 million", "3.5 million"),
    (" Acme Inc. is the owner.", "Acme Inc. is the owner"),
])
def test_first_sentence_keeps_abbreviations_and_initials(raw, expected):
    assert extract_answer(raw, prefilled=True)[0] == expected


def test_answer_gen_params_is_the_one_answer_setting():
    from pathlib import Path

    from ragcritic_lib.llm import GenParams
    from ragcritic_lib.retrieval.rag import ANSWER_STOP, PREFILL_STOP, PROMPT_VARIANTS, answer_gen_params

    # The default variant stops at the union of what notebook 01 and notebooks 08-13 used.
    assert set(ANSWER_STOP) == {"\nQuestion:", "\n\n\n"} | {"\nQuestion:", "<|im_end|>"}
    assert answer_gen_params("default", 32) == GenParams(max_new_tokens=32, stop=("\nQuestion:", "\n\n\n", "<|im_end|>"))
    assert answer_gen_params("prefill", 32) == GenParams(max_new_tokens=32, stop=PREFILL_STOP) and PREFILL_STOP == ("\n",)
    for variant in ("terse", "closed_book"):
        assert answer_gen_params(variant, 7) == GenParams(max_new_tokens=7, stop=ANSWER_STOP)
    assert answer_gen_params() == GenParams(max_new_tokens=48, stop=ANSWER_STOP)
    assert set(PROMPT_VARIANTS) == {"default", "prefill", "terse", "closed_book"}
    with pytest.raises(ValueError, match="unknown RAG prompt variant"):
        answer_gen_params("bogus", 32)
    # No notebook builds an answer setting by hand.
    root = Path(__file__).resolve().parents[1] / "notebooks"
    for nb in sorted(root.glob("*.py")):
        assert "\\nQuestion:" not in nb.read_text(encoding="utf-8"), nb.name
