"""What every top-level script shares: absl start-up that turns bad input into one line and exit 1."""
import sys

from absl import app
from absl import logging

from bert_tf.errors import BertTfError


def run(main):
  """absl.app.run(main), but a BertTfError prints `error: <message>` and exits with status 1."""

  def guarded_main(argv):
    try:
      return main(argv)
    except BertTfError as e:
      logging.flush()
      print(f"error: {e}", file=sys.stderr)
      sys.exit(1)

  app.run(guarded_main)
