"""The one harness of the bench scripts: flags, timing, the machine line and the day's history.

Every bench script starts with `import bench_env` (the environment, first), then uses this module:

Flags (argparse, one style for every script). Before issue 33, 13 scripts used absl flags and 8
argparse; the harness builds on argparse all the same, because the benches are not absl programs:
they need none of absl's global registry (which made bench_encoder define its flags only when run,
so that a test could import it), tests call `parse([...])` as often as they like and get a fresh
namespace each time, and controllers start their workers with plain command lines. Every command
written before keeps working, because `Flags` spells values as absl did: `--flag=value` or
`--flag value`; booleans `--quick`, `--quick=false`, `--noquick` and `--no_quick`; lists as
`--models=small,base`. `run` then does what absl.app.run did for the libraries the benches import
(their absl flags at their defaults, absl's INFO log lines).

    FLAGS = harness.Flags()
    FLAGS.integer("steps", 4, "Timed steps.")
    FLAGS.boolean("append", True, "Append the results to benchmarks/<date>.md.")
    FLAGS.strings("models", "small,base", "Configs to time.")   # a comma-separated list
    harness.run(main, FLAGS, __doc__)      # parses sys.argv into FLAGS, then sys.exit(main(argv))

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
that BENCHMARKS.md's Current figures table links to (a run's figure goes into that table by hand).
`machine()` and `machine_line()` say which CPU a figure comes from.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
_REPLY = "@@harness "
# The flags that decide which kernels TensorFlow, oneDNN, PyTorch and ONNX Runtime can use.
KEY_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw",
             "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")

# --------------------------------------------------------------------------- flags


def _boolean(text):
  value = str(text).strip().lower()
  if value in ("true", "t", "1", "yes"):
    return True
  if value in ("false", "f", "0", "no"):
    return False
  raise argparse.ArgumentTypeError(f"not a boolean: {text!r}")


def _comma_list(text):
  return [item.strip() for item in text.split(",")] if text else []


class Flags:
  """A script's flags: definitions, then, after `parse`, their values as attributes."""

  _OWN = ("string", "integer", "number", "boolean", "strings", "parse", "describe")

  def __init__(self):
    self._parser = argparse.ArgumentParser(
        formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)

  def describe(self, doc):
    """The --help text: the script's docstring."""
    self._parser.description = doc

  def _add(self, name, default, help_text, hidden=False, **kwargs):
    if name in self._OWN or name.startswith("_"):
      raise ValueError(f"--{name}: the name of a Flags method")
    self._parser.add_argument(f"--{name}", dest=name, default=default,
                              help=argparse.SUPPRESS if hidden else help_text, **kwargs)

  def string(self, name, default, help_text="", **kwargs):
    """--name=TEXT (choices=[...], required=True, hidden=True as argparse takes them)."""
    self._add(name, default, help_text, **kwargs)

  def integer(self, name, default, help_text="", **kwargs):
    self._add(name, default, help_text, type=int, **kwargs)

  def number(self, name, default, help_text="", **kwargs):
    self._add(name, default, help_text, type=float, **kwargs)

  def strings(self, name, default, help_text="", **kwargs):
    """--name=a,b,c: a list of strings (default: a list or a comma-separated string)."""
    if isinstance(default, str):
      default = _comma_list(default)
    self._add(name, default, help_text, type=_comma_list, **kwargs)

  def boolean(self, name, default, help_text="", **kwargs):
    """--name, --name=true|false, --noname, --no_name."""
    self._add(name, default, help_text, type=_boolean, nargs="?", const=True, metavar="BOOL",
              **kwargs)
    self._parser.add_argument(f"--no{name}", f"--no_{name}", dest=name, action="store_false",
                              help=argparse.SUPPRESS)

  def parse(self, argv=None):
    """A namespace of the values in argv (default: sys.argv[1:]); they also become attributes
    of this object, for the module-level FLAGS.x reads."""
    values = self._parser.parse_args(sys.argv[1:] if argv is None else argv)
    self.__dict__.update(vars(values))
    return values


def run(main, flags, doc=None):
  """Parses sys.argv into `flags` and exits with main([program])'s return value."""
  if doc:
    flags.describe(doc)
  flags.parse()
  _as_absl_app_run()
  sys.exit(main(sys.argv[:1]))


def _as_absl_app_run():
  """What absl.app.run did for the benches that were absl programs: the absl flags that imported
  libraries define (bert_tf's, the original tokenization's --preserve_unused_tokens) read as their
  defaults, and absl log lines (bert_tf logs through absl) at INFO, in absl's format, on stderr.
  Nothing where absl is not imported."""
  absl_flags, absl_logging = sys.modules.get("absl.flags"), sys.modules.get("absl.logging")
  if absl_flags is not None and not absl_flags.FLAGS.is_parsed():
    absl_flags.FLAGS.mark_as_parsed()
  if absl_logging is not None:
    absl_logging.use_absl_handler()
    absl_logging.set_verbosity(absl_logging.INFO)


# --------------------------------------------------------------------------- the machine


def cpu_info(path="/proc/cpuinfo"):
  """{"model": CPU model name, "flags": [the CPU's flags], "cores": os.cpu_count()}."""
  model, flags = "unknown CPU", []
  try:
    with open(path, encoding="utf-8") as f:
      for line in f:
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model == "unknown CPU":
          model = value.strip()
        elif key.strip() == "flags" and not flags:
          flags = value.split()
  except OSError:
    pass
  return {"model": model, "flags": flags, "cores": os.cpu_count()}


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
