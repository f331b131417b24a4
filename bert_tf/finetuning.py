"""The one fine-tuning driver: run(task_class, values) is the whole of run_classifier.py,
run_swag.py, run_ner.py and run_squad.py.

values: the parsed flags (bert_flags.values()). task_class: a registered bert_tf.tasks.base.Task
subclass, built as task_class(values, tokenizer) before TensorFlow's runtime starts (so that its
bad flags and files fail first); what the driver asks of it (records, model, loss, metrics, result
files, the splits its evaluations score, its task_config.json and export) is listed there.

--eval_every_n_steps, --keep_best_metric and --early_stopping_patience: bert_tf.keep_best; the
best weights it keeps are those --do_eval, --do_predict and --export_dir use. --pack_sequences:
bert_tf.packing_finetune (several examples per row in training, evaluation and prediction; the
task's loss_fn and train_metric_fn reduce through packing_finetune.mean_loss and
example_weights, and it scores the unpacked predictions as usual).

Training with no --init_checkpoint is allowed (a tiny model on synthetic data needs nothing else)
but logs a warning: fine-tuning an untrained encoder is rarely what was meant.
"""
import os
import time

from absl import logging
import tensorflow as tf

from bert_tf import checkpoints
from bert_tf import export
from bert_tf import heads
from bert_tf import keep_best
from bert_tf import model_dir
from bert_tf import packing_finetune
from bert_tf import predictor
from bert_tf import progress
from bert_tf import records
from bert_tf import run_dir
from bert_tf import scalars
from bert_tf import tokenization
from bert_tf import training
from bert_tf.config import BertConfig
from bert_tf.errors import BertTfError
from bert_tf.tasks import base

# Records held by the fine-tuning shuffle buffer at most (~1 KB each at seq 128).
MAX_FINETUNE_SHUFFLE_BUFFER = 100_000
RECORD_FILES = base.RECORD_FILES
# What the closing summary leaves out of the files a run wrote in output_dir.
NOT_RESULTS = ("*.tf_record", "checkpoint", "*.index", "*.data-*-of-*", "train_run.json",
               model_dir.CONFIG_FILE, model_dir.VOCAB_FILE, scalars.CURVES_FILE,
               predictor.TASK_CONFIG_FILE, run_dir.LOCK_FILE)


def config_and_tokenizer(values):
  """Checks the model flags as the original scripts do; returns (BertConfig, FullTokenizer).

  Python only, so bad flags fail before training.setup_runtime() starts TensorFlow's runtime.
  """
  tokenization.validate_case_matches_checkpoint(values.do_lower_case, values.init_checkpoint)
  config = BertConfig.from_json_file(values.bert_config_file)
  config.check_sequence_length(values.max_seq_length)
  if not tf.io.gfile.exists(values.vocab_file):
    raise BertTfError(f"--vocab_file: {values.vocab_file} not found")
  tokenizer = tokenization.FullTokenizer(values.vocab_file, do_lower_case=values.do_lower_case)
  config.check_vocab_size(len(tokenizer.vocab), values.vocab_file)
  return config, tokenizer


def finetuning_steps(values, num_examples, what):
  """(num_train_steps, num_warmup_steps) for values.num_train_epochs over num_examples `what`
  (e.g. "training examples"), as the original computes them."""
  num_train_steps = int(num_examples / values.train_batch_size * values.num_train_epochs)
  if num_train_steps < 1:
    raise BertTfError(f"--train_batch_size: {num_examples} {what} make no full batch of "
                      f"{values.train_batch_size} in {values.num_train_epochs} epochs")
  return num_train_steps, int(num_train_steps * values.warmup_proportion)


def train_plan(values, task, train_records):
  """(layout, rows, num_train_steps, num_warmup_steps) of training on output_dir's
  train.tf_record (train_records: what the task's write_train_records returned for it): the
  packing_finetune.Layout with --pack_sequences (else None) and its number of rows. A BertTfError
  when they make no batch."""
  num_examples, _, what = train_records
  layout = packing_finetune.task_layout(values, task, is_training=True)
  rows = layout.count_rows(os.path.join(values.output_dir, RECORD_FILES["train"])) if (
      layout) else None
  return (layout, rows) + finetuning_steps(
      values, rows or num_examples, f"packed rows of {what}" if layout else what)


def finetune(values, strategy, config, task, model_fn, train_records, steps, evaluator=None):
  """Trains on the task's training records (train_records: what write_train_records returned for
  output_dir's train.tf_record; steps: train_plan's for them); returns the model.

  The records are shuffled over a buffer as large as the training set (up to
  MAX_FINETUNE_SHUFFLE_BUFFER), not the original's 100: train files keep the order of the task's
  data, and CoLA's, for one, is sorted by source, so 100-record windows made batches of one
  source and cost several points of Matthews correlation.
  """
  if not values.init_checkpoint:
    logging.warning("No --init_checkpoint: fine-tuning starts from a randomly initialized "
                    "encoder.")
  if strategy.extended.should_checkpoint:
    model_dir.write_model_files(values.output_dir, config, values.vocab_file)
  train_file = os.path.join(values.output_dir, RECORD_FILES["train"])
  num_examples, num_records, _ = train_records
  layout, rows, num_train_steps, num_warmup_steps = steps
  logging.info("***** Running training *****")
  logging.info("  Num examples = %d (%d records)", num_examples, num_records)
  if layout:
    logging.info("  Packed into %d rows of %d tokens (%.2f records per row)", rows,
                 layout.width, num_records / rows)
  logging.info("  Batch size = %d%s", values.train_batch_size, " rows" if layout else "")
  logging.info("  Num steps = %d", num_train_steps)
  shuffle_buffer_size = max(1, min(num_records, MAX_FINETUNE_SHUFFLE_BUFFER))
  metric_fn = task.train_metric_fn
  if layout:
    train_input_fn = layout.train_input_fn(
        train_file, values.train_batch_size, values.seed, values.gradient_accumulation_steps,
        shuffle_buffer_size, task.packed_loss_weights)
    metric_fn = packing_finetune.with_row_statistics(metric_fn)
  else:
    train_input_fn = records.records_input_fn(
        [train_file], task.schema(True), values.train_batch_size, is_training=True,
        seed=values.seed, gradient_accumulation_steps=values.gradient_accumulation_steps,
        shuffle_buffer_size=shuffle_buffer_size)
  model = training.train(
      strategy, model_fn, task.loss_fn, train_input_fn, num_train_steps, values.learning_rate,
      num_warmup_steps, values.output_dir, init_checkpoint=values.init_checkpoint,
      metric_fn=metric_fn, train_batch_size=values.train_batch_size,
      evaluator=evaluator, run_shape=run_shape(values), **training.train_options(values))
  if values.export_tf1_checkpoint and strategy.extended.should_checkpoint:
    run_dir.export_weights(model, values.output_dir)
  return model


def run_shape(values):
  """The options that change what a fine-tuning run's checkpoints hold or how its input is read
  (its train.tf_record, the packed rows): resuming the run needs the same (run_dir)."""
  shape = {"max_seq_length": values.max_seq_length}
  for flag in ("pack_sequences", "left_to_right", "bilstm_head"):
    if hasattr(values, flag):
      shape[flag] = bool(getattr(values, flag))
  if getattr(values, "pack_sequences", False):
    shape["max_instances_per_row"] = values.max_instances_per_row
  return shape


def run(task_class, values):
  """Fine-tunes, evaluates and predicts as the flags say; exports with --export_dir.

  Returns {split: what the task's finish_split returned}. Every check of the flags, of the data
  and of what --output_dir already holds comes before anything is written there; a run that fails
  before training leaves --output_dir as it found it (see run_dir.claim, which also keeps a
  second run out of it meanwhile).
  """
  start = time.time()
  phases = [phase for phase in ("do_train", "do_eval", "do_predict") if hasattr(values, phase)]
  if not any(getattr(values, phase) for phase in phases):
    raise BertTfError(f"{'/'.join('--' + phase for phase in phases)}: at least one must be True")
  config, tokenizer = config_and_tokenizer(values)
  task = task_class(values, tokenizer)
  plan = keep_best.plan(values, task)
  # Python-only work above; the strategy must come before the first TensorFlow op.
  strategy = training.setup_runtime(values)
  chief = strategy.extended.should_checkpoint
  with run_dir.claim(values.output_dir, hold=chief):
    return _run(values, start, strategy, config, task, plan)


def _check_output_dir(values, task, config):
  """What --output_dir holds is this run's to go on with (or nothing): the same task, model,
  vocabulary and run shape."""
  output_dir = values.output_dir
  run_dir.check_run_kind(output_dir, predictor.task_config(task, values))
  _check_checkpoint_model(values, config)
  if values.do_train:
    run_dir.check_run_shape(output_dir, run_shape(values), config)
    run_dir.check_init_checkpoint(output_dir, values.init_checkpoint)
  if values.do_train or tf.train.latest_checkpoint(output_dir):
    model_dir.check_vocab(output_dir, values.vocab_file)


def _run(values, start, strategy, config, task, plan):
  """run() in its claimed --output_dir."""
  layout = packing_finetune.task_layout(values, task, is_training=False)
  keeper = _keeper(values, plan)
  _check_output_dir(values, task, config)
  model_fn = task.model_fn(config, training.trim_padding(values))
  # Every split's data are read (and a bad row reported) before anything else is written.
  train_records = steps = None
  if values.do_train:
    train_records = task.write_train_records(
        os.path.join(values.output_dir, RECORD_FILES["train"]))
    steps = train_plan(values, task, train_records)
  splits = {}
  for split, batch_size in _splits(values, plan, task):
    path = os.path.join(values.output_dir, task.record_files[split])
    splits[split] = (path, batch_size, task.write_split_records(split, path))
  chief = strategy.extended.should_checkpoint
  model = None
  if values.do_train:
    if chief:
      predictor.write_task_config(task, values)  # what predictor.load(output_dir) builds
    evaluator = _evaluator(plan, task, strategy, splits, values.output_dir, layout)
    try:
      model = finetune(values, strategy, config, task, model_fn, train_records, steps,
                       evaluator)
    finally:
      if evaluator is not None:
        evaluator.close()
    keeper = _keeper(values, plan)  # what training kept
    if keeper and keeper.prefix:
      keeper.restore(model)
  uses = [f"--{flag}" for flag in ("do_eval", "do_predict", "export_dir")
          if getattr(values, flag, None)]
  best = None
  if keeper and keeper.prefix:
    best = keeper.describe() + (f", used for {', '.join(uses)}" if uses else "")
    logging.info("Best weights: %s", best)

  results = {}
  for split, batch_size in _splits(values):
    path, batch_size, state = splits[split]
    input_fn, total, unpack = _prediction_input(task, layout, path, batch_size)
    if model is None:
      model, _ = training.restore_model(strategy, model_fn, input_fn, values.output_dir,
                                        values.init_checkpoint)
      if keeper:
        keeper.restore(model)
    batches = training.predict(strategy, model, input_fn, total=total)
    if unpack is not None:
      batches = unpack(batches)
    results[split] = task.finish_split(split, state, batches, training.global_step(model))
  if results.get("dev") and chief:
    scalars.write_eval_scalars(values.output_dir, results["dev"], training.global_step(model))
  export_path = None
  if getattr(values, "export_dir", None):
    export_path = export.export_from_values(task.name, values, values.output_dir,
                                            weights=keeper.prefix if keeper else None)
  if chief:
    _summary(values, start, model, results.get("dev"), export_path, best)
  return results


def _check_checkpoint_model(values, config):
  """The checkpoint the run goes on from (output_dir's latest; without --do_train, else
  --init_checkpoint) holds the model the flags ask for: --left_to_right or not, and the
  --bilstm_head BiLSTM of the same size or none (a model without it would otherwise read the
  BiLSTM's weights as nothing, or the other way round)."""
  path = tf.train.latest_checkpoint(values.output_dir) or (
      None if values.do_train else values.init_checkpoint)
  if not path:
    return
  try:
    causal, found = checkpoints.left_to_right(path), checkpoints.bilstm_units(path)
  except checkpoints.READ_ERRORS:
    return  # a damaged checkpoint: restoring it says so (training.py)
  if causal != bool(getattr(values, "left_to_right", False)):
    raise BertTfError(f"--left_to_right: {path} holds a model fine-tuned "
                      f"{'left to right: pass' if causal else 'bidirectionally: leave out'} "
                      f"--left_to_right (or train in a new --output_dir)")
  if not hasattr(values, "bilstm_head"):  # a script without the flag (run_swag.py)
    return
  wanted = heads.bilstm_units(values, config)
  if found == wanted:
    return
  if not wanted:
    raise BertTfError(f"--bilstm_head: {path} holds a model with a BiLSTM head ({found} units per "
                      f"direction): pass --bilstm_head --bilstm_hidden_size={found}")
  if not found:
    raise BertTfError(f"--bilstm_head: {path} holds a model without a BiLSTM head: leave "
                      f"--bilstm_head out (or train in a new --output_dir)")
  raise BertTfError(f"--bilstm_hidden_size: {path} holds a BiLSTM head of {found} units per "
                    f"direction, not {wanted}")


def _keeper(values, plan):
  """The BestKeeper of --keep_best_metric (None without); without --do_train, its best weights
  must exist."""
  if plan is None or plan.metric is None:
    return None
  keeper = keep_best.BestKeeper(values.output_dir, plan.metric, plan.patience)
  if not values.do_train and keeper.prefix is None:
    raise BertTfError(f"--keep_best_metric: {keeper.directory} holds no best weights (train with "
                      f"--eval_every_n_steps and --keep_best_metric first)")
  return keeper


def _evaluator(plan, task, strategy, splits, output_dir, layout=None):
  """The keep_best.Evaluator of --eval_every_n_steps, or None."""
  if plan is None or plan.every_n_steps is None:
    return None
  split = task.eval_split
  path, batch_size, state = splits[split]
  input_fn, total, unpack = _prediction_input(task, layout, path, batch_size)
  return keep_best.Evaluator(plan, task, strategy, split, input_fn, total, state, output_dir,
                             unpack=unpack)


def _prediction_input(task, layout, path, batch_size):
  """(input_fn, number of batches or None, unpack or None) to predict a split's record file:
  packed with a packing_finetune.Layout, whose unpack gives the task the unpacked batches."""
  if layout is None:
    return (records.records_input_fn([path], task.schema(False), batch_size, is_training=False),
            _count_batches(path, batch_size), None)
  return (layout.predict_input_fn(path, batch_size), None,
          lambda batches: layout.unpack(batches, path, batch_size))


def _count_batches(path, batch_size):
  """The batches of a split's record file (for the progress line)."""
  count = sum(1 for _ in tf.data.TFRecordDataset(path))
  return -(-count // batch_size)


def _summary(values, start, model, dev_results, export_path, best):
  output_dir = values.output_dir
  results = progress.new_files(output_dir, start, skip=NOT_RESULTS)
  scalars.run_summary(output_dir, start, [
      ("results", ", ".join(os.path.join(output_dir, name) for name in results)),
      ("best weights", best),
      ("weights", os.path.join(output_dir, model_dir.WEIGHTS_CHECKPOINT)
       if values.do_train and values.export_tf1_checkpoint else None),
      ("SavedModel", export_path)], training.global_step(model),
      model if values.do_train else None, dev_results)


def _splits(values, plan=None, task=None):
  """[(split, batch size)] to evaluate or predict: dev with --do_eval, test with --do_predict;
  with a plan that evaluates during training, the task's eval_split too (its records are made
  once, for both)."""
  eval_batch_size = getattr(values, "eval_batch_size", None)
  wanted = [("dev", eval_batch_size, getattr(values, "do_eval", False)),
            ("test", values.predict_batch_size, values.do_predict)]
  splits = [(split, batch_size) for split, batch_size, flag in wanted if flag]
  if values.do_train and plan is not None and plan.every_n_steps is not None:
    split = task.eval_split
    if split not in dict(splits):
      splits.append((split, eval_batch_size or values.predict_batch_size))
  return splits
