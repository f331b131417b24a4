"""The one train / evaluate / predict loop every run_*.py uses.

API (stable; later changes only add keyword arguments):

  The strategy comes from bert_tf.training.runtime (setup_runtime(options), get_strategy, ...).

  model = train(strategy, model_fn, loss_fn, train_input_fn, schedule, output_dir,
                loop_options=TrainLoopOptions(), runtime=RuntimeOptions(), init_checkpoint=None,
                metric_fn=None, evaluator=None, run_shape=None)
      schedule: a bert_tf.training.options.Schedule (steps, learning rate, warmup, batch size);
      loop_options: the TrainLoopOptions (optimizer, gradient accumulation, the checkpoint, loop
      and logging cadence, the clip norm rule); runtime: the RuntimeOptions (its seed, when not
      None, seeds the model's initialization; use_xla compiles the step).
      model_fn()                      -> a tf_keras.Model (called inside strategy.scope()); a task
                                         model holds its encoder as `.encoder`.
      loss_fn(features, outputs)      -> float32 scalar: the mean loss of this replica's
                                         micro-batch (the loop scales it for replicas/accumulation).
      train_input_fn(input_context)   -> tf.data.Dataset of feature dicts, batched per replica
                                         (each replica's share of an optimizer step: bert_tf.data.
                                         records' per_replica_batch_size(input_context,
                                         train_batch_size), or records_input_fn(...) which does
                                         all of it) and repeated forever. With gradient
                                         accumulation the loop splits each batch into its
                                         micro-batches, so a run resumes with another
                                         gradient_accumulation_steps from the same input position.
      metric_fn(features, outputs)    -> {name: (values, weights or None)}: the metric is
                                         sum(values * weights) / sum(weights) over what was seen
                                         (logged during training, over every micro-batch with
                                         gradient accumulation; evaluate() uses the same
                                         function).
      Checkpoints (tf.train.Checkpoint(model=, optimizer=, train_iterators=, rngs=)) go to
      output_dir/model.ckpt-N every save_checkpoints_steps and at the end (keep_checkpoint_max
      of them, 0 for all), never over existing files, the loop running iterations_per_loop steps
      at most between them and host-side work; the newest whole checkpoint there (found by
      listing: bert_tf.training.saves.resume_point) is
      resumed (global step, optimizer slots, input position, dropout RNG), and init_checkpoint is
      then ignored. Otherwise init_checkpoint (an original TF1 checkpoint, one of ours, or a Hugging
      Face directory) is loaded with bert_tf.model.checkpoints.init_from_checkpoint. A NaN/Inf loss raises
      BertTfError without saving. run_shape: recorded in output_dir/train_run.json (see
      bert_tf.training.run_dir.RunDir.check). evaluator (bert_tf.training.keep_best.Evaluator, optional): called as
      evaluator(model, step) after the checkpoint of each step where evaluator.due(step,
      num_train_steps); training stops early when it returns True. On resume,
      evaluator.resume(model, step, num_train_steps) may evaluate a step a kill interrupted, or
      stop at once. SIGTERM (a preemption's notice; the rule of tf.distribute.experimental.
      PreemptionCheckpointHandler) stops the loop after the step in flight, on every worker at
      the same step, saves that step and then acts (cli's handler: `terminated: ...` naming the
      checkpoint); a rerun resumes from it exactly. TensorBoard summaries go to output_dir/train; a progress line
      (steps/s, examples/s, ETA) is logged every log_steps, and a live bar drawn on a terminal
      (bert_tf.training.scalars.TrainLog). Returns the trained model; global_step(model) gives its step,
      model.train_summary the scalars of the last line. Gradients are clipped to global norm 1.0
      after the cross-replica sum, the norm counted by clip_norm_rule (per_position, dense, or
      original: the original's on this device, "dense" on TPU, else "per_position": the
      word-embedding gradient's rows, one per looked-up position of every replica and
      micro-batch, each count on its own, as the original's CPU/GPU runs did).

  results = evaluate(strategy, model, eval_input_fn, metric_fn, loss_fn=None, steps=None,
                     global_step=None)
      eval_input_fn(input_context) -> batched dataset (finite, or repeated with `steps` given).
      Returns {metric names..., "loss" if loss_fn, "global_step" if given}: plain Python floats.
  write_eval_results(path, results)    writes sorted "key = value" lines, as the original.

  for batch in predict(strategy, model, predict_input_fn, total=None, step_cache=None): ...
      yields one dict per batch: the features and the model outputs, as NumPy arrays (nested
      outputs such as encoder_outputs keep their structure).

  model, step = restore_model(strategy, model_fn, input_fn, output_dir=None, init_checkpoint=None)
      a model built for input_fn's features, with the latest checkpoint of output_dir or else
      init_checkpoint loaded (for --do_eval / --do_predict without --do_train).
"""
import os
import signal

from absl import logging
import numpy as np
import tensorflow as tf
import tf_keras

from bert_tf.data import records
from bert_tf.errors import BertTfError
from bert_tf.training import interrupts
from bert_tf.io import progress
from bert_tf.model import checkpoints
from bert_tf.model.formats import tf_checkpoint
from bert_tf.training import optimization
from bert_tf.training import recovery
from bert_tf.training import run_dir
from bert_tf.training import saves
from bert_tf.training import scalars
from bert_tf.training.options import RuntimeOptions
from bert_tf.training.options import TrainLoopOptions

CLIP_NORM = 1.0  # the original's clip_by_global_norm(grads, clip_norm=1.0)


# ---------------------------------------------------------------------------- model building


def _build(model, element_spec):
  """Creates the model's variables by calling it once on zeros shaped like the features."""

  def zeros(spec):
    shape = [1 if d is None else d for d in spec.shape.as_list()]
    return tf.zeros(shape, spec.dtype)

  features = tf.nest.map_structure(zeros, element_spec)
  return features, model(features, training=False)


def _dropout_generators(model):
  """The tf.random.Generator of every dropout-like layer, in a stable order."""
  generators = []
  for layer in model.submodules:
    rng = getattr(layer, "_random_generator", None)
    generator = getattr(rng, "_generator", None)
    if isinstance(generator, tf.random.Generator):
      generators.append(generator)
  return generators


def _load_init_checkpoint(model, init_checkpoint, complete=False):
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  logging.info("Initializing from %s", init_checkpoint)
  checkpoints.init_from_checkpoint(model, init_checkpoint, complete=complete)


def _worker_index(strategy):
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or not resolver.cluster_spec().as_dict():
    return 0
  from tensorflow.python.distribute import multi_worker_util  # pylint: disable=g-import-not-at-top
  return multi_worker_util.id_in_cluster(resolver.cluster_spec(), resolver.task_type,
                                         resolver.task_id)


def _worker_count(strategy):
  resolver = getattr(strategy, "cluster_resolver", None)
  spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
  return max(1, sum(len(tasks) for job, tasks in spec.items() if job in ("chief", "worker")))


def _is_chief(strategy):
  return strategy.extended.should_checkpoint


def global_step(model):
  """The optimizer step a model trained by train() or loaded by restore_model() is at."""
  return int(getattr(model, "global_step", 0))


def restore_model(strategy, model_fn, input_fn, output_dir=None, init_checkpoint=None):
  """A built model with the latest checkpoint of output_dir, or else init_checkpoint, loaded."""
  with strategy.scope():
    model = model_fn()
    _build(model, input_fn(tf.distribute.InputContext()).element_spec)
  latest = tf_checkpoint.latest_checkpoint(output_dir) if output_dir else None
  step = 0
  if latest:
    logging.info("Restoring %s", latest)
    tf.train.Checkpoint(model=model).restore(latest).expect_partial()
    reader = tf.train.load_checkpoint(latest)
    for key in ("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE",
                "optimizer/inner_optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"):
      if reader.has_tensor(key):
        step = int(reader.get_tensor(key))
  elif init_checkpoint:
    _load_init_checkpoint(model, init_checkpoint, complete=True)
  else:
    raise BertTfError(f"--output_dir: {output_dir} holds no checkpoint and no --init_checkpoint "
                      f"was given: there is no trained model to evaluate or predict with (train "
                      f"with --do_train, or pass a fine-tuned checkpoint)")
  model.global_step = step
  return model, step


# ---------------------------------------------------------------------------- training


class _TrainIterators:
  """One checkpointable iterator per local replica, fed to the replicas as PerReplica values.

  A strategy's own distributed iterator cannot be checkpointed; plain tf.data iterators can, so
  a resumed run continues from the exact input position. TPUs need the strategy's iterator and
  resume from the start of the data.
  """

  def __init__(self, strategy, input_fn):
    self.strategy = strategy
    n = strategy.num_replicas_in_sync
    self.checkpointable = not isinstance(strategy, tf.distribute.TPUStrategy)
    if not self.checkpointable:
      self.iterator = iter(strategy.distribute_datasets_from_function(input_fn))
      self.element_spec = input_fn(tf.distribute.InputContext(1, 0, n)).element_spec
      self.iterators = []
      return
    local = len(strategy.extended.worker_devices)
    self.first_replica = _worker_index(strategy) * local
    self.iterators = []
    for r in range(self.first_replica, self.first_replica + local):
      context = tf.distribute.InputContext(num_input_pipelines=n, input_pipeline_id=r,
                                           num_replicas_in_sync=n)
      self.iterators.append(iter(input_fn(context)))
    self.element_spec = self.iterators[0].element_spec

  def check_accumulation(self, accumulation):
    """Each replica's batch splits into `accumulation` micro-batches (a BertTfError if not)."""
    if accumulation == 1:
      return
    if not self.checkpointable:
      raise BertTfError("--gradient_accumulation_steps: not supported with the tpu strategy")
    rows = tf.nest.flatten(self.element_spec)[0].shape[0]
    if rows is not None and rows % accumulation:
      raise BertTfError(f"--train_batch_size: {rows * self.strategy.num_replicas_in_sync} is not "
                        f"divisible by {self.strategy.num_replicas_in_sync} replica(s) x "
                        f"{accumulation} accumulation step(s)")

  def next(self, accumulation=1):
    """The next batch of every replica; with accumulation > 1, split into that many
    micro-batches stacked on a new leading axis."""
    if not self.checkpointable:
      return next(self.iterator)

    def micro_batches(t):
      shape = [tf.shape(t)[i] if d is None else d for i, d in enumerate(t.shape.as_list())]
      return tf.reshape(t, tf.stack([accumulation, shape[0] // accumulation] + shape[1:]))

    values = []
    for it in self.iterators:
      batch = next(it)
      values.append(batch if accumulation == 1 else
                    tf.nest.map_structure(micro_batches, batch))
    return self.strategy.experimental_distribute_values_from_function(
        lambda ctx: values[ctx.replica_id_in_sync_group - self.first_replica])


def train(strategy, model_fn, loss_fn, train_input_fn, schedule, output_dir,
          loop_options=TrainLoopOptions(), runtime=RuntimeOptions(), init_checkpoint=None,
          metric_fn=None, evaluator=None, run_shape=None):
  """Trains model_fn()'s model for schedule.num_train_steps optimizer steps; see the module
  docstring."""
  num_train_steps, accumulation = schedule.num_train_steps, loop_options.gradient_accumulation_steps
  tf.io.gfile.makedirs(output_dir)
  if runtime.seed is not None:
    tf_keras.utils.set_random_seed(runtime.seed)
  iterators = _TrainIterators(strategy, train_input_fn)
  iterators.check_accumulation(accumulation)
  state = _TrainState(strategy, model_fn, iterators.element_spec, metric_fn, dict(
      init_lr=schedule.learning_rate, num_train_steps=num_train_steps,
      num_warmup_steps=schedule.num_warmup_steps, optimizer_type=loop_options.optimizer,
      adam_bias_correction=loop_options.adam_bias_correction, clip_norm=None))
  if _is_chief(strategy):
    recovery.set_aside_damaged(output_dir)  # a cut newest checkpoint: go on from the one before
    run_dir.check_same_run(output_dir, state.model, dict(
        learning_rate=schedule.learning_rate, num_warmup_steps=schedule.num_warmup_steps,
        train_batch_size=schedule.train_batch_size, optimizer_type=loop_options.optimizer,
        gradient_accumulation_steps=accumulation), run_shape)
  manager = _restore_or_initialize(strategy, state, iterators, output_dir, init_checkpoint,
                                   loop_options.keep_checkpoint_max)
  train_loop = _train_loop_function(strategy, state, iterators, loss_fn, metric_fn, accumulation,
                                    runtime.use_xla, optimization.resolve_clip_norm_rule(
                                        optimization.clip_norm_rule_of_flag(
                                            loop_options.clip_norm_rule),
                                        on_tpu=isinstance(strategy, tf.distribute.TPUStrategy)))
  log = scalars.TrainLog(state, output_dir, num_train_steps, schedule.train_batch_size,
                         loop_options.log_steps, chief=_is_chief(strategy), timed=not isinstance(
                             strategy, tf.distribute.MultiWorkerMirroredStrategy))
  # SIGTERM (a preemption's notice) sets it from a thread at once: the loop stops after the step in
  # flight, on every worker (replica_step's reduce), saves it and acts on the signal.
  stop_requested = state.stop_requested
  step = int(state.optimizer.iterations.numpy())
  if step >= num_train_steps:
    logging.warning("%s already holds a checkpoint at step %d, and --num_train_steps is %d: "
                    "nothing to train (give a new --output_dir to train again, or a larger "
                    "--num_train_steps to train on)", output_dir, step, num_train_steps)
  logging.info("***** Running training from step %d to %d *****", step, num_train_steps)
  stop = evaluator is not None and evaluator.resume(state.model, step, num_train_steps)
  with interrupts.noted(lambda unused_signum: stop_requested.assign(True)) as notice:
    stopped = _train_steps(strategy, state, manager, train_loop, log, evaluator, loop_options,
                           num_train_steps, output_dir, step, stop)
  if stopped:  # a peer's SIGTERM: this worker stops as it would
    notice.act(signal.SIGTERM)
  state.model.global_step = int(state.optimizer.iterations.numpy())
  return state.model


def _train_steps(strategy, state, manager, train_loop, log, evaluator, loop_options,
                 num_train_steps, output_dir, step, stop):
  """train()'s loop, from `step` (stop: done already); whether a SIGTERM (here or on a peer)
  stopped it, after saving the step it stopped at."""
  save_checkpoints_steps = loop_options.save_checkpoints_steps
  stopped = False
  try:
    while step < num_train_steps and not stop and not stopped:
      until_save = save_checkpoints_steps - step % save_checkpoints_steps
      if evaluator is not None:
        until_save = min(until_save, evaluator.every_n_steps - step % evaluator.every_n_steps)
      n = log.chunk_size(step, min(loop_options.iterations_per_loop, until_save,
                                   num_train_steps - step))
      with records.naming_bad_records():
        loss, all_finite, stopped = train_loop(tf.constant(n, tf.int32))
      step, stopped = int(state.optimizer.iterations.numpy()), bool(stopped)
      if not bool(all_finite):
        raise BertTfError(
            f"loss became {float(loss)} (NaN or Inf) by step {step}: training stopped, last "
            f"good checkpoint kept: {tf_checkpoint.latest_checkpoint(output_dir)} (try a lower "
            "--learning_rate or --dtype=float32)")
      log.after_chunk(step)
      evaluate = not stopped and evaluator is not None and evaluator.due(step, num_train_steps)
      if step % save_checkpoints_steps == 0 or step == num_train_steps or evaluate or stopped:
        _save(strategy, manager, step)
      if stopped and isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        _barrier(strategy)
      if evaluate:
        stop = evaluator(state.model, step)
  finally:
    log.close()
  return stopped


class _TrainState:
  """The model, its optimizer (loss-scaled under mixed_float16) and the running train metrics,
  built in the strategy's scope."""

  def __init__(self, strategy, model_fn, element_spec, metric_fn, optimizer_options):
    with strategy.scope():
      self.model = model_fn()
      features, outputs = _build(self.model, element_spec)
      optimizer = optimization.create_optimizer(**optimizer_options)
      self.loss_scaled = tf_keras.mixed_precision.global_policy().name == "mixed_float16"
      if self.loss_scaled:
        optimizer = tf_keras.mixed_precision.LossScaleOptimizer(optimizer)
      self.optimizer = optimizer
      self.inner_optimizer = optimizer.inner_optimizer if self.loss_scaled else optimizer
      self.inner_optimizer.build(self.model.trainable_variables)
      self.train_loss = tf_keras.metrics.Mean("loss", dtype=tf.float32)
      names = sorted(metric_fn(features, outputs)) if metric_fn else []
      self.train_metrics = {name: tf_keras.metrics.Mean(name, dtype=tf.float32)
                            for name in names}
    # This worker's own (not the strategy's: a signal's thread sets it), never checkpointed.
    self.stop_requested = tf.Variable(False, trainable=False, name="stop_requested")

  def update_metrics(self, metric_fn, features, outputs, loss):
    self.train_loss.update_state(loss)
    if metric_fn is None:
      return
    for name, (values, weights) in metric_fn(features, outputs).items():
      self.train_metrics[name].update_state(tf.cast(values, tf.float32), sample_weight=weights)

  def read_and_reset_metrics(self):
    values = {"loss": float(self.train_loss.result())}
    values.update({name: float(m.result()) for name, m in self.train_metrics.items()})
    self.train_loss.reset_state()
    for m in self.train_metrics.values():
      m.reset_state()
    return values


def _restore_or_initialize(strategy, state, iterators, output_dir, init_checkpoint,
                           keep_checkpoint_max):
  """The CheckpointManager of output_dir, after resuming its latest checkpoint (model, optimizer,
  input position, dropout RNG) or, when there is none, loading init_checkpoint."""
  objects = dict(model=state.model, optimizer=state.optimizer, train_iterators=iterators.iterators,
                 rngs=_dropout_generators(state.model))
  checkpoint_dir = output_dir if _is_chief(strategy) else os.path.join(
      output_dir, f".worker_{_worker_index(strategy)}_tmp")
  if _is_chief(strategy):
    saves.remove_unfinished_saves(output_dir)
    latest = saves.resume_point(output_dir)
    saves.record_checkpoints(output_dir, latest)  # before the manager reads the state file
  else:
    latest = tf_checkpoint.latest_checkpoint(output_dir)
  while latest:
    logging.info("Resuming from %s%s", latest,
                 f" (--init_checkpoint {init_checkpoint} is ignored)" if init_checkpoint else "")
    try:  # a Checkpoint of its own: one that failed keeps the restore it began
      tf.train.Checkpoint(**objects).restore(latest).assert_existing_objects_matched()
      break
    except checkpoints.READ_ERRORS + (AssertionError,) as e:
      # A tensor TensorFlow cannot read (its checksum): set aside, the one before tried. Not
      # with several workers, which each restore on their own.
      if not (isinstance(e, tf.errors.DataLossError) and _is_chief(strategy) and
              _worker_count(strategy) == 1):
        raise saves.restore_error(latest, e) from None
      saves.silence_abandoned_restore()
      moved, latest = recovery.set_aside_unreadable(latest, e), saves.resume_point(output_dir)
      if not latest:  # the model holds part of it: a new process starts afresh
        raise BertTfError(f"{moved}: set aside, unreadable, and {output_dir} holds no checkpoint "
                          f"before it: run again to start afresh") from None
  if not latest and init_checkpoint:
    _load_init_checkpoint(state.model, init_checkpoint)
  # model.ckpt-N, as the original's Estimator names them (its users glob model.ckpt-*);
  # --keep_checkpoint_max=0 keeps all, as the Estimator's RunConfig.
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(**objects), checkpoint_dir,
                                       max_to_keep=keep_checkpoint_max or None,
                                       checkpoint_name=saves.CHECKPOINT_NAME)
  return manager


def _train_loop_function(strategy, state, iterators, loss_fn, metric_fn, accumulation, use_xla,
                         clip_norm_rule="per_position"):
  """train_loop(num_steps) -> (last loss, whether every loss was finite, whether a worker asked
  to stop: state.stop_requested): a tf.function running up to num_steps optimizer steps on the
  replicas, each clipping its summed gradients to global norm CLIP_NORM as counted by
  clip_norm_rule (see bert_tf.training.optimization)."""
  model, optimizer = state.model, state.optimizer
  trainable = model.trainable_variables
  denominator = float(strategy.num_replicas_in_sync * accumulation)
  by_rows = [clip_norm_rule == "per_position" and
             any(name in v.name for name in optimization.PER_POSITION_VARIABLES)
             for v in trainable]
  # Filled while tracing: the variables whose gradient came as rows (an IndexedSlices, one row per
  # looked-up position) and counts in the norm row by row, not as its dense sum; those with no
  # gradient (e.g. the pooler under a SQuAD head), which the original's optimizer leaves alone:
  # no step, no weight decay.
  counted_by_rows, no_gradient = set(), set()

  def micro_step(features):
    """(loss, dense gradients, outputs, squared norm of the gradients counted by rows)."""
    with tf.GradientTape() as tape:
      outputs = model(features, training=True)
      loss = tf.cast(loss_fn(features, outputs), tf.float32)
      scaled = loss / denominator
      if state.loss_scaled:
        scaled = optimizer.get_scaled_loss(scaled)
    grads = tape.gradient(scaled, trainable)
    if state.loss_scaled:
      grads = optimizer.get_unscaled_gradients(grads)
    rows_squared = tf.constant(0.0)
    for i, g in enumerate(grads):
      if g is None:
        no_gradient.add(i)
      elif by_rows[i] and isinstance(g, tf.IndexedSlices):
        counted_by_rows.add(i)
        rows_squared += optimization.squared_norm(g)  # [positions, H] rows
    grads = [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
             for g, v in zip(grads, trainable)]
    return loss, grads, outputs, rows_squared

  @tf.function(jit_compile=use_xla or None)
  def compute_gradients(features):
    if accumulation == 1:
      return micro_step(features)
    total_loss, total_rows = tf.constant(0.0), tf.constant(0.0)
    total = [tf.zeros_like(v) for v in trainable]
    for i in tf.range(accumulation):
      micro = tf.nest.map_structure(lambda t: t[i], features)  # pylint: disable=cell-var-from-loop
      loss, grads, outputs, rows_squared = micro_step(micro)
      state.update_metrics(metric_fn, micro, outputs, loss)
      total_loss += loss
      total_rows += rows_squared
      total = [a + g for a, g in zip(total, grads)]
    return total_loss / accumulation, total, None, total_rows

  def replica_step(features, stop_requested):
    loss, grads, outputs, rows_squared = compute_gradients(features)
    # The cross-replica sum first (the optimizer then skips its own), so that the clip sees the
    # whole batch's gradients, as one device would: the rows of every replica's positions count.
    context = tf.distribute.get_replica_context()
    grads, rows_squared = context.all_reduce(tf.distribute.ReduceOp.SUM, (grads, rows_squared))
    grads = optimization.clip_by_global_norm(grads, CLIP_NORM, rows_squared + tf.add_n(
        [optimization.squared_norm(g) for i, g in enumerate(grads) if i not in counted_by_rows]))
    optimizer.apply_gradients([(g, v) for i, (g, v) in enumerate(zip(grads, trainable))
                               if i not in no_gradient], skip_gradients_aggregation=True)
    if outputs is not None:  # with accumulation, compute_gradients updated them per micro-batch
      state.update_metrics(metric_fn, features, outputs, loss)
    return tf.stack([loss, stop_requested])  # reduced together: one collective a step

  @tf.function
  def train_loop(num_steps):
    """(last loss, whether every loss was finite, whether a worker asked to stop)."""
    all_finite, stopping = tf.constant(True), tf.constant(False)
    loss = tf.constant(0.0)
    for _ in tf.range(num_steps):
      per_replica = strategy.run(replica_step, args=(
          iterators.next(accumulation), tf.cast(state.stop_requested, tf.float32)))
      reduced = strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica, axis=None)  # [2]
      loss, stopping = reduced[0], reduced[1] > 0  # any worker's request stops every worker
      all_finite = tf.logical_and(all_finite, tf.math.is_finite(loss))
      if not all_finite or stopping:  # at the first NaN/Inf step, or the step asked to stop at
        break
    return loss, all_finite, stopping

  return train_loop


def _save(strategy, manager, step):
  prefix = os.path.join(manager.directory, f"{saves.CHECKPOINT_NAME}-{step}")
  there = [p for p in tf.io.gfile.glob(prefix + ".*") if not recovery.is_set_aside(p)]
  if there:  # never written over (resume_point refuses such runs before they start)
    raise BertTfError(f"--output_dir: {prefix} exists ({os.path.basename(there[0])}, ...): a save "
                      f"at step {step} would write over it; training stopped, the checkpoint "
                      f"left as it is: move its files aside, or give a new --output_dir")
  try:
    with interrupts.deferred():  # Ctrl-C or SIGTERM act once the save is whole
      path = manager.save(checkpoint_number=step)
  except BaseException:  # SIGTERM (SystemExit) or an error mid-save: no half-written save left
    saves.remove_unfinished_saves(manager.directory)
    raise
  if _is_chief(strategy):
    logging.info("Saved checkpoint %s", path)
  else:
    tf.io.gfile.rmtree(manager.directory)


def _barrier(strategy):
  """Every worker waits here for the others: after a stop's save, the chief's checkpoint is whole
  on disk before any worker exits naming the output_dir's latest."""
  strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)


# ---------------------------------------------------------------------------- eval and predict


def evaluate(strategy, model, eval_input_fn, metric_fn, loss_fn=None, steps=None,
             global_step=None):
  """Weighted means of metric_fn's values (and of the loss) over eval_input_fn's batches."""
  dataset = strategy.distribute_datasets_from_function(eval_input_fn)

  @tf.function(input_signature=_step_signature(strategy, dataset))
  def eval_step(features):

    def replica_fn(features):
      outputs = model(features, training=False)
      sums = {}
      for name, (values, weights) in metric_fn(features, outputs).items():
        values = tf.cast(values, tf.float32)
        weights = tf.ones_like(values) if weights is None else tf.cast(weights, tf.float32)
        weights = tf.broadcast_to(weights, tf.shape(values))
        sums[name] = (tf.reduce_sum(values * weights), tf.reduce_sum(weights))
      if loss_fn is not None:
        examples = tf.cast(tf.shape(tf.nest.flatten(features)[0])[0], tf.float32)
        loss = tf.cast(loss_fn(features, outputs), tf.float32)
        sums["loss"] = (tf.where(examples > 0, loss * examples, 0.0), examples)
      return sums

    per_replica = strategy.run(replica_fn, args=(features,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

  totals = {}
  with progress.Progress("evaluating", total=steps, unit="batches") as shown, \
      records.naming_bad_records():
    for i, features in enumerate(dataset):
      if steps is not None and i >= steps:
        break
      for name, (total, weight) in eval_step(features).items():
        t, w = totals.get(name, (0.0, 0.0))
        totals[name] = (t + float(total), w + float(weight))
      shown.update(i + 1)
  if not totals:
    raise BertTfError("the evaluation data hold no record: nothing to evaluate")
  results = {name: t / w if w else float("nan") for name, (t, w) in totals.items()}
  if global_step is not None:
    results["global_step"] = int(global_step)
  return results


def write_eval_results(path, results, log=True):
  """The original's eval_results.txt: one sorted `key = value` line per result, each logged too
  (unless the caller logs its own report: log=False)."""
  from bert_tf.io.fileio import write_text_atomically  # pylint: disable=g-import-not-at-top
  lines = []
  for key in sorted(results):
    if log:
      logging.info("  %s = %s", key, results[key])
    lines.append(f"{key} = {results[key]}\n")
  write_text_atomically(path, "".join(lines))


def _step_signature(strategy, dataset):
  """An eval or predict step's input_signature: the dataset's element_spec, whose batch dimension
  is None, so that the last, smaller batch runs the same trace instead of tracing the model anew.
  None on a TPU, where XLA needs static shapes: each batch shape compiles its own program."""
  if isinstance(strategy, tf.distribute.TPUStrategy):
    return None
  return [dataset.element_spec]


def _predict_step(strategy, model, dataset, step_cache):
  """The tf.function predicting one batch; kept in step_cache (a dict the caller holds, or None)
  and reused by the next call with the same model and input shapes, which then traces nothing."""
  key = str(dataset.element_spec)
  if step_cache is not None and step_cache.get(key, (None,))[0] is model:
    return step_cache[key][1]

  @tf.function(input_signature=_step_signature(strategy, dataset))
  def predict_step(features):

    def replica_fn(features):
      outputs = model(features, training=False)
      merged = dict(features)
      merged.update(outputs if isinstance(outputs, dict) else {"outputs": outputs})
      return merged

    return strategy.run(replica_fn, args=(features,))

  if step_cache is not None:
    step_cache[key] = (model, predict_step)
  return predict_step


def predict(strategy, model, predict_input_fn, total=None, step_cache=None):
  """Yields {feature and output name: NumPy array} per batch, replicas concatenated in order.
  total: the number of batches expected, for the progress line; step_cache: a dict kept between
  calls that predict with the same model (evaluation during training), so that they trace once."""
  dataset = strategy.distribute_datasets_from_function(predict_input_fn)
  predict_step = _predict_step(strategy, model, dataset, step_cache)
  with progress.Progress("predicting", total=total, unit="batches") as shown, \
      records.naming_bad_records():
    for i, features in enumerate(dataset):
      local_results = strategy.experimental_local_results(predict_step(features))
      yield tf.nest.map_structure(lambda *t: np.concatenate([np.asarray(x) for x in t]),
                                  *local_results)
      shown.update(i + 1)

