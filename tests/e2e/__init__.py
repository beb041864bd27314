"""End-to-end paths across processes: ``agentsearch serve``, ``worker`` and ``reindex`` as a deployment runs them."""
