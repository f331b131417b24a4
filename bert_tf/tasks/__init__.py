"""The fine-tuning tasks, each a registered bert_tf.tasks.base.Task with its records, flags and
server: GLUE (glue, glue_server), SWAG (swag), CoNLL-2003 NER (conll, ner_server), SQuAD (squad,
squad_answers, squad_metrics, squad_server), sentence embeddings (embeddings, sentence_encoder,
embedding_server); what their servers share is text_server's."""
