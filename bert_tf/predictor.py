"""`bert_tf.predictor`, the name the original's users import: the module is bert_tf.serving.predictor."""
import sys

from bert_tf.serving import predictor as _module

sys.modules[__name__] = _module
