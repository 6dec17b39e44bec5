"""IR metrics, eval arms, plots, the A/B report, the benchmark, the demo."""
