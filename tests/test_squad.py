"""SQuAD data path: reading, windowed features and post-processing, against hand-built cases and
Model Garden's squad_lib (the original's functions without its flags), plus bad input."""
import collections
import json
import os
import logging as std_logging

import numpy as np
import pytest
import tensorflow as tf
from support.paths import shared_data

from bert_tf.data import records
from bert_tf.errors import BertTfError
from bert_tf.tasks import squad
from bert_tf.tasks import squad_answers
from bert_tf.tasks import squad_server
from bert_tf.text import tokenization

CONTEXT = ("The leader was John Smith (1895-1943). Steve Smith's team won the "
           "Japanese electronics prize in  Paris, France.")
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "leader", "was", "john", "smith", "(", "1895",
         "-", "1943", ")", ".", "steve", "'", "s", "team", "won", "japanese", "electronics",
         "prize", "in", "paris", ",", "france", "who", "when", "born", "?", "##s", "what", "year"]


@pytest.fixture
def tokenizer(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(VOCAB) + "\n")
  return tokenization.FullTokenizer(str(vocab), do_lower_case=True)


def _write_json(path, questions, context=CONTEXT, version="v2.0"):
  data = {"version": version, "data": [{"title": "t", "paragraphs": [
      {"context": context, "qas": questions}]}]}
  path.write_text(json.dumps(data))
  return str(path)


def _qa(qid, question, answer=None, start=None, impossible=False):
  answers = [] if answer is None else [{"text": answer, "answer_start": start}]
  return {"id": qid, "question": question, "answers": answers, "is_impossible": impossible}


def test_split_context_maps_characters_to_words():
  words, offsets = squad.split_context(" a  bc\u202fd ")
  assert words == ["a", "bc", "d"]
  assert offsets == [-1, 0, 0, 0, 1, 1, 1, 2, 2]


def test_answer_span_windows_and_max_context(tokenizer, tmp_path):
  path = _write_json(tmp_path / "train.json", [
      _qa("born", "When was John Smith born?", "1895", CONTEXT.index("1895")),
      _qa("none", "Who won?", impossible=True)])
  examples = squad.read_squad_examples(path, is_training=True, version_2_with_negative=True)
  assert [e.qas_id for e in examples] == ["born", "none"]
  # The word is "(1895-1943)." (word 5); the improved span is the single piece "1895".
  assert (examples[0].start_position, examples[0].end_position) == (5, 5)
  assert examples[1].is_impossible and examples[1].start_position == -1

  features = squad.convert_examples_to_features(
      examples, tokenizer, max_seq_length=24, doc_stride=6, max_query_length=8, is_training=True)
  born = [f for f in features if f.example_index == 0]
  assert len(born) > 2 and born[0].unique_id == squad.FIRST_UNIQUE_ID
  # Query "when was john smith born ?" = 6 pieces, so 24 - 6 - 3 = 15 context pieces a window.
  assert born[0].tokens[:8] == ["[CLS]", "when", "was", "john", "smith", "born", "?", "[SEP]"]
  assert len(born[0].tokens) == 24 and born[0].segment_ids[8:] == [1] * 16
  first = born[0]
  assert first.tokens[first.start_position:first.end_position + 1] == ["1895"]
  assert first.token_to_orig_map[first.start_position] == 5
  # Windows without the answer point at [CLS].
  assert all(f.start_position == f.end_position == 0 for f in born if "1895" not in
             f.tokens[8:])
  # Every context piece is the max-context one in exactly one window.
  windows = squad.doc_windows(num_tokens=26, max_tokens_for_doc=15, doc_stride=6)
  assert [(w.start, w.length) for w in windows] == [(0, 15), (6, 15), (12, 14)]
  counts = collections.Counter()
  for f, window in zip(born, windows):
    for index, is_max in f.token_is_max_context.items():
      counts[window.start + index - 8] += is_max
  assert len(born) == 3 and sorted(counts) == list(range(26)) and set(counts.values()) == {1}
  none = [f for f in features if f.example_index == 1]
  assert all(f.start_position == 0 and f.end_position == 0 and f.is_impossible for f in none)


def test_windows_match_model_garden_on_real_data(tmp_path):
  squad_lib = pytest.importorskip("official.nlp.data.squad_lib")
  path = shared_data("squad", "dev-v2.0.subset.json")
  vocab = shared_data("vocab", "bert-base-uncased-vocab.txt")
  ours_tok = tokenization.FullTokenizer(vocab, do_lower_case=True)
  theirs_tok = squad_lib.tokenization.FullTokenizer(vocab, do_lower_case=True)
  for is_training in (True, False):
    ours = squad.read_squad_examples(path, is_training, version_2_with_negative=True)
    theirs = squad_lib.read_squad_examples(path, is_training, version_2_with_negative=True)
    assert len(ours) == len(theirs) == 14
    for a, b in zip(ours, theirs):
      assert (a.qas_id, a.doc_tokens, a.start_position, a.end_position, a.is_impossible) == (
          b.qas_id, b.doc_tokens, b.start_position, b.end_position, b.is_impossible)
    ours_features = squad.convert_examples_to_features(ours, ours_tok, 96, 32, 24, is_training)
    theirs_features = []
    squad_lib.convert_examples_to_features(
        theirs, theirs_tok, 96, 32, 24, is_training,
        output_fn=lambda f, is_padding=False: None if is_padding else theirs_features.append(f),
        batch_size=1)
    assert len(ours_features) == len(theirs_features) > 30
    for a, b in zip(ours_features, theirs_features):
      for name in ("unique_id", "example_index", "doc_span_index", "tokens", "input_ids",
                   "input_mask", "segment_ids", "token_to_orig_map", "token_is_max_context"):
        assert getattr(a, name) == getattr(b, name), name
      if is_training:
        assert (a.start_position, a.end_position) == (b.start_position, b.end_position)


def test_records_round_trip(tokenizer, tmp_path):
  path = _write_json(tmp_path / "train.json", [
      _qa("paris", "What prize?", "electronics prize", CONTEXT.index("electronics"))])
  examples = squad.read_squad_examples(path, is_training=True)
  features = squad.convert_examples_to_features(examples, tokenizer, 32, 8, 8, True)
  record_file = str(tmp_path / "train.tf_record")
  records.write_records(record_file, (squad.feature_to_record(f, True) for f in features))
  schema = squad.squad_features(32, is_training=True)
  records.check_record_shapes(record_file, schema)
  parsed = list(tf.data.TFRecordDataset(record_file).map(records.parse_fn(schema)))
  assert len(parsed) == len(features)
  for feature, record in zip(features, parsed):
    assert record["input_ids"].numpy().tolist() == feature.input_ids
    assert int(record["start_positions"]) == feature.start_position
    assert int(record["unique_ids"]) == feature.unique_id


def test_get_final_text():
  assert squad_answers.get_final_text("steve smith", "Steve Smith's", True) == "Steve Smith"
  assert squad_answers.get_final_text("1895", "(1895-1943).", True) == "1895"
  assert squad_answers.get_final_text("paris , france", "Paris, France.", True) == "Paris, France"
  assert squad_answers.get_final_text("zurich", "Paris, France.", True) == "Paris, France."
  # Cased: no match when the case differs; the whole words come back.
  assert squad_answers.get_final_text("paris", "Paris", False) == "Paris"


def _features_and_results(tokenizer, tmp_path, seed):
  path = _write_json(tmp_path / "dev.json", [
      _qa("born", "When was John Smith born?", "1895", CONTEXT.index("1895")),
      _qa("team", "Who won?", "Steve Smith", CONTEXT.index("Steve")),
      _qa("none", "What year?", impossible=True)])
  examples = squad.read_squad_examples(path, is_training=False)
  features = squad.convert_examples_to_features(examples, tokenizer, 20, 5, 6, False)
  rng = np.random.RandomState(seed)
  results = [squad_answers.RawResult(f.unique_id, rng.normal(size=20).round(1).tolist(),
                             rng.normal(size=20).round(1).tolist()) for f in features]
  return examples, features, results


@pytest.mark.parametrize("version_2", [False, True])
def test_postprocess_matches_model_garden(tokenizer, tmp_path, version_2):
  squad_lib = pytest.importorskip("official.nlp.data.squad_lib")
  for seed in range(4):
    examples, features, results = _features_and_results(tokenizer, tmp_path, seed)
    for n_best, max_length in ((20, 30), (3, 2)):
      ours = squad_answers.postprocess(examples, features, results, n_best, max_length, True,
                               version_2_with_negative=version_2, null_score_diff_threshold=0.5)
      theirs = squad_lib.postprocess_output(
          examples, features, results, n_best, max_length, True,
          version_2_with_negative=version_2, null_score_diff_threshold=0.5)
      assert ours[0] == theirs[0]
      assert json.dumps(ours[1]) == json.dumps(theirs[1])
      assert ours[2] == pytest.approx(theirs[2])
      if version_2:
        # Rewriting with another threshold gives what a fresh run with it gives.
        again = squad_answers.postprocess(examples, features, results, n_best, max_length, True, True,
                                  null_score_diff_threshold=-1.0)
        assert squad_answers.apply_null_threshold(ours[3], ours[2], -1.0) == again[0]


def test_postprocess_picks_span_and_null(tokenizer, tmp_path):
  examples, features, _ = _features_and_results(tokenizer, tmp_path, 0)
  results = []
  for f in features:
    start, end = np.full(20, -5.0), np.full(20, -5.0)
    if f.example_index == 1 and "steve" in f.tokens:
      start[f.tokens.index("steve")] = 4.0
      end[f.tokens.index("steve") + 1] = 4.0  # "smith"
    start[0] = end[0] = 1.0  # null score 2 everywhere
    results.append(squad_answers.RawResult(f.unique_id, start.tolist(), end.tolist()))
  predictions, nbest, null_odds, best = squad_answers.postprocess(
      examples, features, results, 20, 30, True, version_2_with_negative=True)
  assert predictions["team"] == "Steve Smith"
  assert null_odds["team"] == pytest.approx(2.0 - 8.0)
  assert predictions["none"] == "" and null_odds["none"] > 0
  assert nbest["team"][0]["text"] == "Steve Smith"
  assert sum(e["probability"] for e in nbest["team"]) == pytest.approx(1.0)


def test_bad_input(tokenizer, tmp_path, caplog):
  bad = tmp_path / "bad.json"
  bad.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [{"qas": []}]}]}))
  with pytest.raises(BertTfError, match="no key 'context'"):
    squad.read_squad_examples(str(bad), is_training=False)
  bad.write_text(json.dumps({"version": "1.1"}))
  with pytest.raises(BertTfError, match="no key 'data'"):
    squad.read_squad_examples(str(bad), is_training=False)
  bad.write_text("not json")
  with pytest.raises(BertTfError, match="not SQuAD JSON"):
    squad.read_squad_examples(str(bad), is_training=False)

  path = _write_json(tmp_path / "v2.json", [
      _qa("ok", "Who won?", "Steve Smith", CONTEXT.index("Steve")),
      _qa("moved", "Who won?", "Steve Smith", 3),
      _qa("none", "What year?", impossible=True)])
  with caplog.at_level(std_logging.WARNING):
    examples = squad.read_squad_examples(path, is_training=False)
  assert len(examples) == 3 and "is_impossible set" in caplog.text
  # A 2.0 file scored as 1.1 would meet questions without answers: it is not scorable as 1.1.
  dataset = squad.load_squad_json(path)
  assert squad_answers.has_answers(dataset, True) and not squad_answers.has_answers(dataset, False)
  with pytest.raises(BertTfError, match="pass --version_2_with_negative"):
    squad.read_squad_examples(path, is_training=True)
  caplog.clear()
  with caplog.at_level(std_logging.WARNING):
    examples = squad.read_squad_examples(path, is_training=True, version_2_with_negative=True)
  assert [e.qas_id for e in examples] == ["ok", "none"]
  assert "skipped 1 answers" in caplog.text

  # The original accepts a stride that leaves windows without overlap: so do we, with a warning.
  caplog.clear()
  with caplog.at_level(std_logging.WARNING):
    squad_server.check_lengths(max_seq_length=128, doc_stride=100, max_query_length=64)
  assert "--doc_stride (100) is not less than" in caplog.text
  with pytest.raises(BertTfError, match="--max_query_length"):
    squad_server.check_lengths(max_seq_length=64, doc_stride=10, max_query_length=64)
  squad_server.check_lengths(384, 128, 64)


def test_nbest_probabilities_are_the_originals_bit_for_bit():
  """squad_answers.compute_softmax against the original run_squad.py's _compute_softmax (in its
  own process: the original's scripts define absl flags) on scores where a compensated sum (what
  sum() does from Python 3.12 on) gives other last digits than the original's loop."""
  import math
  import subprocess
  import sys
  from bert_tf.tasks import squad_answers
  from support.paths import REPO
  rng = np.random.RandomState(0)
  lists = [list(rng.normal(0, 10, rng.randint(1, 21))) for _ in range(300)]
  lists.append([0.0] + [-36.0] * 19)  # 1 + 19 tiny terms: the loop rounds each addition
  loop_total = 0.0
  for s in lists[-1]:
    loop_total += math.exp(s)
  assert loop_total != math.fsum(math.exp(s) for s in lists[-1])
  script = ("import json, sys, types\n"
            "contrib = types.ModuleType('tensorflow.contrib')\n"
            "contrib.layers = types.ModuleType('tensorflow.contrib.layers')\n"
            "sys.modules['tensorflow.contrib'] = contrib\n"
            "sys.modules['tensorflow.contrib.layers'] = contrib.layers\n"
            "from bert import run_squad\n"
            "print(json.dumps([run_squad._compute_softmax(s) for s in json.load(sys.stdin)]))\n")
  result = subprocess.run([sys.executable, "-c", script], input=json.dumps(lists),
                          capture_output=True, text=True, cwd=REPO, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
                                   CUDA_VISIBLE_DEVICES=""))
  assert result.returncode == 0, result.stderr[-3000:]
  theirs = json.loads(result.stdout.strip().splitlines()[-1])
  ours = [squad_answers.compute_softmax(s) for s in lists]
  assert ours == theirs  # exact: json round-trips floats
