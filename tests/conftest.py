import os
import sys

# Before TensorFlow is imported anywhere: Model Garden and our layers are Keras 2 (tf_keras).
os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import pytest  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.path.join(os.path.dirname(REPO), "shared", "data")
sys.path.insert(0, REPO)

from script_runner import run_script  # noqa: E402,F401  (the tests' way to run a script)


def shared_data(*parts):
  """Path under ../shared/data, or skip the test with the reason when it is absent."""
  path = os.path.join(SHARED_DATA, *parts)
  if not os.path.exists(path):
    pytest.skip(f"real data not found at {path} (../shared/data is absent)")
  return path


@pytest.fixture
def shared():
  return shared_data
