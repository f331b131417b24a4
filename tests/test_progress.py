"""bert_tf.io.progress: the live bar on a terminal, a line every N seconds into a file, the closing
summary; bert_tf.training.scalars: eval scalars, curves.png."""
import io
import os
import types

from absl import logging
import pytest

from bert_tf.io import progress
from bert_tf.training import scalars


class Clock:

  def __init__(self):
    self.now = 1000.0

  def __call__(self):
    return self.now


@pytest.fixture
def info_lines(monkeypatch):
  lines = []
  monkeypatch.setattr(logging, "info", lambda fmt, *args: lines.append(fmt % args))
  return lines


def test_file_mode_logs_at_most_one_line_per_interval(info_lines):
  clock = Clock()
  shown = progress.Progress("training", total=100, unit="steps", seconds=30, clock=clock,
                            stream=io.StringIO(), tty=False)
  for step in range(1, 101):
    clock.now += 1  # one step a second: 100 s in all
    shown.update(step)
  shown.close()
  # 100 s at one line per 30 s: the lines at 30, 60 and 90 s, nothing on the stream.
  assert len(info_lines) == 3, info_lines
  assert shown.stream.getvalue() == ""
  assert info_lines[0] == ("training: 30/100 steps (30%), 1 steps/s, ETA 0:01:10, "
                           "0:00:30 elapsed")


def test_tty_mode_redraws_one_line_in_place(info_lines):
  clock = Clock()
  stream = io.StringIO()
  shown = progress.Progress("predicting", total=4, unit="batches", clock=clock, stream=stream,
                            tty=True)
  for batch in range(1, 5):
    clock.now += 2
    shown.update(batch, "loss 1.5")
  shown.close()
  text = stream.getvalue()
  assert not info_lines
  assert text.count("\r") >= 4 and text.count("\n") == 1 and text.endswith("\n")
  last = text.rstrip("\n").split("\r")[-1]
  assert last.startswith("[####################] predicting: 4/4 batches (100%), 0.5 batches/s")
  assert "loss 1.5" in last and "ETA 0:00:00" in last


def test_no_total_no_eta():
  clock = Clock()
  shown = progress.Progress("evaluating", unit="batches", clock=clock, tty=False, seconds=None)
  clock.now += 40
  shown.update(8)
  assert shown.text() == "evaluating: 8 batches, 0.2 batches/s, 0:00:40 elapsed"


def test_seconds_none_is_silent(info_lines):
  stream = io.StringIO()
  shown = progress.Progress("writing", total=3, seconds=None, stream=stream, tty=True)
  shown.update(3, force=True)
  shown.maybe_log(lambda s: "x")
  shown.close()
  assert not info_lines and stream.getvalue() == ""


def test_format_duration_and_rate():
  assert progress.format_duration(3725.4) == "1:02:05"
  assert progress.format_duration(90000) == "1d 1:00:00"
  assert progress.format_rate(1234.5) == "1,234" and progress.format_rate(12.34) == "12.3"


def test_summary_names_what_was_written_and_the_figures(info_lines):
  lines = progress.summary("run_classifier finished", [
      ("checkpoint", "/out/ckpt-3"), ("eval results", "/out/eval_results.txt"),
      ("not written", None)], {"eval_accuracy": 0.8125, "steps": 12000, "missing": None})
  assert lines == info_lines
  assert lines == ["***** run_classifier finished *****",
                   "  checkpoint:   /out/ckpt-3",
                   "  eval results: /out/eval_results.txt",
                   "  eval_accuracy = 0.8125",
                   "  steps = 12,000"]


def test_headline_puts_accuracy_and_f1_first_and_drops_global_step():
  results = {"global_step": 7, "eval_loss": 0.5, "zeta": 1.0, "eval_f1": 0.7,
             "eval_accuracy": 0.8, "name": "x", "eval_LOC_f1": 0.6}
  assert list(progress.headline(results)) == ["eval_accuracy", "eval_f1", "eval_LOC_f1",
                                              "eval_loss", "zeta"]
  assert list(progress.headline(results, limit=2)) == ["eval_accuracy", "eval_f1"]


def test_new_files_lists_what_a_run_wrote(tmp_path):
  old, new = tmp_path / "old.txt", tmp_path / "eval_results.txt"
  old.write_text("x")
  os.utime(old, (1000, 1000))
  for name in ("eval_results.txt", "ckpt-3.index", "x.tmp-12"):
    (tmp_path / name).write_text("x")
  (tmp_path / "train").mkdir()
  assert new.exists()
  assert progress.new_files(str(tmp_path), 2000, skip=("*.index",)) == ["eval_results.txt"]


class _Value:

  def __init__(self, value):
    self.value = value

  def numpy(self):
    return self.value


class _FakeTrainState:
  """What scalars.TrainLog reads of bert_tf.training.loop's _TrainState."""

  def __init__(self):
    self.optimizer = types.SimpleNamespace(iterations=_Value(0))
    self.inner_optimizer = types.SimpleNamespace(learning_rate=_Value(1e-4))
    self.model = types.SimpleNamespace()

  def read_and_reset_metrics(self):
    return {"loss": 2.0, "accuracy": 0.5}


def _train(log, clock, chunks, step_seconds=0.5, first_seconds=60):
  """Runs `chunks` chunks as the training loop does; returns the chunk sizes."""
  sizes, step = [], 0
  for _ in range(chunks):
    n = log.chunk_size(step, 10**9)
    clock.now += first_seconds if step == 0 else n * step_seconds
    step += n
    log.after_chunk(step)
    sizes.append(n)
  return sizes


def test_train_log_sizes_chunks_and_logs_by_time(tmp_path, info_lines):
  clock = Clock()
  log = scalars.TrainLog(_FakeTrainState(), str(tmp_path), num_train_steps=100_000,
                         log_steps=100_000, clock=clock)
  log.bar.tty = False
  sizes = _train(log, clock, 12)
  log.close()
  # One step to trace, one to measure, then 10 s worth (20 steps at 0.5 s) per chunk.
  assert sizes == [1, 1] + [20] * 10
  lines = [line for line in info_lines if line.startswith("step ")]
  assert not [line for line in info_lines if line.startswith("training:")]  # no second kind
  # 100.5 s after the first step: a line (and a TensorBoard point) every 30 s, not per chunk.
  assert len(lines) == 3, info_lines
  assert lines[0].startswith("step 62/100000 loss 2, learning_rate 0.0001, steps_per_second")
  assert "accuracy 0.5" in lines[0] and "ETA 13:52:49" in lines[0]  # 99,938 steps at 2/s
  points = scalars.read_scalars(str(tmp_path / "train"))
  # ... the first point after the first step (which took 60 s to trace), then every 30 s.
  assert [step for step, _ in points["loss"]] == [1, 62, 122, 182]
  assert "tensorboard --logdir=" in info_lines[0]


def test_train_log_without_time_for_multi_worker_runs(tmp_path, info_lines):
  clock = Clock()
  log = scalars.TrainLog(_FakeTrainState(), str(tmp_path), num_train_steps=500, log_steps=100,
                         clock=clock, timed=False)
  sizes = _train(log, clock, 5, step_seconds=100)
  log.close()
  # Every worker runs the same chunks: up to the next summary step (500 // CURVE_POINTS), never
  # sized by time; lines at log_steps only, however long the steps take.
  assert sizes == [1, 4, 5, 5, 5]
  assert not [line for line in info_lines if line.startswith("step ")]


def test_eval_scalars_and_curves_png(tmp_path):
  scalars.write_eval_scalars(str(tmp_path), {"eval_accuracy": 0.75, "global_step": 3,
                                             "eval_loss": float("nan"), "name": "x"}, 3)
  assert scalars.read_scalars(str(tmp_path / "eval")) == {"eval_accuracy": [(3, 0.75)]}
  path = scalars.plot_curves(str(tmp_path))
  assert path == str(tmp_path / "curves.png")
  assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert not [name for name in os.listdir(tmp_path) if ".tmp-" in name]
  assert scalars.plot_curves(str(tmp_path / "empty")) is None


def _write_train_scalars(output_dir, losses):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with tf.summary.create_file_writer(os.path.join(output_dir, "train")).as_default():
    for step, loss in enumerate(losses, 1):
      tf.summary.scalar("loss", loss, step=step)
      tf.summary.scalar("learning_rate", 1e-4, step=step)


def test_curves_put_single_eval_points_in_a_table_and_smooth_noisy_losses(tmp_path):
  losses = [2.0 - 0.01 * i + (0.5 if i % 2 else -0.5) for i in range(100)]  # noisy, falling
  _write_train_scalars(str(tmp_path), losses)
  # Without --eval_every_n_steps: one evaluation, at the end.
  scalars.write_eval_scalars(str(tmp_path), {"eval_accuracy": 0.75, "eval_f1": 0.625,
                                             "eval_loss": 0.5}, 100)
  panels, singles = scalars._panels(scalars.read_scalars(str(tmp_path / "train")),
                                    scalars.read_scalars(str(tmp_path / "eval")))
  # eval_loss joins the train loss's panel; accuracy and F1 have no curve: a table, no panels.
  assert [title for title, _, _ in panels] == ["loss", "learning_rate"]
  assert panels[0][2] == [(100, 0.5)]
  assert singles == {"eval_accuracy": [(100, 0.75)], "eval_f1": [(100, 0.625)]}
  assert scalars.plot_curves(str(tmp_path)) == str(tmp_path / "curves.png")
  # With evaluations during training, each metric has its own curve again.
  scalars.write_eval_scalars(str(tmp_path), {"eval_accuracy": 0.8, "eval_f1": 0.85}, 50)
  panels, singles = scalars._panels(scalars.read_scalars(str(tmp_path / "train")),
                                    scalars.read_scalars(str(tmp_path / "eval")))
  assert [title for title, _, _ in panels][2:] == ["eval_accuracy", "eval_f1"] and not singles
  # The moving average follows the trend and takes out the +-0.5 noise.
  smooth = scalars.smoothed(losses)
  assert smooth[0] == pytest.approx(losses[0]) and len(smooth) == len(losses)
  assert abs(smooth[-1] - (2.0 - 0.01 * 99)) < 0.3
  assert max(abs(a - b) for a, b in zip(smooth[50:], smooth[51:])) < 0.2


def test_summary_final_training_loss_is_the_last_step_lines(tmp_path, info_lines):
  _write_train_scalars(str(tmp_path), [3.0, 2.0, 1.0])  # the event files' last point: 1.0
  model = types.SimpleNamespace(train_summary={"loss": 1.5})  # the last step line's mean
  lines = scalars.run_summary(str(tmp_path), 0, [], 3, trained_model=model)
  assert "  final training loss = 1.5" in lines
  lines = scalars.run_summary(str(tmp_path), 0, [], 3, trained_model=types.SimpleNamespace())
  assert "  last logged training loss = 1" in lines
