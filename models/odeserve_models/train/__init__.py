"""Training: the tokenizer, the encoders (embedding, classifier, masked LM), the translator, the
classifier's lexical and cross-lingual experts, the TF-IDF teacher."""
