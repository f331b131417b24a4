"""The fine-tuning tasks, each a registered bert_tf.tasks.base.Task: GLUE (glue), SWAG (swag),
CoNLL-2003 NER (conll), SQuAD (squad, squad_answers)."""
