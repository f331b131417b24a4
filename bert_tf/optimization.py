"""`bert_tf.optimization`, the name the original's users import: the module is bert_tf.training.optimization."""
import sys

from bert_tf.training import optimization as _module

sys.modules[__name__] = _module
