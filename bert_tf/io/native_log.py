"""TensorFlow's native (C++) log on a script's stderr: which lines are its chatter, and the relay
that keeps them off the terminal unless the user asks for them (-v / --verbosity=1).

TensorFlow's C++ code writes to file descriptor 2 directly, in two formats:

  YYYY-MM-DD hh:mm:ss.ffffff: I external/local_xla/xla/tsl/cuda/cudart_stub.cc:31] Could not find ...
  I0000 00:00:1795804343.684277   12974 device_compiler.h:196] Compiled cluster using XLA! ...

The first (TensorFlow's own logging) obeys TF_CPP_MIN_LOG_LEVEL, read once when TensorFlow loads;
the second (absl's C++ logging, which XLA, the CUDA probe and oneDNN use) does not, nor does the
"WARNING: All log messages before absl::InitializeLog() ..." line it starts with. So a script
points descriptor 2 at a pipe whose reader, this module run as its own small process
(`python -I -S native_log.py`), copies every line to the real stderr but those: an INFO, WARNING or
ERROR line of a C++ file. A FATAL line (what precedes a crash), a Python traceback, faulthandler's
dump and anything not in those formats pass; a log line of a .py file (absl's Python format, as a
child process may write) passes too. TensorFlow's errors reach the user as Python exceptions: the
ERROR lines it logs beside them ("failed call to cuInit", "oneDNN supports DT_INT64 only on
platforms with AVX-512") are start-up probes on a healthy run.

The relay is a process, not a thread, so that it outlives a crash of the script and still copies
the crash's last words. Standard library only: it starts without site-packages (-I -S).
"""
import os
import re
import select
import signal
import sys

# TensorFlow's own C++ log format and absl's, of a C++ source file; group "level" is I/W/E/F.
_CPP_FILE = r"[\w./+-]+\.(?:cc|h|cpp|hpp|c|cu):\d+\]"
NATIVE_LINE = re.compile(
    rb"^(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: (?P<level>[IWEF]) " + _CPP_FILE.encode() +
    rb"|(?P<absl_level>[IWEF])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ " + _CPP_FILE.encode() + rb")")
# Lines of TensorFlow's chatter that are not log records themselves.
CHATTER = (b"WARNING: All log messages before absl::InitializeLog() is called",
           b"To enable the following instructions:")  # cpu_feature_guard's second line
# The lines a gRPC error's record goes on with (a lost worker's, a multi-worker run's): chatter too
# when they follow chatter.
CONTINUATION = (b"Additional GRPC error information from remote target", b":UNKNOWN:Error received")
# How long a partial line that may be the start of a log record waits for its end.
_PARTIAL_SECONDS = 0.5


def verbose_requested(argv):
  """Whether a command line asks for everything: -v, --v, or --verbosity / -v of 1 or more (as
  `--verbosity=1`, `-v=2` or `--verbosity 1`)."""
  args = list(argv[1:])
  for i, arg in enumerate(args):
    if arg == "--":
      break
    name, has_value, value = arg.lstrip("-").partition("=")
    if not arg.startswith("-") or name not in ("v", "verbosity"):
      continue
    if not has_value:
      value = args[i + 1] if i + 1 < len(args) else ""
      if name == "v" and not value.lstrip("-").isdigit():
        return True  # a bare -v
    try:
      if int(value) >= 1:
        return True
    except ValueError:
      pass
  return False


def is_chatter(line):
  """Whether a line (bytes, without its newline) is TensorFlow's native chatter: an INFO,
  WARNING or ERROR record of a C++ file, or one of CHATTER."""
  found = NATIVE_LINE.match(line)
  if found:
    return (found.group("level") or found.group("absl_level")) != b"F"
  return line.startswith(CHATTER)


def _may_become_chatter(partial):
  """Whether a line not yet ended could still turn out chatter (worth waiting for its end)."""
  return bool(partial) and (partial[:1] in b"IWEF0123456789" or
                            any(c.startswith(partial[:len(c)]) for c in CHATTER))


def relay(source, target):
  """Copies file descriptor `source` to `target` until end of file, without the chatter. A line
  still open is held only while it may be chatter, and at most _PARTIAL_SECONDS (a progress bar
  redrawn with \\r passes at once)."""
  pending, after_chatter = b"", [False]

  def keep(line):
    dropped = is_chatter(line) or after_chatter[0] and (not line or line.startswith(CONTINUATION))
    after_chatter[0] = dropped
    return not dropped

  while True:
    if pending:
      ready, _, _ = select.select([source], [], [], _PARTIAL_SECONDS)
      if not ready:
        _write(target, pending)
        pending = b""
        continue
    chunk = os.read(source, 65536)
    if not chunk:
      break
    *lines, pending = (pending + chunk).split(b"\n")
    kept = b"".join(line + b"\n" for line in lines if keep(line))
    if pending and not _may_become_chatter(pending):
      kept, pending = kept + pending, b""
    _write(target, kept)
  if pending and not is_chatter(pending):
    _write(target, pending)


def _write(fd, data):
  while data:
    try:
      data = data[os.write(fd, data):]
    except OSError:
      return  # the terminal is gone: nothing left to show the lines on


if __name__ == "__main__":
  # Ctrl-C and SIGTERM go to the script, which still has lines to say (this process is in its
  # process group): the relay ends when the last writer of the pipe closes it.
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.signal(signal.SIGTERM, signal.SIG_IGN)
  relay(sys.stdin.fileno(), sys.stdout.fileno())
