"""arq workers: settings and jobs that keep the indexes fresh; the work itself lives in the engine."""
