"""Records and judgements, torch-free: the figures' identities, what a GPU should reach, verdicts, files."""
