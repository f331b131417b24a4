"""What a script shows on the terminal: our log lines as a person reads them, TensorFlow's chatter
hidden, and all of it, in absl's full format, with -v (or --verbosity=1).

  session = terminal.start(sys.argv)   before the flags are parsed (bert_tf.cli.app.run)
  ...                                  the run
  terminal.stop(session)               at its end, whatever the end

Without -v:
  - our lines read `18:32:04 Saved checkpoint out/model.ckpt-20` (a warning
    `18:32:04 warning: ...`): absl's prefix (level, date, thread id, file:line) is for -v;
  - a record logged by other code than ours (TensorFlow's "Sharding callback duration", a
    SavedModel's "Found untraced functions", ...) is shown only from ERROR up;
  - TensorFlow's C++ log is filtered by bert_tf.io.native_log's relay (its INFO, WARNING and
    ERROR lines: "failed call to cuInit", "Compiled cluster using XLA!", ...), and
    TF_CPP_MIN_LOG_LEVEL defaults to 3 (bert_tf/__init__.py), so TensorFlow's own start-up lines
    are not written at all.
Python's own output (tracebacks, `error:` lines, progress bars, warnings) never goes through the
filter: Python's sys.stderr keeps the real stderr, only descriptor 2 (C++'s) is the relay's pipe.
What the relay passes (a FATAL line, a line in no log format) may come a moment after the Python
lines written around it; stop() drains it, so a run's closing `error:` line or traceback, written
after stop(), comes last.
"""
import io
import logging as std_logging
import os
import signal
import subprocess
import sys
import threading
import time

from absl import logging

from bert_tf.io import native_log

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Seconds stop() waits for the relay to copy what is left in the pipe.
_RELAY_SECONDS = 10


def normalized_argv(argv):
  """argv with a bare -v (or --v) as --verbosity=1, which absl's integer flag needs."""
  return [argv[0]] + ["--verbosity=1" if arg in ("-v", "--v") else arg for arg in argv[1:]]


class PlainFormatter(std_logging.Formatter):
  """`HH:MM:SS message`; a warning `HH:MM:SS warning: message`, an error `... error: ...`."""

  def format(self, record):
    stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
    kind = ("error: " if record.levelno >= std_logging.ERROR else
            "warning: " if record.levelno >= std_logging.WARNING else "")
    text = record.getMessage()
    if record.exc_info:
      text += "\n" + self.formatException(record.exc_info)
    return f"{stamp} {kind}{text}"


class OursOnly(std_logging.Filter):
  """Lets through every record of bert_tf and of the script being run, and other code's from
  ERROR up."""

  def __init__(self, main_script=None):
    super().__init__()
    self.ours = [_PACKAGE + os.sep]
    if main_script:
      self.ours.append(os.path.dirname(os.path.abspath(main_script)) + os.sep)

  def filter(self, record):
    return record.levelno >= std_logging.ERROR or any(
        os.path.abspath(record.pathname).startswith(path) for path in self.ours)


class Session:
  """What start() changed, for stop() to put back."""

  def __init__(self):
    self.filters = []       # (handler, filter)
    self.formatter = None   # the absl handler's, replaced
    self.stderr = None      # Python's sys.stderr before the relay
    self.saved_fd = None    # a copy of the real stderr (descriptor 2 before the relay)
    self.relay = None       # the relay's subprocess.Popen


def start(argv):
  """Sets the terminal up for a script run with `argv` (module docstring); returns the Session.
  With -v it changes nothing."""
  session = Session()
  if native_log.verbose_requested(argv):
    return session
  handler = logging.get_absl_handler()
  session.formatter = handler.python_handler.formatter
  handler.setFormatter(PlainFormatter())
  ours = OursOnly(argv[0] if argv else None)
  for target in [handler] + _other_stderr_handlers():
    target.addFilter(ours)
    session.filters.append((target, ours))
  _start_relay(session)
  return session


def _other_stderr_handlers():
  """Handlers other than absl's that write to stderr: TensorFlow adds one to its logger when it is
  imported before absl's handler is in place."""
  found = []
  for logger in [std_logging.getLogger()] + [std_logging.getLogger(name) for name in
                                             list(std_logging.root.manager.loggerDict)]:
    for h in getattr(logger, "handlers", ()):
      if (isinstance(h, std_logging.StreamHandler) and h is not logging.get_absl_handler()
          and getattr(h, "stream", None) in (sys.stderr, sys.__stderr__)):
        found.append(h)
  return found


def _start_relay(session):
  """Points descriptor 2 at native_log's relay, Python's sys.stderr at a copy of the real one.
  Nothing changes where that cannot be done (no fork, a closed stderr, a thread's call)."""
  if os.name != "posix" or threading.current_thread() is not threading.main_thread():
    return
  try:
    sys.stderr.flush()
    saved = os.dup(2)
  except (OSError, ValueError, AttributeError):
    return
  read_end, write_end = os.pipe()
  previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited: Ctrl-C is the script's
  try:
    session.relay = subprocess.Popen(
        [sys.executable, "-I", "-S", native_log.__file__], stdin=read_end, stdout=saved,
        stderr=saved, close_fds=True)
  except OSError:
    os.close(saved)
    return
  finally:
    signal.signal(signal.SIGINT, previous)
    os.close(read_end)
  os.dup2(write_end, 2)
  os.close(write_end)
  session.saved_fd = saved
  session.stderr = sys.stderr
  sys.stderr = _text_stream(saved, sys.stderr)
  _point_absl_at(sys.stderr)


def _text_stream(fd, like):
  """A text stream on `fd` as Python's own stderr is: line-buffered, backslashreplace."""
  return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False),
                          encoding=getattr(like, "encoding", None) or "utf-8",
                          errors="backslashreplace", line_buffering=True, write_through=True)


def _point_absl_at(stream):
  """absl writes a record twice when its stream is not sys.stderr: it follows sys.stderr."""
  handler = logging.get_absl_handler().python_handler
  handler.acquire()
  try:
    handler.stream = stream
  finally:
    handler.release()


def stop(session):
  """Puts back what start() changed; waits (a few seconds at most) for the relay to copy what
  TensorFlow wrote last."""
  if session is None:
    return
  for target, ours in session.filters:
    target.removeFilter(ours)
  session.filters = []
  if session.formatter is not None:
    logging.get_absl_handler().setFormatter(session.formatter)
    session.formatter = None
  if session.relay is None:
    return
  try:
    sys.stderr.flush()
  except (OSError, ValueError):
    pass
  os.dup2(session.saved_fd, 2)  # closes this process's end of the pipe
  sys.stderr = session.stderr
  _point_absl_at(sys.stderr)
  try:
    session.relay.wait(timeout=_RELAY_SECONDS)
  except subprocess.TimeoutExpired:
    pass  # a process started by the run still holds the pipe: the relay ends with it
  session.relay = None
