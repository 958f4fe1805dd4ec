"""The encoder verifier: how it reads the critic's prompt, and that it learns on a tiny encoder."""

import pytest

from ragcritic_lib.critic.critics import VERDICT_PREFIX
from ragcritic_lib.critic.verifier import example_pair, split_view

USER = ("Question: Where is Mynara Arena?\nPassages:\n[1] Mynara Arena: it stands in Salton.\n[2] Other text.\n"
        "Answer to check: Salton\n\nReply {\"Judgement\": \"Correct\"} or {\"Judgement\": \"Error\"}.")


def test_split_view_puts_answer_and_question_first_and_passages_second() -> None:
    first, second = split_view(USER)
    assert first == "Answer to check: Salton Question: Where is Mynara Arena?"
    assert second == "[1] Mynara Arena: it stands in Salton. [2] Other text."


def test_an_unexpected_prompt_is_read_whole_not_refused() -> None:
    assert split_view("no marks at all\nhere") == ("no marks at all here", "")
    assert split_view("Answer to check: x Question: y Passages: z") == ("Answer to check: x Question: y Passages: z", "")


def test_example_pair_labels_from_the_assistant_verdict() -> None:
    def ex(verdict):
        return {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": USER},
                             {"role": "assistant", "content": VERDICT_PREFIX + verdict + '"}'}]}
    assert example_pair(ex("Correct"))[2] is False and example_pair(ex("Error"))[2] is True


def _tiny_encoder(folder):
    transformers = pytest.importorskip("transformers")

    folder.mkdir(parents=True, exist_ok=True)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "answer", "to", "check", "question", "salton", "paris",
             "where", "is", "it", "stands", "in", "[1]", "arena", ":", "?", "."]
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    tk = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tk.normalizer = normalizers.Lowercase()
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                      special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    transformers.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                         sep_token="[SEP]", mask_token="[MASK]").save_pretrained(folder)
    cfg = transformers.BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=64)
    transformers.BertModel(cfg).save_pretrained(folder)
    return folder


def test_the_verifier_learns_a_grounding_signal_and_reloads(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    from ragcritic_lib.critic.verifier import EncoderVerifier, VerifierSettings, dev_pairs_and_labels, train_verifier
    from ragcritic_lib.evaluation.stats import auroc

    torch.set_num_threads(1)
    folder = _tiny_encoder(tmp_path / "enc")

    def chat(n, offset):
        out = []
        for i in range(n):
            wrong = (i + offset) % 2 == 0
            ans = "paris" if wrong else "salton"
            user = f"Question: where is it?\nPassages:\n[1] it stands in salton.\nAnswer to check: {ans}\n\nReply."
            out.append({"messages": [{"role": "user", "content": user},
                                     {"role": "assistant", "content": VERDICT_PREFIX + ("Error" if wrong else "Correct")}]})
        return out

    v = EncoderVerifier(folder, max_length=32, seed=0)
    rep = train_verifier(v, chat(32, 0), chat(8, 1), VerifierSettings(epochs=6, learning_rate=3e-3, head_learning_rate=3e-2, batch_size=8,
                                                                     eval_every=32, seed=0))
    pairs, labels = dev_pairs_and_labels(chat(8, 1))
    assert rep.best_dev_auroc == 1.0 and auroc(v.scores(pairs), labels) == 1.0
    back = EncoderVerifier.load(v.save(tmp_path / "saved"), max_length=32)
    assert back.scores(pairs) == pytest.approx(v.scores(pairs), abs=1e-5)


def test_a_shipped_verifier_scores_the_critic_user_turns(tmp_path) -> None:
    pytest.importorskip("torch")
    from ragcritic_lib.critic.verifier import EncoderVerifier, VerifierScorer

    folder = EncoderVerifier(_tiny_encoder(tmp_path / "enc"), max_length=32).save(tmp_path / "shipped")
    scorer = VerifierScorer(folder, max_length=32)
    a = "Question: where is it?\nPassages:\n[1] it stands in salton.\nAnswer to check: paris\n\nReply."
    got = scorer([a, a.replace("paris", "salton")])
    assert len(got) == 2 and all(isinstance(v, float) for v in got)
    assert got[0] == pytest.approx(scorer([a])[0], abs=1e-6)


def test_the_verifier_ships_only_what_it_trained_and_refuses_another_base(tmp_path) -> None:
    pytest.importorskip("torch")
    import json

    from safetensors.torch import load_file

    from ragcritic_lib.critic.verifier import EncoderVerifier, VerifierSettings, train_verifier

    base = _tiny_encoder(tmp_path / "enc")
    v = EncoderVerifier(base, max_length=32)
    ex = [{"messages": [{"role": "user", "content": "Question: q\nPassages:\n[1] p\nAnswer to check: a"},
                        {"role": "assistant", "content": VERDICT_PREFIX + ("Error" if i % 2 else "Correct")}]}
          for i in range(4)]
    train_verifier(v, ex, ex, VerifierSettings(epochs=1, batch_size=4, eval_every=4, train_layers=1, seed=0))
    out = v.save(tmp_path / "shipped")
    names = set(load_file(str(out / "verifier.safetensors")))
    assert names and all(n.startswith(("encoder.encoder.layer.0.", "head.")) for n in names)
    manifest = json.loads((out / "verifier.json").read_text())
    assert manifest["trained_layers"] == 1 and manifest["base"]["params_key"] == "critic_body.verifier_model"
    (base / "model.safetensors").write_bytes((base / "model.safetensors").read_bytes() + b" ")
    with pytest.raises(ValueError, match="is not the one the verifier was trained on"):
        EncoderVerifier.load(out)
    with pytest.raises(FileNotFoundError, match="no verifier manifest"):
        EncoderVerifier.load(tmp_path)


def test_train_pairs_learns_any_pair_task_and_refuses_bad_input(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    from ragcritic_lib.critic.verifier import EncoderVerifier, VerifierSettings, train_pairs
    from ragcritic_lib.evaluation.stats import auroc

    torch.set_num_threads(1)
    v = EncoderVerifier(_tiny_encoder(tmp_path / "enc"), max_length=32, seed=0)
    # Label: the second segment does not hold "salton" (the question cannot be answered from it).
    rows = [("where is it?", "it stands in salton." if i % 2 else "it is old.", i % 2 == 0) for i in range(32)]
    dev = [(a, b) for a, b, _ in rows[:8]]
    labels = [y for *_, y in rows[:8]]
    rep = train_pairs(v, rows, dev, labels, VerifierSettings(epochs=6, learning_rate=3e-3, head_learning_rate=3e-2,
                                                             batch_size=8, eval_every=32, seed=0))
    assert rep.examples == 32 and rep.best_dev_auroc == 1.0 and auroc(v.scores(dev), labels) == 1.0
    with pytest.raises(ValueError, match="no training rows"):
        train_pairs(v, [], dev, labels, VerifierSettings())
    with pytest.raises(ValueError, match="8 dev pairs but 7 dev labels"):
        train_pairs(v, rows, dev, labels[:7], VerifierSettings())
