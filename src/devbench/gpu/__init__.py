"""The GPU run: a time-boxed call planned, run through asv, judged and packed."""
