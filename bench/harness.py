"""A small harness for bench scripts on a shared, noisy machine.

Each peer runs in a worker process of its own (its own environment, e.g. TF_ENABLE_ONEDNN_OPTS,
which TensorFlow reads once at import; its own thread pools, whose spinning is not billed to the
next peer). The controller interleaves the peers call by call in rounds, so that load from other
processes falls on all of them alike, and each worker times its own call: wall time
(perf_counter) and process CPU time (all the worker's threads, CLOCK_PROCESS_CPUTIME_ID). The
summary is the median with min and max of each; CPU time is the steadier figure when the machine
is shared. The machine line says the CPU, its flags and the load average.

Worker side:   harness.serve(run_once)     (run_once: a callable timing one batch)
Controller:    with harness.Worker(name, argv, env) as w: ...;  harness.interleaved(workers, ...)
"""
import json
import os
import statistics
import subprocess
import sys
import time

import bench_history

_REPLY = "@@harness "
# The flags that decide which kernels TensorFlow, oneDNN, PyTorch and ONNX Runtime can use.
KEY_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw",
             "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


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


def machine_line():
  """One Markdown line: the CPU, its cores, which of KEY_FLAGS it has and the load average."""
  info = cpu_info()
  have = [f for f in KEY_FLAGS if f in info["flags"]]
  lacks = [f for f in KEY_FLAGS if f not in info["flags"]]
  return (f"CPU: {info['model']}, {info['cores']} cores; flags: {' '.join(have) or 'none'} "
          f"(not: {' '.join(lacks) or 'none'}); load average {load_average()}")


def load_average():
  return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def summary(values):
  """(median, min, max) of a list of numbers."""
  return statistics.median(values), min(values), max(values)


# --------------------------------------------------------------------------- worker side


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
    wall, cpu = time.perf_counter(), time.process_time()
    run_once()
    _reply({"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu})


def _reply(message):
  sys.stdout.write(_REPLY + json.dumps(message) + "\n")
  sys.stdout.flush()


# --------------------------------------------------------------------------- controller side


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


def interleaved(workers, rounds):
  """{name: {"wall": [s...], "cpu": [s...]}}: `rounds` rounds, one call of each worker per
  round, in turn."""
  for w in workers:
    w.wait_ready()
  samples = {w.name: {"wall": [], "cpu": []} for w in workers}
  for _ in range(rounds):
    for w in workers:
      wall, cpu = w.call()
      samples[w.name]["wall"].append(wall)
      samples[w.name]["cpu"].append(cpu)
  return samples


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


def append_history(text):
  """Appends a section to benchmarks/<UTC date>.md."""
  with open(bench_history.today_file(), "a", encoding="utf-8") as f:
    f.write(text)
