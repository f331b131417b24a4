"""What run_squad.py does: SQuAD JSON -> windowed features -> train / predict -> answer files.

Prediction writes the original's predictions.json and nbest_predictions.json (and null_odds.json
for SQuAD 2.0); when the predict file carries answers it also scores them with the official metric
into eval_results.json. For SQuAD 2.0, eval_results.json includes the best null-score threshold
(best_f1_thresh), searched over the best non-null answers, so it is exact rather than a lower
bound; --tune_null_threshold writes predictions.json with that threshold instead of
--null_score_diff_threshold.
"""
import os
import random
import time

from absl import logging
import numpy as np
import tensorflow as tf

from bert_tf import common_flags
from bert_tf import heads
from bert_tf import records
from bert_tf import squad_metrics
from bert_tf import training
from bert_tf.data import squad
from bert_tf.errors import BertTfError


def span_loss(features, outputs):
  """Mean of the start and end position cross-entropies (the original's total_loss)."""

  def cross_entropy(logits, positions):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=positions, logits=tf.cast(logits, tf.float32)))

  return (cross_entropy(outputs["start_logits"], features["start_positions"]) +
          cross_entropy(outputs["end_logits"], features["end_positions"])) / 2.0


def validate_flags(f):
  """The original's validate_flags_or_throw, as BertTfError naming the flag; returns
  (BertConfig, FullTokenizer)."""
  if not f.do_train and not f.do_predict:
    raise BertTfError("--do_train/--do_predict: at least one must be True")
  if f.do_train and not f.train_file:
    raise BertTfError("--train_file: required with --do_train")
  if f.do_predict and not f.predict_file:
    raise BertTfError("--predict_file: required with --do_predict")
  squad.check_lengths(f.max_seq_length, f.doc_stride, f.max_query_length)
  if f.tune_null_threshold and not f.version_2_with_negative:
    raise BertTfError("--tune_null_threshold: needs --version_2_with_negative")
  return common_flags.config_and_tokenizer_from_flags(f)


def predict_logits(strategy, model, input_fn):
  """RawResults (float32 logit rows) for every feature of input_fn, in record order."""
  results = []
  for batch in training.predict(strategy, model, input_fn):
    for unique_id, start, end in zip(batch["unique_ids"], batch["start_logits"],
                                     batch["end_logits"]):
      results.append(squad.RawResult(int(unique_id), start, end))
  return results


def write_answers(f, examples, features, results, dataset):
  """predictions.json, nbest_predictions.json, null_odds.json and, when scorable, eval_results.json.

  Returns the evaluation (empty when the predict file has no answers).
  """
  v2 = f.version_2_with_negative
  threshold = f.null_score_diff_threshold
  start = time.time()
  predictions, nbest, null_odds, best_non_null = squad.postprocess(
      examples, features, results, f.n_best_size, f.max_answer_length, f.do_lower_case,
      version_2_with_negative=v2, null_score_diff_threshold=threshold,
      verbose_logging=f.verbose_logging)
  logging.info("Post-processed %d questions in %.2f s", len(examples), time.time() - start)

  evaluation = {}
  scorable = squad.has_answers(dataset, v2)
  if f.tune_null_threshold and not scorable:
    raise BertTfError(f"--tune_null_threshold: {f.predict_file} has no answers to tune on")
  if scorable and not v2:
    evaluation = squad_metrics.evaluate_v1(dataset["data"], predictions)
  elif scorable:
    # Scoring the best non-null answers with na_probs = null odds and na_prob_thresh = the
    # threshold scores exactly predictions.json, and searches the threshold over every answer.
    evaluation = squad_metrics.evaluate_v2(dataset["data"], best_non_null, null_odds, threshold)
    if f.tune_null_threshold:
      threshold = evaluation["best_f1_thresh"]
      logging.info("Best --null_score_diff_threshold on %s: %.4f", f.predict_file, threshold)
      predictions = squad.apply_null_threshold(best_non_null, null_odds, threshold)
      evaluation = squad_metrics.evaluate_v2(dataset["data"], best_non_null, null_odds, threshold)
    evaluation["null_score_diff_threshold"] = threshold

  squad.write_json(os.path.join(f.output_dir, "predictions.json"), predictions)
  squad.write_json(os.path.join(f.output_dir, "nbest_predictions.json"), nbest)
  if v2:
    squad.write_json(os.path.join(f.output_dir, "null_odds.json"), null_odds)
  if evaluation:
    squad.write_json(os.path.join(f.output_dir, "eval_results.json"), evaluation)
    for key, value in evaluation.items():
      logging.info("  %s = %s", key, value)
  return evaluation


def run(f):
  """The whole of run_squad.py for parsed FLAGS; returns the evaluation dict (or {})."""
  config, tokenizer = validate_flags(f)
  # A bad predict file should fail now, not after training.
  dataset = squad.load_squad_json(f.predict_file) if f.do_predict else None
  strategy = common_flags.runtime_from_flags()
  tf.io.gfile.makedirs(f.output_dir)
  trim = common_flags.trim_padding_from_flags()
  model_fn = lambda: heads.BertSpanLabeler(config, trim_padding=trim)  # noqa: E731
  model = None

  if f.do_train:
    if not f.init_checkpoint:
      logging.warning("No --init_checkpoint: fine-tuning starts from a randomly initialized "
                      "encoder.")
    train_examples = squad.read_squad_examples(f.train_file, is_training=True,
                                               version_2_with_negative=f.version_2_with_negative)
    if not train_examples:
      raise BertTfError(f"--train_file: {f.train_file} has no usable question")
    num_train_steps, num_warmup_steps = common_flags.finetuning_steps(f, len(train_examples),
                                                                      "training questions")
    # Pre-shuffled (as the original) so the small shuffle buffer of the input sees mixed articles.
    random.Random(f.seed).shuffle(train_examples)
    train_file = os.path.join(f.output_dir, "train.tf_record")
    writer = squad.FeatureWriter(train_file, is_training=True)
    squad.convert_examples_to_features(
        train_examples, tokenizer, f.max_seq_length, f.doc_stride, f.max_query_length,
        is_training=True, output_fn=writer.process_feature)
    writer.close()
    logging.info("***** Running training *****")
    logging.info("  Num orig examples = %d", len(train_examples))
    logging.info("  Num split examples = %d", writer.num_features)
    del train_examples
    model = common_flags.finetune(f, strategy, model_fn, span_loss, train_file,
                                  records.squad_features(f.max_seq_length, is_training=True),
                                  writer.num_features, num_train_steps, num_warmup_steps)

  if not f.do_predict:
    return {}
  examples = squad.read_squad_examples(f.predict_file, is_training=False,
                                       version_2_with_negative=f.version_2_with_negative,
                                       dataset=dataset)
  eval_file = os.path.join(f.output_dir, "eval.tf_record")
  writer = squad.FeatureWriter(eval_file, is_training=False)
  features = []

  def keep_and_write(feature):
    features.append(feature)
    writer.process_feature(feature)

  squad.convert_examples_to_features(
      examples, tokenizer, f.max_seq_length, f.doc_stride, f.max_query_length,
      is_training=False, output_fn=keep_and_write)
  writer.close()
  logging.info("***** Running predictions *****")
  logging.info("  Num orig examples = %d", len(examples))
  logging.info("  Num split examples = %d", len(features))
  logging.info("  Batch size = %d", f.predict_batch_size)
  input_fn = training.records_input_fn(
      [eval_file], records.squad_features(f.max_seq_length, is_training=False),
      f.predict_batch_size, is_training=False)
  if model is None:
    model, _ = training.restore_model(strategy, model_fn, input_fn, f.output_dir,
                                      f.init_checkpoint)
  results = predict_logits(strategy, model, input_fn)
  if len(results) != len(features):
    raise BertTfError(f"{eval_file}: {len(results)} predictions for {len(features)} features")
  bad = [r.unique_id for r in results if not (np.all(np.isfinite(r.start_logits)) and
                                               np.all(np.isfinite(r.end_logits)))]
  if bad:
    raise BertTfError(f"--init_checkpoint/--output_dir: the model gives non-finite logits "
                      f"({len(bad)} of {len(results)} features)")
  return write_answers(f, examples, features, results, dataset)
