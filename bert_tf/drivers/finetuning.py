"""The one fine-tuning driver: run(task_class, options) is the whole of run_classifier.py,
run_swag.py, run_ner.py and run_squad.py.

options: a bert_tf.drivers.finetune_options.FinetuneOptions, which the script builds from its flags
(bert_flags.finetune_options). task_class: a registered bert_tf.tasks.base.Task subclass, built
as task_class(options, tokenizer) before TensorFlow's runtime starts (so that its bad flags and
files fail first); what the driver asks of it (records, model, loss, metrics, result files, the
splits its evaluations score, its task_config.json and export) is listed there.

--eval_every_n_steps, --keep_best_metric and --early_stopping_patience: bert_tf.training.keep_best; the
best weights it keeps are those --do_eval, --do_predict and --export_dir use. --pack_sequences:
bert_tf.data.packing_finetune (several examples per row in training, evaluation and prediction; the
task's loss_fn and train_metric_fn reduce through packing_finetune.mean_loss and
example_weights, and it scores the unpacked predictions as usual).

Training with no --init_checkpoint is allowed (a tiny model on synthetic data needs nothing else)
but logs a warning: fine-tuning an untrained encoder is rarely what was meant.
"""
import dataclasses
import json
import os
import time

from absl import logging
import tensorflow as tf

from bert_tf.data import packing_finetune
from bert_tf.data import records
from bert_tf.errors import BertTfError
from bert_tf.io import progress
from bert_tf.io.fileio import write_text_atomically
from bert_tf.drivers import distillation
from bert_tf.model.formats import tf_checkpoint
from bert_tf.model import model_files
from bert_tf.drivers import exporting
from bert_tf.serving import guard
from bert_tf.serving import reduced
from bert_tf.tasks import base
from bert_tf.training import keep_best
from bert_tf.training import loop
from bert_tf.training import run_dir
from bert_tf.training import saves
from bert_tf.training import runtime
from bert_tf.training import scalars
from bert_tf.training.options import Schedule

# Records held by the fine-tuning shuffle buffer at most (~1 KB each at seq 128).
MAX_FINETUNE_SHUFFLE_BUFFER = 100_000
RECORD_FILES = base.RECORD_FILES
# What the closing summary leaves out of the files a run wrote in output_dir.
NOT_RESULTS = ("*.tf_record", "checkpoint", "*.index", "*.data-*-of-*", "train_run.json",
               tf_checkpoint.CONFIG_FILE, tf_checkpoint.VOCAB_FILE, scalars.CURVES_FILE,
               tf_checkpoint.TASK_CONFIG_FILE, run_dir.LOCK_FILE)


def finetuning_steps(options, num_examples, what):
  """(num_train_steps, num_warmup_steps) for options.num_train_epochs over num_examples `what`
  (e.g. "training examples"), as the original computes them."""
  num_train_steps = int(num_examples / options.train_batch_size * options.num_train_epochs)
  if num_train_steps < 1:
    raise BertTfError(f"--train_batch_size: {num_examples} {what} make no full batch of "
                      f"{options.train_batch_size} in {options.num_train_epochs} epochs")
  return num_train_steps, int(num_train_steps * options.warmup_proportion)


def train_plan(options, task, train_records):
  """(layout, rows, num_train_steps, num_warmup_steps) of training on output_dir's
  train.tf_record (train_records: what the task's write_train_records returned for it): the
  packing_finetune.Layout with --pack_sequences (else None) and its number of rows. A BertTfError
  when they make no batch."""
  num_examples, _, what = train_records
  layout = packing_finetune.task_layout(options, task, is_training=True)
  rows = layout.count_rows(os.path.join(options.output_dir, RECORD_FILES["train"])) if (
      layout) else None
  return (layout, rows) + finetuning_steps(
      options, rows or num_examples, f"packed rows of {what}" if layout else what)


def finetune(options, strategy, config, task, model_fn, train_records, steps, evaluator=None):
  """Trains on the task's training records (train_records: what write_train_records returned for
  output_dir's train.tf_record; steps: train_plan's for them); returns the model.

  The records are shuffled over a buffer as large as the training set (up to
  MAX_FINETUNE_SHUFFLE_BUFFER), not the original's 100: train files keep the order of the task's
  data, and CoLA's, for one, is sorted by source, so 100-record windows made batches of one
  source and cost several points of Matthews correlation.
  """
  if not options.init_checkpoint:
    logging.warning("No --init_checkpoint: fine-tuning starts from a randomly initialized "
                    "encoder.")
  if strategy.extended.should_checkpoint:
    model_files.write_model_files(options.output_dir, config, options.vocab_file)
  train_file = os.path.join(options.output_dir, RECORD_FILES["train"])
  num_examples, num_records, _ = train_records
  layout, rows, num_train_steps, num_warmup_steps = steps
  logging.info("***** Running training *****")
  logging.info("  Num examples = %d (%d records)", num_examples, num_records)
  if layout:
    logging.info("  Packed into %d rows of %d tokens (%.2f records per row)", rows,
                 layout.width, num_records / rows)
  logging.info("  Batch size = %d%s", options.train_batch_size, " rows" if layout else "")
  logging.info("  Num steps = %d", num_train_steps)
  shuffle_buffer_size = max(1, min(num_records, MAX_FINETUNE_SHUFFLE_BUFFER))
  metric_fn = task.train_metric_fn
  if layout:
    train_input_fn = layout.train_input_fn(
        train_file, options.train_batch_size, options.runtime.seed, shuffle_buffer_size,
        task.packed_loss_weights)
    metric_fn = packing_finetune.with_row_statistics(metric_fn)
  else:
    train_input_fn = records.records_input_fn(
        [train_file], task.schema(True), options.train_batch_size, is_training=True,
        seed=options.runtime.seed,
        shuffle_buffer_size=shuffle_buffer_size)
  schedule = Schedule(num_train_steps, options.learning_rate, num_warmup_steps,
                      options.train_batch_size)
  model = loop.train(strategy, model_fn, task.loss_fn, train_input_fn, schedule,
                     options.output_dir, options.loop, options.runtime,
                     init_checkpoint=options.init_checkpoint, metric_fn=metric_fn,
                     evaluator=evaluator, run_shape=options.run_shape())
  if options.export_tf1_checkpoint and strategy.extended.should_checkpoint:
    saves.export_weights(model, options.output_dir)
  return model


def run(task_class, options):
  """Fine-tunes, evaluates and predicts as the flags say; exports with --export_dir.

  Returns {split: what the task's finish_split returned}. Every check of the flags, of the data
  and of what --output_dir already holds comes before anything is written there; a run that fails
  before training leaves --output_dir as it found it (see run_dir.claim, which also keeps a
  second run out of it meanwhile).
  """
  start = time.time()
  # Python only, so that bad flags and files fail before TensorFlow's runtime starts.
  task_class.check_options(options)
  files = model_files.open_model(options, max_seq_length=options.max_seq_length)
  options, config = files.resolved(options), files.config
  task = distillation.wrap(task_class(options, files.tokenizer), options)  # --teacher_dir
  plan = keep_best.plan(options, task)
  directory = run_dir.RunDir(options.output_dir)
  if options.do_train:
    directory.check_batch_size(options.train_batch_size)
  _check_inputs(options, task, plan)
  # Python-only work above; the strategy must come before the first TensorFlow op.
  strategy = runtime.setup_runtime(options.runtime, config, options.max_seq_length)
  # What --dtype=auto chose: an export after training serves in it.
  options = dataclasses.replace(options, runtime=dataclasses.replace(
      options.runtime, dtype=runtime.concrete_dtype()))
  chief = strategy.extended.should_checkpoint
  with run_dir.claim(options.output_dir, hold=chief):
    return _run(options, start, strategy, config, task, plan, directory)


def _check_inputs(options, task, plan):
  """Every file the run's splits are read from is there, before --output_dir is made."""
  splits = (["train"] if options.do_train else []) + [s for s, _ in _splits(options, plan, task)]
  for split in splits:
    given = task.split_file(split)
    if given and given[1] and not tf.io.gfile.exists(given[1]):
      raise BertTfError(f"{given[0]}: {given[1]}: file not found")
  if options.export_dir:  # a reduced-precision export's check and calibration rows
    reduced.check_inputs(base.for_export(task.name, flag="--export_dir"), options)


def _run(options, start, strategy, config, task, plan, directory):
  """run() in its claimed --output_dir (directory: its RunDir, read before it was claimed)."""
  layout = packing_finetune.task_layout(options, task, is_training=False)
  keeper = _keeper(options, plan)
  # What --output_dir holds is this run's to go on with (or nothing): the same task, model,
  # vocabulary and run shape.
  directory.check(run_dir.Run(
      training=options.do_train, config=config, run_shape=options.run_shape(),
      train_batch_size=options.train_batch_size, init_checkpoint=options.init_checkpoint,
      vocab_file=options.vocab_file, task=task, causal=options.left_to_right,
      bilstm_units=(options.bilstm_units(config) if options.has_flag("bilstm_head") else "any")))
  model_fn = task.model_fn(config, runtime.trim_padding(options.runtime))
  # Every split's data are read (and a bad row reported) before anything else is written.
  train_records = steps = None
  if options.do_train:
    train_records = task.write_train_records(
        os.path.join(options.output_dir, RECORD_FILES["train"]))
    steps = train_plan(options, task, train_records)
  splits = {}
  for split, batch_size in _splits(options, plan, task):
    path = os.path.join(options.output_dir, task.record_files[split])
    splits[split] = (path, batch_size, task.write_split_records(split, path))
  chief = strategy.extended.should_checkpoint
  model = None
  if options.do_train:
    if chief:  # what predictor.load(output_dir) builds
      write_text_atomically(os.path.join(options.output_dir, tf_checkpoint.TASK_CONFIG_FILE),
                            json.dumps(task.task_config(), indent=2, sort_keys=True) + "\n")
    evaluator = _evaluator(plan, task, strategy, splits, options.output_dir, layout)
    try:
      model = finetune(options, strategy, config, task, model_fn, train_records, steps,
                       evaluator)
    finally:
      if evaluator is not None:
        evaluator.close()
    keeper = _keeper(options, plan)  # what training kept
    if keeper and keeper.prefix:
      keeper.restore(model)
  uses = [f"--{flag}" for flag in ("do_eval", "do_predict", "export_dir")
          if getattr(options, flag)]
  best = None
  if keeper and keeper.prefix:
    best = keeper.describe() + (f", used for {', '.join(uses)}" if uses else "")
    logging.info("Best weights: %s", best)

  results = {}
  for split, batch_size in _splits(options):
    path, batch_size, state = splits[split]
    input_fn, total, unpack = _prediction_input(task, layout, path, batch_size)
    logging.info("***** Running %s *****", "evaluation" if split == "dev" else "predictions")
    logging.info("  Batch size = %d", batch_size)
    if model is None:
      model, _ = loop.restore_model(strategy, model_fn, input_fn, options.output_dir,
                                        options.init_checkpoint)
      if keeper:
        keeper.restore(model)
    batches = loop.predict(strategy, model, input_fn, total=total)
    if unpack is not None:
      batches = unpack(batches)
    results[split] = task.finish_split(split, state, batches, loop.global_step(model))
  if results.get("dev") and chief:
    scalars.write_eval_scalars(options.output_dir, results["dev"], loop.global_step(model))
  export_path = None
  if options.export_dir:
    export_path = exporting.export_from_options(task.name, options, config, options.output_dir,
                                               weights=keeper.prefix if keeper else None)
  if chief:
    _summary(options, start, model, task, results, export_path, best)
  return results


def _keeper(options, plan):
  """The BestKeeper of --keep_best_metric (None without); without --do_train, its best weights
  must exist."""
  if plan is None or plan.metric is None:
    return None
  keeper = keep_best.BestKeeper(options.output_dir, plan.metric, plan.patience)
  if not options.do_train and keeper.prefix is None:
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


def _summary(options, start, model, task, results, export_path, best):
  """The closing lines: the files written, and each scored split's figures (task.headline)."""
  output_dir = options.output_dir
  written = progress.new_files(output_dir, start, skip=NOT_RESULTS)
  figures = {}
  for split, split_results in results.items():
    if split_results:
      figures.update(task.headline(split, split_results))
  figures.update(guard.figures(export_path))  # a reduced-precision export's check
  scalars.run_summary(output_dir, start, [
      ("results", ", ".join(os.path.join(output_dir, name) for name in written)),
      ("best weights", best),
      ("weights", os.path.join(output_dir, tf_checkpoint.WEIGHTS_CHECKPOINT)
       if options.do_train and options.export_tf1_checkpoint else None),
      ("SavedModel", export_path)], loop.global_step(model),
      model if options.do_train else None, figures=figures)


def _splits(options, plan=None, task=None):
  """[(split, batch size)] to evaluate or predict: dev with --do_eval, test with --do_predict;
  with a plan that evaluates during training, the task's eval_split too (its records are made
  once, for both)."""
  wanted = [("dev", options.eval_batch_size, options.do_eval),
            ("test", options.predict_batch_size, options.do_predict)]
  splits = [(split, batch_size) for split, batch_size, flag in wanted if flag]
  if options.do_train and plan is not None and plan.every_n_steps is not None:
    split = task.eval_split
    if split not in dict(splits):
      splits.append((split, options.eval_split_batch_size))
  return splits
