"""`bert_tf.modeling`, the name the original's users import: the module is bert_tf.model.modeling."""
import sys

from bert_tf.model import modeling as _module

sys.modules[__name__] = _module
