"""Training and evaluation scalars: the training loop's progress (lines, live bar, chunk sizes),
TensorBoard event files in output_dir/train and output_dir/eval, and output_dir/curves.png.

  log = TrainLog(state, output_dir, num_train_steps, ...)   # inside bert_tf.training.loop.train
  n = log.chunk_size(step, limit)      # steps for the next train_loop(n) call
  log.after_chunk(step)                # summaries, the step line, the bar
  write_eval_scalars(output_dir, results, step)   # eval metrics beside the training curves
  plot_curves(output_dir)              # -> output_dir/curves.png, from the event files on disk

Training scalars (loss, learning rate, rate, the task's metrics) go to TensorBoard every
log_steps steps, more often for short runs (at least CURVE_POINTS points a run) and at least every
SUMMARY_SECONDS. A `step N/M loss ..., ETA` line is logged every log_steps steps and, into a file,
at least every LOG_SECONDS; a terminal gets a live bar. Chunks of steps are sized from the
measured step time (CHUNK_SECONDS), so that this happens on time even with a large --log_steps.
Time never decides anything in a multi-worker run: every worker must run the same chunks.
A training metric named X_per_row (a mean per batch element, e.g. the real tokens of a packed row)
is also logged as X_per_second.
"""
import math
import os
import time

from absl import logging
import tensorflow as tf

from bert_tf.io import fileio
from bert_tf.io import progress as progress_lib
from bert_tf.model.formats import tf_checkpoint

CURVE_POINTS = 100
SUMMARY_SECONDS = 30
LOG_SECONDS = progress_lib.LOG_SECONDS
CHUNK_SECONDS = {True: 2.0, False: 10.0}  # on a terminal, into a file
CURVES_FILE = "curves.png"
_NOT_PLOTTED = ("steps_per_second", "examples_per_second", "global_step")
_PER_ROW, _PER_SECOND = "_per_row", "_per_second"
_MAX_PANELS = 12


class TrainLog:
  """The training loop's progress: see the module docstring. state: training._TrainState."""

  def __init__(self, state, output_dir, num_train_steps, train_batch_size=None, log_steps=100,
               chief=True, timed=True, clock=time.monotonic):
    self.state, self.num_train_steps = state, num_train_steps
    self.train_batch_size, self.log_steps = train_batch_size, log_steps
    self.timed, self.clock = timed, clock
    self.writer = (tf.summary.create_file_writer(os.path.join(output_dir, "train"))
                   if chief else tf.summary.create_noop_writer())
    step = int(state.optimizer.iterations.numpy())
    self.summary_steps = max(1, min(log_steps or num_train_steps,
                                    num_train_steps // CURVE_POINTS))
    self.bar = progress_lib.Progress("training", total=num_train_steps, unit="steps", start=step,
                                     clock=clock, seconds=LOG_SECONDS if chief else None)
    self.chunk_seconds = CHUNK_SECONDS[self.bar.tty]
    self.traced = False  # the first chunk (one step) traces and compiles the model
    self.step_seconds = None
    now = clock()
    self.chunk_start = self.summary_time = self.line_time = self.origin_time = now
    self.last_step = self.summary_step = self.line_step = self.origin_step = step
    self.sums, self.line_steps, self.last_scalars = {}, 0, None  # step-weighted since the line
    if chief:
      logging.info("TensorBoard logs in %s (see them with: tensorboard --logdir=%s)",
                   output_dir, output_dir)

  def chunk_size(self, step, limit):
    """Steps for the next chunk: at most `limit`, up to the next summary and log step; one step
    first (it traces and compiles the model), then (timed) one to measure, then about
    chunk_seconds' worth."""
    n = min(limit, self.summary_steps - step % self.summary_steps)
    if self.log_steps:
      n = min(n, self.log_steps - step % self.log_steps)
    if not self.traced:
      logging.info("Building and compiling the training step (the first step can take a "
                   "while)...")
      n = 1
    elif self.timed:  # one step to measure the step time, then chunk_seconds' worth
      n = 1 if self.step_seconds is None else min(n, max(1, int(self.chunk_seconds /
                                                                 self.step_seconds)))
    self.chunk_start = self.clock()
    return n

  def after_chunk(self, step):
    """After train_loop: writes the summaries, logs the line or redraws the bar when due."""
    now = self.clock()
    if not self.traced:
      logging.info("First step done in %s", progress_lib.format_duration(now - self.chunk_start))
      self.traced = True
      # Rates and ETAs leave the tracing out.
      self.origin_step, self.origin_time = step, now
      self.bar.start_done, self.bar.start_time = step, now
    else:
      self.step_seconds = (now - self.chunk_start) / max(step - self.last_step, 1)
    self.last_step = step
    final = step >= self.num_train_steps
    line_due = final or (self.log_steps and step % self.log_steps == 0) or (
        self.timed and not self.bar.tty and now - max(self.line_time, self.origin_time) >=
        LOG_SECONDS)
    if (line_due or step % self.summary_steps == 0 or
        (self.timed and now - self.summary_time >= SUMMARY_SECONDS)):
      self._summary(step, now)
    if line_due:
      self._line(step, now)
    if self.bar.tty:  # into a file, the step lines are the progress
      self.bar.update(step, f"loss {self.last_scalars['loss']:.4g}" if self.last_scalars else None)

  def _summary(self, step, now):
    steps = step - self.summary_step
    metrics = self.state.read_and_reset_metrics()
    scalars = {"loss": metrics.pop("loss"),
               "learning_rate": float(self.state.inner_optimizer.learning_rate.numpy()),
               "steps_per_second": steps / max(now - self.summary_time, 1e-9)}
    scalars.update(metrics)
    _add_rates(scalars, self.train_batch_size)
    with self.writer.as_default():
      for name, value in scalars.items():
        tf.summary.scalar(name, value, step=step)
    self.writer.flush()
    for name, value in scalars.items():
      self.sums[name] = self.sums.get(name, 0.0) + value * steps
    self.line_steps += steps
    self.summary_step, self.summary_time, self.last_scalars = step, now, scalars

  def _line(self, step, now):
    """`step N/M loss ..., ETA h:mm:ss`: the means since the last line; model.train_summary."""
    scalars = {name: total / max(self.line_steps, 1) for name, total in self.sums.items()}
    scalars["learning_rate"] = self.last_scalars["learning_rate"]
    if step > self.line_step and now > self.line_time:
      scalars["steps_per_second"] = (step - self.line_step) / (now - self.line_time)
      _add_rates(scalars, self.train_batch_size)
    rate = (step - self.origin_step) / (now - self.origin_time) if now > self.origin_time else 0
    eta = (self.num_train_steps - step) / rate if rate else 0
    logging.info("step %d/%d %s, ETA %s", step, self.num_train_steps,
                 ", ".join(f"{k} {v:.4g}" for k, v in scalars.items()),
                 progress_lib.format_duration(eta))
    self.state.model.train_summary = scalars
    self.sums, self.line_steps = {}, 0
    self.line_step, self.line_time = step, now

  def close(self):
    self.bar.close()
    self.writer.close()


def _add_rates(scalars, train_batch_size):
  """examples_per_second from steps_per_second, and X_per_second for every X_per_row (packed
  fine-tuning's examples_per_row gives the examples, not the rows, per second)."""
  if not train_batch_size:
    return
  rows = scalars["steps_per_second"] * train_batch_size
  scalars["examples_per_second"] = rows
  for name in [n for n in scalars if n.endswith(_PER_ROW)]:
    scalars[name[:-len(_PER_ROW)] + _PER_SECOND] = scalars[name] * rows


def run_summary(output_dir, start, written, global_step, trained_model=None, eval_results=None,
                figures=None):
  """The end of a training or evaluation run: writes curves.png, then logs the closing lines:
  the latest checkpoint (of a trained_model), `written` [(what, path or None)], TensorBoard and
  the curves; the step, the last training loss and accuracies and the eval figures (`figures`,
  {name: value}, else the headline ones of eval_results). start: the run's time.time() at its
  start."""
  train = read_scalars(os.path.join(output_dir, "train"))
  curves = plot_curves(output_dir, train)
  shown = {"global_step": global_step}
  # The loss (and accuracies) of the run's last `step N/M loss ...` line (the means since the
  # line before it), the same figures; a run that trained no step here has only the event files'
  # last point.
  last_line = getattr(trained_model, "train_summary", None) or {}
  if "loss" in last_line:
    shown["final training loss"] = last_line["loss"]
  elif trained_model is not None and train.get("loss"):
    shown["last logged training loss"] = train["loss"][-1][1]
  shown.update((f"final training {name}", value) for name, value in last_line.items()
               if "accuracy" in name)
  shown.update(progress_lib.headline(eval_results) if figures is None else figures)
  checkpoint = tf_checkpoint.latest_checkpoint(output_dir) if trained_model is not None else None
  return progress_lib.summary(
      f"Finished in {progress_lib.format_duration(time.time() - start)}",
      [("checkpoint", checkpoint)] + list(written) + [
          ("TensorBoard", f"tensorboard --logdir={output_dir}" if curves else None),
          ("curves", curves)], shown)


def write_eval_scalars(output_dir, results, step, writer=None):
  """The numeric results (but global_step) as TensorBoard scalars in output_dir/eval at `step`;
  through `writer` (flushed, left open) when given: evaluations during training share one."""
  own = writer is None
  if own:
    writer = tf.summary.create_file_writer(os.path.join(output_dir, "eval"))
  with writer.as_default():
    for name, value in sorted(results.items()):
      if name != "global_step" and isinstance(value, (int, float)) and math.isfinite(value):
        tf.summary.scalar(name, float(value), step=int(step))
  if own:
    writer.close()
  else:
    writer.flush()


def read_scalars(log_dir):
  """{tag: [(step, value)] sorted by step} from every event file in log_dir; where a resumed run
  logged a step again, the later value wins."""
  by_tag = {}
  for path in sorted(tf.io.gfile.glob(os.path.join(log_dir, "events.out.tfevents.*"))):
    try:
      for record in tf.data.TFRecordDataset(path):
        event = tf.compat.v1.Event.FromString(record.numpy())
        for value in event.summary.value:
          number = (float(tf.make_ndarray(value.tensor)) if value.HasField("tensor")
                    else value.simple_value)
          by_tag.setdefault(value.tag, {})[event.step] = (event.wall_time, number)
    except tf.errors.DataLossError:  # a file cut short by a killed run: keep what was read
      logging.warning("%s: truncated event file, read up to where it ends", path)
  return {tag: sorted((step, v) for step, (_, v) in points.items())
          for tag, points in by_tag.items()}


def _panel_name(tag):
  return tag[len("eval_"):] if tag.startswith("eval_") else tag


def _panels(train, evaluation):
  """([(title, train points or None, eval points or None)], {eval tag: [(step, value)]}): the
  loss and learning rate first, an eval metric in the panel of the train metric of its name
  (without eval_); of the eval metrics, the headline ones. An eval metric with no train curve and
  a single point (no --eval_every_n_steps) gets no panel: it goes to the second value, a table."""
  evaluation = {tag: evaluation[tag] for tag in progress_lib.headline(
      {tag: 0.0 for tag in evaluation}, limit=6)}
  singles = {tag: points for tag, points in evaluation.items()
             if len(points) == 1 and _panel_name(tag) not in train}
  evaluation = {tag: points for tag, points in evaluation.items() if tag not in singles}
  order = sorted((t for t in train if t not in _NOT_PLOTTED and not t.endswith(_PER_SECOND)),
                 key=lambda t: ({"loss": 0, "learning_rate": 1}.get(t, 2), t))
  panels = {tag: [train[tag], None] for tag in order}
  for tag in sorted(evaluation):
    if tag in _NOT_PLOTTED or tag.endswith(_PER_SECOND):
      continue
    name = _panel_name(tag)
    panels.setdefault(name if name in panels else tag, [None, None])[1] = evaluation[tag]
  return [(title, t, e) for title, (t, e) in panels.items()][:_MAX_PANELS - bool(singles)], singles


def smoothed(values, points_per_span=10):
  """An exponential moving average of `values` (bias-corrected from the first value), spanning
  about len(values) / points_per_span points: the trend of a noisy loss."""
  alpha = 2.0 / (max(1, len(values) // points_per_span) + 1)
  out, mean, weight = [], 0.0, 0.0
  for value in values:
    mean = (1 - alpha) * mean + alpha * value
    weight = (1 - alpha) * weight + alpha
    out.append(mean / weight)
  return out


def _plot_train(axes, title, points):
  """The train series: raw; past 20 points (not the learning rate, which is smooth), the raw
  line lighter under its moving average."""
  steps, values = zip(*points)
  if len(points) < 20 or title == "learning_rate":
    axes.plot(steps, values, label="train", linewidth=1)
    return
  axes.plot(steps, values, color="tab:blue", alpha=0.3, linewidth=1, label="train")
  axes.plot(steps, smoothed(values), color="tab:blue", linewidth=1.5, label="train (smoothed)")


def _plot_table(axes, singles):
  """Eval metrics of a single point, as text: `name  value  (step N)`."""
  axes.axis("off")
  axes.set_title("eval")
  order = progress_lib.headline({tag: 0.0 for tag in singles}, limit=len(singles))
  lines = [f"{tag}  {singles[tag][0][1]:.4g}  (step {singles[tag][0][0]})" for tag in order]
  axes.text(0.02, 0.95, "\n".join(lines), va="top", ha="left", family="monospace",
            fontsize="small", transform=axes.transAxes)


def plot_curves(output_dir, train=None):
  """Writes output_dir/curves.png (atomically) from the event files of output_dir/train (or the
  read_scalars of them, `train`) and output_dir/eval; returns its path, or None when there is
  nothing to plot or no matplotlib."""
  path = os.path.join(output_dir, CURVES_FILE)
  if train is None:
    train = read_scalars(os.path.join(output_dir, "train"))
  panels, singles = _panels(train, read_scalars(os.path.join(output_dir, "eval")))
  if not panels and not singles:
    return None
  try:
    # pylint: disable=g-import-not-at-top
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # Agg: no display needed
    from matplotlib.figure import Figure
  except ImportError:
    logging.warning("matplotlib is not installed: no %s", path)
    return None
  count = len(panels) + bool(singles)
  cols = min(3, count)
  rows = math.ceil(count / cols)
  figure = Figure(figsize=(4.5 * cols, 3.2 * rows), layout="constrained")
  FigureCanvasAgg(figure)
  for i, (title, train, evaluation) in enumerate(panels):
    axes = figure.add_subplot(rows, cols, i + 1)
    if train:
      _plot_train(axes, title, train)
    if evaluation:
      axes.plot(*zip(*evaluation), "o-" if len(evaluation) > 1 else "o", color="tab:red",
                label="eval")
    if (train and evaluation) or (train and len(train) >= 20 and title != "learning_rate"):
      axes.legend(fontsize="small")
    axes.set_title(title)
    axes.set_xlabel("step")
    axes.grid(alpha=0.3)
  if singles:
    _plot_table(figure.add_subplot(rows, cols, count), singles)
  figure.suptitle(output_dir, fontsize="small")
  with fileio.atomic_output(path) as tmp:
    with fileio.open_file(tmp, "wb") as f:
      figure.savefig(f, format="png", dpi=80)
  return path
