"""The repository and the real data beside it (../shared/data)."""
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTS = os.path.join(REPO, "tests")
SHARED_DATA = os.path.join(os.path.dirname(REPO), "shared", "data")


def shared_data(*parts):
  """Path under ../shared/data, or skip the test with the reason when it is absent."""
  path = os.path.join(SHARED_DATA, *parts)
  if not os.path.exists(path):
    pytest.skip(f"real data not found at {path} (../shared/data is absent)")
  return path
