"""The shared search engine: store, analyzer, embeddings, fusion and indexed records."""
