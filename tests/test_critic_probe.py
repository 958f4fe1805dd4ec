"""The verdict probe: its features are the states the trainer's verdict position reads, it fits and
ships as JSON over a hashed model, and a critic scores its verdict with it."""

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from ragcritic_lib.critic import probe as P  # noqa: E402


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from test_llm import _write_tiny_model

    torch.set_num_threads(1)
    return _write_tiny_model(tmp_path_factory.mktemp("probe") / "base")


def _conv(q, a):
    return [{"role": "system", "content": "Judge."},
            {"role": "user", "content": f"Question: {q}\nPassages:\n[1] x\nAnswer to check: {a}"}]


def _model(tiny_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return (AutoModelForCausalLM.from_pretrained(str(tiny_dir), dtype=torch.float32).eval(),
            AutoTokenizer.from_pretrained(str(tiny_dir)))


def test_features_are_the_states_at_the_trainers_verdict_position(tiny_dir) -> None:
    from ragcritic_lib.critic.critics import VERDICT_PREFIX
    from ragcritic_lib.critic.train import encode

    model, tok = _model(tiny_dir)
    convs = [_conv("where", "here"), _conv("when was it built, and by whom", "in 1990 by a long list of people")]
    feats = P.verdict_features(model, tok, convs, layer=1, batch_size=2)
    h = model.config.hidden_size
    assert feats.shape == (2, 2 * h)
    for conv, row in zip(convs, feats):
        e = encode(tok, conv, VERDICT_PREFIX + 'Error"}', max_length=10_000)
        ids = torch.tensor([e.ids[: e.verdict_pos + 1]])
        with torch.no_grad():
            out = model(input_ids=ids, output_hidden_states=True)
        assert torch.allclose(torch.tensor(row[:h]), out.hidden_states[1][0, -1], atol=1e-4)
        # the final state is the normed one: the LM head maps it to the model's logits
        assert torch.allclose(model.lm_head(torch.tensor(row[h:])), out.logits[0, -1], atol=1e-3)
    # batching and order change nothing
    alone = P.verdict_features(model, tok, convs[1:], layer=1)
    assert torch.allclose(torch.tensor(alone[0]), torch.tensor(feats[1]), atol=1e-4)
    # every state at the last position, each sequence once, in the callers' numbering
    ids = [P._verdict_ids(tok, c) for c in convs]
    seen = dict(P.last_position_states(model, tok, ids, batch_size=1))
    assert sorted(seen) == [0, 1] and len(seen[0]) == model.config.num_hidden_layers + 1
    for i in (0, 1):
        assert torch.allclose(torch.cat([seen[i][1], seen[i][-1]]), torch.tensor(feats[i]), atol=1e-4)


def test_fit_save_and_score_round_trip_through_a_critic(tiny_dir, tmp_path) -> None:
    from ragcritic_lib.critic.critics import LLMCritic
    from ragcritic_lib.evaluation.stats import auroc

    model, tok = _model(tiny_dir)
    convs = [_conv(f"q{i}", "wrong thing" if i % 2 else "right") for i in range(20)]
    labels = [bool(i % 2) for i in range(20)]
    feats = P.verdict_features(model, tok, convs, layer=1)
    fitted = P.fit_probe(feats, labels, seed=0)
    assert fitted["n"] == 20 and fitted["n_error"] == 10
    assert auroc(P.probe_scores(fitted, feats), labels) == 1.0
    folder = P.save_probe(tmp_path / "probe", fitted, model_dir=tiny_dir, layer=1)
    scorer = P.ProbeScorer(folder)
    assert scorer(convs) == pytest.approx(P.probe_scores(fitted, feats), abs=1e-4)
    assert scorer.forward_rows == 20
    # a conversation read before, or twice in one call, costs no forward pass and scores the same
    again = scorer([convs[3], convs[3], convs[0], _conv("new question", "right")])
    assert scorer.forward_rows == 21
    assert again[:3] == [scorer(convs)[3]] * 2 + [scorer(convs)[0]]
    assert again[3] == pytest.approx(P.probe_scores(fitted, P.verdict_features(model, tok, [_conv("new question", "right")],
                                                                            layer=1))[0], abs=1e-4)

    class NoScore:  # the critic never asks its LLM for the margin when it has a scorer
        model = "x"

        def score(self, *a, **k):
            raise AssertionError("margin read from the LLM")

    critic = LLMCritic(NoScore(), taxonomy=None, verdict_scorer=lambda cs: [len(c) for c in cs])
    records = [{"question": "q", "passages": ["p"], "prediction": "a"}]
    critic.messages = lambda r: _conv(r["question"], r["prediction"])
    assert critic.verdict_margins(records) == [2.0]


def test_a_probe_refuses_one_class_another_model_and_a_bad_file(tiny_dir, tmp_path) -> None:
    with pytest.raises(ValueError, match="of one class"):
        P.fit_probe([[0.0, 1.0], [1.0, 0.0]], [True, True], seed=0)
    with pytest.raises(FileNotFoundError, match="no verdict probe"):
        P.ProbeScorer(tmp_path)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / P.PROBE_FILE).write_text("{}")
    with pytest.raises(ValueError, match="expected a probe with base.folder"):
        P.ProbeScorer(tmp_path / "bad")
    folder = P.save_probe(tmp_path / "p", {"mean": [0], "scale": [1], "coef": [1], "intercept": 0.0},
                          model_dir=tiny_dir, layer=1)
    doc = json.loads((folder / P.PROBE_FILE).read_text())
    doc["base"]["sha256"] = "0" * 64
    (folder / P.PROBE_FILE).write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="not the one the probe was fitted on"):
        P.ProbeScorer(folder)


def test_a_probe_fits_the_few_samples_of_a_smoke_run() -> None:
    """Four samples, two a class, once stopped SIM-RAG's smoke run: 5 folds cannot split them."""
    feats = [[0.0, 1.0], [0.1, 0.9], [1.0, 0.0], [0.9, 0.2]]
    two_each = P.fit_probe(feats, [False, False, True, True], seed=0)
    assert two_each["n"] == 4 and P.probe_scores(two_each, feats)[2] > P.probe_scores(two_each, feats)[0]
    one_wrong = P.fit_probe(feats[:3], [False, False, True], seed=0)
    assert one_wrong["C"] == 1.0 and P.probe_scores(one_wrong, feats)[2] > P.probe_scores(one_wrong, feats)[0]


def test_repeated_folds_choose_c_over_several_shuffled_splits() -> None:
    import numpy as np

    rng = np.random.default_rng(3)
    y = [bool(i % 3 == 0) for i in range(60)]
    x = np.array([[1.0 if v else 0.0, 0.0] for v in y]) + rng.normal(0, 1.0, (60, 2))
    once = P.fit_probe(x, y, seed=5)
    assert P.fit_probe(x, y, seed=5, cv_repeats=1) == once  # the default is one split, in order
    repeated = P.fit_probe(x, y, seed=5, cv_repeats=3)
    assert repeated["n"] == 60 and repeated["C"] > 0 and len(repeated["coef"]) == 2
    assert P.fit_probe(x, y, seed=5, cv_repeats=3) == repeated  # seeded


def test_the_probe_fit_states_its_penalty_and_raises_no_deprecation_warning() -> None:
    import warnings

    import numpy as np
    from sklearn.linear_model import LogisticRegressionCV

    rng = np.random.default_rng(3)
    y = [bool(i % 4 == 0) for i in range(80)]
    x = np.array([[1.0 if v else 0.0, 0.5, -0.2] for v in y]) + rng.normal(0, 1.0, (80, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # an unstated default is a FutureWarning in scikit-learn 1.9
        fitted = P.fit_probe(x, y, seed=2)
    # The same fit as scikit-learn's plain L2 logistic regression with C by 5-fold AUROC.
    z = (x - x.mean(0)) / x.std(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        ref = LogisticRegressionCV(Cs=8, cv=5, scoring="roc_auc", max_iter=3000, random_state=2).fit(z, np.array(y, int))
    assert fitted["C"] == float(ref.C_[0]) and np.allclose(fitted["coef"], ref.coef_[0], atol=1e-12)
    assert fitted["intercept"] == pytest.approx(float(ref.intercept_[0]), abs=1e-12)


def test_a_probe_that_reads_the_answer_span_ships_and_scores_the_same(tiny_dir, tmp_path) -> None:
    import numpy as np

    model, tok = _model(tiny_dir)
    convs = [_conv(f"q{i}", "a long and wrong thing here" if i % 2 else "right") for i in range(12)]
    labels = [bool(i % 2) for i in range(12)]
    plain = P.verdict_features(model, tok, convs, layer=1)
    spanned = P.verdict_features(model, tok, convs, layer=1, span_layer=2)
    width = model.config.hidden_size
    assert spanned.shape == (12, 3 * width) and np.allclose(spanned[:, width:], plain, atol=1e-5)
    ids, start, end = P.answer_span(tok, convs[1])
    assert tok.decode(ids[start:end]).strip() == "a long and wrong thing here" and 0 < start < end < len(ids)
    states = dict((i, (s, m)) for i, s, m in P.span_states(model, tok, [ids], [(start, end)]))
    assert np.allclose(spanned[1, :width], states[0][1][2].numpy(), atol=1e-5)  # layer 2 over the answer
    with pytest.raises(ValueError, match="spans"):
        P.hidden_features(model, tok, [ids], layer=1, span_layer=2)
    fitted = P.fit_probe(spanned, labels, seed=0)
    folder = P.save_probe(tmp_path / "span", fitted, model_dir=tiny_dir, layer=1, span_layer=2)
    assert json.loads((folder / P.PROBE_FILE).read_text())["span_layer"] == 2
    scorer = P.ProbeScorer(folder)
    assert scorer(convs) == pytest.approx(P.probe_scores(fitted, spanned), abs=1e-4)
    assert scorer(convs[:2]) == scorer(convs)[:2] and scorer.forward_rows == 12
    plain_folder = P.save_probe(tmp_path / "plain", P.fit_probe(plain, labels, seed=0), model_dir=tiny_dir, layer=1)
    assert "span_layer" not in json.loads((plain_folder / P.PROBE_FILE).read_text())  # an older probe.json, unchanged
