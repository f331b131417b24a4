"""The machine a process runs on: its CPU, the TensorFlow setting that depends on it, and choices
measured on it, kept per machine.

Which way of running a model is fastest depends on the CPU (TensorFlow Lite beat TensorFlow on an
AVX2-only EPYC and lost to it on an AVX-512 Xeon), so such a choice is timed where it is made and
kept in a small JSON file of the user's cache, keyed by all the measure depended on (the CPU, the
threads, the files timed), never beside the model: an export may be read-only, shared, or another
user's. Nothing here imports TensorFlow, so that a script can call prefer_onednn() before it does.

  machine.prefer_onednn()                    # first, before TensorFlow is imported
  machine.cpu()                              # {"model": "AMD EPYC", "flags": {...}, "threads": 2}
  seconds = machine.time_in_turns({"a": fn_a, "b": fn_b}, rounds=3)   # {name: [s, s, s]}
  choices = machine.Choices("backends")      # <cache>/backends.json
  choices.get(key) or choices.put(key, value)   # key: a dict of JSON values (machine_key() in it)

The cache directory: $BERT_TF_CACHE_DIR, else $XDG_CACHE_HOME/bert_tf, else ~/.cache/bert_tf.
Deleting a file there makes its choices measured again.
"""
import hashlib
import json
import os
import sys
import time

from absl import logging

ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"


# ---------------------------------------------------------------------------- the CPU


def read_cpuinfo(path="/proc/cpuinfo"):
  """The text of /proc/cpuinfo, or "" where there is none (macOS, Windows)."""
  try:
    with open(path, encoding="utf-8", errors="replace") as f:
      return f.read()
  except OSError:
    return ""


def cpu(path="/proc/cpuinfo", text=None):
  """{"model": the CPU's model name, "flags": frozenset of its feature flags (empty where
  /proc/cpuinfo is absent), "threads": the cores this process may use}; of `text` when given
  (/proc/cpuinfo's), else of the file at path."""
  model, flags = None, frozenset()
  for line in (read_cpuinfo(path) if text is None else text).splitlines():
    key, _, value = line.partition(":")
    key = key.strip()
    if key == "model name" and model is None:
      model = value.strip()
    elif key == "flags" and not flags:
      flags = frozenset(value.split())
  if model is None:
    import platform  # pylint: disable=g-import-not-at-top
    model = platform.processor() or platform.machine() or "unknown CPU"
  threads = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
             else os.cpu_count() or 1)
  return {"model": model, "flags": flags, "threads": threads}


def machine_key(info=None):
  """What a speed measured here depends on, as JSON values: the CPU's model, a digest of its
  flags (a VM moved to another host may show the same name with other features), the threads."""
  info = info or cpu()
  digest = hashlib.sha1(" ".join(sorted(info["flags"])).encode()).hexdigest()[:12]
  return {"cpu": info["model"], "cpu_flags": digest, "threads": info["threads"]}


# ---------------------------------------------------------------------------- oneDNN


def onednn_wins(flags):
  """Whether TensorFlow's oneDNN kernels make inference faster on a CPU with these flags: measured
  on AVX2 (an AMD EPYC without AVX-512: 1.1-1.2x at batch 8 and 32, level at batch 1) and
  AVX-512 (an Intel Xeon, where TensorFlow turns oneDNN on by itself); BENCHMARKS.md. A CPU
  without AVX2 keeps TensorFlow's default (off), unmeasured."""
  return {"avx2", "fma"} <= set(flags)


def prefer_onednn(environ=None, flags=None):
  """Turns TensorFlow's oneDNN kernels on where onednn_wins for this CPU, by setting
  TF_ENABLE_ONEDNN_OPTS=1, which TensorFlow reads once, when it is imported: call this first.
  A value the user set stands, whatever it is; after TensorFlow's import nothing is changed.
  Returns why oneDNN is as it is, for a log line."""
  environ = os.environ if environ is None else environ
  if ONEDNN_VARIABLE in environ:
    return f"{ONEDNN_VARIABLE}={environ[ONEDNN_VARIABLE]} as set"
  if "tensorflow" in sys.modules:
    return f"TensorFlow imported before {ONEDNN_VARIABLE} could be set"
  if not onednn_wins(cpu()["flags"] if flags is None else flags):
    return "TensorFlow's default: this CPU has no AVX2"
  environ[ONEDNN_VARIABLE] = "1"
  return f"{ONEDNN_VARIABLE}=1: oneDNN wins on AVX2 and AVX-512 CPUs"


# ---------------------------------------------------------------------------- timing


def time_in_turns(fns, rounds):
  """{name: [wall seconds of each round]} of callables {name: fn} called in turns, one call of
  each per round, so that load from other processes falls on all of them alike."""
  seconds = {name: [] for name in fns}
  for _ in range(rounds):
    for name, fn in fns.items():
      start = time.perf_counter()
      fn()
      seconds[name].append(time.perf_counter() - start)
  return seconds


# ---------------------------------------------------------------------------- the cache


def cache_dir(environ=None):
  environ = os.environ if environ is None else environ
  if environ.get("BERT_TF_CACHE_DIR"):
    return environ["BERT_TF_CACHE_DIR"]
  base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "bert_tf")


class Choices:
  """Measured choices of one kind, in <cache_dir()>/<kind>.json: {key: {"value": ..., "time":
  Unix time}}, key the JSON of a dict of what the measure depended on; the newest `limit` kept.
  A file that does not parse, or an entry of another shape (another version's, or damaged),
  counts as none: said once in a warning, and measured again (put writes the file anew). One
  that cannot be written is said once in a warning, and the choice is measured again next
  time."""

  def __init__(self, kind, directory=None, limit=256):
    self.path = os.path.join(directory or cache_dir(), f"{kind}.json")
    self.limit = limit
    self._warned = False
    self._warned_unreadable = False

  @staticmethod
  def _key(key):
    return json.dumps(key, sort_keys=True, separators=(",", ":"))

  def _unusable(self, what):
    if not self._warned_unreadable:
      self._warned_unreadable = True
      logging.warning("%s: %s: ignored, measured again (and kept anew)", self.path, what)

  def _read(self, warn=False):
    try:
      with open(self.path, encoding="utf-8") as f:
        entries = json.load(f)
    except FileNotFoundError:
      return {}
    except (OSError, ValueError) as e:  # UnicodeDecodeError is a ValueError
      if warn:
        self._unusable(f"not a cache file bert_tf can read ({type(e).__name__})")
      return {}
    if not isinstance(entries, dict):
      if warn:
        self._unusable(f"a JSON {type(entries).__name__}, not the object of entries it keeps")
      return {}
    return entries

  def get(self, key, check=None):
    """The value put for key, or None. check(value): whether a value has the shape its kind's
    measure gives (one that has not is ignored with a warning, as measured by nothing)."""
    entry = self._read(warn=True).get(self._key(key))
    if entry is None:
      return None
    value = entry.get("value") if isinstance(entry, dict) else None
    if value is None or check is not None and not _checked(check, value):
      self._unusable("its entry for this machine is not one bert_tf wrote (another shape)")
      return None
    return value

  def put(self, key, value):
    """Keeps value for key; returns whether the file was written."""
    entries = self._read()  # read again: another process may have added its own
    entries = {k: entry for k, entry in entries.items()  # of another shape: not kept
               if isinstance(entry, dict) and isinstance(entry.get("time"), (int, float))}
    entries[self._key(key)] = {"value": value, "time": time.time()}
    newest = sorted(entries.items(), key=lambda item: -item[1]["time"])[:self.limit]
    tmp = f"{self.path}.tmp-{os.getpid()}"
    try:
      os.makedirs(os.path.dirname(self.path), exist_ok=True)
      with open(tmp, "w", encoding="utf-8") as f:
        json.dump(dict(newest), f, indent=1, sort_keys=True)
      os.replace(tmp, self.path)
      return True
    except OSError as e:
      if os.path.exists(tmp):
        os.remove(tmp)
      if not self._warned:
        logging.warning("%s: cannot keep a measured choice there (%s); it is measured again on "
                        "each load (set BERT_TF_CACHE_DIR to a writable directory)", self.path, e)
        self._warned = True
      return False


def _checked(check, value):
  """check(value), an exception of a value of another shape counting as False."""
  try:
    return bool(check(value))
  except (TypeError, ValueError, KeyError, AttributeError):
    return False
