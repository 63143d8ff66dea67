"""CI over analyze documents: diff, baselines, batch runs and the discovery of jobs."""
