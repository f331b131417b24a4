"""pytest's set-up for the tests, and the fixtures several modules use: fixtures only. The helpers
behind them live in tests/support/, which the test modules import (never conftest, nor one
another)."""
import os
import signal
import sys
import tempfile
import warnings

# Before TensorFlow is imported anywhere: Model Garden and our layers are Keras 2 (tf_keras).
os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
# --dtype=auto's CPU probe caches what it measured (bert_tf.training.dtype_probe): in a folder of
# the session's, not in the user's home.
os.environ.setdefault("BERT_TF_CACHE_DIR", tempfile.mkdtemp(prefix="bert_tf_cache-"))

import pytest  # noqa: E402

pytest.register_assert_rewrite("support")  # the shared checks report as the tests' own asserts

from support.paths import REPO, shared_data  # noqa: E402
sys.path.insert(0, REPO)

from support import task_data  # noqa: E402


# The slowest modules, slowest first. `make test` hands whole modules to its two workers in the
# order collected (--dist loadfile --no-loadscope-reorder): started first, the longest modules
# cannot be the last one a worker runs alone while the other idles. The rest follow by name.
SLOWEST_FIRST = [
    "test_readme.py", "test_export.py", "test_predictor.py", "test_bilstm_head.py",
    "test_packing_finetune.py", "test_faults.py", "test_original_oracle.py",
    "test_tokenization.py", "test_training.py", "test_original_training_oracle.py",
    "test_distillation.py", "test_run_pretraining.py", "test_tflite.py", "test_run_ner.py",
    "test_keep_best.py", "test_packing.py", "test_packed_ner_swag_scripts.py",
    "test_device_check.py", "test_faults_runs.py", "test_dynamic_masking.py",
    "test_packed_finetuning_scripts.py", "test_faults_resume.py", "test_new_task.py",
    "test_original_modules.py", "test_faults_preempt.py", "test_faults_files.py",
]


def pytest_collection_modifyitems(items):
  rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
  items.sort(key=lambda item: rank.get(os.path.basename(str(item.fspath)), len(rank)))


@pytest.fixture
def shared():
  return shared_data


@pytest.fixture(scope="module")
def conll_data(tmp_path_factory):
  """Tiny CoNLL data, its vocabulary and config, and run_ner.py's common flags (one a module)."""
  return task_data.conll_data(tmp_path_factory.mktemp("run_ner"))


@pytest.fixture(autouse=True, scope="session")
def _cache_of_the_session(tmp_path_factory):
  """The choices bert_tf measures and keeps (bert_tf.training.machine.Choices: the predictor's backend)
  go to a directory of the session's own, never the user's cache (scripts the tests start
  inherit it)."""
  os.environ["BERT_TF_CACHE_DIR"] = str(tmp_path_factory.mktemp("bert_tf_cache"))


@pytest.fixture(autouse=True)
def _signal_handlers_as_found(request):
  """Each test starts with the worker's Ctrl-C and SIGTERM handlers as the session found them, and
  a test that leaves them changed (a SIGINT left ignored is inherited by every script a later test
  starts, which then cannot be interrupted) has them put back and is named in a warning."""
  before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
  yield
  for signum, handler in before.items():
    if signal.getsignal(signum) is not handler and handler is not None:
      signal.signal(signum, handler)
      warnings.warn(f"{request.node.nodeid} left the {signal.Signals(signum).name} handler changed; "
                    f"put back")
