"""Long inputs served whole (the windows of bert_tf/tasks/squad_server.py and ner_server.py): the
SQuAD and NER servers an export holds, called through bert_tf.serving.predictor, give run_squad's
and run_ner's Python-path outputs on real inputs many windows long (a Gutenberg chapter as a SQuAD
context, CoNLL-2003 documents joined into one text). Tiny randomly initialised models saved as
fine-tuned checkpoints."""
import os

from absl import flags
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from bert_tf.serving import export
from bert_tf.serving import predictor
from bert_tf.tasks import conll
from bert_tf.tasks import ner_server
from bert_tf.tasks import squad
from bert_tf.tasks import squad_answers
from bert_tf.tasks import squad_server
from bert_tf.text import tokenization
from support.paths import shared_data
from support.exports import model_inputs
from support.exports import tiny_config
from support.exports import vocab_path

flags.FLAGS.mark_as_parsed()

SEQ, STRIDE, QUERY = 128, 48, 24
NER_SEQ = 32
QUESTIONS = ["Who was reading the book?", "What did the Rabbit take out of its waistcoat-pocket?",
             "What was the jar labelled?", "How far did Alice think she had fallen?",
             "What did the little bottle say?", "Where did Alice find the little golden key?",
             "Who was Dinah?", "What did Alice eat at the end of the chapter?"]


def gutenberg_chapter():
  """Chapter I of Alice in Wonderland, line breaks kept (about 2,800 word pieces)."""
  path = os.path.join(shared_data("corpus", "gutenberg"), "pg11-alice_in_wonderland.txt")
  with open(path, encoding="utf-8-sig") as f:
    text = f.read()
  start = text.index("CHAPTER I.\nDown the Rabbit-Hole")
  return text[start:text.index("CHAPTER II.", start + 100)].strip()


def conll_documents():
  """The words of each document of CoNLL-2003's valid.txt."""
  documents = []
  for sentence in conll.read_conll(os.path.join(shared_data("conll2003"), "valid.txt")):
    if sentence.docstarts or not documents:
      documents.append([])
    documents[-1].extend(sentence.words)
  return documents


def python_squad(model, questions, n_best_size, doc_stride):
  """run_squad's path: windows, logits and squad_answers.postprocess (SQuAD 2.0 outputs), and the
  window each question's best non-null answer comes from."""
  tokenizer = tokenization.FullTokenizer(vocab_path())
  examples = [squad.SquadExample(str(i), q, squad.split_context(c)[0], None, None, None, False)
              for i, (q, c) in enumerate(questions)]
  features = squad.convert_examples_to_features(examples, tokenizer, SEQ, doc_stride, QUERY, False)
  outputs = model(model_inputs(features))
  results = [squad_answers.RawResult(f.unique_id, s, e) for f, s, e in zip(
      features, outputs["start_logits"].numpy(), outputs["end_logits"].numpy())]
  predictions, _, null_odds, best_non_null = squad_answers.postprocess(
      examples, features, results, n_best_size or SEQ, 30, True, version_2_with_negative=True)
  return examples, features, predictions, null_odds, best_non_null


def test_squad_export_answers_long_contexts_as_run_squad(tmp_path):
  chapter = gutenberg_chapter()
  # Keras' seed too: with tf.random.set_seed alone the weights (and whether the model answers
  # enough questions for the checks below) depend on what ran before in this process.
  tf_keras.utils.set_random_seed(2)
  model = export.build_model("squad", tiny_config(30522))
  tf.train.Checkpoint(model=model).save(str(tmp_path / "squad" / "ckpt"))
  # In memory, as the NER test below: the server an export would hold (tests/test_export.py
  # covers saving it, tests/test_predictor.py predictor.load of a SQuAD export).
  server = export.build_server("squad", tiny_config(30522), vocab_path(), True,
                               str(tmp_path / "squad"), SEQ, max_query_length=QUERY,
                               doc_stride=STRIDE, n_best_size=20, null_score_diff_threshold=0.0)
  questions = [(q, chapter) for q in QUESTIONS] + [("Who?", "Alice met the Rabbit.")]
  loaded = predictor.Predictor(server.serve, "squad", batch_size=4)
  served = loaded(question=[q for q, _ in questions], context=[c for _, c in questions])
  examples, features, predictions, null_odds, best_non_null = python_squad(
      model, questions, 20, STRIDE)
  assert len(features) > 50 * len(QUESTIONS)  # the chapter is many windows
  for i, (example, result) in enumerate(zip(examples, served)):
    assert result["null_score_diff"] == pytest.approx(null_odds[str(i)], abs=1e-4)
    assert result["has_answer"] == (predictions[str(i)] != "")
    if result["has_answer"]:  # the raw context's whitespace (line breaks) collapsed
      assert " ".join(result["answer"].split()) == best_non_null[str(i)]
  # Not vacuous: answers, and most of them past the first window.
  first_window = [f for f in features if f.doc_span_index == 0][0]
  first_words = " ".join(examples[0].doc_tokens[:max(first_window.token_to_orig_map.values())])
  answers = [r["answer"] for r in served[:len(QUESTIONS)] if r["has_answer"]]
  assert len(answers) >= len(QUESTIONS) // 2
  assert sum(" ".join(a.split()) not in first_words for a in answers) >= len(answers) // 2

  # A batch of one: the same outputs.
  loaded.batch_size = 1
  alone = loaded(question=QUESTIONS[-2:], context=[chapter] * 2)
  for one, batched in zip(alone, served[len(QUESTIONS) - 2:]):
    assert one["answer"] == batched["answer"]
    assert one["null_score_diff"] == pytest.approx(batched["null_score_diff"], abs=1e-5)


def test_ner_export_tags_every_word_of_long_documents_as_run_ner(tmp_path):
  documents = conll_documents()
  texts = documents[:6] + [sum(documents[6:18], [])]  # the last: 12 documents, ~3,000 words
  sentences = conll.read_conll(os.path.join(shared_data("conll2003"), "valid.txt"))
  labels = conll.get_labels(sentences)
  tf.random.set_seed(3)
  cased = tiny_config(28996)
  model = export.build_model("ner", cased, num_labels=len(labels))
  tf.train.Checkpoint(model=model).save(str(tmp_path / "ner" / "ckpt"))
  # In memory (the export test above covers saving): the server an export would hold.
  server = export.build_server("ner", cased, vocab_path(cased=True), False, str(tmp_path / "ner"),
                               NER_SEQ, label_list=labels)
  served = predictor.Predictor(server.serve, "ner", batch_size=3)([" ".join(w) for w in texts])
  # run_ner's path: each text one CoNLL "sentence", windowed by conll.window_spans.
  long_sentences = [conll.Sentence(words, ["O"] * len(words), [], [], []) for words in texts]
  tokenizer = tokenization.FullTokenizer(vocab_path(cased=True), do_lower_case=False)
  features = conll.convert_sentences_to_features(long_sentences, labels, NER_SEQ, tokenizer)
  assert len(features) > 20 * len(texts)
  predicted = model(model_inputs(features))["logits"].numpy().argmax(-1)
  tags = conll.predictions_to_tags(long_sentences, features, predicted, labels)
  for words, expected, result in zip(texts, tags, served):
    assert [word for word, _ in result] == words
    assert [tag for _, tag in result] == expected
  assert len({tag for row in tags for tag in row}) > 2  # the tags are not all one

  # The windows themselves, as the tokenize signature gives them: run_ner's, row for row.
  windows = server.tokenize(
      text=tf.constant([" ".join(w) for w in texts[:2]]))
  expected = [f for f in features if f.sentence_index < 2]
  assert windows["input_ids"].numpy().tolist() == [f.input_ids for f in expected]
  assert windows["example_index"].numpy().tolist() == [f.sentence_index for f in expected]


def test_ner_windows_match_window_spans_on_awkward_piece_counts():
  """Words longer than half a window, or than a window, one-word and empty sentences."""
  rng = np.random.RandomState(5)
  max_tokens = 6
  sentences = [[1], [], [6], [3, 4, 3, 1, 1, 6, 2], list(rng.randint(1, 7, 60)), [1] * 13]
  counts = [c for s in sentences for c in s]
  word_ids = tf.RaggedTensor.from_row_lengths(tf.zeros([sum(counts)], tf.int32), counts)
  splits = np.cumsum([0] + [len(s) for s in sentences])
  window_ids, sentence, word_window, word_position = ner_server.ner_windows(
      word_ids, tf.constant(splits, tf.int64), max_tokens)
  expected_sentence, expected_lengths, expected_word = [], [], []
  for index, piece_counts in enumerate(sentences):
    spans = conll.window_spans(piece_counts, max_tokens)
    base = len(expected_sentence)
    for w, (first, start, end, last) in enumerate(spans):
      expected_sentence.append(index)
      expected_lengths.append(sum(piece_counts[first:last]))
      for word in range(start, end):
        expected_word.append((base + w, 1 + sum(piece_counts[first:word])))
  assert sentence.numpy().tolist() == expected_sentence
  assert window_ids.row_lengths().numpy().tolist() == expected_lengths
  assert list(zip(word_window.numpy().tolist(), word_position.numpy().tolist())) == expected_word


@pytest.mark.parametrize("stride", [3, 12])  # overlapping windows, and windows with gaps
def test_squad_windows_match_doc_windows_and_max_context(stride):
  num_pieces = [0, 5, 10, 11, 40, 97]
  room = 10
  windows, max_context = squad_server.squad_windows(
      tf.constant(num_pieces, tf.int64), tf.constant([room] * len(num_pieces), tf.int64), stride)
  expected, expected_max = [], []
  for index, n in enumerate(num_pieces):
    spans = squad.doc_windows(n, room, stride) or [squad.DocSpan(0, 0)]
    for span_index, span in enumerate(spans):
      expected.append((index, span.start, span.length))
      expected_max.append([j < span.length and squad.check_is_max_context(
          spans, span_index, span.start + j) for j in range(room)])
  assert list(zip(*(windows[k].numpy().tolist() for k in ("example", "start", "length")))) == (
      expected)
  assert max_context.numpy().tolist() == expected_max
