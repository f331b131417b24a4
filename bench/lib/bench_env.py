"""The environment of every bench script: import it first, before TensorFlow or bert_tf.

  from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)

TensorFlow reads these variables once, at its import, so they are set here and nowhere else:
TF_USE_LEGACY_KERAS=1 (tf_keras, as bert_tf's scripts run it), TF_CPP_MIN_LOG_LEVEL=2 unless the
caller set it (TensorFlow's C++ info lines off). The repository and bench/ go on sys.path, so that
`bert_tf`, bench/lib and the bench scripts import from any working directory.
Thread settings stay with the benches that need them (a peer's process, its OMP_NUM_THREADS).
"""
import os
import sys

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bench/, above lib/
REPO = os.path.dirname(BENCH)
DATA = os.path.join(os.path.dirname(REPO), "shared", "data")  # ../shared/data
VOCAB = os.path.join(DATA, "vocab", "bert-base-uncased-vocab.txt")

# The environment the bench was started in, for commands run as a user runs them (bench_readme).
STARTED_ENVIRON = dict(os.environ)
os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

for _path in (BENCH, REPO):
  if _path not in sys.path:
    sys.path.insert(0, _path)
