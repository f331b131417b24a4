"""A script started through the script runner's server (support/script_runner.py) without waiting
for it: its stderr read line by line as the script writes it, its pid to signal, its exit status.
For the tests that act while a run goes on (a kill at a given step), at the server's cost of a run
rather than a fresh `python` that imports TensorFlow.

  started = start_script("run_pretraining.py", *args)
  for line in started.stderr: ...      # as written (a FIFO, or a pipe with BERT_TF_TESTS_FORK=0)
  os.kill(started.pid, signal.SIGKILL)
  started.wait(timeout=120)            # -> the exit status, as subprocess's returncode
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile

from support import script_runner


class StartedScript:
  """A run of `script args` in `cwd` with `env` (default: this process's), under way."""

  def __init__(self, script, *args, cwd=script_runner.REPO, env=None):
    argv = [os.path.join(script_runner.REPO, script) if not os.path.isabs(script) else script,
            *[str(a) for a in args]]
    env = dict(os.environ if env is None else env)
    self.returncode = None
    self._process = self._conn = None
    self._dir = tempfile.mkdtemp(prefix="bert_tf_started-")
    if os.environ.get("BERT_TF_TESTS_FORK", "1") == "0":
      self._process = subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env, text=True,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
      self.pid, self.stderr = self._process.pid, self._process.stderr
      return
    stdout, stderr = os.path.join(self._dir, "stdout"), os.path.join(self._dir, "stderr")
    open(stdout, "w").close()
    os.mkfifo(stderr)
    request = {"argv": argv, "cwd": str(cwd), "env": env, "stdout": stdout, "stderr": stderr}
    self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    self._conn.connect(os.environ.get("BERT_TF_SCRIPT_RUNNER")
                       or script_runner.server_environment()["BERT_TF_SCRIPT_RUNNER"])
    self._conn.sendall((json.dumps(request) + "\n").encode())
    self._replies = self._conn.makefile("r")
    self.pid = int(self._replies.readline())
    # The run opens its end first thing: until then this open waits.
    self.stderr = open(stderr, encoding="utf-8", errors="replace")

  def wait(self, timeout):
    """The exit status (negative: the signal that ended it); the run is killed after timeout
    seconds (subprocess.TimeoutExpired). What is left of stderr can still be read."""
    if self.returncode is None:
      try:
        if self._process is not None:
          self.returncode = self._process.wait(timeout=timeout)
        else:
          self.returncode = script_runner._wait(  # pylint: disable=protected-access
              self._conn, self._replies, self.pid, timeout, [sys.executable])
      finally:
        if self._conn is not None:
          self._conn.close()
        shutil.rmtree(self._dir, ignore_errors=True)
    return self.returncode


def start_script(script, *args, cwd=script_runner.REPO, env=None):
  return StartedScript(script, *args, cwd=cwd, env=env)
