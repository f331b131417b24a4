"""Runs the top-level scripts for the tests without paying TensorFlow's import in every run.

A script started as `python run_classifier.py ...` spends ~4-6 s of CPU importing TensorFlow,
tf_keras, tensorflow-text and bert_tf before it reads its first flag; the suite starts scripts
about a hundred times. Here one server process imports all of that once and forks a fresh process
for each run, which executes the script as `__main__` with its arguments, working directory,
environment and standard streams, exactly as `python script.py` would from there on. The server
never runs a TensorFlow op, so every forked run starts TensorFlow's runtime afresh (devices, thread
pools, logical CPU devices for the mirrored tests).

What cannot be the same is decided at import: a run whose environment changes a variable read when
TensorFlow loads (TF_*, CUDA*, XLA*, OMP*, KMP*, ...) is exec'd as a real `python script.py`, and
the tests that check what a script imports start their own subprocess. BERT_TF_TESTS_FORK=0 sends
every run through a plain subprocess.

  run_script("run_classifier.py", "--task_name=MRPC", ..., cwd=REPO, env=None, timeout=600)
    -> subprocess.CompletedProcess (stdout and stderr as text)

As a command, `python tests/support/script_runner.py ARGS...` behaves as `python ARGS...` (shell
commands such as the README's use it as their interpreter): a script is run through the server
named by $BERT_TF_SCRIPT_RUNNER (its output printed when it ends), anything else by Python itself.
"""
import atexit
import io
import json
import os
import runpy
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

# Not support.paths's: this file also runs as a command, where `support` is not a package.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Environment variables that take effect when TensorFlow (or its thread pools) load.
_IMPORT_TIME_PREFIXES = ("TF_", "CUDA", "XLA", "OMP_", "KMP_", "MKL", "ONEDNN", "PYTHON", "LD_")
# Read when a distribution strategy is made, not at import: a multi-worker run forks as any other.
_RUN_TIME_VARIABLES = ("TF_CONFIG",)
_HEAVY_MODULES = ("bert_tf", "tensorflow", "tf_keras", "tensorflow_text", "bert_tf.drivers.finetuning",
                  "bert_tf.drivers.pretraining", "bert_tf.serving.export", "bert_tf.serving.predictor",
                  "bert_tf.drivers.feature_extraction", "bert_tf.tasks.glue", "bert_tf.tasks.squad",
                  "bert_tf.tasks.conll", "bert_tf.tasks.swag", "bert_tf.data.pretraining_data.pipeline")


# ----------------------------------------------------------------------------------------------
# The server: `python tests/support/script_runner.py --serve SOCKET_PATH`.


def _serve(socket_path):
  sys.path[0] = REPO  # in place of tests/support, whose modules the scripts must not see
  for name in _HEAVY_MODULES:
    __import__(name)
  _warm_plots()
  _warm_tokenizer_tables()
  listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
  listener.bind(socket_path)
  listener.listen(16)
  signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the per-request processes reap themselves
  print("ready", flush=True)
  parent = os.getppid()
  listener.settimeout(2)
  while True:
    try:
      conn, _ = listener.accept()
    except socket.timeout:
      if os.getppid() != parent:  # the test process is gone (killed): so is its server
        os._exit(0)
      continue
    conn.settimeout(None)
    request = json.loads(conn.makefile("r").readline())
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork() == 0:
      listener.close()
      _report(conn, request)
    conn.close()


def _warm_plots():
  """Imports matplotlib and lays out text once: every training run draws its curves.png, and a
  run would otherwise pay the import and the first font loading (a few seconds) itself."""
  try:
    # pylint: disable=g-import-not-at-top
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
  except ImportError:
    return
  figure = Figure(layout="constrained")
  FigureCanvasAgg(figure)
  axes = figure.add_subplot()
  axes.plot([0, 1], [0, 1], label="warm")
  axes.legend()
  axes.text(0, 0, "warm", family="monospace")
  figure.savefig(io.BytesIO(), format="png")


def _warm_tokenizer_tables():
  """Builds the tokenizers' character tables (pure Python over every code point, cached for the
  process) once: every run that tokenizes would otherwise spend ~1-3 s of CPU building them."""
  # pylint: disable=g-import-not-at-top,protected-access
  from bert_tf.text import fast_tokenization, tokenization
  tokenization._python_patterns()  # and char_classes(), which it reads
  fast_tokenization._sigma_context_runs()


def _report(conn, request):
  """In a child of the server: forks the run, sends its pid, waits, sends its exit status."""
  try:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
      conn.close()
      _run(request)
    conn.sendall(f"{pid}\n".encode())
    _, status = os.waitpid(pid, 0)
    conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
  except OSError:
    pass  # the client gave up (a timeout): it killed the run itself
  finally:
    os._exit(0)


def _run(request):
  """In the run's process: the script as `python script args` would run it, then exit."""
  code = 1
  try:
    os.setsid()
    for fd, path, mode in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY),
                           (2, request["stderr"], os.O_WRONLY)):
      target = os.open(path, mode)
      os.dup2(target, fd)
      os.close(target)
    os.chdir(request["cwd"])
    if _import_time(request["env"]) != _import_time(os.environ):
      os.execve(sys.executable, [sys.executable, *request["argv"]], request["env"])
    os.environ.clear()
    os.environ.update(request["env"])
    script = request["argv"][0]
    sys.argv = list(request["argv"])
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    runpy.run_path(script, run_name="__main__")
    code = 0
  except SystemExit as e:
    if e.code is None:
      code = 0
    elif isinstance(e.code, int):
      code = e.code
    else:
      print(e.code, file=sys.stderr)
      code = 1
  except BaseException:  # pylint: disable=broad-except
    traceback.print_exc()
  finally:
    try:
      sys.stdout.flush()
      sys.stderr.flush()
    finally:
      os._exit(code)


# ----------------------------------------------------------------------------------------------
# The client.

_server = None
_server_lock = threading.Lock()


def _start_server():
  global _server
  with _server_lock:
    if _server is None:
      directory = tempfile.mkdtemp(prefix="bert_tf_script_runner-")
      path = os.path.join(directory, "socket")
      process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", path], cwd=REPO,
                                 stdout=subprocess.PIPE, text=True)
      if process.stdout.readline().strip() != "ready":
        raise RuntimeError("the script runner's server did not start")
      atexit.register(process.kill)
      _server = (process, path)
  return _server[1]


def server_environment():
  """Environment variables for a shell whose `python tests/support/script_runner.py` reaches the
  server."""
  return {"BERT_TF_SCRIPT_RUNNER": _start_server()}


def _import_time(env):
  return {key: value for key, value in env.items()
          if key.startswith(_IMPORT_TIME_PREFIXES) and key not in _RUN_TIME_VARIABLES}


def run_script(script, *args, cwd=REPO, env=None, timeout=600):
  """`python script args` in `cwd` with `env` (default: this process's), as CompletedProcess."""
  argv = [os.path.join(REPO, script) if not os.path.isabs(script) else script,
          *[str(a) for a in args]]
  env = dict(os.environ if env is None else env)
  if os.environ.get("BERT_TF_TESTS_FORK", "1") == "0":
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
  with tempfile.TemporaryDirectory(prefix="bert_tf_run-") as out:
    request = {"argv": argv, "cwd": str(cwd), "env": env,
               "stdout": os.path.join(out, "stdout"), "stderr": os.path.join(out, "stderr")}
    for name in ("stdout", "stderr"):
      open(request[name], "w").close()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
      conn.connect(os.environ.get("BERT_TF_SCRIPT_RUNNER") or _start_server())
      conn.sendall((json.dumps(request) + "\n").encode())
      replies = conn.makefile("r")
      pid = int(replies.readline())
      returncode = _wait(conn, replies, pid, timeout, [sys.executable, *argv])
    with open(request["stdout"], encoding="utf-8", errors="replace") as f:
      stdout = f.read()
    with open(request["stderr"], encoding="utf-8", errors="replace") as f:
      stderr = f.read()
  return subprocess.CompletedProcess([sys.executable, *argv], returncode, stdout, stderr)


def _wait(conn, replies, pid, timeout, argv):
  conn.settimeout(timeout)
  start = time.time()
  try:
    return int(replies.readline())
  except (socket.timeout, TimeoutError):
    try:
      os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
    raise subprocess.TimeoutExpired(argv, time.time() - start) from None


def _as_python(args):
  """`python ARGS...`: a .py script through the server, anything else by Python itself."""
  if (args and args[0].endswith(".py") and os.path.isfile(args[0])
      and os.environ.get("BERT_TF_SCRIPT_RUNNER")):
    done = run_script(os.path.abspath(args[0]), *args[1:], cwd=os.getcwd(), timeout=3600)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    sys.exit(done.returncode if done.returncode >= 0 else 128 - done.returncode)
  os.execv(sys.executable, [sys.executable, *args])


if __name__ == "__main__":
  if sys.argv[1:2] == ["--serve"]:
    _serve(sys.argv[2])
  else:
    _as_python(sys.argv[1:])
