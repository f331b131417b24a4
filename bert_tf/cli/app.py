"""What every top-level script shares: absl start-up that turns bad input into one line and exit 1."""
import os
import re
import signal
import sys

from absl import app
from absl import logging

from bert_tf.cli import flag_errors
from bert_tf.cli import flags as bert_flags
from bert_tf.errors import BertTfError
from bert_tf.errors import op_message
from bert_tf.io import fileio
from bert_tf.training import interrupts
from bert_tf.io import terminal

# TensorFlow errors that come from the user's files and directories, not from a bug: one line each.
_TF_FILE_ERRORS = {
    "DataLossError": "a file is corrupt or truncated",
    "PermissionDeniedError": "permission denied",
    "FailedPreconditionError": "cannot use a file or directory",
    "NotFoundError": "not found",
    "AlreadyExistsError": "already exists",
    "ResourceExhaustedError": "out of memory or disk (lower the batch size?)",
}


def _one_line(error):
  """`error: ...` for the errors a user's input or disk causes; None for any other (a bug)."""
  if isinstance(error, BertTfError):
    return f"error: {error}"
  if fileio.is_disk_full(error):
    return f"error: {fileio.disk_full_error(_disk_full_where(error))}"
  if isinstance(error, OSError) and error.strerror:
    where = f"{error.filename}: " if error.filename else ""
    return f"error: {where}{error.strerror}"
  tf = sys.modules.get("tensorflow")
  peers = sys.modules.get("bert_tf.training.peers")  # loaded where a run has workers
  lost = peers and peers.lost_peer(error)
  if lost:
    return f"error: {lost}"
  if tf is not None and isinstance(error, tf.errors.OpError):
    what = _TF_FILE_ERRORS.get(type(error).__name__)
    if what:
      return f"error: {what}: {op_message(error.message) or type(error).__name__}"
  return None


# What a writer adds to the path it was asked to write (temporary names, checkpoint shards, a
# SavedModel's variables), removed in that order to name that path.
_WRITER_SUFFIXES = (r"\.tempstate\d+$", r"_temp/part-\d+-of-\d+\.(data|index).*$",
                    r"\.tmp-\d+.*$", r"\.(data-\d+-of-\d+|index)$", r"/variables/variables$")


def _disk_full_where(error):
  """The path a full disk stopped (from the error), else the output flags the run was given."""
  path = getattr(error, "filename", None)
  if not path:
    named = re.search(r"(\S+?)[;:,]? (?:No space left|File too large|Disk quota)",
                      str(getattr(error, "message", "") or ""))
    path = named.group(1) if named and os.path.sep in named.group(1) else None
  if not path:
    return ", ".join(f"{flag}={value}" for flag, value in bert_flags.outputs_given()) or "writing"
  for suffix in _WRITER_SUFFIXES:
    path = re.sub(suffix, "", str(path))
  return path.rstrip("/") or "/"


def _stopped(how):
  """The one line of a run stopped by Ctrl-C or SIGTERM (`how`: "interrupted", "terminated"):
  what it keeps."""
  kept = []
  tf = sys.modules.get("tensorflow")
  for flag, value in bert_flags.outputs_given():
    checkpoint = None
    if flag == "--output_dir" and tf is not None and os.path.isdir(value):
      from bert_tf.model.formats import tf_checkpoint  # pylint: disable=g-import-not-at-top  (TensorFlow's)
      checkpoint = tf_checkpoint.latest_checkpoint(value)
    if checkpoint:
      kept.append(f"the latest checkpoint, {checkpoint}, is kept (a rerun resumes from it)")
    elif fileio.exists(value) or fileio.glob(f"{value}-*-of-*"):
      kept.append(f"what {flag}={value} holds is kept")
    else:
      kept.append(f"nothing was written to {flag}={value}")
  return f"{how}: {'; '.join(kept + ['nothing half-written is left'])}"


def _warn_repeated_flags(argv):
  for name, given in bert_flags.repeated_flags(argv):
    print(f"warning: --{name} is given {len(given)} times ({', '.join(given)}): using the last, "
          f"{given[-1]}", file=sys.stderr)


class Terminated(SystemExit):
  """SIGTERM as an exception (a SystemExit of status 128 + SIGTERM, as a killed process's)."""


# What bert_tf.io.terminal set up for the run (its relay of TensorFlow's C++ log), while run() runs.
_session = None


def _last_line(line):
  """Prints the run's closing `error:` or `interrupted:` line after everything TensorFlow wrote
  before it: the relay is drained first."""
  terminal.stop(_session)
  print(line, file=sys.stderr)


def _terminate(signum, unused_frame):
  """SIGTERM as an exception, so that every cleanup runs (temporary files, spool directories,
  worker processes) before the process ends with status 128 + SIGTERM, as a killed one."""
  raise Terminated(128 + signum)


_HOW = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}


def _stop_starting(signum, unused_frame):
  os.write(2, f"{_HOW[signum]}: stopped while starting: nothing was written\n".encode())
  os._exit(128 + signum)  # pylint: disable=protected-access  (nothing to clean up yet)


def catch_startup_signals():
  """Called by every script before its imports that load TensorFlow (seconds): Ctrl-C or SIGTERM
  meanwhile prints one line and exits with 130 or 143, not a traceback of the import it cut.
  run() takes over once main starts. A signal the process was started ignoring stays ignored."""
  for signum in _HOW:
    if signal.getsignal(signum) in (signal.default_int_handler, signal.SIG_DFL):
      signal.signal(signum, _stop_starting)
  # Never lost: one raised in a weakref callback or a __del__ is raised again where it can be.
  interrupts.redeliver_swallowed({KeyboardInterrupt: signal.SIGINT, Terminated: signal.SIGTERM})


def _take_over_signals():
  """From start-up's handlers to main's: Ctrl-C raises KeyboardInterrupt, SIGTERM Terminated."""
  if signal.getsignal(signal.SIGINT) is _stop_starting:
    signal.signal(signal.SIGINT, signal.default_int_handler)
  if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
    signal.signal(signal.SIGTERM, _terminate)


def run(main):
  """absl.app.run(main), but an error from bad input or an unusable file (BertTfError, OSError,
  TensorFlow's DataLossError, PermissionDeniedError, ...) prints `error: <message>` and exits
  with status 1 (a full disk names the file or output flag); any other exception keeps its
  traceback. Ctrl-C prints one line `interrupted: ...` saying what was kept and exits with 130;
  SIGTERM unwinds the same way (what the run was writing is removed, what it had finished stays)
  and prints `terminated: ...`, exit status 143.
  A gs:// path in a flag is checked to be reachable first; a flag given twice with two values is
  warned about (absl takes the last, as the original did). A flag absl cannot parse is one
  `error:` line too (cli.flag_errors). Log lines read as bert_tf.io.terminal says (TensorFlow's
  chatter hidden; -v shows everything)."""

  def guarded_main(argv):
    _take_over_signals()
    interrupts.redeliver_swallowed({KeyboardInterrupt: signal.SIGINT, Terminated: signal.SIGTERM})
    try:
      for flag, url in bert_flags.urls_given():
        fileio.check_reachable(url, flag)
      return main(argv)
    except (KeyboardInterrupt, Terminated) as e:
      how = "terminated" if isinstance(e, Terminated) else "interrupted"
      for signum in _HOW:  # a second signal must not cut the line short
        signal.signal(signum, signal.SIG_IGN)
      logging.flush()
      try:
        line = _stopped(how)
      except Exception:  # pylint: disable=broad-except  (an unreadable output: say less)
        line = f"{how}: nothing half-written is left"
      _last_line(line)
      sys.exit(e.code if isinstance(e, Terminated) else 130)
    except Exception as e:  # pylint: disable=broad-except
      line = _one_line(e)
      if line is None:
        raise
      logging.flush()
      _last_line(line)
      sys.exit(1)

  bert_flags.use_grouped_help()
  sys.argv[:] = terminal.normalized_argv(sys.argv)
  _warn_repeated_flags(sys.argv)
  global _session
  _session = terminal.start(sys.argv)
  try:
    app.run(guarded_main, flags_parser=flag_errors.parse)
  finally:
    terminal.stop(_session)
