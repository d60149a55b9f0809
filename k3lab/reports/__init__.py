"""Reports: run reports, release verdicts under a gate policy, comparisons between runs."""
