"""bert_tf.progress: the live bar on a terminal, a line every N seconds into a file, the closing
summary; bert_tf.scalars: eval scalars, curves.png."""
import io
import os

from absl import logging
import pytest

from bert_tf import progress


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
