"""Reports over results files: per-solution tables, paired comparisons, summaries."""
