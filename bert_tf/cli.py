"""What every top-level script shares: absl start-up that turns bad input into one line and exit 1."""
import signal
import sys

from absl import app
from absl import logging

from bert_tf import flags as bert_flags
from bert_tf.errors import BertTfError

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
  if isinstance(error, OSError) and error.strerror:
    where = f"{error.filename}: " if error.filename else ""
    return f"error: {where}{error.strerror}"
  tf = sys.modules.get("tensorflow")
  if tf is not None and isinstance(error, tf.errors.OpError):
    what = _TF_FILE_ERRORS.get(type(error).__name__)
    if what:
      message = (error.message or "").strip().splitlines()
      return f"error: {what}: {message[0] if message else type(error).__name__}"
  return None


def _terminate(signum, unused_frame):
  """SIGTERM as an exception, so that every cleanup runs (temporary files, spool directories,
  worker processes) before the process ends with status 128 + SIGTERM, as a killed one."""
  raise SystemExit(128 + signum)


def run(main):
  """absl.app.run(main), but an error from bad input or an unusable file (BertTfError, OSError,
  TensorFlow's DataLossError, PermissionDeniedError, ...) prints `error: <message>` and exits
  with status 1; any other exception keeps its traceback. SIGTERM unwinds like Ctrl-C: what the
  run was writing is removed, what it had finished stays."""

  def guarded_main(argv):
    signal.signal(signal.SIGTERM, _terminate)
    try:
      return main(argv)
    except Exception as e:  # pylint: disable=broad-except
      line = _one_line(e)
      if line is None:
        raise
      logging.flush()
      print(line, file=sys.stderr)
      sys.exit(1)

  bert_flags.use_grouped_help()
  app.run(guarded_main)
