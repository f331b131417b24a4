"""The fine-tuning tasks: GLUE (glue), SWAG (swag), CoNLL-2003 NER (conll), SQuAD (squad, squad_answers)."""
