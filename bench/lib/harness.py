"""The one harness of the bench scripts: start-up, timing, the machine line and the day's history.

Every bench script starts with `from lib import bench_env` (the environment, first), then uses this module:

Flags are absl's, as the scripts' are, in the bench's own FlagValues: tests import several benches
into one process and bench_ablations imports bench_glue and bench_ner, whose flags (--seed,
--work_dir, ...) would collide in absl's global registry. `run` starts the bench as absl.app.run
does (the global flags that imported libraries define read at their defaults, absl's log lines at
INFO); --help prints the docstring and the bench's flags. Booleans also take --no_<name>, as some
commands in BENCHMARKS.md and benchmarks/ spell them. (bench/device_check/ is the exception: it
runs on a bare python3 before anything is installed, so its flags are argparse's.)

    FLAGS = flags.FlagValues()
    flags.DEFINE_integer("steps", 4, "Timed steps.", flag_values=FLAGS)
    flags.DEFINE_boolean("append", True, "Append the results to benchmarks/<date>.md.",
                         flag_values=FLAGS)
    flags.DEFINE_list("models", "small,base", "Configs to time.", flag_values=FLAGS)
    harness.run(main, FLAGS, __doc__)    # parses sys.argv into FLAGS, then absl.app.run(main)

`parse(FLAGS, [...])` parses a list of flags afresh (the tests'), `values(FLAGS)` copies the parsed
values into a namespace a bench may add to.

Timing (one loop). Peers take turns call by call in rounds, so that load from other processes on
this shared machine falls on all of them alike; each call is timed in wall time (perf_counter)
and process CPU time (all threads, CLOCK_PROCESS_CPUTIME_ID); summaries are medians with min and
max. A peer is either in-process (`Local`, or `interleave({name: fn}, rounds)`), or a worker
process of its own (`Worker` + `serve`: its own environment, e.g. TF_ENABLE_ONEDNN_OPTS, which
TensorFlow reads once at import, and its own thread pools, whose spinning is not billed to the
next peer).

    samples = harness.interleave({"a": fn_a, "b": fn_b}, rounds=7)  # {name: [wall seconds]}
    median, low, high = harness.summary(samples["a"])

    Worker side:   harness.serve(run_once)     (run_once: a callable timing one batch)
    Controller:    with harness.Worker(name, argv, env) as w: ...;  harness.interleaved(workers, n)

History. `append_history(text)` appends a section to benchmarks/<UTC date>.md, the dated history
that BENCHMARKS.md's Current figures table links to (a run's figure goes into that table by hand);
`publish(lines, append)` prints a section and appends it. `machine()` and `machine_line()` say
which CPU a figure comes from.
"""
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
import types

from absl import app
from absl import flags
from absl import logging

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bench/, above lib/
REPO = os.path.dirname(BENCH)
_REPLY = "@@harness "
# The flags that decide which kernels TensorFlow, oneDNN, PyTorch and ONNX Runtime can use.
KEY_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw",
             "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")

# --------------------------------------------------------------------------- flags

_HELP = ("-h", "-?", "-help", "--help", "--helpshort", "--helpfull")


def _parse(flag_values, argv):
  """Parses argv ([program, flags...]) into flag_values afresh, every flag not in it at its
  default, --no_<boolean> read as absl's --no<boolean>; returns [program, positional args...]."""
  booleans = {name for name in flag_values if flag_values[name].boolean}
  args = [f"--no{arg[5:]}" if arg.startswith("--no_") and arg[5:] in booleans else arg
          for arg in argv[1:]]
  flag_values.unparse_flags()
  return flag_values(argv[:1] + args)


def parse(flag_values, argv=None):
  """The values of the flags in argv (default: sys.argv[1:]) as a new namespace; they are also
  flag_values' until the next parse. A bad flag raises absl's flags.Error."""
  _parse(flag_values, sys.argv[:1] + (sys.argv[1:] if argv is None else list(argv)))
  return values(flag_values)


def values(flag_values):
  """The parsed values of flag_values as a new namespace (a bench may add its own to it)."""
  return types.SimpleNamespace(**flag_values.flag_values_dict())


def run(main, flag_values, doc=None):
  """absl.app.run(main) with the bench's flags parsed from sys.argv into flag_values: --help
  prints `doc` and the flags; a bad flag prints absl's one line and exits 1."""

  def parse_argv(argv):
    if any(arg in _HELP for arg in argv[1:]):
      print((doc or "").rstrip() + "\n\nflags:\n" + flag_values.get_help(
          include_special_flags=False))
      sys.exit(0)
    try:
      rest = _parse(flag_values, argv)
    except flags.Error as error:
      sys.stderr.write(f"FATAL Flags parsing error: {error}\nPass --help to see the flags.\n")
      sys.exit(1)
    rest = flags.FLAGS(rest)  # the absl flags of bert_tf and the original's modules: defaults
    logging.set_verbosity(logging.INFO)  # bert_tf logs through absl
    return rest

  app.run(main, flags_parser=parse_argv)


# --------------------------------------------------------------------------- the machine


def cpu_info(path="/proc/cpuinfo"):
  """{"model": CPU model name, "flags": [the CPU's flags], "cores": os.cpu_count()}."""
  model, cpu_flags = "unknown CPU", []
  try:
    with open(path, encoding="utf-8") as f:
      for line in f:
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model == "unknown CPU":
          model = value.strip()
        elif key.strip() == "flags" and not cpu_flags:
          cpu_flags = value.split()
  except OSError:
    pass
  return {"model": model, "flags": cpu_flags, "cores": os.cpu_count()}


def cpu_model():
  return cpu_info()["model"]


def machine():
  """"<CPU model>, <N> cores"."""
  return f"{cpu_model()}, {os.cpu_count()} cores"


def machine_line():
  """One Markdown line: the CPU, its cores, which of KEY_FLAGS it has and the load average."""
  info = cpu_info()
  have = [f for f in KEY_FLAGS if f in info["flags"]]
  lacks = [f for f in KEY_FLAGS if f not in info["flags"]]
  return (f"CPU: {info['model']}, {info['cores']} cores; flags: {' '.join(have) or 'none'} "
          f"(not: {' '.join(lacks) or 'none'}); load average {load_average()}")


def load_average():
  return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def commit(repo=REPO, note_dirty=False):
  """The short hash of repo's HEAD ("unknown" outside a checkout); with note_dirty, followed by
  " (with uncommitted changes)" where tracked files differ from it."""
  out = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True,
                       text=True, check=False).stdout.strip() or "unknown"
  if note_dirty and subprocess.run(
      ["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
      text=True, check=False).stdout.strip():
    out += " (with uncommitted changes)"
  return out


def utc_now(fmt="%Y-%m-%d %H:%M UTC"):
  return datetime.datetime.now(datetime.timezone.utc).strftime(fmt)


# --------------------------------------------------------------------------- timing


def summary(values):
  """(median, min, max) of a list of numbers."""
  return statistics.median(values), min(values), max(values)


def timed(fn):
  """(fn(), wall seconds of the call)."""
  start = time.perf_counter()
  result = fn()
  return result, time.perf_counter() - start


def _clocks():
  return time.perf_counter(), time.process_time()


def _since(clocks):
  wall, cpu = clocks
  return time.perf_counter() - wall, time.process_time() - cpu


class Local:
  """A peer in this process, with Worker's interface: `warmup` untimed calls of `fn` when the
  rounds start, then one timed call per `call()`; `result` is its last call's return value."""

  def __init__(self, name, fn, warmup=1):
    self.name, self.fn, self.warmup = name, fn, warmup
    self.started, self.result = False, None

  def wait_ready(self):
    if not self.started:
      for _ in range(self.warmup):
        self.result = self.fn()
      self.started = True

  def call(self):
    """(wall, cpu) seconds of one call."""
    self.wait_ready()
    clocks = _clocks()
    self.result = self.fn()
    return _since(clocks)


def interleaved(peers, rounds):
  """{name: {"wall": [s...], "cpu": [s...]}}: `rounds` rounds, one call of each peer (a Local
  or a Worker) per round, in turn, after every peer's warm-up."""
  for peer in peers:
    peer.wait_ready()
  samples = {peer.name: {"wall": [], "cpu": []} for peer in peers}
  for _ in range(rounds):
    for peer in peers:
      wall, cpu = peer.call()
      samples[peer.name]["wall"].append(wall)
      samples[peer.name]["cpu"].append(cpu)
  return samples


def interleave(fns, rounds, warmup=1, results=None):
  """{name: [wall seconds of each round]} of in-process callables {name: fn} taking turns;
  `results` (a dict), when given, receives each fn's last return value."""
  peers = [Local(name, fn, warmup) for name, fn in fns.items()]
  samples = interleaved(peers, rounds)
  if results is not None:
    results.update({peer.name: peer.result for peer in peers})
  return {name: s["wall"] for name, s in samples.items()}


def table(samples, per_call=1, unit="ms / batch"):
  """Markdown rows: name, CPU time median (min-max), wall time median (min-max), in ms."""
  lines = [f"| peer | CPU {unit}, median (min-max) | wall {unit}, median (min-max) |",
           "|---|---:|---:|"]
  for name, s in samples.items():
    cells = []
    for key in ("cpu", "wall"):
      median, low, high = (1000 * x / per_call for x in summary(s[key]))
      cells.append(f"{median:.1f} ({low:.1f}-{high:.1f})")
    lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
  return lines


# --------------------------------------------------------------------------- worker processes


def serve(run_once, warmup=1):
  """The worker's loop: runs `run_once` `warmup` times, says ready, then times one call per
  "run" line on stdin and answers {"wall", "cpu"} seconds on stdout; "quit" ends it."""
  for _ in range(warmup):
    run_once()
  _reply({"ready": True})
  for line in sys.stdin:
    command = line.strip()
    if command == "quit":
      return
    clocks = _clocks()
    run_once()
    wall, cpu = _since(clocks)
    _reply({"wall": wall, "cpu": cpu})


def _reply(message):
  sys.stdout.write(_REPLY + json.dumps(message) + "\n")
  sys.stdout.flush()


class Worker:
  """A peer in its own process: `argv` (a Python command line) run with os.environ + `env`."""

  def __init__(self, name, argv, env=None):
    self.name = name
    self.process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        env=dict(os.environ, **(env or {})))
    self.started = False

  def wait_ready(self):
    """Waits for the worker's warm-up to end (start every worker, then wait for each)."""
    if not self.started:
      self._read()
      self.started = True

  def _read(self):
    for line in self.process.stdout:
      if line.startswith(_REPLY):
        return json.loads(line[len(_REPLY):])
      sys.stderr.write(f"[{self.name}] {line}")
    raise RuntimeError(f"{self.name}: worker exited with {self.process.wait()}")

  def call(self):
    """(wall, cpu) seconds of one timed call in the worker."""
    self.wait_ready()
    self.process.stdin.write("run\n")
    reply = self._read()
    return reply["wall"], reply["cpu"]

  def close(self):
    if self.process.poll() is None:
      try:
        self.process.stdin.write("quit\n")
        self.process.stdin.close()
        self.process.wait(timeout=60)
      except (OSError, subprocess.TimeoutExpired):
        self.process.kill()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


# --------------------------------------------------------------------------- history


def today_file():
  """benchmarks/YYYY-MM-DD.md for today (UTC), started with its title when new."""
  day = utc_now("%Y-%m-%d")
  path = os.path.join(REPO, "benchmarks", f"{day}.md")
  if not os.path.exists(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
      f.write(f"# Benchmark runs of {day}\n\nSections appended by the bench/ scripts, in the order "
              f"they ran; the current figure of each measure is in ../BENCHMARKS.md.\n")
  return path


def append_history(text, path=None):
  """Appends `text` (a section) to `path`, by default the day's file benchmarks/<UTC date>.md."""
  with open(path or today_file(), "a", encoding="utf-8") as f:
    f.write(text)


def publish(lines, append=True, lead=""):
  """A bench's last step: prints its section (`lines`, joined) and, when `append`, appends it
  (after `lead`) to the day's file."""
  text = "\n".join(lines) + "\n"
  print(text)
  if append:
    append_history(lead + text)
