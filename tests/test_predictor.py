"""bert_tf.serving.predictor: from an export and from a fine-tuning output_dir, the same results as the
export's serving_default signature called directly (and as run_classifier's test_results.tsv),
whatever the batch size; bad calls and paths end in one-line BertTfErrors. Tiny models on a
tiny vocab; one real run_classifier.py run, the other output_dirs made in process."""
import json
import os
import shutil
import types

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.model.config import BertConfig
from bert_tf.serving import export
from bert_tf.serving import predictor
from bert_tf.tasks import base
from support.script_runner import run_script
from support import tiny

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "movie", "was", "good", "bad",
         "he", "said", "so", "anna", "met", "tom", "in", "paris", "who", "where", "did", "eu",
         "rejects", "german", "call", "to", "boycott", "british", "lamb", ".", ",", "?"]
# One layer: these tests check the predictor's plumbing around the model, and saving or
# converting a model costs seconds a layer.
TINY = dict(tiny.TINY, vocab_size=len(WORDS), num_hidden_layers=1)
SEQ = 32
SENTENCES = ["the movie was good", "He said so.", "", "bad bad movie , the", "Anna met Tom in "
             "Paris ." * 3]
NER_SENTENCES = ["EU rejects German call to boycott British lamb .", "Anna met Tom",
                 "  in   Paris  ", "Who did ?", "xyzzy said so"]
QUESTIONS = ["Who met Tom?", "Where did Anna meet Tom?", "who?", "", "Where?"]
CONTEXTS = ["Anna met Tom in Paris.", "Anna met Tom in Paris.", "", "He said so.",
            "the movie was good in Paris"]


def _files(tmp):
  """(bert_config.json, vocab.txt) of the tiny model."""
  (tmp / "bert_config.json").write_text(json.dumps(TINY))
  (tmp / "vocab.txt").write_text("\n".join(WORDS) + "\n")
  return str(tmp / "bert_config.json"), str(tmp / "vocab.txt")


def _serve_directly(loaded, **inputs):
  """A predictor's SavedModel's serving_default on all inputs at once, as Python lists."""
  serve = loaded.module.signatures["serving_default"]
  outputs = serve(**{name: tf.constant(values, tf.string) for name, values in inputs.items()})
  return {name: value.numpy().tolist() for name, value in outputs.items()}


def _assert_same(results, expected):
  """Predictor results equal (scores to float32 rounding)."""
  assert len(results) == len(expected)
  for got, want in zip(results, expected):
    if isinstance(want, dict):
      assert got.keys() == want.keys()
      for key, value in want.items():
        assert got[key] == (pytest.approx(value, abs=1e-6) if isinstance(value, (float, dict))
                            else value), key
    else:
      assert got == want


def _fake_output_dir(directory, model, name, values, **fields):
  """What a run_*.py training run of the registered task `name` leaves for the predictor: its
  checkpoint, task_config.json, and copies of the config and vocab. values: the task's own
  options; fields: the task object's (made without its data)."""
  tf.train.Checkpoint(model=model).save(os.path.join(directory, "ckpt"))
  task_class = base.get(name)
  options = types.SimpleNamespace(output_dir=str(directory), do_lower_case=True,
                                  max_seq_length=SEQ, task=task_class.options_class(**values))
  task = task_class.__new__(task_class)
  vars(task).update(options=options, **fields)
  (directory / "task_config.json").write_text(json.dumps(task.task_config()))
  _files(directory)
  return str(directory)


def _both(made, task=None):
  """Predictors of an output_dir (two inputs per batch) and of its export's SavedModel (one
  batch): each is compared with the export's signature called on all inputs at once."""
  return (predictor.load(made.output_dir, task=task, batch_size=2),
          predictor.load(made.export_dir, task=task, backend="savedmodel"))


def _tflite(made, task):
  """The predictor running the model in TensorFlow Lite from the export's file (made with
  --tflite), two inputs per batch: the task's server around the file. (An output_dir's model
  converted on loading is the same server around the same file: tests/test_tflite.py.)"""
  from_export = predictor.load(made.export_dir, task=task, batch_size=2, backend="tflite")
  assert from_export.backend == "tflite"
  return from_export


# ---------------------------------------------------------------------------- classifier


@pytest.fixture(scope="module")
def mrpc_run(tmp_path_factory):
  """run_classifier.py --task_name=MRPC: trained, predicted on test.tsv and exported."""
  tmp = tmp_path_factory.mktemp("mrpc")
  config_file, vocab_file = _files(tmp)
  data_dir = tmp / "data"
  data_dir.mkdir()
  header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
  pairs = [("the movie was good", "he said so"), ("Anna met Tom", "Tom met Anna in Paris"),
           ("bad", ""), ("who said so ?", "the movie"), ("EU rejects German call", "lamb")]
  (data_dir / "train.tsv").write_text(header + "".join(
      f"{i % 2}\t{i}\t{i}\t{a}\t{b}\n" for i, (a, b) in enumerate(pairs * 4)))
  (data_dir / "test.tsv").write_text(header + "".join(
      f"{i}\t{i}\t{i}\t{a}\t{b}\n" for i, (a, b) in enumerate(pairs)))
  output_dir = tmp / "out"
  done = run_script(
      "run_classifier.py", "--task_name=MRPC", f"--data_dir={data_dir}",
      f"--vocab_file={vocab_file}", f"--bert_config_file={config_file}",
      f"--output_dir={output_dir}", f"--export_dir={tmp / 'export'}", f"--max_seq_length={SEQ}",
      "--do_train", "--do_predict", "--train_batch_size=4", "--num_train_epochs=2",
      "--learning_rate=1e-2", "--predict_batch_size=8")
  assert done.returncode == 0, done.stderr[-3000:]
  return types.SimpleNamespace(tmp=tmp, output_dir=str(output_dir), export_dir=str(tmp / "export"),
                               pairs=pairs, config_file=config_file, vocab_file=vocab_file)


def test_classifier_pairs_from_run_and_export(mrpc_run):
  config = json.loads(open(os.path.join(mrpc_run.output_dir, "task_config.json")).read())
  assert config == {"task": "glue", "task_name": "MRPC",
                    "label_list": ["0", "1"], "pair": True, "regression": False,
                    "do_lower_case": True, "max_seq_length": SEQ}
  from_run = predictor.load(mrpc_run.output_dir, task="classifier",
                            bert_config_file=mrpc_run.config_file,
                            vocab_file=mrpc_run.vocab_file)
  from_export = predictor.load(mrpc_run.export_dir, batch_size=2)
  assert (from_run.task, from_run.label_list, from_run.pair) == ("glue", ["0", "1"], True)
  pairs = mrpc_run.pairs
  results = from_run(pairs)
  # run_classifier's own predictions of test.tsv: each label's probability.
  probabilities = np.loadtxt(os.path.join(mrpc_run.output_dir, "test_results.tsv"))
  np.testing.assert_allclose([list(r["scores"].values()) for r in results], probabilities,
                             atol=1e-6)
  assert np.ptp(probabilities[:, 1]) > 1e-3  # the inputs' results differ: the order matters
  served = _serve_directly(from_export, text_a=[a for a, _ in pairs],
                           text_b=[b for _, b in pairs])
  expected = [{"label": label.decode(), "score": max(p), "scores": {"0": p[0], "1": p[1]}}
              for label, p in zip(served["labels"], served["probabilities"])]
  assert expected[0]["label"] == str(int(np.argmax(probabilities[0])))
  _assert_same(results, expected)
  _assert_same(from_export(pairs), expected)  # two at a time
  _assert_same(from_export([a for a, _ in pairs], text_b=[b for _, b in pairs]), expected)
  # No text_b: single texts, as run_classifier packs a pair with an empty text_b.
  single = _serve_directly(from_export, text_a=SENTENCES, text_b=[""] * len(SENTENCES))
  assert [r["scores"]["1"] for r in from_export(SENTENCES)] == pytest.approx(
      [p[1] for p in single["probabilities"]], abs=1e-6)
  assert from_export("the movie was good") == from_export(["the movie was good"])


@pytest.fixture(scope="module")
def sst2(tmp_path_factory):
  """An SST-2 (one text) classifier's output_dir and its export."""
  tmp = tmp_path_factory.mktemp("sst2")
  tf.random.set_seed(2)
  model = export.build_model("classifier", BertConfig(**TINY), num_labels=2)
  output_dir = _fake_output_dir(tmp / "out", model, "glue", {"task_name": "sst-2"})
  export_dir = export.export("classifier", BertConfig(**TINY), str(tmp / "out" / "vocab.txt"),
                             True, output_dir, str(tmp / "export"), SEQ, label_list=["0", "1"],
                             pair=False)
  return types.SimpleNamespace(output_dir=output_dir, export_dir=export_dir)


def test_single_text_classifier_and_batching(sst2):
  from_run, from_export = _both(sst2)
  served = _serve_directly(from_export, text_a=SENTENCES)
  expected = [{"label": label.decode(), "score": max(p), "scores": {"0": p[0], "1": p[1]}}
              for label, p in zip(served["labels"], served["probabilities"])]
  for loaded in (from_run, from_export):
    assert loaded.pair is False
    _assert_same(loaded(SENTENCES), expected)


def test_export_without_info_is_read_from_its_signature(sst2, tmp_path):
  """An export written before servers had info(): the task, pair and regression from the
  signature; the label names of "scores" are then the label indexes."""
  server = export.build_server("classifier", BertConfig(**TINY),
                               os.path.join(sst2.output_dir, "vocab.txt"), True, sst2.output_dir,
                               SEQ, label_list=["neg", "pos"], pair=False)
  del server.info
  old = predictor.load(export.save(server, str(tmp_path / "old")))
  assert (old.task, old.pair, old.regression, old.label_list) == ("glue", False, False, None)
  new = predictor.load(sst2.output_dir)(SENTENCES)
  results = old(SENTENCES)
  assert [r["label"] for r in results] == [{"0": "neg", "1": "pos"}[r["label"]] for r in new]
  assert [r["scores"]["1"] for r in results] == pytest.approx([r["scores"]["1"] for r in new],
                                                              abs=1e-6)


# ---------------------------------------------------------------------------- NER and SQuAD


@pytest.fixture(scope="module")
def ner(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("ner")
  tf.random.set_seed(3)
  labels = ["B-LOC", "B-MISC", "B-ORG", "B-PER", "I-PER", "O"]
  model = export.build_model("ner", BertConfig(**TINY), num_labels=len(labels))
  output_dir = _fake_output_dir(tmp / "out", model, "ner", {"feature_based": False},
                                label_list=labels)
  export_dir = export.export("ner", BertConfig(**TINY), str(tmp / "out" / "vocab.txt"), True,
                             output_dir, str(tmp / "export"), SEQ, tflite=True, label_list=labels)
  return types.SimpleNamespace(output_dir=output_dir, export_dir=export_dir, labels=labels)


def test_ner_words_and_tags(ner):
  from_run, from_export = _both(ner, task="ner")
  served = _serve_directly(from_export, text=NER_SENTENCES)
  expected = [[(w.decode(), t.decode()) for w, t in zip(words[:n], tags[:n])]
              for words, tags, n in zip(served["words"], served["tags"], served["num_words"])]
  assert [[w for w, _ in sentence] for sentence in expected] == [s.split() for s in NER_SENTENCES]
  assert {t for sentence in expected for _, t in sentence} <= set(ner.labels)
  assert from_run(NER_SENTENCES) == from_export(NER_SENTENCES) == expected
  assert from_export(NER_SENTENCES[0]) == expected[:1]
  assert _tflite(ner, "ner")(NER_SENTENCES) == expected


@pytest.fixture(scope="module")
def squad2(tmp_path_factory):
  """A SQuAD 2.0 model with small windows that answers wherever a span is valid (every span is
  searched, the null score threshold is high): an empty context is its one null answer."""
  tmp = tmp_path_factory.mktemp("squad")
  tf.random.set_seed(4)
  model = export.build_model("squad", BertConfig(**TINY))
  options = dict(max_query_length=8, doc_stride=8, max_answer_length=5, n_best_size=0,
                 null_score_diff_threshold=1e3)
  values = dict(options, version_2_with_negative=True)
  output_dir = _fake_output_dir(tmp / "out", model, "squad", values)
  export_dir = export.export("squad", BertConfig(**TINY), str(tmp / "out" / "vocab.txt"), True,
                             output_dir, str(tmp / "export"), SEQ, tflite=True, **options)
  return types.SimpleNamespace(output_dir=output_dir, export_dir=export_dir)


def test_squad_answers(squad2):
  from_run, from_export = _both(squad2, task="squad")
  served = _serve_directly(from_export, question=QUESTIONS, context=CONTEXTS)
  expected = [{"answer": a.decode(), "score": s, "has_answer": h, "null_score_diff": d}
              for a, s, h, d in zip(served["answer"], served["score"], served["has_answer"],
                                    served["null_score_diff"])]
  assert expected[2] == {"answer": "", "score": 0.0, "has_answer": False,
                         "null_score_diff": pytest.approx(expected[2]["null_score_diff"])}
  for result, context in zip(expected, CONTEXTS):
    assert result["has_answer"] == bool(context) and result["answer"] in context
    assert bool(result["answer"]) == bool(context)
  for loaded in (from_run, from_export):
    _assert_same(loaded(question=QUESTIONS, context=CONTEXTS), expected)
  _assert_same(from_export(question=QUESTIONS[0], context=CONTEXTS[0]), expected[:1])
  from_tflite = _tflite(squad2, "squad")(question=QUESTIONS, context=CONTEXTS)
  assert [r["answer"] for r in from_tflite] == [r["answer"] for r in expected]
  _assert_same(from_tflite, expected)


# ---------------------------------------------------------------------------- bad input


def _never(**inputs):
  raise AssertionError(f"bad input reached the model: {inputs}")


def test_bad_calls():
  """Checked before any model call (a stand-in model that must not be called)."""
  classify = predictor.Predictor(_never, "classifier", ["0", "1"], pair=False)
  tag = predictor.Predictor(_never, "ner", ["O"])
  answer = predictor.Predictor(_never, "squad")
  bad = [(classify, dict(texts=[]), "texts: an empty list"),
         (classify, dict(texts=["ok", 3]), r"texts\[1\]: expected a string, got int"),
         (classify, dict(texts=None), "texts: expected a string or a list of strings"),
         (classify, dict(texts=["a"], text_b=["b"]), "text_b: this classifier's task takes one"),
         (classify, dict(texts=[("a", "b")]), "text_b: this classifier.s task takes one"),
         (classify, dict(question="who?", context="x"), "question=/context= are not inputs"),
         (tag, dict(texts="a", text_b="b"), "text_b: an NER predictor"),
         (tag, dict(texts=[b"bytes"]), r"texts\[0\]: expected a string, got bytes"),
         (answer, dict(texts=["who?"]), r"call it as p\(question=..., context=...\)"),
         (answer, dict(question=["a", "b"], context=["c"]), "got 2 question, 1 context"),
         (answer, dict(question="a"), "context: expected a string")]
  for call, kwargs, message in bad:
    texts = kwargs.pop("texts", None)
    with pytest.raises(BertTfError, match=message):
      call(texts, **kwargs)


def test_pair_inputs_must_match():
  pairs = predictor.Predictor(_never, "classifier", ["0", "1"], pair=True)
  with pytest.raises(BertTfError, match="got 2 text_a, 1 text_b"):
    pairs(["a", "b"], text_b=["c"])
  with pytest.raises(BertTfError, match="give \\(text_a, text_b\\) pairs, or texts and text_b="):
    pairs([("a", "b")], text_b=["c"])
  with pytest.raises(BertTfError, match="texts\\[0\\]: expected a \\(text_a, text_b\\) pair "
                                        "\\(give pairs, or texts and text_b=\\), got tuple"):
    pairs([("a", "b", "c")])


def test_bad_paths(sst2, ner, tmp_path):
  with pytest.raises(BertTfError, match="neither an export .* nor a fine-tuning output_dir"):
    predictor.load(str(tmp_path))
  with pytest.raises(BertTfError, match="task: .* holds a glue model, not ner"):
    predictor.load(sst2.export_dir, task="ner")
  with pytest.raises(BertTfError, match="task: .* holds a ner model, not squad"):
    predictor.load(ner.output_dir, task="squad")
  with pytest.raises(BertTfError, match="batch_size: expected a positive integer, got 0"):
    predictor.load(sst2.export_dir, batch_size=0)
  # An output_dir without the config and vocab copies: the arguments that replace them.
  bare = tmp_path / "bare"
  shutil.copytree(sst2.output_dir, bare)
  os.remove(bare / "bert_config.json")
  os.remove(bare / "vocab.txt")
  with pytest.raises(BertTfError, match=r"give predictor.load bert_config_file= \(.*bert_config"
                     r".json not found\) and vocab_file= \(.*vocab.txt not found\)$"):
    predictor.load(str(bare))
  loaded = predictor.load(str(bare), bert_config_file=os.path.join(sst2.output_dir,
                                                                   "bert_config.json"),
                          vocab_file=os.path.join(sst2.output_dir, "vocab.txt"))
  assert loaded(SENTENCES) == predictor.load(sst2.output_dir)(SENTENCES)
  # A run a predictor cannot serve: feature-based NER.
  config = json.loads((bare / "task_config.json").read_text())
  (bare / "task_config.json").write_text(json.dumps(dict(config, task="ner", export_kind="ner",
                                                         feature_based=True)))
  with pytest.raises(BertTfError, match="a feature-based NER run; a predictor serves"):
    predictor.load(str(bare))
