"""SavedModel checks: the tiny export config with the released vocabularies, features as model
inputs, and a classifier run whose export must serve what --do_predict wrote."""
import os

import numpy as np
import tensorflow as tf

from bert_tf.model.config import BertConfig
from bert_tf.serving import export
from support.paths import shared_data
from support.tiny import SIZES

TINY = dict(SIZES, max_position_embeddings=512, type_vocab_size=2)


def vocab_path(cased=False):
  name = "bert-base-cased-vocab.txt" if cased else "bert-base-uncased-vocab.txt"
  return os.path.join(shared_data("vocab"), name)


def tiny_config(vocab_size):
  return BertConfig(vocab_size=vocab_size, **TINY)


def model_inputs(features):
  return {name: tf.constant(np.array([getattr(f, name) for f in features], np.int32))
          for name in ("input_ids", "input_mask", "segment_ids")}


def check_classifier_run(tmp_path, output_dir, min_accuracy):
  """A run_classifier.py run on synthetic_sst2 data in tmp_path/data, with --do_eval,
  --do_predict and --export_dir=tmp_path/export: its dev accuracy reaches min_accuracy and the
  export serves the probabilities --do_predict wrote."""
  results = dict(line.split(" = ") for line in
                 (output_dir / "eval_results.txt").read_text().splitlines())
  assert float(results["eval_accuracy"]) >= min_accuracy, results
  texts = [line.split("\t")[1] for line in
           (tmp_path / "data" / "test.tsv").read_text().splitlines()[1:]]
  served = export.load(str(tmp_path / "export")).signatures["serving_default"](
      text_a=tf.constant(texts))
  np.testing.assert_allclose(served["probabilities"],
                             np.loadtxt(output_dir / "test_results.tsv"), atol=1e-5)
