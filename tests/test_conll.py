"""CoNLL reading, windowed first-sub-token features, entity scoring (vs seqeval), write-back."""
import os
import random
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf
from seqeval import metrics as seqeval_metrics
from seqeval import scheme as seqeval_scheme

from bert_tf.data import records
from bert_tf.errors import BertTfError
from bert_tf.tasks import conll
from bert_tf.tasks import conlleval
from support.paths import shared_data

TYPES = ("PER", "LOC", "ORG", "MISC")


class PieceTokenizer:
  """Splits each word into pieces of 3 characters (`abcdefg` -> abc ##def ##g); ids by first use."""

  def __init__(self):
    self.vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}

  def tokenize(self, word):
    if word == "<drop>":
      return []
    pieces = [word[i:i + 3] for i in range(0, len(word), 3)]
    return pieces[:1] + ["##" + p for p in pieces[1:]]

  def convert_tokens_to_ids(self, tokens):
    return [self.vocab.setdefault(t, len(self.vocab)) for t in tokens]


def write(tmp_path, text, name="data.txt"):
  path = os.path.join(tmp_path, name)
  with open(path, "w") as f:
    f.write(text)
  return path


CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC


Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER
-DOCSTART- -X- -X- O
BRUSSELS NNP B-NP B-LOC
"""


def test_read_conll_sentences_docstarts_and_blank_runs(tmp_path):
  sentences = conll.read_conll(write(tmp_path, CONLL))
  assert [s.words for s in sentences] == [["EU", "rejects", "German"], ["Peter", "Blackburn"],
                                          ["BRUSSELS"]]
  assert [s.tags for s in sentences] == [["B-ORG", "O", "B-MISC"], ["B-PER", "I-PER"], ["B-LOC"]]
  assert sentences[0].docstarts == ["-DOCSTART- -X- -X- O"]
  assert sentences[1].docstarts == []
  # A -DOCSTART- inside a sentence ends it.
  assert sentences[2].docstarts == ["-DOCSTART- -X- -X- O"]
  assert sentences[0].line_numbers == [3, 4, 5]
  assert sentences[1].lines[1] == "Blackburn NNP I-NP I-PER"
  assert conll.get_labels(sentences) == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-PER"]


def test_words_keep_characters_other_readers_split_lines_or_columns_at(tmp_path):
  # Lines end at "\n" only ("\r" dropped, as tf.gfile reads), columns are split at spaces and
  # tabs only: U+2028, U+0085, U+00A0 and \x1c are part of a word.
  path = tmp_path / "odd.txt"
  path.write_bytes("a\u2028b NN B-PER\r\nc\x85d\tNN I-PER\r\n\r\ne\xa0f NN O\ng\x1ch NN O\n"
                   .encode("utf-8"))
  sentences = conll.read_conll(str(path))
  assert [s.words for s in sentences] == [["a\u2028b", "c\x85d"], ["e\xa0f", "g\x1ch"]]
  assert [s.tags for s in sentences] == [["B-PER", "I-PER"], ["O", "O"]]
  assert sentences[1].line_numbers == [4, 5]


@pytest.mark.parametrize("text,message", [
    ("EU B-ORG\nrejects VBZ O\n", ":2: expected 2 columns (as on line 1), got 3"),
    ("EU\n", ":1: expected at least 2 columns"),
    ("EU NNP ORG\n", ":1: tag 'ORG' (last column) is not O"),
    ("\n\n-DOCSTART- O\n\n", "no sentences found"),
])
def test_read_conll_bad_input(tmp_path, text, message):
  path = write(tmp_path, text)
  with pytest.raises(BertTfError) as e:
    conll.read_conll(path)
  assert str(e.value).startswith(path) and message in str(e.value)


def test_detect_scheme(tmp_path):
  iob2 = conll.read_conll(write(tmp_path, "a B-PER\nb I-PER\nc O\nd B-LOC\n"))
  iob1 = conll.read_conll(write(tmp_path, "a I-PER\nb I-PER\nc B-PER\nd O\n"))
  iobes = conll.read_conll(write(tmp_path, "a B-PER\nb E-PER\nc S-LOC\n"))
  assert conll.detect_scheme(iob2) == "IOB2"
  assert conll.detect_scheme(iob1) == "IOB1"
  assert conll.detect_scheme(iobes) == "IOBES"


def test_window_spans_cover_every_word_once():
  rng = random.Random(0)
  for _ in range(200):
    counts = [rng.randint(1, 9) for _ in range(rng.randint(1, 40))]
    max_tokens = rng.randint(9, 30)
    spans = conll.window_spans(counts, max_tokens)
    labelled = [w for _, start, end, _ in spans for w in range(start, end)]
    assert labelled == list(range(len(counts)))
    for first, start, end, last in spans:
      assert first <= start < end <= last
      assert sum(counts[first:last]) <= max_tokens
    if sum(counts) <= max_tokens:
      assert spans == [(0, 0, len(counts), len(counts))]


def test_features_label_first_sub_token_only():
  sentence = conll.Sentence(["Blackburn", "is", "<drop>"], ["B-PER", "O", "O"], None, [1, 2, 3],
                            [])
  tokenizer = PieceTokenizer()
  label_list = ["O", "B-PER", "I-PER"]
  [feature] = conll.convert_sentences_to_features([sentence], label_list, 12, tokenizer)
  tokens = ["[CLS]", "Bla", "##ckb", "##urn", "is", "[UNK]", "[SEP]"]
  assert feature.input_ids[:7] == tokenizer.convert_tokens_to_ids(tokens)
  assert feature.input_ids[7:] == [0] * 5
  assert feature.input_mask == [1] * 7 + [0] * 5
  assert feature.label_ids == [0, 1, 0, 0, 0, 0] + [0] * 6
  assert feature.label_weights == [0, 1, 0, 0, 1, 1] + [0] * 6
  assert feature.word_indexes == [0, 1, 2] and feature.token_positions == [1, 4, 5]


def test_long_sentence_is_windowed_and_every_word_predicted(tmp_path):
  rng = random.Random(1)
  words = ["".join(rng.choice("abcdefgh") for _ in range(rng.randint(1, 10))) for _ in range(60)]
  tags = [rng.choice(["O", "B-PER", "I-PER"]) for _ in words]
  sentence = conll.Sentence(words, tags, [f"{w} {t}" for w, t in zip(words, tags)],
                            list(range(1, 61)), [])
  label_list = ["O", "B-PER", "I-PER"]
  features = conll.convert_sentences_to_features([sentence] * 2, label_list, 16,
                                                 PieceTokenizer())
  assert len(features) > 2
  assert all(len(f.input_ids) == 16 and sum(f.input_mask) <= 16 for f in features)
  assert sum(sum(f.label_weights) for f in features) == 120
  # Predicting the gold label at every position gives the gold tags back.
  predicted = [np.array(f.label_ids) for f in features]
  tags_back = conll.predictions_to_tags([sentence] * 2, features, predicted, label_list)
  assert tags_back == [tags, tags]
  path = os.path.join(tmp_path, "predictions.txt")
  conll.write_predictions(path, [sentence], [tags])
  lines = open(path).read().split("\n")
  assert lines[0] == f"{words[0]} {tags[0]} {tags[0]}" and lines[60] == "" and len(lines) == 62


def test_unknown_tag_at_eval_is_reported_and_weighted_zero(tmp_path):
  sentence = conll.Sentence(["a", "b"], ["B-XYZ", "O"], None, [7, 8], [])
  with mock.patch.object(conll.logging, "warning") as warning:
    [feature] = conll.convert_sentences_to_features([sentence], ["O", "B-PER"], 8,
                                                    PieceTokenizer(), source="dev.txt")
  assert feature.label_weights[:3] == [0, 0, 1]
  message = warning.call_args[0][0] % warning.call_args[0][1:]
  assert "dev.txt" in message and "'B-XYZ' x1 (first on line 7)" in message


def test_records_round_trip(tmp_path):
  sentence = conll.Sentence(["Blackburn", "is"], ["B-PER", "O"], None, [1, 2], [])
  [feature] = conll.convert_sentences_to_features([sentence], ["O", "B-PER"], 8,
                                                  PieceTokenizer())
  path = os.path.join(tmp_path, "train.tf_record")
  conll.write_records([feature], path)
  schema = conll.tagging_features(8)
  records.check_record_shapes(path, schema)
  [parsed] = tf.data.TFRecordDataset(path).map(records.parse_fn(schema))
  assert parsed["label_ids"].dtype == tf.int32
  assert parsed["label_ids"].numpy().tolist() == feature.label_ids
  assert parsed["label_weights"].numpy().tolist() == feature.label_weights


def test_entities_iob1_iob2_iobes():
  assert conlleval.get_entities(["B-PER", "I-PER", "O", "B-LOC"]) == {("PER", 0, 2), ("LOC", 3, 4)}
  # IOB1: I- opens an entity, B- separates two adjacent entities of one type.
  assert conlleval.get_entities(["I-PER", "I-PER", "B-PER", "I-LOC"]) == {
      ("PER", 0, 2), ("PER", 2, 3), ("LOC", 3, 4)}
  assert conlleval.get_entities(["S-PER", "B-LOC", "E-LOC", "O"]) == {("PER", 0, 1), ("LOC", 1, 3)}


def _random_entities(rng, length):
  """Random non-overlapping entities [(type, start, end)] in a sentence of `length` words."""
  entities, i = [], 0
  while i < length:
    if rng.random() < 0.4:
      end = min(length, i + rng.randint(1, 3))
      entities.append((rng.choice(TYPES), i, end))
      i = end
    else:
      i += rng.randint(1, 2)
  return entities


def _encode(entities, length, scheme):
  tags = ["O"] * length
  for k, (entity_type, start, end) in enumerate(entities):
    previous = entities[k - 1] if k else None
    adjacent_same = previous and previous[2] == start and previous[0] == entity_type
    for i in range(start, end):
      tags[i] = f"I-{entity_type}"
    if scheme == "IOB2" or (scheme == "IOB1" and adjacent_same):
      tags[start] = f"B-{entity_type}"
  return tags


def _assert_same_as_seqeval(gold, predicted, **mode):
  ours = conlleval.entity_scores(gold, predicted)
  report = seqeval_metrics.classification_report(gold, predicted, output_dict=True,
                                                 zero_division=0, **mode)
  overall = ours["overall"]
  assert overall["f1"] == pytest.approx(seqeval_metrics.f1_score(gold, predicted, **mode))
  assert overall["precision"] == pytest.approx(
      seqeval_metrics.precision_score(gold, predicted, **mode))
  assert overall["recall"] == pytest.approx(seqeval_metrics.recall_score(gold, predicted, **mode))
  assert report["micro avg"]["f1-score"] == pytest.approx(overall["f1"])
  for entity_type, scores in ours["types"].items():
    if scores["support"]:
      assert report[entity_type]["f1-score"] == pytest.approx(scores["f1"])
      assert report[entity_type]["support"] == scores["support"]
  assert ours["accuracy"] == pytest.approx(seqeval_metrics.accuracy_score(gold, predicted))


@pytest.mark.parametrize("scheme", ["IOB1", "IOB2"])
def test_scores_match_seqeval_on_well_formed_tags(scheme):
  rng = random.Random(scheme)
  gold, predicted = [], []
  for _ in range(300):
    length = rng.randint(1, 12)
    entities = _random_entities(rng, length)
    kept = [e for e in entities if rng.random() < 0.7]
    # Wrong type or boundary for some, spurious ones elsewhere.
    noisy = sorted(kept + [e for e in _random_entities(rng, length)
                           if all(e[2] <= k[1] or e[1] >= k[2] for k in kept) and
                           rng.random() < 0.3])
    gold.append(_encode(entities, length, scheme))
    predicted.append(_encode(noisy, length, scheme))
  _assert_same_as_seqeval(gold, predicted)
  scheme_class = getattr(seqeval_scheme, scheme)
  _assert_same_as_seqeval(gold, predicted, mode="strict", scheme=scheme_class)


def test_scores_match_seqeval_conlleval_mode_on_any_tags():
  # Ill-formed sequences (I- after O, type changes inside I- runs), read as conlleval reads them.
  rng = random.Random(3)
  tags = ["O", "O", "O"] + [f"{p}-{t}" for p in "BI" for t in TYPES]
  gold = [[rng.choice(tags) for _ in range(rng.randint(1, 15))] for _ in range(300)]
  predicted = [[t if rng.random() < 0.7 else rng.choice(tags) for t in g] for g in gold]
  _assert_same_as_seqeval(gold, predicted)


def test_scores_match_seqeval_on_real_conll_dev():
  sentences = conll.read_conll(os.path.join(shared_data("conll2003"), "valid.txt"))
  assert conll.detect_scheme(sentences) == "IOB2"
  labels = conll.get_labels(sentences)
  rng = random.Random(4)
  gold = [s.tags for s in sentences]
  predicted = [[t if rng.random() < 0.9 else rng.choice(labels) for t in g] for g in gold]
  _assert_same_as_seqeval(gold, predicted)
  assert conlleval.entity_scores(gold, gold)["overall"]["f1"] == 1.0


def test_scores_to_results_and_report():
  scores = conlleval.entity_scores([["B-PER", "I-PER", "O", "B-LOC"]], [["B-PER", "I-PER", "O", "O"]])
  results = conlleval.scores_to_results(scores)
  assert results["eval_precision"] == 1.0 and results["eval_recall"] == 0.5
  assert results["eval_LOC_f1"] == 0.0 and results["eval_PER_support"] == 1
  assert "FB1:  66.67" in conlleval.format_report(scores)


def test_docstart_in_any_form_and_position(tmp_path):
  path = write(tmp_path, "-DOCSTART-\n\nEU B-ORG\nrejects O\n-DOCSTART- O\n\n-DOCSTART-\n")
  [sentence] = conll.read_conll(path)
  assert sentence.words == ["EU", "rejects"] and len(sentence.docstarts) == 1
  out = os.path.join(tmp_path, "predictions.txt")
  conll.write_predictions(out, [sentence], [["B-ORG", "O"]])
  # Every line has the same number of columns, as conlleval requires.
  assert open(out).read() == "-DOCSTART- O O\n\nEU B-ORG B-ORG\nrejects O O\n\n"
