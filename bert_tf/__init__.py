"""bert_tf: a TensorFlow 2 / Keras re-implementation of Google's original BERT release."""
import os

# Model Garden and our layers are Keras 2 (tf_keras); this must be set before TensorFlow is imported.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

__version__ = "0.1.0"
