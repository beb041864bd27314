"""The starter data set: what a new data directory of `agentsearch serve` holds, so every search answers from the first start.

``data/`` holds the set (its README says where each part comes from and its license); ``loader``
loads it once per data directory, ``banner`` writes the start-up lines that say where to look.
"""
