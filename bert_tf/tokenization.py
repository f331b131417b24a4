"""`bert_tf.tokenization`, the name the original's users import: the module is bert_tf.text.tokenization."""
import sys

from bert_tf.text import tokenization as _module

sys.modules[__name__] = _module
