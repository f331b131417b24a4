"""bert_tf: a TensorFlow 2 / Keras re-implementation of Google's original BERT release."""
import os
import sys

from bert_tf.io import native_log as _native_log

# Model Garden and our layers are Keras 2 (tf_keras); this must be set before TensorFlow is imported.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# TensorFlow's C++ start-up chatter (on a CPU machine it includes an "E ... failed call to cuInit"
# line right above any real error) stays off unless the user sets TF_CPP_MIN_LOG_LEVEL or runs a
# script with -v (--verbosity=1), which shows everything; errors still reach the user as Python
# exceptions. It is read once, when TensorFlow loads: before a script's flags are parsed.
if not _native_log.verbose_requested(sys.argv):
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

__version__ = "0.1.0"
