"""Pretraining: the whole of run_pretraining.py (run), its objective, metrics and input pipeline
(the original run_pretraining.py's model_fn and input_fn_builder).

loss = masked-LM loss sum(w * ce) / (sum(w) + 1e-5) + mean next-sentence loss, as the original.
The objective is a bert_tf.model.objectives.Objective (with the feature names it reads). The ablations
of the paper's Table 5: no_nsp drops the NSP term (--no_nsp); left_to_right rebuilds the
unmasked text and predicts every next token (--left_to_right, with a causal BertPretrainer).
run(options, runtime, loop_options) takes a bert_tf.drivers.pretraining_options.PretrainingOptions,
RuntimeOptions and TrainLoopOptions (bert_tf.cli.flags builds them from run_pretraining.py's flags).
--pack_sequences packs several instances per row (bert_tf.data.packing); the losses and metrics are
the same per instance: the next-sentence terms are then weighted by next_sentence_weights.
--dynamic_masking masks unmasked records at input time (bert_tf.data.dynamic_masking).
"""
import os
import time

from absl import logging
import tensorflow as tf

from bert_tf.data import dynamic_masking
from bert_tf.data import packing
from bert_tf.data import records
from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.model import heads
from bert_tf.model.formats import tf_checkpoint
from bert_tf.model import model_files
from bert_tf.model import modeling
from bert_tf.model import objectives
from bert_tf.training import loop
from bert_tf.training import run_dir
from bert_tf.training import saves
from bert_tf.training import runtime as runtime_lib
from bert_tf.training import scalars


def _cross_entropy(logits, labels):
  """-log softmax(logits)[label] per row, in float32, as the original's log_softmax * one_hot.

  Written out (log-sum-exp minus the label's logit) with its own gradient, softmax - one_hot,
  because the masked-LM logits are large (batch x predictions x vocab): this makes a handful of
  passes over them where log_softmax, one_hot and their autodiff gradient make about a dozen, and
  tf.nn.sparse_softmax_cross_entropy_with_logits is slower still on the CPU.
  """
  shape = tf.shape(labels)
  vocab_size = tf.shape(logits)[-1]
  flat_logits = tf.reshape(logits, [-1, vocab_size])
  flat_labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
  return tf.reshape(_label_cross_entropy(flat_logits, flat_labels), shape)


@tf.custom_gradient
def _label_cross_entropy(logits, labels):
  x = tf.cast(logits, tf.float32)
  top = tf.reduce_max(x, axis=-1, keepdims=True)
  exp = tf.exp(x - top)
  total = tf.reduce_sum(exp, axis=-1, keepdims=True)
  label_logit = tf.gather(x, labels, axis=1, batch_dims=1)
  loss = tf.squeeze(top + tf.math.log(total), -1) - label_logit

  def gradient(upstream):
    grad = exp * (upstream[:, None] / total)
    label_index = tf.stack([tf.range(tf.shape(labels)[0]), labels], axis=1)
    grad = tf.tensor_scatter_nd_sub(grad, label_index, upstream)
    return tf.cast(grad, logits.dtype), None

  return loss, gradient


def masked_lm_loss(features, outputs):
  per_prediction = _cross_entropy(outputs[objectives.MLM_LOGITS],
                                  features[objectives.MASKED_LM_IDS])
  weights = tf.cast(features[objectives.MASKED_LM_WEIGHTS], tf.float32)
  return tf.reduce_sum(weights * per_prediction) / (tf.reduce_sum(weights) + 1e-5)


def _next_sentence_labels(features):
  """The labels, [B] or, packed, [B, K], and their weights (None: all real)."""
  weights = features.get(objectives.NEXT_SENTENCE_WEIGHTS)
  if weights is None:
    return tf.reshape(features[objectives.NEXT_SENTENCE_LABELS], [-1]), None
  return features[objectives.NEXT_SENTENCE_LABELS], weights


def next_sentence_loss(features, outputs):
  labels, weights = _next_sentence_labels(features)
  per_instance = _cross_entropy(outputs[objectives.NSP_LOGITS], labels)
  if weights is None:
    return tf.reduce_mean(per_instance)
  return tf.math.divide_no_nan(tf.reduce_sum(weights * per_instance), tf.reduce_sum(weights))


def loss_fn(objective=objectives.Objective()):
  """The train/eval loss_fn(features, outputs) of bert_tf.training.loop for the objective: the masked
  LM's loss, plus the next sentence's where the objective predicts it."""
  use_nsp = objective.predicts_next_sentence

  def pretraining_loss(features, outputs):
    loss = masked_lm_loss(features, outputs)
    if use_nsp:
      loss += next_sentence_loss(features, outputs)
    return loss

  return pretraining_loss


def metric_fn(objective=objectives.Objective(), row_statistics=False):
  """The original's eval metrics of the objective as {name: (values, weights)} for
  bert_tf.training.loop; row_statistics adds the instances and real tokens per packed row
  (bert_tf.data.packing)."""
  use_nsp = objective.predicts_next_sentence

  def pretraining_metrics(features, outputs):
    mlm_logits = outputs[objectives.MLM_LOGITS]
    mlm_ids = features[objectives.MASKED_LM_IDS]
    weights = features[objectives.MASKED_LM_WEIGHTS]
    metrics = {
        "masked_lm_accuracy": (heads.correct_predictions(mlm_ids, mlm_logits), weights),
        "masked_lm_loss": (_cross_entropy(mlm_logits, mlm_ids), weights),
    }
    if use_nsp:
      labels, nsp_weights = _next_sentence_labels(features)
      metrics["next_sentence_accuracy"] = (
          heads.correct_predictions(labels, outputs[objectives.NSP_LOGITS]), nsp_weights)
      metrics["next_sentence_loss"] = (_cross_entropy(outputs[objectives.NSP_LOGITS], labels),
                                       nsp_weights)
    if row_statistics:
      metrics.update(packing.row_statistics(features))
    return metrics

  return pretraining_metrics


def left_to_right_targets(features):
  """Per example: undo the masking, then predict token t+1 from positions <= t (all of them).

  create_pretraining_data replaced the masked tokens (with [MASK], a random or the same token);
  masked_lm_ids hold the originals, so scattering them back gives the unmasked text.
  """
  input_ids = features["input_ids"]
  seq_length = input_ids.shape[0]
  weights = features[objectives.MASKED_LM_WEIGHTS]
  real = weights > 0
  positions = tf.boolean_mask(features[objectives.MASKED_LM_POSITIONS], real)
  original_ids = tf.tensor_scatter_nd_update(
      input_ids, positions[:, tf.newaxis],
      tf.boolean_mask(features[objectives.MASKED_LM_IDS], real))
  features = dict(features)
  features["input_ids"] = original_ids
  features[objectives.MASKED_LM_POSITIONS] = tf.range(seq_length - 1, dtype=input_ids.dtype)
  features[objectives.MASKED_LM_IDS] = original_ids[1:]
  features[objectives.MASKED_LM_WEIGHTS] = tf.cast(features["input_mask"][1:], tf.float32)
  return features


def input_fn(input_files, max_seq_length, max_predictions_per_seq, batch_size, is_training,
             seed=0, left_to_right=False, row_limits=None,
             eval_steps=None, masking=None):
  """The pretraining records as a bert_tf.training.loop input_fn. Eval repeats, as the original
  (it runs --max_eval_steps batches).

  row_limits (max_instances, max_predictions): packed rows (bert_tf.data.packing.input_fn); their
  evaluation holds the instances of eval_steps unpacked batches, and ends there.
  masking: a bert_tf.data.dynamic_masking.DynamicMasking for unmasked records, seeded by `seed` for
  training, by dynamic_masking.EVAL_SEED for evaluation.
  """
  if row_limits:
    return packing.input_fn(
        input_files, max_seq_length, max_predictions_per_seq, batch_size, is_training,
        *row_limits, seed=seed,
        map_fn=left_to_right_targets if left_to_right else None, eval_steps=eval_steps,
        masking=masking)
  return records.records_input_fn(
      input_files, batch_size=batch_size, is_training=is_training, seed=seed,
      map_fn=left_to_right_targets if left_to_right else None, repeat=True,
      drop_remainder=is_training,
      **dynamic_masking.records_arguments(masking, max_seq_length, max_predictions_per_seq,
                                          is_training, seed))


def run_shape(options, limits):
  """The options that change what a pretraining run's checkpoints hold or how its input is read:
  resuming the run needs the same (bert_tf.training.run_dir.RunDir.check). options: a
  bert_tf.drivers.pretraining_options.PretrainingOptions; limits: the packed row limits (None unpacked)."""
  objective_shape = options.objective.run_shape()
  shape = {"left_to_right": objective_shape["left_to_right"],
           "pack_sequences": bool(options.pack_sequences),
           "dynamic_masking": objective_shape["dynamic_masking"],
           "max_seq_length": options.max_seq_length}
  if limits:
    shape["max_instances_per_row"], shape["max_predictions_per_row"] = limits
  return shape


def run(options, runtime, loop_options):
  """Trains (--do_train) and evaluates (--do_eval) as a PretrainingOptions says, under a
  RuntimeOptions and a TrainLoopOptions; returns the eval results (or None). Every check of the
  options, the records and what --output_dir holds comes before anything is written there
  (run_dir.claim, which also keeps a second run out of it)."""
  start = time.time()
  files = model_files.open_model(options, max_seq_length=options.max_seq_length,
                                 need_vocab=False)
  options, config = files.resolved(options), files.config
  directory = run_dir.RunDir(options.output_dir)
  if options.do_train:
    directory.check_batch_size(options.train_batch_size)
  strategy = runtime_lib.setup_runtime(runtime, config, options.max_seq_length)
  with run_dir.claim(options.output_dir, hold=strategy.extended.should_checkpoint):
    return _run(options, start, strategy, config, runtime, loop_options, directory)


def _check_input_files(options, masking):
  """The --input_file records (the first of each file: a later one of other lengths is named
  when the pipeline reads it); returns the files."""
  input_files = fileio.input_files(options.input_file, "--input_file")
  logging.info("*** Input Files ***")
  name_to_features = dynamic_masking.records_arguments(
      masking, options.max_seq_length, options.max_predictions_per_seq, False,
      0)["name_to_features"]
  empty = []
  for input_file in input_files:
    logging.info("  %s", input_file)
    dynamic_masking.check_records(input_file, masking)
    if not records.check_record_shapes(input_file, name_to_features):
      logging.warning("%s holds no record", input_file)
      empty.append(input_file)
  if len(empty) == len(input_files):
    raise BertTfError(f"--input_file: {', '.join(empty)}: no record in "
                      f"{'any of these files' if len(empty) > 1 else 'the file'} (empty or "
                      f"unfinished: make it with create_pretraining_data.py)")
  return input_files


def _run(options, start, strategy, config, runtime, loop_options, directory):
  """run() in its claimed --output_dir (directory: its RunDir, read before it was claimed)."""
  objective = options.objective
  masking = dynamic_masking.DynamicMasking.from_options(
      objective.masking, options.max_seq_length, options.vocab_file, config.vocab_size)
  input_files = _check_input_files(options, masking)
  limits = packing.row_limits(options.max_seq_length, objective, options.max_instances_per_row,
                              options.max_predictions_per_row) if options.pack_sequences else None
  if limits:
    logging.info("Packing up to %d instances and %d masked-LM predictions per row", *limits)
  shape = run_shape(options, limits)
  directory.check(run_dir.Run(
      training=options.do_train, config=config, run_shape=shape,
      train_batch_size=options.train_batch_size, init_checkpoint=options.init_checkpoint,
      vocab_file=options.vocab_file))

  def model_fn():
    return modeling.BertPretrainer(config, causal=objective.left_to_right)

  def make_input_fn(batch_size, is_training):
    return input_fn(input_files, options.max_seq_length, options.max_predictions_per_seq,
                    batch_size, is_training, seed=runtime.seed,
                    left_to_right=objective.left_to_right, row_limits=limits,
                    eval_steps=options.max_eval_steps, masking=masking)

  model = None
  if options.do_train:
    model = _train(options, strategy, config, model_fn,
                   make_input_fn(options.train_batch_size, True),
                   metric_fn(objective, row_statistics=bool(limits)), shape, loop_options,
                   runtime)
  result = _evaluate(options, strategy, model_fn, make_input_fn, model, bool(limits)) if (
      options.do_eval) else None
  if strategy.extended.should_checkpoint:
    _summary(options, start, model, result)
  return result


def _evaluate(options, strategy, model_fn, make_input_fn, model, packed):
  """--do_eval: the metrics over --max_eval_steps batches, in eval_results.txt and output_dir/eval
  (TensorBoard). Packed, over the same instances, in fewer rows; the results add how many
  instances and real tokens were evaluated (and per row)."""
  logging.info("***** Running evaluation *****")
  logging.info("  Batch size = %d", options.eval_batch_size)
  eval_input_fn = make_input_fn(options.eval_batch_size, False)
  if model is None:
    model, _ = loop.restore_model(strategy, model_fn, eval_input_fn, options.output_dir,
                                      options.init_checkpoint)
  result = loop.evaluate(strategy, model, eval_input_fn, metric_fn(options.objective, packed),
                             loss_fn(options.objective), steps=None if packed else options.max_eval_steps,
                             global_step=loop.global_step(model))
  if packed:
    result["instances"] = options.max_eval_steps * options.eval_batch_size
    result["real_tokens"] = round(result["instances"] * result["real_tokens_per_row"] /
                                  result["instances_per_row"])
  if strategy.extended.should_checkpoint:
    logging.info("***** Eval results *****")
    loop.write_eval_results(os.path.join(options.output_dir, "eval_results.txt"), result)
    scalars.write_eval_scalars(options.output_dir, result, result["global_step"])
  return result


def _summary(options, start, model, result):
  output_dir = options.output_dir
  tf1 = os.path.join(output_dir, tf_checkpoint.WEIGHTS_CHECKPOINT)
  step = loop.global_step(model) if model is not None else result["global_step"]
  scalars.run_summary(output_dir, start, [
      ("weights", tf1 if options.do_train and options.export_tf1_checkpoint else None),
      ("eval results", os.path.join(output_dir, "eval_results.txt") if result else None)],
      step, model if options.do_train else None, result)


def _train(options, strategy, config, model_fn, train_input_fn, train_metric_fn, shape,
           loop_options, runtime):
  if strategy.extended.should_checkpoint:
    model_files.write_model_files(options.output_dir, config, options.vocab_file)
  logging.info("***** Running training *****")
  logging.info("  Batch size = %d", options.train_batch_size)
  model = loop.train(strategy, model_fn, loss_fn(options.objective), train_input_fn,
                     options.schedule, options.output_dir, loop_options, runtime,
                     init_checkpoint=options.init_checkpoint, metric_fn=train_metric_fn,
                     run_shape=shape)
  if options.export_tf1_checkpoint and strategy.extended.should_checkpoint:
    saves.export_weights(model, options.output_dir)
  return model
