"""Progress a person can read while long work runs, and the summary that ends every run.

  progress = Progress("training", total=1000, unit="steps")
  progress.update(250, "loss 2.31")
  # training: 250/1000 steps (25%), 3.1 steps/s, ETA 0:04:02, 0:01:20 elapsed, loss 2.31
  progress.close()

On a terminal (stderr is a TTY) the line is a live bar redrawn in place (at most every
TTY_SECONDS); into a file it is an absl log line at most every `seconds` seconds (None: never), so
a batch job's log gets a line every 30 s, not one per step. maybe_log(message_fn) is the free-form
form the data phases use (message_fn(elapsed seconds) -> text).

summary(title, written, figures) logs the closing lines of a run: what it wrote, where, and its
headline figures.

No TensorFlow here: create_pretraining_data runs without it.
"""
import fnmatch
import logging as std_logging
import multiprocessing
import os
import sys
import time

from absl import logging

# Seconds between log lines when the output is a file (the data phases' --progress_seconds).
LOG_SECONDS = 30
# Seconds between redraws of a terminal's bar.
TTY_SECONDS = 0.25
_BAR_WIDTH = 20


def format_duration(seconds):
  """0:04:02, or 1d 2:03:04 past a day."""
  seconds = int(max(seconds, 0) + 0.5)
  days, seconds = divmod(seconds, 86400)
  text = f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
  return f"{days}d {text}" if days else text


def format_rate(rate):
  """1,234 or 12.3 or 1.23: three significant digits, no exponent."""
  return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


def is_tty(stream):
  """Whether `stream` is a terminal of this, the main, process (workers' bars would fight)."""
  try:
    return (stream.isatty() and multiprocessing.current_process().name == "MainProcess")
  except (AttributeError, ValueError):
    return False


class _ClearLine(std_logging.Filter):
  """Clears the live bar before a log record is written to the same terminal."""

  def __init__(self, progress):
    super().__init__()
    self.progress = progress

  def filter(self, record):
    self.progress.clear()
    return True


class Progress:
  """Done/total, rate and time left of one phase, on a terminal or in the log (module docstring).

  clock and stream (default: time.monotonic, sys.stderr) are there for tests; tty defaults to
  whether the stream is a terminal.
  """

  def __init__(self, phase, total=None, unit="steps", seconds=LOG_SECONDS, start=0, stream=None,
               clock=time.monotonic, tty=None):
    self.phase, self.total, self.unit, self.seconds = phase, total, unit, seconds
    self.stream = stream or sys.stderr
    self.tty = is_tty(self.stream) if tty is None else tty
    self.clock = clock
    self.start_time = self.last_time = clock()
    self.start_done = self.done = start
    self.extra = None
    self.shown = False  # a bar is on the terminal's current line
    self._filter = None
    if self.tty and seconds is not None:
      self._filter = _ClearLine(self)
      logging.get_absl_handler().addFilter(self._filter)

  def elapsed(self):
    return self.clock() - self.start_time

  def rate(self):
    """Units per second since the start (None before any time has passed)."""
    elapsed = self.elapsed()
    return (self.done - self.start_done) / elapsed if elapsed > 0 else None

  def text(self, extra=None):
    """`phase: done/total unit (pct%), rate unit/s, ETA h:mm:ss, extra`."""
    rate = self.rate()
    parts = [f"{self.done}/{self.total} {self.unit} ({100 * self.done / max(self.total, 1):.0f}%)"
             if self.total else f"{self.done} {self.unit}"]
    if rate:
      parts.append(f"{format_rate(rate)} {self.unit}/s")
      if self.total:
        parts.append(f"ETA {format_duration((self.total - self.done) / rate)}")
    parts.append(f"{format_duration(self.elapsed())} elapsed")
    if extra:
      parts.append(extra)
    return f"{self.phase}: " + ", ".join(parts)

  def update(self, done, extra=None, force=False):
    """Records `done` units; shows the line if it is time to (always with force)."""
    self.done = done
    self.extra = extra
    self._show(lambda: self.text(extra), force)

  def maybe_log(self, message_fn):
    """Shows `phase: message_fn(elapsed) (elapsed)` if it is time to."""
    self._show(lambda: f"{self.phase}: {message_fn(self.elapsed())} "
                       f"({format_duration(self.elapsed())})", False)

  def _show(self, line_fn, force):
    if self.seconds is None:
      return
    now = self.clock()
    if not force and now - self.last_time < (TTY_SECONDS if self.tty else self.seconds):
      return
    self.last_time = now
    if self.tty:
      line = line_fn()
      if self.total:
        filled = int(_BAR_WIDTH * min(self.done / self.total, 1))
        line = f"[{'#' * filled}{'.' * (_BAR_WIDTH - filled)}] {line}"
      self.stream.write("\r" + line + "\x1b[K")
      self.stream.flush()
      self.shown = True
    else:
      logging.info("%s", line_fn())

  def clear(self):
    """Removes the bar from the terminal (before other output)."""
    if self.shown:
      self.stream.write("\r\x1b[K")
      self.stream.flush()
      self.shown = False

  def close(self, extra=None):
    """Ends the phase: on a terminal the bar's last state stays on its own line."""
    if self.tty and self.seconds is not None:
      self.update(self.done, extra or self.extra, force=True)
      self.stream.write("\n")
      self.stream.flush()
      self.shown = False
    if self._filter is not None:
      logging.get_absl_handler().removeFilter(self._filter)
      self._filter = None

  def __enter__(self):
    return self

  def __exit__(self, *unused_exc_info):
    self.close()


def format_figure(value):
  if isinstance(value, float):
    return f"{value:.4g}"
  if isinstance(value, int) and not isinstance(value, bool):
    return f"{value:,}"
  return str(value)


def summary_lines(title, written=(), figures=None):
  """The closing lines: `title`, one `  <what>: <path>` per written thing, then the figures as
  `  name = value` lines."""
  lines = [f"***** {title} *****"]
  width = max([len(what) for what, _ in written] + [0])
  for what, path in written:
    if path:
      lines.append(f"  {what + ':':<{width + 1}} {path}")
  for name, value in (figures or {}).items():
    if value is not None:
      lines.append(f"  {name} = {format_figure(value)}")
  return lines


def new_files(directory, since, skip=()):
  """The names of the files directly in a local `directory` modified at or after `since` (a
  time.time()), sorted, but those matching a glob pattern of `skip` or being written (.tmp-)."""
  if "://" in directory or not os.path.isdir(directory):
    return []
  names = []
  for entry in os.scandir(directory):
    if (entry.is_file() and entry.stat().st_mtime >= since and ".tmp-" not in entry.name and
        not any(fnmatch.fnmatch(entry.name, pattern) for pattern in skip)):
      names.append(entry.name)
  return sorted(names)


def summary(title, written=(), figures=None):
  """Logs summary_lines(...) at INFO; returns them."""
  lines = summary_lines(title, written, figures)
  for line in lines:
    logging.info("%s", line)
  return lines


def headline(results, limit=8):
  """The figures of an evaluation worth a summary line: accuracy, F1, exact match, correlations
  and loss first (overall before per-type), at most `limit` of them; never global_step."""
  order = ("accuracy", "f1", "exact", "mcc", "pearson", "spearman", "loss")

  def rank(name):  # eval_f1 before eval_PER_f1
    group = next((i for i, word in enumerate(order) if word in name.lower()), len(order))
    return group, name.count("_"), name

  names = sorted((name for name, value in (results or {}).items()
                  if name != "global_step" and isinstance(value, (int, float))), key=rank)
  return {name: results[name] for name in names[:limit]}
