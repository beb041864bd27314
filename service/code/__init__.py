"""Workspace code search building blocks: walking, chunking, trigram prefilter and path scope."""
